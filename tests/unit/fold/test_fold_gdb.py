"""gdb dumps, pt-pmp raw logs and wallflame snapshot logs (gdb backend) -> Profile.

Fixtures are real captures of ``samples/bin/mix`` (``scripts/capture-snapshots.sh``) plus one
hand-written file of hostile names (``hostile.txt``, CRLF, invalid UTF-8).
"""

from __future__ import annotations

import io
import itertools
import json
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from wallflame.errors import InputError
from wallflame.fold import eustack, eustackframes, gdb, procrecords, snapshotlog, snapshots
from wallflame.fold.options import FoldOptions
from wallflame.folded import write_folded
from wallflame.profile import OFF, ON, HolderKey, Profile

FIX = FIXTURES / "gdb"
GOLDEN = FIX / "golden"
CAPTURES = ["mix-bt.txt", "mix-ptpmp-raw.txt", "mix-ptpmp-truncated.txt", "mix-wallflame.log",
            "mix-collect-gdb.log", "mix-stripped-bt.txt", "hostile.txt"]


def fold(path: Path | str, options: FoldOptions | None = None) -> Profile:
    p = Profile()
    gdb.fold(str(path), options or FoldOptions(), p)
    return p


def annotated(p: Profile) -> str:
    out = io.StringIO()
    write_folded(p, out, annotate=True)
    return out.getvalue()


@pytest.mark.parametrize("name", CAPTURES)
def test_golden(name: str, golden: Callable[[Path, str], None]) -> None:
    golden(GOLDEN / f"{name}.folded", annotated(fold(FIX / name)))


@pytest.mark.parametrize("name", CAPTURES)
def test_detected_as_gdb(name: str) -> None:
    head = (FIX / name).read_bytes()[:65536].decode("utf-8", "replace")
    assert gdb.detect(head)
    assert not eustack.detect(head)


def test_single_dump_threads_names_and_lwps() -> None:
    p = fold(FIX / "mix-bt.txt")
    names = {k.tid: k.thread for k in p.stacks}
    assert sorted(names.values()) == ["mix", "mix-1", "mix-2", "mix-3", "mix-4", "mix-ticker"]
    assert all(k.pid == 10881 for k in p.stacks)  # from "[Inferior 1 (process N) detached]"
    assert names[10881] == "mix"
    # one stack per thread, the whole dump weighs the snapshot interval (no timestamps)
    assert len(p.stacks) == 6
    assert set(p.stacks.values()) == {FoldOptions().snapshot_interval_ns}
    assert p.meta.samples["snapshots"] == 1
    assert any("without a timestamp" in w for w in p.meta.warnings)


def test_mutex_waiters_carry_the_lock_and_inlined_frames() -> None:
    p = fold(FIX / "mix-bt.txt")
    waiters = [k for k in p.stacks if k.wait == "mutex"]
    assert len(waiters) == 3
    for k in waiters:
        assert k.lock == "0x55e365914100 <shared_lock>"
        # gdb prints the inlined glibc frames without an address: they are kept
        assert k.frames[-5:] == ("worker_loop", "pthread_mutex_lock", "lll_mutex_lock_optimized",
                                 "__lll_lock_wait", "futex_wait")
    # a foreign dump (no proc lines): the spinning thread is on-CPU
    on = [k for k in p.stacks if k.state == ON]
    assert [k.frames[-1] for k in on] == ["mix_hash"]


def test_ptpmp_raw_log_weights_are_intervals() -> None:
    p = fold(FIX / "mix-ptpmp-raw.txt")
    lines = (FIX / "mix-ptpmp-raw.txt").read_text().splitlines()
    ts = [snapshotlog.parse_ts(line) for line in lines if line.startswith("TS ")]
    assert len(ts) == 3 and all(t is not None for t in ts)
    times = [t for t in ts if t is not None]
    intervals = [b - a for a, b in itertools.pairwise(times)]
    first = int(statistics.median(intervals))
    assert p.meta.samples["snapshots"] == 3
    assert p.meta.window_ns == times[-1] - times[0]
    # every thread is in every dump: it weighs the median interval once, then each interval
    for t in p.per_thread():
        assert t.total == first + sum(intervals), t.name
    assert p.meta.rates["pmp_hz"] == pytest.approx(2 * 1e9 / (times[-1] - times[0]), rel=1e-3)


