"""The data model (Profile, Meta, totals) and folded text in and out of it."""

from __future__ import annotations

import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from wallflame.folded import (
    MAGIC,
    ThreadRoot,
    escape,
    folded_lines,
    meta_from_json,
    parse_annotated_line,
    read_annotated,
    unescape,
    write_folded,
)
from wallflame.profile import (
    OFF,
    ON,
    UNIT_SAMPLES,
    WAIT_CLASSES,
    HolderKey,
    Meta,
    Profile,
    StackKey,
    ThreadTotals,
    merge_all,
)

A = StackKey(("main", "work"), 11, "w-1", 10, ON)
B = StackKey(("main", "pthread_mutex_lock"), 11, "w-1", 10, OFF, "mutex", "0x10 <m>", 12)
C = StackKey(("main", "nanosleep"), 12, "w-2", 10, OFF, "sleep")
D = StackKey(("loop", "epoll_wait"), 13, "io", 10, OFF, "poll")
H = HolderKey("0x10 <m>", 12, "w-2", ("main", "critical"))


def sample() -> Profile:
    p = Profile()
    p.add(A, 700)
    p.add(B, 200)
    p.add(C, 100)
    p.add(D, 1000)
    p.add_holder(H, 200)
    p.meta.threads.update({11: "w-1", 12: "w-2", 13: "io"})
    return p


def test_add_sums_and_ignores_zero() -> None:
    p = Profile()
    p.add(A, 5)
    p.add(A, 7)
    p.add(C, 0)
    p.add_holder(H, 0)
    assert p.stacks == {A: 12} and not p.holders


def test_totals_per_thread_per_class_per_lock() -> None:
    p = sample()
    assert p.total() == 2000
    assert p.per_class() == {**dict.fromkeys(("on", *WAIT_CLASSES), 0),  # every class
                             "on": 700, "mutex": 200, "poll": 1000, "sleep": 100}
    threads = p.per_thread()
    assert [(t.tid, t.name, t.total) for t in threads] == [(13, "io", 1000), (11, "w-1", 900),
                                                          (12, "w-2", 100)]
    assert threads[1].on == 700 and threads[1].off == 200 and threads[1].wait["mutex"] == 200
    assert p.per_lock() == {"0x10 <m>": 200}


def test_unknown_wait_class_counts_as_other() -> None:
    t = ThreadTotals(1, "x")
    t.add(StackKey(("f",), state=OFF, wait="bogus"), 3)
    assert t.wait["other"] == 3 and set(t.wait) == set(WAIT_CLASSES)


def test_filter_keeps_the_holders_of_kept_locks() -> None:
    p = sample()
    off = p.off_cpu()
    assert set(off.stacks) == {B, C, D} and off.holders == {H: 200}
    on = p.on_cpu()
    assert set(on.stacks) == {A} and not on.holders
    assert p.filter(lambda k: k.tid == 12).holders == {}


def test_merge_sums_stacks_and_metadata() -> None:
    p, q = sample(), sample()
    p.meta.lose("lost events", 40, 3)
    q.meta.lose("lost events", 7, 2, "x")
    q.meta.warn("w")
    q.meta.warn("w")
    q.meta.count("perf", 5)
    q.meta.window_ns = 9
    p.meta.extra["k"] = 1
    q.meta.extra["k"] = 2
    p.merge(q)
    assert p.stacks[A] == 1400 and p.holders[H] == 400
    loss = p.meta.losses["lost events"]
    assert (loss.count, loss.first_line) == (5, 7)
    assert p.meta.warnings == ["w"] and p.meta.samples == {"perf": 5}
    assert p.meta.window_ns == 9 and p.meta.extra["k"] == 1


def test_merge_all_keeps_the_first_unit_and_warns_on_mixed_units() -> None:
    a, b = sample(), sample()
    a.meta.unit = UNIT_SAMPLES
    m = merge_all([a, b])
    assert m.meta.unit == UNIT_SAMPLES
    assert any("different units" in w for w in m.meta.warnings)
    assert merge_all([]).total() == 0


def test_sorted_items_is_deterministic() -> None:
    p, q = Profile(), Profile()
    for k, w in sample().stacks.items():
        p.add(k, w)
    for k, w in reversed(list(sample().stacks.items())):
        q.add(k, w)
    assert list(p.sorted_items()) == list(q.sorted_items())


def test_plain_folded_roots() -> None:
    p = sample()
    assert folded_lines(p, ThreadRoot.COMM) == [
        "io;loop;epoll_wait 1000", "w-1;main;pthread_mutex_lock 200", "w-1;main;work 700",
        "w-2;main;nanosleep 100"]
    assert folded_lines(p, ThreadRoot.TID)[0] == "io-10/13;loop;epoll_wait 1000"
    assert folded_lines(p, ThreadRoot.PID)[0] == "io-10;loop;epoll_wait 1000"
    assert folded_lines(p, ThreadRoot.NONE) == [
        "loop;epoll_wait 1000", "main;nanosleep 100", "main;pthread_mutex_lock 200",
        "main;work 700"]


