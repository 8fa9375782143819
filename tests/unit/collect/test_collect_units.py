"""Pure tests of the collector's /proc, MI, smaps and perf-stderr readers."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from wallflame.collect.gdbmi import mi_cstring, stream_text
from wallflame.collect.locks.targetmemory import parse_maps
from wallflame.collect.memory import HEAP_MAX_SIZE, arenas, parse_smaps
from wallflame.collect.perf import (
    CHUNK_MAX_S,
    CHUNK_S,
    CHUNK_SAMPLES,
    LEAD_S,
    SAMPLED_STACK_BYTES,
    SLEEP_MARGIN_S,
    UNBOUNDED_S,
    PerfOptions,
    chunk_seconds,
    lost_from_stderr,
    oncpu_chunk_s,
    record_command,
    sched_options,
    wake_command,
)
from wallflame.collect.plan import WINDOW_MIN_HZ, WINDOW_SAMPLES_PER_CPU, window_freq_hz
from wallflame.collect.snapshots import PmpStats, ts_line
from wallflame.collect.target import parse_stat, parse_syscall

STAT_TAIL = ("S 100 200 200 0 -1 4194560 10 0 0 0 5 6 0 0 20 0 3 0 123456 1000 200 "
             "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0")


def test_stat_split_at_last_paren_with_hostile_comm() -> None:
    st_ = parse_stat(f"42 (a) S (b) ) x) {STAT_TAIL}")
    assert st_.comm == "a) S (b) ) x"
    assert st_.state == "S"
    assert st_.ppid == 100
    assert st_.start_ticks == 123456


@given(st.text(alphabet=st.characters(blacklist_characters="\n\x00"), max_size=16))
def test_stat_any_comm_round_trips(comm: str) -> None:
    assert parse_stat(f"7 ({comm}) {STAT_TAIL}").comm == comm


def test_syscall_file_forms() -> None:
    assert parse_syscall("202 0x55d0c0a3e040 0x80 0x2 0x0 0x0 0x0 0x7ffd 0x7f12\n") == (
        202, 0x55D0C0A3E040)
    assert parse_syscall("running\n") == (-2, 0)
    assert parse_syscall("-1 0x7ffd1 0x7f12\n") == (-1, 0)
    assert parse_syscall("") == (-2, 0)


def test_mi_cstring_escapes_and_octal_utf8() -> None:
    assert mi_cstring(r"Thread 2 \"mix-1\":\n") == 'Thread 2 "mix-1":\n'
    assert mi_cstring(r"caf\303\251\t;") == "café\t;"
    assert stream_text(r'~"#0  main () at m.c:3\n"') == "#0  main () at m.c:3\n"
    assert stream_text('^done') is None


@given(st.text(max_size=40))
def test_mi_cstring_is_total(s: str) -> None:
    assert isinstance(mi_cstring(s), str)


def _smaps(rows: list[tuple[int, int, str, str, int]]) -> str:
    out = []
    for lo, hi, perms, path, rss in rows:
        out.append(f"{lo:x}-{hi:x} {perms} 00000000 00:00 0 {path}".rstrip())
        out.append(f"Size: {(hi - lo) // 1024} kB")
        out.append(f"Rss: {rss} kB")
    return "\n".join(out) + "\n"


def test_arena_heaps_found_stacks_ignored() -> None:
    base = 0x7F0000000000  # 64 MiB aligned
    assert base % HEAP_MAX_SIZE == 0
    text = _smaps([
        (0x555500000000, 0x555500100000, "rw-p", "[heap]", 900),
        (base, base + (8 << 20), "rw-p", "", 8000),                       # arena, committed
        (base + (8 << 20), base + HEAP_MAX_SIZE, "---p", "", 0),          # its reserve
        (base + HEAP_MAX_SIZE, base + HEAP_MAX_SIZE + 4096, "---p", "", 0),  # stack guard
        (base + HEAP_MAX_SIZE + 4096, base + HEAP_MAX_SIZE + (8 << 20), "rw-p", "", 64),
        (base + 2 * HEAP_MAX_SIZE, base + 3 * HEAP_MAX_SIZE, "rw-p", "", 65536),  # full arena
    ])
    regions = parse_smaps(text)
    a = arenas(regions)
    assert a["count"] == 2
    assert [m["start"] for m in a["mappings"]] == [hex(base), hex(base + 2 * HEAP_MAX_SIZE)]
    assert a["total_rss_kb"] == 8000 + 65536


def test_heaps_side_by_side_merged_into_one_mapping_are_arenas() -> None:
    """An arena past 64 MiB takes a second heap; when it lies right after a full one, the
    kernel shows both as one mapping (a 128 MiB one, or 64 MiB and a committed part followed
    by the reserve).  A run in CI saw 54 MB of arenas in a process holding 480 MB in them."""
    base = 0x7F0000000000
    text = _smaps([
        (base, base + 2 * HEAP_MAX_SIZE, "rw-p", "", 131072),                # two full heaps
        (base + 4 * HEAP_MAX_SIZE, base + 5 * HEAP_MAX_SIZE + (8 << 20), "rw-p", "", 70000),
        (base + 5 * HEAP_MAX_SIZE + (8 << 20), base + 6 * HEAP_MAX_SIZE, "---p", "", 0),
        (base + 8 * HEAP_MAX_SIZE, base + 8 * HEAP_MAX_SIZE + (96 << 20), "rw-p", "", 1),  # not
    ])
    a = arenas(parse_smaps(text))
    assert [m["start"] for m in a["mappings"]] == [hex(base), hex(base + 4 * HEAP_MAX_SIZE)]
    assert a["total_rss_kb"] == 131072 + 70000


def test_perf_lost_lines_counted() -> None:
    text = ("[ perf record: Woken up 3 times to write data ]\n"
            "Processed 12000 events and lost 7 chunks!\n"
            "Check IO/CPU overload!\n")
    lost, lines = lost_from_stderr(text)
    assert lost == 7
    assert lines == ["Processed 12000 events and lost 7 chunks!"]


def test_oncpu_chunks_are_longer_when_their_samples_are_few(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Frame-pointer samples on every CPU: a chunk holds about CHUNK_SAMPLES, between CHUNK_S
    and CHUNK_MAX_S seconds; a window that fits in one is one chunk, closed when perf stops
    (its switch never comes before perf's own bound); DWARF chunks last up to CHUNK_S, a
    window split evenly."""
    assert oncpu_chunk_s(99, "fp", None, cpus=2) == 60
    assert oncpu_chunk_s(499, "fp", None, cpus=2) == 12
    assert oncpu_chunk_s(99, "fp", None, cpus=8) == 15
    assert oncpu_chunk_s(997, "fp", None, cpus=64) == CHUNK_S
    assert oncpu_chunk_s(99, "dwarf", None, cpus=2) == CHUNK_S
    assert oncpu_chunk_s(99, "dwarf", 60, cpus=2) == 11  # six chunks, 66 s
    assert oncpu_chunk_s(99, "dwarf", 10, cpus=2) == 10 + SLEEP_MARGIN_S
    for hz, cpus in ((1, 1), (99, 2), (499, 2), (997, 64), (4999, 1)):
        n = oncpu_chunk_s(hz, "fp", None, cpus=cpus)
        assert CHUNK_S <= n <= CHUNK_MAX_S
        assert n == CHUNK_S or n * hz * cpus <= CHUNK_SAMPLES
    one = oncpu_chunk_s(99, "fp", 60, cpus=2)
    cmd = record_command(1, tmp_path / "perf.data", PerfOptions(99, "fp", chunk_s=one), 60)
    assert cmd[-1] == str(60 + SLEEP_MARGIN_S) and f"--switch-output={one}s" in cmd
    assert oncpu_chunk_s(499, "fp", 60, cpus=2) == 13  # a minute at 499 Hz: five chunks
    assert oncpu_chunk_s(499, "fp", 10, cpus=2) == 10 + SLEEP_MARGIN_S