def test_truncated_last_dump_is_dropped_and_counted() -> None:
    p = fold(FIX / "mix-ptpmp-truncated.txt")
    full = fold(FIX / "mix-ptpmp-raw.txt")
    assert p.meta.samples["snapshots"] == 2
    assert full.meta.samples["snapshots"] == 3
    loss = p.meta.losses["truncated last snapshot (no TS line)"]
    assert loss.count == 1 and loss.first_line > 100


def test_wallflame_log_running_threads_go_to_coverage_only() -> None:
    p = fold(FIX / "mix-wallflame.log")
    running = p.meta.extra["pmp_running_ns"]
    assert running and all(int(tid) in p.meta.threads for tid in running)
    assert all(k.state == OFF for k in p.stacks)
    assert p.meta.extra["pause"]["snapshots"] == 6
    assert p.meta.extra["pause"]["max_ms"] >= p.meta.extra["pause"]["median_ms"] > 0
    # per thread, blocked + running snapshot time = the thread's whole share of the log
    window = p.meta.window_ns
    first = p.meta.extra["snapshot_sources"][0]["first_snapshot_ns"]
    for t in p.per_thread():
        assert t.total + running.get(str(t.tid), 0) == window + first, t.name


def test_wallflame_log_holders() -> None:
    """A log written by ``wallflame collect --pmp-backend gdb``: a waiter on shared_lock whose
    owner was read from the mutex gets the holder's tid, never the stack the dump caught it
    with (the owner was read from /proc before the dump: not known to be its holding stack)."""
    p = fold(FIX / "mix-collect-gdb.log")
    assert p.holders
    for h, w in p.holders.items():
        assert h.lock.endswith(" <shared_lock>")
        assert h.thread.startswith("mix-") and h.frames == ()
        waiters = [k for k in p.stacks if k.holder == h.tid and k.lock == h.lock]
        assert waiters and all(k.wait == "mutex" for k in waiters)
        assert w <= sum(p.stacks[k] for k in waiters)
    assert sum(p.holders.values()) == sum(v for k, v in p.stacks.items() if k.holder)


def test_proc_states(tmp_path: Path) -> None:
    """R runs (coverage only), S with a wait on the stack waits, T is stopped (off-CPU, not a
    mismatch), S with no wait on the stack is kept off-CPU and counted as a mismatch, and t
    (a tracer's stop) leaves the decision to the stack."""
    lines = ['# wallflame-snapshots 1 {"backend": "gdb", "pid": 1, "rate_hz": 10}']
    for ts in (1, 2):
        lines += ['Thread 4 (Thread 0x1 (LWP 4) "r"):', "#0  0x1 in spin ()",
                  'Thread 3 (Thread 0x2 (LWP 3) "s"):', "#0  0x1 in nanosleep ()",
                  'Thread 2 (Thread 0x3 (LWP 2) "t"):', "#0  0x1 in spin ()",
                  'Thread 1 (Thread 0x4 (LWP 1) "m"):', "#0  0x1 in spin ()",
                  'Thread 5 (Thread 0x5 (LWP 5) "x"):', "#0  0x1 in nanosleep ()",
                  'Thread 6 (Thread 0x6 (LWP 6) "y"):', "#0  0x1 in spin ()"]
        lines += ['# wallflame-proc {"tid": 4, "state": "R"}',
                  '# wallflame-proc {"tid": 3, "state": "S"}',
                  '# wallflame-proc {"tid": 2, "state": "T"}',
                  '# wallflame-proc {"tid": 1, "state": "S"}',
                  '# wallflame-proc {"tid": 5, "state": "t"}',
                  '# wallflame-proc {"tid": 6, "state": "t"}',
                  f"TS {ts}00000000.1732258745 d t"]
    path = tmp_path / "log.txt"
    path.write_text("\n".join(lines) + "\n")
    p = fold(path)
    by = {k.tid: k for k in p.stacks}
    running = p.meta.extra["pmp_running_ns"]
    assert 4 not in by and running == {"4": 200_000_000, "6": 200_000_000}
    assert by[5].wait == "sleep"  # "t": stopped by a tracer, the stack decides
    assert by[3].wait == "sleep" and by[2].wait == "other" and by[1].wait == "other"
    assert p.meta.extra["pmp_state_mismatch"] == 2  # thread 1, twice
    assert all(w == 200_000_000 for w in p.stacks.values())


