"""The native module (``wallflame._speedups``) gives exactly what the Python references
(``unit.hub.reference_report``, ``reference_folded``) give.

Property tests compare the two on random input; an end-to-end test renders the same inputs
natively and with the references in place and requires identical files."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from synthetic import synthetic_folded

from unit.hub import reference_folded
from unit.hub import reference_report as ref
from wallflame import speedups
from wallflame.profile import OFF, ON, Profile, StackKey
from wallflame.report import html as html_mod
from wallflame.report import summary as summary_mod
from wallflame.report import tree as tree_mod
from wallflame.report.tree import CLASSES, FlameTree, Row, thread_label, visible

native = speedups.native

# Frames drawn from a small alphabet so that stacks share prefixes, with the characters that
# matter: the separator's neighbours, multi-byte UTF-8, controls, an empty name.
FRAME = st.sampled_from(["main", "a", "b", "", "é", "日本", "\x1b[31m", "x y", "b;", "~"])
TEXT = st.text(alphabet=st.sampled_from([*"ab;é日\x00 \n\\", "\U0001f600", "\ud800"]),
               max_size=40)


@given(TEXT)
def test_split_is_str_split(s: str) -> None:
    split = speedups.frame_splitter()
    assert split(s) == tuple(s.split(";"))
    assert split(s) == tuple(s.split(";"))  # the second time from the shared names


@given(st.lists(TEXT, max_size=30))
def test_split_shares_each_name(lines: list[str]) -> None:
    interner = native.Interner()
    seen: dict[str, str] = {}
    for line in lines:
        try:
            parts = interner.split(line)
        except UnicodeEncodeError:  # a lone surrogate: the wrapper falls back
            assert "\ud800" in line
            continue
        assert parts == tuple(line.split(";"))
        for p in parts:
            assert seen.setdefault(p, p) is p
    assert interner.size() == len(seen)


@given(st.lists(st.lists(st.sampled_from(["a", "b", "ab", "", "é", "a;b"]), max_size=6)
                .map(";".join), max_size=30), st.booleans())
def test_split_after_a_similar_line(lines: list[str], ordered: bool) -> None:
    """A line is split right whatever the line before it shared with it: a prefix ending
    inside a name (``a;b`` then ``a;bc``), a longer or shorter line, empty names."""
    split = native.Interner().split
    for line in sorted(lines) if ordered else lines:
        assert split(line) == tuple(line.split(";"))


@given(st.text(st.sampled_from([*" ~\x1f\x7f\x80\xa0a<", "\u202e", "\ud800", "é", "\u2028"]),
               max_size=12))
def test_visible_looks_at_what_is_outside_printable_ascii(name: str) -> None:
    """Names of printable ASCII are returned as they are; any other is checked character by
    character, as a regular expression would select them."""
    import re

    if re.search(r"[^\x20-\x7e]", name) is None:
        assert visible(name) is name
    else:
        assert visible(name) == "".join(map(tree_mod._visible_char, name))


def test_split_deep_stack() -> None:
    line = ";".join(f"f{i % 300}" for i in range(10_000))
    assert speedups.frame_splitter()(line) == tuple(line.split(";"))


IDENT = st.tuples(st.integers(0, 3), st.sampled_from(["", "worker", "<script>", "\x07"]))
ROW = st.tuples(IDENT, st.lists(FRAME, max_size=6).map(tuple), st.integers(0, len(CLASSES) - 1),
                st.integers(1, 10**12))


def _fields(t: FlameTree | None) -> object:
    if t is None:
        return None
    return (t.names, t.name, t.parent, t.selfs, t.threads)


def _both(rows: list[Row], check: bool) -> tuple[object, object]:
    ours = FlameTree()
    ok = native.grow(rows, ours.names, ours.name, ours.parent, ours.selfs, ours.threads,
                     {"all": 0}, len(CLASSES), check, visible, thread_label)
    theirs = ref.grow(rows, FlameTree(), check)
    return (_fields(ours) if ok else None), _fields(theirs)


@settings(max_examples=300)
@given(st.lists(ROW, max_size=25))
def test_grow_matches_python_sorted(rows: list[Row]) -> None:
    rows.sort()
    ours, theirs = _both(rows, check=True)
    assert theirs is not None
    assert ours == theirs


@settings(max_examples=300)
@given(st.lists(ROW, max_size=25))
def test_grow_matches_python_unsorted(rows: list[Row]) -> None:
    """Out of order: both give up (None) under ``check``; without it both build the same
    (unmerged) tree."""
    assert _both(rows, check=True)[0] == _both(rows, check=True)[1]
    ours, theirs = _both(rows, check=False)
    assert ours == theirs


def test_grow_rejects_bad_rows() -> None:
    t = FlameTree()
    with pytest.raises(TypeError):
        native.grow([((0, "t"), ("a",), len(CLASSES), 1)], t.names, t.name, t.parent,
                     t.selfs, t.threads, {"all": 0}, len(CLASSES), True, visible, thread_label)
    with pytest.raises(TypeError):
        native.grow([("not a row",)], t.names, t.name, t.parent, t.selfs, t.threads,  # type: ignore[list-item]
                     {"all": 0}, len(CLASSES), True, visible, thread_label)


#: Frame names near the edges of the unknown-frame rule: brackets, spaces, the kernel mark,
#: the ``[unsampled]`` marker and names that are not ASCII (the C code reads every kind).
FRAME_PARTS = st.sampled_from(["[", "]", "_[k]", " ", "unknown", "libc.so.6", "unsampled",
                               "[unsampled]", "_", "k", "é", "\u4e2d", "\U0001f600", "x", ""])
FRAME_NAMES = st.one_of(st.lists(FRAME_PARTS, max_size=6).map("".join), st.text(max_size=12))


@settings(max_examples=2000)
@given(FRAME_NAMES)
def test_unknown_frame_rule_is_the_python_one(frame: str) -> None:
    """The native ``frame_weights`` counts a stack as holding an unknown frame exactly when
    ``names.is_unknown`` says its frame is one."""
    from wallflame.names import is_unknown

    shallow, unknown = native.frame_weights({StackKey((frame,)): 7}, 0)
    assert (shallow, unknown) == (0, 7 if is_unknown(frame) else 0)


def test_unknown_frame_rule() -> None:
    from wallflame.names import is_unknown, unknown_in

    for frame in ("[unknown]", "[libc.so.6]", "[vdso]", "[mix]", "[kernel.kallsyms]_[k]",
                  "[unknown]_[k]", unknown_in("/usr/lib/x86_64-linux-gnu/libc.so.6")):
        assert is_unknown(frame), frame
    for frame in ("main", "[unsampled]", "[signal handler called]", "[off mutex]", "[]", "_[k]",
                  "[unknown", "f_[k]", "operator[]"):
        assert not is_unknown(frame), frame


KEY = st.builds(
    StackKey,
    st.lists(st.sampled_from(["main", "f", "[unknown]", "[libc.so.6]", "[x]", "[", "]", "[.so]",
                              "a.so]", "[unknown", "[lib.so", "é[.so]"]), max_size=4).map(tuple),
    st.integers(0, 3), st.sampled_from(["", "worker", "io"]), st.just(0),
    st.sampled_from([ON, OFF]), st.sampled_from(["", "mutex", "io", "odd"]),
    st.sampled_from(["", "0x10 <m>"]), st.integers(0, 2))
WEIGHT = st.one_of(st.integers(-5, 10**15), st.sampled_from([2**62, 2**63 - 1, -2**63, 2**64]))
STACKS = st.lists(st.tuples(KEY, WEIGHT), max_size=40).map(dict)


@given(STACKS, st.dictionaries(st.integers(0, 3), st.sampled_from(["named", "\x1b"])))
def test_stack_passes_match_python(stacks: dict[StackKey, int],
                                   threads: dict[int, str]) -> None:
    p = Profile(stacks=stacks)
    p.meta.threads = threads
    ours = (p.grouped(), summary_mod.stack_weights(p), tree_mod.tree_rows(p))
    theirs = (ref.grouped(p), ref.stack_weights(p), ref.tree_rows(p))
    assert ours == theirs
    assert list(ours[0]) == list(theirs[0])  # the same groups in the same order


@settings(max_examples=300, deadline=None)
@given(STACKS, st.dictionaries(st.integers(0, 3), st.sampled_from(["named", "\x1b"])),
       st.booleans())
def test_tree_of_stacks_matches_python(stacks: dict[StackKey, int], threads: dict[int, str],
                                       ordered: bool) -> None:
    """``grow_stacks`` (the tree straight from the stacks) gives the reference's tree, for
    stacks in order (one pass) and out of order (found out, then sorted rows)."""
    def row_order(kv: tuple[StackKey, int]) -> object:
        k = kv[0]
        return (k.tid, threads.get(k.tid, k.thread) if k.tid else k.thread), k.frames

    p = Profile(stacks=dict(sorted(stacks.items(), key=row_order)) if ordered else stacks)
    p.meta.threads = threads
    ours = _fields(tree_mod.build_tree(p))
    with pytest.MonkeyPatch.context() as mp:
        ref.use_references(mp)
        assert ours == _fields(tree_mod.build_tree(p))


# Frames some wait rule names (exactly, by a prefix, under a suffix or a raw name) among
# frames none does, so that stacks share prefixes and the screen has something to find.
WAIT_KEY = st.builds(
    StackKey,
    st.lists(st.sampled_from(["main", "f", "g", "pthread_mutex_lock", "__lll_lock_wait",
                              "futex_wait_[k]", "__GI___poll", "epoll_wait", "[unknown]"]),
             max_size=6).map(tuple),
    st.integers(0, 3), st.just(""), st.just(0), st.sampled_from([ON, OFF, "odd"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(WAIT_KEY, st.integers(-3, 50)), max_size=40), st.booleans(),
       st.frozensets(st.sampled_from(["main", "g", "epoll_wait", "[unknown]", "h"])))
def test_frame_names_and_stacks_naming_match_python(
        items: list[tuple[StackKey, int]], ordered: bool, names: frozenset[str]) -> None:
    """``frame_names`` and ``stacks_naming`` give the set union and the ``isdisjoint`` screen
    over the stacks not in the state skipped, for stacks in order (each sharing a prefix with
    the one before it) and out of order, and ``on_cpu_in`` is the same with either."""
    stacks = dict(sorted(items, key=lambda kv: kv[0].frames) if ordered else items)
    every = [(k, w) for k, w in stacks.items() if k.state != OFF]
    assert native.frame_names(stacks, OFF) == set().union(*(k.frames for k, _ in every))
    assert native.stacks_naming(stacks, OFF, set(names)) == \
        [(k, w) for k, w in every if not names.isdisjoint(k.frames)]
    assert native.stacks_naming(stacks, OFF, names) == \
        [(k, w) for k, w in every if not names.isdisjoint(k.frames)]
    p = Profile(stacks=stacks)
    assert summary_mod.on_cpu_in(p) == ref.on_cpu_in(p)


def test_stack_passes_reject_other_keys() -> None:
    for bad in ({("a", 1): 1}, {StackKey(("f",))[:4]: 1}, {StackKey("f"): 1}):  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            native.group_weights(bad)
        with pytest.raises(TypeError):
            native.frame_weights(bad, 2)
        with pytest.raises(TypeError):
            native.frame_names(bad, OFF)
        with pytest.raises(TypeError):
            native.stacks_naming(bad, OFF, {"f"})
    with pytest.raises(TypeError):
        native.frame_weights({StackKey((1,)): 1}, 2)  # type: ignore[arg-type]


@given(st.lists(st.integers(-2**63, 2**63 - 1), max_size=100))
def test_ints_json_is_json_dumps(values: list[int]) -> None:
    assert native.ints_json(values) == json.dumps(values, separators=(",", ":"))


def test_ints_json_refuses_what_json_writes_otherwise() -> None:
    for values in ([2**63], [-2**63 - 1], [True], [1.0], ["1"]):
        with pytest.raises((TypeError, OverflowError)):
            native.ints_json(values)


JSON_TEXT = st.lists(st.sampled_from([*"a<>&'\"/:é\x00", "://", "</script>"]),
                     max_size=6).map("".join)
JSON_LEAF = st.one_of(st.integers(-2**70, 2**70), st.booleans(), st.none(), st.floats(),
                      JSON_TEXT)
JSON = st.recursive(JSON_LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.lists(st.integers(-2**64, 2**64), min_size=60, max_size=70),
    st.lists(st.one_of(st.integers(0, 9), st.booleans()), min_size=64, max_size=66),
    st.dictionaries(JSON_TEXT, inner, max_size=4)), max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_tojson_is_jinja_tojson(value: object) -> None:
    from jinja2.utils import htmlsafe_json_dumps

    def dumps(obj: object, **kwargs: Any) -> str:
        return json.dumps(obj, **kwargs).replace("://", ":\\/\\/")

    expected = htmlsafe_json_dumps(value, dumps=dumps, sort_keys=True, separators=(",", ":"))
    assert html_mod.tojson(value) == expected
    assert "://" not in expected and "<" not in expected


#: ``wallflame`` with the arguments after the first (the tests' folder), natively or with every
#: native path of a report replaced by its reference.
REPORT = "import sys; from wallflame.entry import main; sys.argv[:2] = ['wallflame']; main()"
REPORT_WITH_REFERENCES = (
    "import sys; sys.path.insert(0, sys.argv[1]); import pytest; "
    "from unit.hub.reference_report import use_references; use_references(pytest.MonkeyPatch()); "
    + REPORT.removeprefix("import sys; "))


@pytest.mark.parametrize("fmt", ["html", "json", "txt", "svg", "speedscope.json"])
def test_reports_identical_with_the_references(tmp_path: Path, fmt: str) -> None:
    folded = tmp_path / "in.folded"
    synthetic_folded(folded, 1500)
    hostile = tmp_path / "hostile.folded"
    deep = ";".join(f"f{i % 97}" for i in range(3000))
    hostile.write_bytes(b"".join(
        line + b"\n" for line in (
            b"t;<script>alert(1)</script>;x 5", b"t;\x1b[31m;\xc3\xa9;\xe2\x80\xae 3",
            b"t;\xff\xfe;a 2", b"t;a\\;b;c 1", b"u/7/9;main;x 4", b"thread (12);f 2",
            b"t;" + deep.encode() + b" 6", b"t;" + deep.encode() + b";g 1")))
    inputs = [str(folded), str(hostile), *(str(FIXTURES / "folded" / f) for f in
                                           ("bcc-offcputime.folded", "plain-tid.folded")),
              str(ROOT / "examples" / "ci" / "baseline" / "run-1")]  # a run directory
    outs = []
    for code in (REPORT, REPORT_WITH_REFERENCES):
        out = tmp_path / f"out{len(outs)}.{fmt}"
        r = subprocess.run([sys.executable, "-c", code, str(ROOT / "tests"), "report", *inputs,
                            "-o", str(out)], capture_output=True, text=True,
                           env={**os.environ, "WALLFLAME_NO_CACHE": "1"}, check=False)
        assert r.returncode == 0, r.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


@contextlib.contextmanager
def python_folding(on: bool = True) -> Iterator[None]:
    """Folded files read by ``reference_folded`` (when ``on``) instead of natively."""
    from wallflame.fold import foreign_folded as folded_mod

    with pytest.MonkeyPatch.context() as mp:
        if on:
            mp.setattr(folded_mod, "_fold_plain", reference_folded.fold_plain)
            mp.setattr(folded_mod, "frame_splitter", reference_folded.frame_splitter)
        yield


LINE_PART = st.sampled_from([
    b"main", b"worker", b";", b";f", b";g", b" ", b"1", b"0", b"7", b"#", b"\\", b"/", b"\r",
    b"\xff", b"\xc3\xa9", b"\xe2\x80", b"process 12", b"thread (3)", b"\x1c", b"\xc2\xa0",
    b"\t", b"-", b".5", b"99999999999999999999", b"--",
])
LINE = st.lists(LINE_PART, max_size=8).map(b"".join)
PLAIN = st.tuples(st.sampled_from([b"main", b"w-1", b"\xc3\xa9t", b"t-1/2", b"process 5",
                                   b"thread (3)", b"a\\x3bb", b"#c", b" x"]),
                  st.lists(st.sampled_from([b"a", b"b", b"\xff", b"c d"]), max_size=4),
                  st.integers(0, 10**6)).map(
    lambda t: b";".join([t[0], *t[1]]) + b" " + str(t[2]).encode())


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(PLAIN, PLAIN, LINE), min_size=1, max_size=30),
       st.sampled_from([b"\n", b"\r\n"]), st.booleans())
def test_fold_plain_matches_python(lines: list[bytes], eol: bytes, last_eol: bool) -> None:
    """Folding a file natively (plain lines in C, the rest in Python) and with the references
    (every line in Python) give the same stacks in the same order, the same losses and the
    same error."""
    import tempfile

    from wallflame.fold import foreign_folded as folded_mod
    from wallflame.fold.options import FoldOptions
    from wallflame.profile import Profile

    data = eol.join(lines) + (eol if last_eol else b"")
    with tempfile.NamedTemporaryFile(suffix=".folded") as f:
        f.write(data)
        f.flush()
        results = []
        for use_native in (True, False):
            profile = Profile()
            with python_folding(not use_native):
                try:
                    folded_mod.fold(f.name, FoldOptions(), profile)
                    err = None
                except Exception as e:  # the same clean error either way
                    err = str(e)
            results.append((err, list(profile.stacks.items()),
                            {k: (v.count, v.first_line) for k, v in
                             profile.meta.losses.items()}, profile.meta.unit))
            assert all(type(k) is StackKey for k in profile.stacks)
            assert all(type(k.frames) is tuple for k in profile.stacks)
            # stored under the hash Python computes for it (the native code computes its own)
            assert all(k in profile.stacks for k in list(profile.stacks))
    assert results[0] == results[1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([b"\n", b"ab", b"\r\n", b"x" * 40, b"\xff"])).map(b"".join),
       st.integers(1, 64))
def test_line_buffers_give_the_blocks(data: bytes, chunk: int) -> None:
    """The reused buffer holds the lines ``line_blocks`` gives (in blocks cut elsewhere),
    whatever the read size (lines longer than the buffer grow it)."""
    import io

    from wallflame import textio

    old_chunk = textio.CHUNK
    textio.CHUNK = chunk
    try:
        blocks = list(textio.line_blocks(io.BytesIO(data)))
        buffers = [bytes(buf[:end]) for buf, end in textio.line_buffers(io.BytesIO(data))]
    finally:
        textio.CHUNK = old_chunk
    assert [ln for b in buffers for ln in b.split(b"\n")] == \
        [ln for b in blocks for ln in b.split(b"\n")]


def test_native_tuple_hash_is_the_interpreters() -> None:
    """The native reader hashes stack keys part by part as CPython's tuple hash does; it
    checks that at import and, if the interpreter hashes tuples otherwise, does not."""
    if os.environ.get("WALLFLAME_REQUIRE_LIVE") == "1" and sys.implementation.name == "cpython":
        assert native.TUPLE_HASH == 1
    interner = native.Interner()
    stacks: dict[StackKey, int] = {}
    data = b"t;a;b 1\nt;a;c 2\nt 3\nu;a;b 4\nt;a;b;\xc3\xa9 5\nt;a 6\n"
    interner.fold_plain(data, 0, len(data), stacks, StackKey, ON, 1)
    for key, weight in list(stacks.items()):
        plain = StackKey(tuple(key.frames), key.tid, key.thread, key.pid, key.state, key.wait,
                         key.lock, key.holder)
        assert stacks[plain] == weight


def test_fold_plain_blocks_split_long_lines(tmp_path: Path) -> None:
    """Lines longer than a read block, and many blocks, read natively as by the reference."""
    from wallflame import textio
    from wallflame.fold import foreign_folded as folded_mod
    from wallflame.fold.options import FoldOptions
    from wallflame.profile import Profile

    path = tmp_path / "long.folded"
    deep = ";".join(f"f{i}" for i in range(5000))
    path.write_text("".join(f"t{i % 3};{deep};x{i} {i}\n" for i in range(50)))
    old_chunk = textio.CHUNK
    textio.CHUNK = 4096
    try:
        native_profile = Profile()
        folded_mod.fold(str(path), FoldOptions(), native_profile)
        pure = Profile()
        with python_folding():
            folded_mod.fold(str(path), FoldOptions(), pure)
    finally:
        textio.CHUNK = old_chunk
    assert list(native_profile.stacks.items()) == list(pure.stacks.items())
    assert len(pure.stacks) == 49  # count 0 adds nothing


PERF_HEAD = st.tuples(
    st.sampled_from([b"app", b"w 1", b"a:b", b"x 7 [000]", b"\xc3\xa9", b" lead", b"t"]),
    st.sampled_from([b" 7", b" 12/13", b" 7 [001]", b"", b"  9"]),
    st.sampled_from([b" 1.500000", b" 2.25", b" 10.000001", b" 1.", b" 3.5", b" 0.9"]),
    st.sampled_from([b": 250000 cpu-clock: ", b":     10 cycles: ", b": 7 cycles:u:",
                     b": 1 sched:sched_switch: prev_comm=a prev_pid=7 prev_prio=120 "
                     b"prev_state=S ==> next_comm=b next_pid=9 next_prio=120",
                     b": 99999999999999999999 cpu-clock: ", b": 3 e: 0 main (/a)",
                     b": 5 task-clock:  ", b": 1 probe:x: "]),
).map(b"".join)
PERF_FRAME = st.tuples(
    st.sampled_from([b"\t", b"\t    ", b"  ", b"\t\t"]),
    st.sampled_from([b"55d3", b"ffffffff8100", b"0", b"zz", b""]),
    st.sampled_from([b" ", b"  "]),
    st.sampled_from([b"main", b"f+0x1a", b"f+0x2b", b"g+0x1+0x2", b"g+0x1", b"[unknown]",
                     b"(anonymous namespace)::h+0x3", b"a;b+0x4", b"\xff+0x5", b"k+0x",
                     b"std::vector<int>::push_back(int const&)+0x9", b" sp+0x1", b"add"]),
    st.sampled_from([b" (/bin/app)", b" ([kernel.kallsyms])", b" ([unknown])", b" (x.ko)",
                     b"", b" (/lib/libc.so.6) ", b" (a (b))"]),
).map(b"".join)
PERF_RECORD = st.one_of(
    st.tuples(PERF_HEAD, st.lists(PERF_FRAME, max_size=5)).map(
        lambda t: b"\n".join([t[0], *t[1]])),
    st.sampled_from([b"app 7 [000] 1.0: PERF_RECORD_SWITCH OUT preempt",
                     b"app 7 [000] 1.1: PERF_RECORD_LOST 5", b"# comment", b"", b"\n"]),
)


@settings(max_examples=int(os.environ.get("WALLFLAME_EXAMPLES", "300")), deadline=None)
@given(st.lists(PERF_RECORD, min_size=1, max_size=25), st.integers(0, 2),
       st.sampled_from([64, 1 << 20]), st.booleans())
def test_perf_fold_matches_python(recs: list[bytes], repeat: int, chunk: int,
                                  kernel: bool) -> None:
    """``perf script`` text folded with the native fast path and in pure Python gives the
    same stacks in the same order, the same meta data and the same error."""
    import io

    from unit.fold.reference_perf import python_only
    from wallflame.fold.options import FoldOptions
    from wallflame.fold.perf import reader as perf_mod

    data = b"\n\n".join(recs * (repeat + 1)) + b"\n\n"
    results = []
    old_chunk = perf_mod.CHUNK
    perf_mod.CHUNK = chunk
    try:
        for use_native in (True, False):
            profile = Profile()
            try:
                with python_only() if not use_native else contextlib.nullcontext():
                    perf_mod.fold_stream(io.BytesIO(data), FoldOptions(kernel=kernel), profile)
                err = None
            except Exception as e:  # the same clean error either way
                err = str(e)
            m = profile.meta
            results.append((err, list(profile.stacks.items()),
                            {k: (v.count, v.first_line) for k, v in m.losses.items()},
                            m.unit, m.window_ns, m.samples, list(m.threads.items()), m.extra,
                            m.warnings))
    finally:
        perf_mod.CHUNK = old_chunk
    assert results[0] == results[1]


def test_perf_fold_native_on_a_fixture() -> None:
    """The fixtures fold the same with and without the native fast path."""
    from unit.fold.reference_perf import python_only
    from wallflame.fold.options import FoldOptions
    from wallflame.fold.perf import reader as perf_mod

    for name in ("deep-fp.txt", "mix-fp.txt", "mix-dwarf.txt", "mix-sched.txt", "mix-lost.txt",
                 "mix-fp-crlf.txt", "mix-fp-truncated.txt", "mix-two-events.txt"):
        outs = []
        for use_native in (True, False):
            profile = Profile()
            with python_only() if not use_native else contextlib.nullcontext():
                perf_mod.fold(str(FIXTURES / "perf" / name), FoldOptions(), profile)
            outs.append((list(profile.stacks.items()), profile.meta.to_json()))
        assert outs[0] == outs[1], name
