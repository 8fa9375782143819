"""eu-stack dumps (plain, ``-i -m``, ``-i -m -s``, stripped binary) and wallflame snapshot logs
with the eu-stack backend -> Profile.  Fixtures: real captures of ``samples/bin/mix``."""

from __future__ import annotations

import io
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from wallflame.errors import InputError
from wallflame.fold import eustack, eustackframes, gdb
from wallflame.fold.options import FoldOptions
from wallflame.folded import write_folded
from wallflame.profile import OFF, Profile

FIX = FIXTURES / "eustack"
GOLDEN = FIX / "golden"
CAPTURES = ["mix-plain.txt", "mix-im.txt", "mix-ims.txt", "mix-stripped.txt",
            "mix-wallflame.log", "mix-collect-eustack.log"]


def fold(path: Path | str, options: FoldOptions | None = None) -> Profile:
    p = Profile()
    eustack.fold(str(path), options or FoldOptions(), p)
    return p


def annotated(p: Profile) -> str:
    out = io.StringIO()
    write_folded(p, out, annotate=True)
    return out.getvalue()


@pytest.mark.parametrize("name", CAPTURES)
def test_golden(name: str, golden: Callable[[Path, str], None]) -> None:
    golden(GOLDEN / f"{name}.folded", annotated(fold(FIX / name)))


@pytest.mark.parametrize("name", CAPTURES)
def test_detected_as_eustack(name: str) -> None:
    head = (FIX / name).read_bytes()[:65536].decode("utf-8", "replace")
    assert eustack.detect(head)
    assert not gdb.detect(head)


def test_plain_and_inline_variants_agree_on_the_mix_frames() -> None:
    """``-i`` adds inlined glibc frames; the frames of mix itself are the same."""
    mix = {"main", "nap", "ticker", "worker_main", "worker_loop", "spin_work", "mix_hash",
           "critical_section", "wait_for_tick"}
    plain = fold(FIX / "mix-plain.txt")
    inline = fold(FIX / "mix-im.txt")
    by_tid_plain = {k.tid: [f for f in k.frames if f in mix] for k in plain.stacks}
    by_tid_inline = {k.tid: [f for f in k.frames if f in mix] for k in inline.stacks}
    assert by_tid_plain.keys() == by_tid_inline.keys()
    assert len(by_tid_plain) == 6
    # the two dumps were taken a moment apart: every thread is in a mix function in both
    assert all(v for v in by_tid_plain.values())
    assert all(v for v in by_tid_inline.values())
    # -s only adds source lines
    assert annotated(fold(FIX / "mix-ims.txt")).count("\n") > 3


def test_inline_frames_kept() -> None:
    p = fold(FIX / "mix-im.txt")
    waiters = [k for k in p.stacks if k.wait == "mutex"]
    assert waiters
    for k in waiters:
        assert k.frames[-4:] == ("pthread_mutex_lock", "lll_mutex_lock_optimized",
                                 "__lll_lock_wait", "futex_wait")


def test_stripped_binary_frames_name_their_module() -> None:
    p = fold(FIX / "mix-stripped.txt")
    names = {f for k in p.stacks for f in k.frames}
    assert "[mix-stripped]" in names
    assert "start_thread" in names and "nanosleep" in names


def test_names_come_from_proc_lines_in_wallflame_logs() -> None:
    p = fold(FIX / "mix-collect-eustack.log")
    assert {k.thread for k in p.stacks} <= {"mix", "mix-ticker", "mix-1", "mix-2", "mix-3",
                                            "mix-4"}
    assert all(k.state == OFF for k in p.stacks)
    assert p.meta.samples["snapshots"] == 20
    assert p.meta.extra["pause"]["snapshots"] == 20
    running = p.meta.extra["pmp_running_ns"]
    first = p.meta.extra["snapshot_sources"][0]["first_snapshot_ns"]
    for t in p.per_thread():
        assert t.total + running.get(str(t.tid), 0) == p.meta.window_ns + first, t.name