@pytest.mark.parametrize(("proc", "wait", "lock", "holder"), [
    ('"state": "S", "syscall": 230', "sleep", "", 0),
    ('"state": "S", "syscall": 202, "owner": 9, "lock": "0x10 <m>"', "mutex", "0x10 <m>", 9),
    ('"state": "S", "syscall": 202', "condvar", "", 0),
    ('"state": "S", "syscall": 232', "poll", "", 0),
    ('"state": "S", "syscall": 0', "io", "", 0),
    ('"state": "D", "syscall": 61', "io", "", 0),
    ('"state": "S", "syscall": -1', "other", "", 0),
])
def test_proc_says_asleep_stack_says_running(tmp_path: Path, proc: str, wait: str, lock: str,
                                             holder: int) -> None:
    """eu-stack reaches a thread milliseconds after /proc was read: when /proc says asleep
    and the stack shows running code, the system call /proc showed gives the class."""
    path = tmp_path / "log.txt"
    path.write_text('# wallflame-snapshots 1 {"backend": "gdb", "pid": 1}\n'
                    'Thread 2 (Thread 0x1 (LWP 2) "w"):\n#0  0x1 in spin ()\n'
                    'Thread 1 (Thread 0x2 (LWP 9) "h"):\n#0  0x1 in critical ()\n'
                    f'# wallflame-proc {{"tid": 2, {proc}}}\n'
                    '# wallflame-proc {"tid": 9, "state": "R"}\n'
                    "TS 1.1732258745 d t\n")
    p = fold(path)
    (key,) = p.stacks
    assert (key.wait, key.lock, key.holder) == (wait, lock, holder)
    assert p.meta.extra["pmp_state_mismatch"] == 1
    if holder:
        assert p.holders == {HolderKey(lock, 9, "h", ()): p.stacks[key]}


def test_hostile_names_stay_one_frame_each() -> None:
    p = fold(FIX / "hostile.txt")
    by_tid = {k.tid: k for k in p.stacks}
    assert by_tid[4104].thread == 'a"b;c) <img src=x>'
    assert by_tid[4103].thread == "sig;handler"
    assert by_tid[4102].thread == "caf\ufffd"  # invalid UTF-8 decodes deterministically
    assert by_tid[4100].thread == "" and by_tid[4100].pid == 4100
    f = by_tid[4104].frames
    assert f == (
        "clone3", "start_thread", "operator<< <char, std::char_traits<char> >",
        "std::function<void (int)>::operator()", "main::{lambda()#1}::operator()",
        "(anonymous namespace)::Queue<std::pair<int, std::string>, std::less<void> >::pop",
        "std::lock_guard<std::mutex>::lock_guard", "pthread_mutex_lock",
        "lll_mutex_lock_optimized", "__lll_lock_wait", "futex_wait",
    )
    assert by_tid[4104].lock == "0x55d0c0a3e040 <shared_lock>"
    assert by_tid[4103].frames == ("[unknown]", "poll", "[signal handler called]",
                                   "[libfoo.so.1]")
    assert by_tid[4103].wait == "poll"
    assert by_tid[4102].lock == "0x55d0c0a3e080 <tick_lock>"  # m= argument
    assert by_tid[4102].wait == "condvar"
    assert p.meta.losses["truncated stack (Backtrace stopped)"].count == 1
    text = annotated(p)
    assert "sig\\x3bhandler" in text and "a\"b\\x3bc)" in text