@given(st.one_of(st.none(), st.floats(min_value=0.01, max_value=7 * 24 * 3600)),
       st.integers(1, CHUNK_MAX_S))
@example(7 * 24 * 3600.0, 1)
@example(7 * 24 * 3600.0 - 0.5, 1)
def test_a_window_is_split_into_even_chunks(duration: float | None, longest: int) -> None:
    """``chunk_seconds``: no set length, ``longest``; a window that fits in one chunk is one,
    bounded by perf's own end; a longer one is as few chunks as ``longest`` allows, of one
    length, holding the window and ``LEAD_S`` (no last chunk of the fraction of a second the
    recorder ran past them), none longer than ``longest + LEAD_S``; a duration at perf's own
    bound (``UNBOUNDED_S``, a week) or past it, as none."""
    got = chunk_seconds(duration, longest)
    if duration is None or duration >= UNBOUNDED_S:  # no set length, or past perf's bound
        assert got == longest
        return
    whole = max(1, int(duration + 0.999))
    if whole <= longest:
        assert got == whole + SLEEP_MARGIN_S
        return
    n = -(-whole // longest)
    assert n * got >= whole + LEAD_S
    assert got <= longest + LEAD_S
    assert (n - 1) * got < whole + LEAD_S or n > longest  # n - 1 of them would not hold it


def test_the_scheduler_and_wake_recorders_chunk_a_window_evenly(tmp_path: Path) -> None:
    """A 10 s window is one chunk of each scheduler recorder, a minute six of 11 s."""
    assert chunk_seconds(10) == 10 + SLEEP_MARGIN_S
    assert chunk_seconds(60) == 11
    assert chunk_seconds(61) == 10  # seven chunks, 70 s
    assert chunk_seconds(None) == CHUNK_S
    cmd = wake_command(tmp_path / "wake.data", "pid==1", 60, chunk_seconds(60))
    assert "--switch-output=11s" in cmd and cmd[-1] == str(60 + SLEEP_MARGIN_S)


@given(st.one_of(st.none(), st.floats(min_value=0.1, max_value=7 * 24 * 3600)))
def test_a_longer_window_is_sampled_at_a_lower_rate_for_as_many_samples(
        duration: float | None) -> None:
    """``window_freq_hz``: the default rate up to 10 s (or with no set length); beyond, the rate
    that takes about ``WINDOW_SAMPLES_PER_CPU`` samples a CPU, never under ``WINDOW_MIN_HZ``
    nor above the default, ending in 9; never rising with the window's length."""
    hz = window_freq_hz(duration, 499)
    assert WINDOW_MIN_HZ <= hz <= 499 and hz % 10 == 9
    if duration is None or duration <= WINDOW_SAMPLES_PER_CPU / 499:
        assert hz == 499
    elif hz > WINDOW_MIN_HZ:  # within 10 Hz of the rate that takes exactly that many
        assert WINDOW_SAMPLES_PER_CPU - 10 * duration <= hz * duration <= WINDOW_SAMPLES_PER_CPU
    if duration is not None:
        assert window_freq_hz(duration * 1.5, 499) <= hz
    assert window_freq_hz(duration, 99) == 99  # a default at the floor stays there


def test_window_rates() -> None:
    assert [window_freq_hz(d, 499) for d in (None, 5, 10, 12, 20, 30, 60, 600)] == [
        499, 499, 499, 409, 249, 159, 99, 99]


def test_record_command_is_bounded_and_chunked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cmd = record_command(1234, tmp_path / "perf.data", PerfOptions(997, "fp"), 2.5)
    assert cmd[-3:] == ["--", "sleep", str(3 + SLEEP_MARGIN_S)]
    assert f"--switch-output={CHUNK_S}s" in cmd
    sched = record_command(1234, tmp_path / "sched.data", PerfOptions(997, "dwarf", True), 2)
    assert "sched:sched_switch" in sched and "--switch-events" in sched
    assert sched[sched.index("--call-graph") + 1] == "dwarf,8192"
    assert sched[sched.index("-c") + 1] == "1"  # stack_hz 0: every switch with its stack
    sampled = record_command(1234, tmp_path / "sched.data",
                             PerfOptions(997, "dwarf", True, stack_hz=24.6), 2)
    assert sampled[sampled.index("-F") + 1] == "25" and "-c" not in sampled
    assert "--switch-events" in sampled  # every switch still recorded, without a stack
    # the scheduler recorder: 8 KiB at every switch, 32 KiB per sampled stack (MariaDB's
    # connection threads need 16-32 KiB to reach their root)
    every = record_command(1, tmp_path / "s", sched_options(997, "dwarf", None), 2)
    assert every[every.index("--call-graph") + 1] == "dwarf,8192"
    few = record_command(1, tmp_path / "s", sched_options(997, "dwarf", 10.0), 2)
    assert few[few.index("--call-graph") + 1] == f"dwarf,{SAMPLED_STACK_BYTES}"
    assert SAMPLED_STACK_BYTES == 32768
    # what the run's missing-frames note names is the copy perf was given
    from wallflame.assemble.meta import _stack_copy_bytes
    assert (_stack_copy_bytes(every), _stack_copy_bytes(few)) == (8192, SAMPLED_STACK_BYTES)
    assert _stack_copy_bytes(["perf", "record", "--call-graph", "dwarf"]) == 8192
    assert _stack_copy_bytes(None) == _stack_copy_bytes("dwarf,4096") == 8192


def test_ts_line_is_pt_pmp_format() -> None:
    t_ns = 1_700_000_000_123_456_789
    line = ts_line(t_ns)
    assert re.fullmatch(r"TS 123456789\.1700000000 \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", line)
    assert line.endswith(time.strftime("%F %T", time.localtime(1_700_000_000)))


def test_pause_summary() -> None:
    s = PmpStats(pauses_ms=[3.0, 1.0, 10.0, 2.0])
    assert s.pause_summary() == {"snapshots": 4, "median_ms": 2.5, "max_ms": 10.0,
                                 "total_ms": 16.0}


def test_maps_parsing() -> None:
    m = parse_maps("55d0c0a3c000-55d0c0a3d000 r--p 00000000 08:01 1234 /usr/bin/x y\n"
                   "garbage\n")
    assert len(m) == 1 and m[0].path == "/usr/bin/x y" and m[0].inode == 1234


STOP_SCRIPT = """
import os, signal, threading
from wallflame.collect.run import _Stop
ev = threading.Event()
with _Stop(ev) as st:
    # Event.wait and Event.set hold the event's (non-reentrant) lock across a few bytecodes;
    # a signal handled there must not need that lock.
    with ev._cond:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass
    assert ev.wait(5), "the event was not set"
print(st.signal)
"""


def test_stop_signal_while_event_lock_is_held_does_not_deadlock() -> None:
    import signal
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", STOP_SCRIPT], capture_output=True, text=True,
                       timeout=30, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(int(signal.SIGTERM))


def test_guard_stops_a_tracer_with_sigkill_and_perf_with_sigint(tmp_path: Path) -> None:
    """When wallflame dies, the guard stops each tool it was told about with that tool's first
    signal: SIGINT lets perf keep its data; a tracer (gdb, eu-stack) gets SIGKILL, since gdb
    turns a SIGINT into an interrupt of the target that a later SIGKILL would leave pending."""
    import io
    import signal
    import subprocess
    import sys

    from wallflame.collect.safety import _guard_main
    from wallflame.collect.target import read_stat

    script = ("import signal, sys, time\n"
              "signal.signal(signal.SIGINT, lambda *a: (open(sys.argv[1], 'w').write('INT'),"
              " sys.exit(0)))\n"
              "open(sys.argv[1] + '.ready', 'w').close()\n"
              "time.sleep(60)\n")
    target = subprocess.Popen(["sleep", "60"])
    tools = {name: subprocess.Popen([sys.executable, "-c", script, str(tmp_path / name)])
             for name in ("perf", "gdb")}
    try:
        deadline = time.monotonic() + 10
        while not all((tmp_path / f"{n}.ready").exists() for n in tools):
            assert time.monotonic() < deadline, "the stand-in tools did not start"
            time.sleep(0.02)
        start = read_stat(target.pid)
        assert start is not None
        lines = []
        for name, proc in tools.items():
            st = read_stat(proc.pid)
            assert st is not None
            sig = signal.SIGKILL if name == "gdb" else signal.SIGINT
            lines.append(f"tool {proc.pid} {st.start_ticks} {int(sig)}\n")
        # no "done": wallflame died
        assert _guard_main([str(target.pid), str(start.start_ticks), "0", "1"],
                           io.BytesIO("".join(lines).encode())) == 0
        assert tools["perf"].wait(5) == 0 and (tmp_path / "perf").read_text() == "INT"
        assert tools["gdb"].wait(5) == -signal.SIGKILL and not (tmp_path / "gdb").exists()
        assert target.poll() is None
    finally:
        for proc in (target, *tools.values()):
            proc.kill()
            proc.wait()


def test_new_pids_are_the_free_ones_the_kernel_takes_next() -> None:
    from wallflame.collect.threads import RESERVED_PIDS, next_pids

    # no wrap yet: everything above the last pid handed out, then from the bottom again
    assert next_pids(1000, 32768, {1, 999, 1000}) == [(1001, 32767), (300, 998)]
    # wrapped: old processes above the last pid are left out, not let through
    got = next_pids(4174, 32768, {4174, 24232, 24481, 24482}, room=40000)
    assert got == [(4175, 24231), (24233, 24480), (24483, 32767), (RESERVED_PIDS, 4173)]
    got = next_pids(4174, 32768, {4174, 24232, 24481, 24482}, room=20000)
    assert got == [(4175, 24174)]
    assert not any(a <= p <= b for a, b in got for p in (4174, 24232, 24481, 24482))
    # room and the number of ranges are bounded
    assert next_pids(100, 1000, set(), room=50) == [(101, 150)]
    assert len(next_pids(100, 100_000, set(range(200, 100_000, 2)), most=5)) == 5


@given(st.integers(301, 5000), st.sets(st.integers(1, 5999), max_size=200),
       st.integers(1, 8000))
def test_new_pids_never_cover_a_pid_in_use(last: int, used: set[int], room: int) -> None:
    from wallflame.collect.threads import NEW_RANGES, next_pids

    got = next_pids(last, 6000, used, room=room)
    assert len(got) <= NEW_RANGES and sum(b - a + 1 for a, b in got) <= room
    assert all(a <= b for a, b in got)
    assert not any(a <= p <= b for a, b in got for p in used)
    # the first is the pid the kernel takes next: the first free one after ``last``, wrapping
    order = [*range(last + 1, 6000), *range(300, last + 1)]
    assert got[0][0] == next(p for p in order if p not in used)


def test_the_wake_filter_keeps_the_target_and_the_new_pids_only() -> None:
    from wallflame.collect.threads import wake_filter

    assert wake_filter([10, 11, 12, 40], [(500, 600)]) == \
        "(pid>=10&&pid<=12)||pid==40||(pid>=500&&pid<=600)"
    assert wake_filter([10, 11], None) == "(pid>=10&&pid<=11)||pid>11"
    assert wake_filter([], [(1, 2)]) == ""


def test_numbers_that_are_not_finite_are_refused_before_anything_starts(tmp_path: Path) -> None:
    """click's FLOAT takes ``nan`` and ``inf``; a budget of ``nan`` MB/s passed every
    comparison and planned a stack rate from it."""
    from click.testing import CliRunner

    from wallflame.cli import cli

    for option, value in (("--max-data-mb-per-s", "nan"), ("--max-data-mb-per-s", "inf"),
                          ("--sched-stack-hz", "nan"), ("--sched-stack-hz", "-1"),
                          ("--duration", "inf"), ("--pmp-rate", "nan"),
                          ("--max-pause-ms", "0"), ("--owner-rate", "nan"),
                          ("--owner-rate", "-1"), ("--owner-rate", "inf")):
        out = tmp_path / f"run{option}{value}"
        r = CliRunner().invoke(cli, ["collect", "--pid", "1", "-o", str(out), option, value])
        assert r.exit_code == 2, (option, value, r.output)  # a bad command line
        assert "must be" in r.output and "Traceback" not in r.output, r.output
        assert "(fix: give" in r.output and r.output.count("\n") == 1, r.output
        assert not out.exists()


def test_the_command_line_reaches_the_plan_as_asked(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``collect``'s options reach ``collect.plan.Request`` as given, and ``None`` where they
    were left to their defaults (which lets the plan choose)."""
    from click.testing import CliRunner

    import wallflame.commands.collect as command
    from wallflame.cli import cli
    from wallflame.collect.plan import Overhead, Request
    from wallflame.errors import InputError
    from wallflame.rundir import OffCpu, SnapshotBackend

    seen: list[Request] = []

    def stop_here(out: Path, request: Request, **_: object) -> None:
        seen.append(request)
        raise InputError("stopped here", "none")

    monkeypatch.setattr(command, "collect", stop_here)
    for extra, want in (
            ([], Request()),
            (["--owner-rate", "0"], Request(owner_rate_hz=0.0)),
            (["-F", "499"], Request(freq_hz=499)),
            (["--off-cpu", "both", "--no-holder-stacks"],
             Request(off_cpu=OffCpu.BOTH, holder_stacks=False)),
            (["--overhead", "light", "-d", "30"], Request(overhead=Overhead.LIGHT, duration_s=30)),
            (["--pmp-backend", "gdb", "--sched-stack-hz", "0"],
             Request(pmp_backend=SnapshotBackend.GDB, sched_stack_hz=0.0))):
        r = CliRunner().invoke(cli, ["collect", "--pid", "1", "-o", str(tmp_path / "r"), *extra])
        assert r.exit_code == 3 and "stopped here" in r.output, r.output
        assert seen[-1] == want, (extra, seen[-1])
    r = CliRunner().invoke(cli, ["collect", "-o", str(tmp_path / "r"), "--", "true"])
    assert seen[-1] == Request(attached=False), seen[-1]


def test_the_folding_process_and_what_it_started_are_found() -> None:
    """The folding process's threads, its ``perf script`` and the ``addr2line`` that one starts
    get the normal priority back when the window closes: all of them found from ``/proc``."""
    from wallflame.collect.stream import process_tree

    p = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30"])
    try:
        deadline = time.monotonic() + 10
        found: list[int] = []
        while time.monotonic() < deadline and len(found) < 2:
            found = process_tree(p.pid)
            time.sleep(0.05)
        assert found[0] == p.pid and len(found) >= 2, found
        assert all(os.path.exists(f"/proc/{pid}") for pid in found)
    finally:
        p.kill()
        p.wait()
    assert process_tree(p.pid) == []


def test_a_tool_reads_the_copy_of_kallsyms_in_a_namespace_of_its_own(tmp_path: Path) -> None:
    """``spawn(..., kallsyms=COPY)``: the tool reads COPY as /proc/kallsyms; nobody else
    does, and the machine's mount table is left as it was.  Where mount namespaces are
    refused (not root, a container), the tool reads the kernel's own file."""
    from wallflame.collect.safety import reads_copy_of_kallsyms, spawn

    copy = tmp_path / "kallsyms"
    copy.write_bytes(b"ffffffff81000000 T _text\nffffffff82000000 T _etext\n")
    before = Path("/proc/self/mountinfo").read_bytes()
    proc = spawn(["sh", "-c", "cat /proc/kallsyms; read x"], 9, kallsyms=copy,
                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    bound = reads_copy_of_kallsyms(proc.pid, copy)  # while the tool runs (it waits for input)
    proc.stdin.close()
    text = proc.stdout.read()
    proc.wait(5)
    assert Path("/proc/self/mountinfo").read_bytes() == before
    assert not reads_copy_of_kallsyms(os.getpid(), copy)
    if os.geteuid() != 0:
        assert not bound
        return
    assert bound, "root may make a mount namespace here"
    assert text == copy.read_bytes()


def test_a_collect_is_light_where_recording_every_switch_costs_too_much() -> None:
    """``budget.too_costly``: 2 CPUs at 5 µs a switch is 3% of them at 12,000 switches a
    second; ``cpu_times`` reads the machine's idle and whole CPU time."""
    from wallflame.collect import budget

    assert budget.recording_cost(12_000, cpus=2) == pytest.approx(0.03)
    assert budget.too_costly({1: 10_000.0, 2: 3_000.0}, cpus=2)
    assert not budget.too_costly({1: 6_000.0}, cpus=2)  # above the busiest sample program
    assert not budget.too_costly({1: 30_000.0}, cpus=16)
    assert not budget.too_costly({}, cpus=2)
    idle, total = budget.cpu_times() or (0, 0)
    assert 0 <= idle <= total and total > 0


def test_switch_rates_count_every_process_of_the_target() -> None:
    """A pid tree's or a cgroup's switches are those of all its processes: the light choice
    and the data budget read them all, not the first process's alone."""
    import subprocess
    import sys

    from wallflame.collect import budget
    code = "import time\nwhile True: time.sleep(0.001)"
    kids = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]
    try:
        time.sleep(0.3)
        one = budget.switch_rates(kids[0].pid, seconds=0.3)
        both = budget.switch_rates([k.pid for k in kids], seconds=0.3)
    finally:
        for k in kids:
            k.kill()
            k.wait()
    assert set(one) == {kids[0].pid}
    assert set(both) == {kids[0].pid, kids[1].pid}
    # each sleeps 1 ms a loop: hundreds of switches a second (at least 100 on a busy machine)
    assert all(r > 100 for r in both.values()), both


def test_task_files_read_fresh_text_and_nothing_once_the_thread_ended() -> None:
    """A kept ``/proc`` file gives the thread's figures now, each read; once the thread has
    ended it gives nothing (and is closed), never another thread's; past ``most`` kept
    files, each read opens its file."""
    import threading

    go, spun, done = threading.Event(), threading.Event(), threading.Event()

    def spin() -> None:
        go.wait()
        t = time.thread_time()
        while time.thread_time() - t < 0.05:
            pass
        spun.set()
        done.wait()

    th = threading.Thread(target=spin, daemon=True)
    th.start()
    try:
        _task_files_checks(th, go, spun, done)
    finally:
        go.set()
        done.set()


def _task_files_checks(th: threading.Thread, go: threading.Event, spun: threading.Event,
                       done: threading.Event) -> None:
    from wallflame.collect.target import TaskFiles, ThreadReader, read_threads
    tid = th.native_id
    assert tid is not None
    files = TaskFiles(os.getpid(), "schedstat", most=1)
    first = files.read(tid)
    assert first is not None and len(files.fds) == 1
    go.set()
    assert spun.wait(60)  # 50 ms of its own CPU, however busy the machine
    later = files.read(tid)
    assert later is not None and int(later.split()[0]) >= int(first.split()[0]) + 40_000_000
    other = files.read(threading.get_native_id())  # past ``most``: opened and closed
    assert other is not None and len(files.fds) == 1
    # the same records as the one-shot reader
    reader = ThreadReader(os.getpid())
    by = {t.tid: t for t in reader.read()}
    assert by[tid].comm == {t.tid: t for t in read_threads(os.getpid())}[tid].comm
    done.set()
    th.join()
    for _ in range(200):  # the thread is gone from /proc a moment after join
        if not os.path.exists(f"/proc/{os.getpid()}/task/{tid}"):
            break
        time.sleep(0.01)
    assert files.read(tid) is None and not files.fds
    assert tid not in {t.tid for t in reader.read()}
    assert not any(tid in f.fds for f in (reader.stat, reader.wchan, reader.syscall))
    reader.close()
    files.close()


def test_kept_proc_files_stay_within_one_budget_for_the_whole_collect(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``TaskFiles`` of a collect shares one budget of kept descriptors (the owner
    sampler, the snapshots' records, the counters: six kinds of file on a target of hundreds
    of threads would pass the default limit of 1024): past it, reads open their file each
    time and still give the text."""
    from wallflame.collect import target
    monkeypatch.setattr(target, "MAX_KEPT_TOTAL", target._kept[0] + 3)
    me = threading.get_native_id()
    files = [target.TaskFiles(os.getpid(), name) for name in ("stat", "schedstat", "syscall",
                                                               "wchan")]
    try:
        texts = [f.read(me) for f in files]
        assert all(t is not None for t in texts)
        assert sum(len(f.fds) for f in files) == 3  # the fourth is read without keeping it
        assert target._kept[0] == target.MAX_KEPT_TOTAL
    finally:
        for f in files:
            f.close()
    assert target._kept[0] == target.MAX_KEPT_TOTAL - 3


def test_a_death_signal_before_the_tools_exec_ends_the_child() -> None:
    """wallflame's own SIGINT handler (it only writes to a pipe) is inherited by the child a
    tool is started from: the death signal arriving before the exec must still end it, or the
    tool runs on, orphaned, for its whole duration."""
    from wallflame.collect.safety import _death_signal_preexec

    old = signal.signal(signal.SIGINT, lambda *_: None)
    try:
        preexec = _death_signal_preexec(signal.SIGINT)
        pid = os.fork()
        if pid == 0:  # the child, between fork and exec
            preexec()
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
    finally:
        signal.signal(signal.SIGINT, old)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGINT, status