def test_plain_folded_sums_stacks_that_print_the_same() -> None:
    p = Profile()
    p.add(StackKey(("f",), 1, "t", 1, ON), 2)
    p.add(StackKey(("f",), 2, "t", 1, ON), 3)
    assert folded_lines(p) == ["t;f 5"]


def test_one_symbol_is_one_frame() -> None:
    p = Profile()
    p.add(StackKey(("a;b", "c\\d", "e\nf", "thread 12"), 1, "my thread", 2, ON), 1)
    (line,) = folded_lines(p)
    assert line == "my_thread;a\\x3bb;c\\\\d;e\\x0af;thread\\x2012 1"
    assert [unescape(f) for f in line.rsplit(" ", 1)[0].split(";")][1:] == [
        "a;b", "c\\d", "e\nf", "thread 12"]


def annotated_text(p: Profile) -> str:
    out = io.StringIO()
    write_folded(p, out, annotate=True)
    return out.getvalue()


def read_back(text: str) -> Profile:
    q = Profile()
    read_annotated(enumerate(text.split("\n"), 1), q)  # as iter_lines: only \n ends a line
    return q


def test_annotated_round_trip() -> None:
    p = sample()
    p.meta.unit = UNIT_SAMPLES
    p.meta.lose("truncated", 3, 2, "why")
    p.meta.extra["pause"] = {"snapshots": 3, "median_ms": 1.5}
    text = annotated_text(p)
    assert text.startswith(MAGIC + "\n#meta ")
    q = read_back(text)
    assert q.stacks == p.stacks and q.holders == p.holders
    assert q.meta.to_json() == p.meta.to_json()
    assert annotated_text(q) == text
    assert not q.meta.warnings  # no "different units" warning for a fresh profile


def test_annotated_reader_counts_bad_lines() -> None:
    q = read_back(f"{MAGIC}\n#meta {{bad\n#holder [1]\nno count here\nx-1/2;f 3\n")
    assert set(q.meta.losses) == {"bad metadata line", "bad holder line",
                                  "malformed folded line"}
    assert q.stacks == {StackKey(("f",), 2, "x", 1, ON): 3}


def test_old_unknown_ids_still_read() -> None:
    assert parse_annotated_line("t-?/?;f;[off io]") == StackKey(("f",), 0, "t", 0, OFF, "io")


def test_meta_json_round_trip() -> None:
    m = Meta(unit="ns", window_ns=5, rates={"perf_hz": 99.0}, samples={"perf": 3},
             threads={7: "x"}, extra={"a": [1, 2]})
    m.lose("k", 4)
    m.warn("careful")
    assert meta_from_json(json.loads(json.dumps(m.to_json()))).to_json() == m.to_json()


names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=16)
keys = st.builds(
    StackKey,
    st.lists(names, min_size=1, max_size=6).map(tuple),
    st.integers(0, 1 << 22), st.one_of(st.just(""), names), st.integers(0, 1 << 22),
    st.just(ON), st.just(""), st.just(""), st.just(0),  # on-CPU stacks carry no wait data
) | st.builds(
    StackKey,
    st.lists(names, min_size=1, max_size=6).map(tuple),
    st.integers(0, 1 << 22), st.one_of(st.just(""), names), st.integers(0, 1 << 22),
    st.just(OFF), st.sampled_from(WAIT_CLASSES),
    st.one_of(st.just(""), st.from_regex(r"0x[0-9a-f]{1,12}( <[a-z_;]{1,8}>)?", fullmatch=True)),
    st.integers(0, 1 << 22),
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(keys, st.integers(1, 10**15), max_size=12))
def test_annotated_round_trip_is_lossless(stacks: dict[StackKey, int]) -> None:
    """Whatever the names hold (``;``, ``\\``, newlines, ``[off ...]``, spaces, digits, markup),
    the annotated flavour gives back exactly the same stacks."""
    p = Profile()
    for k, w in stacks.items():
        if k.thread == "[unknown]":
            k = k._replace(thread="")  # the one name that means "unknown"
        p.add(k, w)
    q = read_back(annotated_text(p))
    assert q.stacks == p.stacks


@given(names)
def test_escape_round_trip(name: str) -> None:
    e = escape(name)
    assert unescape(e) == name
    assert ";" not in e and "\n" not in e and "\r" not in e
    assert not (e[-1:].isdigit() and " " in e and e.rsplit(" ", 1)[1].isdigit())