@pytest.mark.parametrize(("line", "name", "lock"), [
    ("#3  0x00007f in foo (m=0x10 <x>, n=2) at a.c:1", "foo", "0x10 <x>"),
    ("#3  foo (__mutex=__mutex@entry=0x20) at a.c:1", "foo", "0x20"),
    ("#3  0x1 in bar (lock=0x30 <g_lock+8>) from /lib/libbar.so", "bar", "0x30 <g_lock+8>"),
    ("#3  0x1 in baz (mm=0x40, block=0x50) at a.c:1", "baz", ""),
    ("#3  0x1 in ?? ()", "[unknown]", ""),
    ("#3  0x1 in ?? () from /usr/lib/libc.so.6", "[libc.so.6]", ""),
    ("#12 0x1 in ns::f (s=\"x), m=0x60\") at q.c:3", "ns::f", ""),
    ("#0  no_args_at_all", "no_args_at_all", ""),
    ("#1  0x1 in unclosed (a=1, b=", "unclosed", ""),
])
def test_frame_lines(line: str, name: str, lock: str) -> None:
    f = gdb.parse_frame(line)
    assert f.name == name
    assert gdb.lock_of(f.args) == lock


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["#0  ", "#3  0x1f in ", "#12 0x0 in ?? "]))
def test_any_frame_text_parses(text: str, prefix: str) -> None:
    f = gdb.parse_frame(prefix + text)
    assert f.name
    gdb.lock_of(f.args)
    eustackframes.parse_frame(prefix + text)


@pytest.mark.parametrize(("line", "head"), [
    ('Thread 42 (Thread 0x7f274d19f640 (LWP 3772082) "connection"):', (3772082, "connection")),
    ('Thread 1.2 (Thread 0x7f (LWP 12) "x"):', (12, "x")),
    ("Thread 1 (process 4100):", (4100, "")),
    ('Thread 3 (LWP 77 "a (b)"):', (77, "a (b)")),
    ('Thread 3 (Thread 0x1 (LWP 9) ""):', (9, "")),
    ("Thread x (LWP 1):", None),
    ("Thread 1 (LWP 1)", None),
])
def test_header_lines(line: str, head: tuple[int, str] | None) -> None:
    got = gdb.parse_header(line)
    assert (got[:2] if got else None) == head


@pytest.mark.parametrize(("line", "ns"), [
    ("TS 123456789.1732258745 2026-11-22 06:45:45", 1732258745_123456789),
    ("TS 000000012.1732258745 2026-11-22 06:45:45", 1732258745_000000012),
    ("TS 1732258745.123456789", 1732258745_123456789),
    ("TS 1732258745.5 2026-11-22 06:45:45", 1732258745_500000000),
    ("TS x.y", None),
    ("TS 12345678901.1", None),
])
def test_ts_lines(line: str, ns: int | None) -> None:
    assert snapshotlog.parse_ts(line) == ns


@pytest.mark.parametrize("data", [b"", b"\n\n", b"hello\nworld\n", b"\xff\xfe\x00",
                                  b'# wallflame-snapshots 1 {"backend": "gdb"}\n'])
def test_nothing_usable_is_one_clean_error(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "x.txt"
    path.write_bytes(data)
    with pytest.raises(InputError, match="no thread stacks found"):
        fold(path)


def test_concatenated_dumps_without_ts(tmp_path: Path) -> None:
    one = (FIX / "mix-bt.txt").read_text()
    path = tmp_path / "two.txt"
    path.write_text(one + one)
    p = fold(path)
    assert p.meta.samples["snapshots"] == 2
    assert p.total() == 2 * fold(FIX / "mix-bt.txt").total()


def test_deep_stack_no_recursion(tmp_path: Path) -> None:
    lines = ['Thread 1 (Thread 0x7f (LWP 7) "deep"):']
    lines += [f"#{i}  0x{i:x} in f{i} (x=1) at d.c:{i}" for i in range(10_000)]
    path = tmp_path / "deep.txt"
    path.write_text("\n".join(lines) + "\nTS 1.1732258745 2026-11-22 06:45:45\n")
    p = fold(path)
    (key,) = p.stacks
    assert len(key.frames) == 10_000 and key.frames[0] == "f9999" and key.frames[-1] == "f0"


def test_crlf_reads_as_lf(tmp_path: Path) -> None:
    raw = (FIX / "mix-ptpmp-raw.txt").read_bytes()
    path = tmp_path / "crlf.txt"
    path.write_bytes(raw.replace(b"\n", b"\r\n"))
    assert annotated(fold(path)) == annotated(fold(FIX / "mix-ptpmp-raw.txt"))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_any_bytes_fold_or_fail_cleanly(data: bytes) -> None:
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".txt") as f:
        f.write(data)
        f.flush()
        try:
            p = fold(f.name)
        except InputError:
            return
        assert all(w > 0 for w in p.stacks.values())