def test_libdw_logs_are_eustack_text(tmp_path: Path) -> None:
    """The libdw backend's log says ``"backend": "libdw"`` and holds eu-stack's text: it is
    detected as eu-stack (so ``wallflame fold raw/snapshots.log`` works) and folds the same."""
    from wallflame.fold import detect_format
    from wallflame.textio import head

    text = (FIX / "mix-collect-eustack.log").read_text()
    assert '"backend": "eu-stack"' in text.split("\n", 1)[0]
    log = tmp_path / "snapshots.log"
    log.write_text(text.replace('"backend": "eu-stack"', '"backend": "libdw"', 1))
    assert detect_format(head(str(log)), str(log)) == "eu-stack"
    assert fold(log).stacks == fold(FIX / "mix-collect-eustack.log").stacks


@pytest.mark.parametrize(("line", "name"), [
    ("#0  0x00007f clock_nanosleep@GLIBC_2.2.5", "clock_nanosleep"),
    ("#1  0x00007f __GI___nanosleep - /usr/lib/x86_64-linux-gnu/libc.so.6", "nanosleep"),
    ("#2  0x000055 - /tmp/mix-stripped", "[mix-stripped]"),
    ("#3  0x000055", "[unknown]"),
    ("#4  0x000055 operator- - /usr/lib/libx.so", "operator-"),
    ("#5  0x000055 Queue<int>::pop(int) const - /a b/c.so", "Queue<int>::pop"),
    ("#6  0x000055 f - [vdso: 123]", "f"),
])
def test_frame_lines(line: str, name: str) -> None:
    assert eustackframes.parse_frame(line).name == name


def test_several_dumps_without_ts_are_split_at_pid_lines(tmp_path: Path) -> None:
    one = (FIX / "mix-plain.txt").read_text()
    path = tmp_path / "three.txt"
    path.write_text(one * 3)
    p = fold(path)
    assert p.meta.samples["snapshots"] == 3
    assert p.total() == 3 * fold(FIX / "mix-plain.txt").total()


def test_deep_stack(tmp_path: Path) -> None:
    lines = ["PID 7 - process", "TID 7:"]
    lines += [f"#{i:<3} 0x{i:016x} f{i} - /lib/x.so" for i in range(10_000)]
    path = tmp_path / "deep.txt"
    path.write_text("\n".join(lines) + "\n")
    (key,) = fold(path).stacks
    assert len(key.frames) == 10_000 and key.frames[-1] == "f0"


def test_crlf_reads_as_lf(tmp_path: Path) -> None:
    path = tmp_path / "crlf.txt"
    path.write_bytes((FIX / "mix-wallflame.log").read_bytes().replace(b"\n", b"\r\n"))
    assert annotated(fold(path)) == annotated(fold(FIX / "mix-wallflame.log"))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_any_bytes_fold_or_fail_cleanly(data: bytes) -> None:
    with tempfile.NamedTemporaryFile(suffix=".txt") as f:
        f.write(data)
        f.flush()
        try:
            p = fold(f.name)
        except InputError:
            return
        assert all(w > 0 for w in p.stacks.values())


eu_lines = st.sampled_from([
    "PID 5 - process", "TID 5:", "TID 6:", "#0  0x1 a", "#1  0x2 b - /lib/x.so",
    "#2  0x3 - /bin/p", "    src.c:1:2", "TS 1.1732258745 d t", "TS 2.1732258746 d t",
    '# wallflame-proc {"tid": 6, "state": "S", "owner": 5, "lock": "0x9"}', "", "junk",
    '# wallflame-snapshots 1 {"backend": "eu-stack", "pid": 5}',
])


@settings(max_examples=300, deadline=None)
@given(st.lists(eu_lines, max_size=60))
def test_any_line_sequence_folds(lines: list[str]) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write("\n".join(lines))
        f.flush()
        try:
            p = fold(f.name)
        except InputError as e:  # nothing usable at all: one clean error
            assert "no thread stacks found" in e.format_message()
            return
    assert all(w > 0 and k.frames for k, w in p.stacks.items())
    assert sum(p.holders.values()) <= sum(w for k, w in p.stacks.items() if k.holder)