gdb_lines = st.sampled_from([
    'Thread 2 (Thread 0x7f (LWP 12) "w;x"):', "Thread 1 (process 11):", "#0  0x1 in a (m=0x9)",
    "#1  b (this=0x1) at b.c:2", "#2  0x2 in ?? () from /lib/libz.so", "TS 1.1732258745 d t",
    "TS 2.1732258746 d t", "# wallflame-proc {\"tid\": 12, \"state\": \"R\"}", "[New LWP 12]",
    "Backtrace stopped: x", "", "#3  <signal handler called>", "garbage",
    '# wallflame-snapshot {"t_ns": 5, "pause_ms": 1.5}',
])


@settings(max_examples=300, deadline=None)
@given(st.lists(gdb_lines, max_size=60))
def test_any_line_sequence_folds(lines: list[str]) -> None:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write("\n".join(lines))
        f.flush()
        try:
            p = fold(f.name)
        except InputError as e:  # nothing usable at all: one clean error
            assert "no thread stacks found" in e.format_message()
            return
    assert all(w > 0 and k.frames for k, w in p.stacks.items())
    per_tid: dict[int, int] = {}
    for k in p.stacks:
        per_tid[k.tid] = per_tid.get(k.tid, 0) + 1
    assert all(n <= p.meta.samples["snapshots"] for n in per_tid.values())


def _ran_log(tmp_path: Path, counts: list[tuple[int, int] | None]) -> Path:
    """Thread 2 in three snapshots a second apart: twice in a condvar wait, then caught in
    ``send`` (client write) though /proc read it asleep in the same futex; ``counts`` are
    its (record's, stop's) timeslice counts per snapshot (None: not read)."""
    stacks = ["#0  0x1 in __futex_abstimed_wait_common ()\n#1  0x2 in pthread_cond_wait ()\n"
              "#2  0x3 in worker ()\n"] * 2 + ["#0  0x1 in send ()\n#1  0x2 in vio_write ()\n"
                                               "#2  0x3 in worker ()\n"]
    dumps = []
    for stack, c in zip(stacks, counts, strict=True):
        proc: dict[str, object] = {"tid": 2, "state": "S", "syscall": 202}
        snap: dict[str, object] = {"pause_ms": 0.1}
        if c is not None:
            proc["pcount"] = c[0]
            snap["stop_pcount"] = {"2": c[1]}
        dumps.append((stack, proc, snap))
    return _thread2_log(tmp_path, dumps)


def _thread2_log(tmp_path: Path, dumps: list[tuple[str, dict[str, object], dict[str, object]]]
                 ) -> Path:
    """A snapshot log of thread 2 alone, one dump a second: (stack, /proc record, snapshot
    line) each."""
    out = ['# wallflame-snapshots 1 {"backend": "gdb", "pid": 1}\n']
    for i, (stack, proc, snap) in enumerate(dumps):
        out.append(f'Thread 1 (Thread 0x1 (LWP 2) "w"):\n{stack}'
                   f"# wallflame-proc {json.dumps(proc)}\n"
                   f"# wallflame-snapshot {json.dumps(snap)}\n"
                   f"TS 000000000.{1000 + i} d t\n")
    path = tmp_path / "log.txt"
    path.write_text("".join(out))
    return path


def test_a_thread_that_ran_before_its_stop_keeps_the_wait_proc_saw(tmp_path: Path) -> None:
    """Read asleep in a futex by /proc, then run again (its timeslice count moved on by more
    than the stop's own one) before it was stopped: its stack (here preempted in ``send``)
    is of another instant, so its time goes to the thread's snapshots that did not run in
    between and were blocked in the same system call."""
    p = fold(_ran_log(tmp_path, [(10, 11), (20, 21), (30, 33)]))
    waits = {k.wait: w for k, w in p.stacks.items() if k.state == OFF}
    assert waits == {"condvar": 3_000_000_000}  # the first weighs the median interval
    assert p.meta.extra["pmp_ran_before_stop"] == 1
    # counts not read (a log of an older collect): as before, the stack and its rules decide
    p = fold(_ran_log(tmp_path, [None, None, None]))
    assert {k.wait for k in p.stacks if k.state == OFF} == {"condvar", "io"}
    assert "pmp_ran_before_stop" not in p.meta.extra
    # the stop's own timeslice is no run: kept where it was caught
    p = fold(_ran_log(tmp_path, [(10, 11), (20, 21), (30, 31)]))
    assert {k.wait for k in p.stacks if k.state == OFF} == {"condvar", "io"}
    # a thread that ran at every snapshot: /proc's system call says what it waited on
    p = fold(_ran_log(tmp_path, [(10, 15), (20, 29), (30, 33)]))
    assert {(k.frames, k.wait): w for k, w in p.stacks.items() if k.state == OFF} == \
        {((snapshots.RAN_FRAME,), "condvar"): 3_000_000_000}


def _stale_log(tmp_path: Path, waits: list[tuple[str, dict[str, object], bool]]) -> Path:
    """Thread 2 in one snapshot a second for each ``(stack, /proc fields, ran before its
    stop)`` of ``waits``."""
    return _thread2_log(tmp_path, [
        (stack, {"tid": 2, "state": "S", "pcount": 10 * i, **fields},
         {"pause_ms": 0.1, "stop_pcount": {"2": 10 * i + (5 if ran else 1)}})
        for i, (stack, fields, ran) in enumerate(waits)])


_CONDVAR = ("#0  0x1 in __futex_abstimed_wait_common ()\n#1  0x2 in pthread_cond_wait ()\n"
            "#2  0x3 in worker ()\n")
_SEND = "#0  0x1 in send ()\n#1  0x2 in worker ()\n"


def test_a_short_wait_caught_stale_keeps_its_class(tmp_path: Path) -> None:
    """A thread whose long waits are condition-variable waits and whose short ones (a mutex,
    the client's socket) end before it is stopped: the short ones keep the class /proc's
    call gives them instead of being counted as its condvar waits."""
    cond = {"syscall": 202, "futex": [0x189, 0]}  # FUTEX_WAIT_BITSET|PRIVATE|CLOCK_REALTIME
    lll = {"syscall": 202, "futex": [128, 2]}  # glibc's low-level lock: FUTEX_WAIT for 2
    p = fold(_stale_log(tmp_path, [(_CONDVAR, cond, False), (_CONDVAR, cond, False),
                                   (_SEND, lll, True), (_SEND, {"syscall": 7}, True)]))
    waits = {(k.frames, k.wait): w for k, w in p.stacks.items() if k.state == OFF}
    assert waits == {(("worker", "pthread_cond_wait", "__futex_abstimed_wait_common"),
                      "condvar"): 2_000_000_000,
                     ((snapshots.RAN_FRAME,), "mutex"): 1_000_000_000,
                     ((snapshots.RAN_FRAME,), "poll"): 1_000_000_000}
    assert p.meta.extra["pmp_ran_before_stop"] == 2
    # a stale wait on a glibc mutex /proc read (seen free): under its lock's name
    mutex = {"syscall": 202, "futex": [128, 2], "kind": "mutex:normal", "lock": "big_lock",
             "refused": "free"}
    p = fold(_stale_log(tmp_path, [(_CONDVAR, cond, False), (_SEND, mutex, True)]))
    assert {(k.frames, k.wait, k.lock) for k in p.stacks if k.state == OFF} == {
        (("worker", "pthread_cond_wait", "__futex_abstimed_wait_common"), "condvar", ""),
        ((snapshots.RAN_FRAME,), "mutex", "big_lock")}
    # a stale condvar wait still goes to the thread's condvar stacks
    p = fold(_stale_log(tmp_path, [(_CONDVAR, cond, False), (_SEND, cond, True)]))
    assert {k.wait for k in p.stacks if k.state == OFF} == {"condvar"}
    assert not any(snapshots.RAN_FRAME in k.frames for k in p.stacks)


@pytest.mark.parametrize(("fields", "expected"), [
    ({"futex": [128, 2]}, "mutex"),  # __lll_lock_wait
    ({"futex": [0, 2]}, "mutex"),  # a process-shared one
    ({"futex": [0x189, 2]}, "condvar"),  # BITSET: a condition variable's wait for 2
    ({"futex": [128, 0]}, "condvar"),  # a wait for another value: no lll lock
    ({"futex": [128, 2], "kind": "rwlock:prefer-reader"}, "rwlock"),
    ({"futex": [0x189, 1], "kind": "mutex:normal", "lock": "m"}, "mutex"),
    ({"owner": 7, "lock": "m"}, "mutex"),  # a record of an older collect
    ({}, "condvar"),
    ({"futex": "junk"}, "condvar"),
    ({"futex": [True, 2]}, "condvar"),
])
def test_the_class_proc_gives_a_futex_wait(fields: dict[str, object], expected: str) -> None:
    assert procrecords.proc_class({"syscall": 202, **fields}, "S") == expected


@pytest.mark.parametrize(("fields", "expected"), [
    ({"syscall": 219, "wchan": "futex_do_wait"}, "condvar"),  # a timed futex wait restarted
    ({"syscall": 219, "wchan": "poll_schedule_timeout.constprop.0"}, "poll"),
    ({"syscall": 219, "wchan": "do_nanosleep"}, "sleep"),
    ({"syscall": 219, "wchan": "do_syscall_64"}, "sleep"),  # a nanosleep restarted (6.1)
    ({"syscall": 219, "wchan": ""}, "other"),
    ({"syscall": 128, "wchan": "do_sigtimedwait.isra.0"}, "poll"),  # as the rules say
    ({"syscall": 7}, "poll"),
    ({"syscall": 9999}, "other"),
    # an idle io_uring worker: its syscall file shows its creator's io_uring_enter
    ({"syscall": 426, "wchan": "io_wq_worker"}, "other"),
    ({"syscall": 426, "wchan": "io_cqring_wait"}, "io"),
])
def test_the_class_proc_gives_a_system_call(fields: dict[str, object], expected: str) -> None:
    """restart_syscall (a timed wait that a snapshot's stop interrupted goes on in it) is
    told apart by the kernel function the thread sleeps in."""
    assert procrecords.proc_class(fields, "S") == expected


def test_a_thread_read_asleep_but_on_a_run_queue_is_runnable(tmp_path: Path) -> None:
    """/proc's state says asleep, but the kernel gives no sleeping function (``wchan`` 0) for
    a thread on a run queue: preempted after it set its sleeping state and before it switched
    out.  Counted with the running threads, not as a wait; unless no record of the dump has
    a ``wchan`` (not readable here), when the state is all there is."""
    def log(wchan_other: str) -> Path:
        procs = [{"tid": 2, "state": "S", "syscall": 7, "wchan": ""},
                 {"tid": 3, "state": "S", "syscall": 202, "wchan": wchan_other}]
        text = ('# wallflame-snapshots 1 {"backend": "gdb", "pid": 1}\n'
                'Thread 2 (Thread 0x1 (LWP 2) "a"):\n#0  0x1 in poll ()\n#1  0x2 in main ()\n'
                'Thread 1 (Thread 0x2 (LWP 3) "b"):\n'
                "#0  0x1 in __futex_abstimed_wait_common ()\n#1  0x2 in pthread_cond_wait ()\n"
                + "".join(f"# wallflame-proc {json.dumps(p)}\n" for p in procs)
                + '# wallflame-snapshot {"pause_ms": 0.1}\nTS 000000000.1000 d t\n')
        path = tmp_path / "log.txt"
        path.write_text(text)
        return path

    p = fold(log("futex_do_wait"))
    assert {k.tid: k.wait for k in p.stacks if k.state == OFF} == {3: "condvar"}
    assert p.meta.extra["pmp_asleep_on_runqueue"] == 1
    assert set(p.meta.extra["pmp_running_ns"]) == {"2"}
    p = fold(log(""))
    assert {k.tid: k.wait for k in p.stacks if k.state == OFF} == {2: "poll", 3: "condvar"}
    assert "pmp_asleep_on_runqueue" not in p.meta.extra
