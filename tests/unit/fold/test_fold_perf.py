"""perf script text -> Profile: on-CPU samples, scheduler off-CPU time, losses, bad input.

Fixtures in ``tests/fixtures/perf`` are real captures of ``samples/bin/mix`` and
``samples/bin/deep`` made with ``scripts/capture-fixtures.sh``; expectations that are not
golden files are computed from the raw text with independent, simpler parsing.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from wallflame.errors import InputError
from wallflame.fold import detect_format, perf
from wallflame.fold.options import FoldOptions
from wallflame.fold.perf import reader as perf_reader
from wallflame.fold.perf import state as perf_lines
from wallflame.folded import ThreadRoot, unescape, write_folded
from wallflame.profile import OFF, ON, Profile
from wallflame.textio import head

FIX = FIXTURES / "perf"
GOLDEN = FIX / "golden"
FIXTURES = sorted(p.name for p in FIX.glob("*.txt"))
HEADER = re.compile(rb"^(\S.*?) +(\d+) +(\d+\.\d+): +(\d+) +([\w:-]+):", re.M)


def fold(src: Path | bytes, **opts: object) -> Profile:
    p = Profile()
    options = FoldOptions(**opts)  # type: ignore[arg-type]
    if isinstance(src, bytes):
        perf.fold_stream(io.BytesIO(src), options, p)
    else:
        perf.fold(str(src), options, p)
    return p


def annotated(p: Profile) -> str:
    out = io.StringIO()
    write_folded(p, out, annotate=True)
    return out.getvalue()


def headers(path: Path, event: str = "cpu-clock") -> list[tuple[bytes, int, int, int]]:
    """(comm, tid, time_ns, period) of every sample header of ``event`` in a fixture."""
    out = []
    for m in HEADER.finditer(path.read_bytes()):
        if m.group(5).decode() == event:
            sec, frac = m.group(3).split(b".")
            out.append((m.group(1), int(m.group(2)), int(sec) * 10**9 + int(frac.ljust(9, b"0")),
                        int(m.group(4))))
    return out


# -- golden files and detection -------------------------------------------------------------------

@pytest.mark.parametrize("fixture", FIXTURES)
def test_golden(fixture: str, golden: Callable[[Path, str], None]) -> None:
    golden(GOLDEN / fixture.replace(".txt", ".folded"), annotated(fold(FIX / fixture)))


def test_golden_kernel_annotation(golden: Callable[[Path, str], None]) -> None:
    golden(GOLDEN / "mix-fp.kernel.folded", annotated(fold(FIX / "mix-fp.txt", kernel=True)))


@pytest.mark.parametrize("fixture", FIXTURES)
def test_detected_as_perf(fixture: str) -> None:
    assert perf.detect(head(str(FIX / fixture)))
    assert detect_format(head(str(FIX / fixture)), fixture) == "perf"


def test_not_detected_on_other_formats() -> None:
    gdb = ('Thread 2 (Thread 0x7f (LWP 12) "mix-1"):\n#0  0x00007f in nanosleep () from '
           "/lib/libc.so.6\n#1  0x0000 in nap (ms=4) at mix.c:55\n")
    assert not perf.detect(gdb)
    assert not perf.detect("TID 12:\n#0  0x00007f3 nanosleep\n")
    assert not perf.detect("main;worker;spin 42\nmain;idle 7\n")
    # pt-pmp aggregated output: a date line, then counts
    assert not perf.detect("Sun Nov 22 06:07:55 UTC 2026\n      4 nanosleep,nap,main\n")
    assert not perf.detect("")


# -- on-CPU samples -------------------------------------------------------------------------------

@pytest.mark.parametrize("fixture", ["mix-fp.txt", "mix-dwarf.txt", "deep-fp.txt"])
def test_weights_are_the_sum_of_periods(fixture: str) -> None:
    hs = headers(FIX / fixture)
    p = fold(FIX / fixture)
    assert p.meta.unit == "ns"
    assert p.total() == sum(h[3] for h in hs)
    assert p.meta.samples["perf"] == len(hs)
    assert all(k.state == ON for k in p.stacks)
    per_tid: dict[int, int] = {}
    for _, tid, _, period in hs:
        per_tid[tid] = per_tid.get(tid, 0) + period
    assert {t.tid: t.on for t in p.per_thread()} == per_tid
    assert p.meta.window_ns == max(h[2] for h in hs) - min(h[2] for h in hs)


def test_threads_named_from_headers() -> None:
    hs = headers(FIX / "mix-fp.txt")
    p = fold(FIX / "mix-fp.txt")
    for _comm, tid, _, _ in hs:
        assert p.meta.threads[tid] in {c.decode() for c, t, _, _ in hs if t == tid}
    assert {k.thread for k in p.stacks} == {c.decode() for c, _, _, _ in hs}
    assert sorted(v for v in p.meta.threads.values() if v.startswith("mix-")) == [
        "mix-1", "mix-2", "mix-3", "mix-ticker"]


def test_frames_are_root_first_and_normalized() -> None:
    p = fold(FIX / "mix-dwarf.txt")
    stacks = [k.frames for k in p.stacks]
    assert any(f[:5] == ("clone3", "start_thread", "worker_main", "worker_loop", "spin_work")
               for f in stacks)
    names = {n for f in stacks for n in f}
    assert not any("+0x" in n or "@" in n or ".isra" in n or n.startswith("__GI_")
                   for n in names)


def test_cpp_names_kept_whole() -> None:
    names = {n for k in fold(FIX / "deep-fp.txt").stacks for n in k.frames}
    assert "(anonymous namespace)::Spin::operator()" in names
    assert "(anonymous namespace)::Stage<unsigned long (int, unsigned long)>::run" in names


def test_kernel_frames_marked_on_request() -> None:
    text = (FIX / "mix-fp.txt").read_text()
    # kernel by the reference's rule: the module is in brackets ([kernel.kallsyms], [vdso])
    kernel = {m.group(1) for m in re.finditer(r"^\t\s*[0-9a-f]+ (\S+?)(?:\+0x[0-9a-f]+)? "
                                              r"\((\[(?!unknown\])[^]]*\])\)$", text, re.M)}
    assert kernel, "fixture has kernel frames"
    plain = {n for k in fold(FIX / "mix-fp.txt").stacks for n in k.frames}
    marked = {n for k in fold(FIX / "mix-fp.txt", kernel=True).stacks for n in k.frames}
    assert not any(n.endswith("_[k]") for n in plain)
    assert {n[:-4] for n in marked if n.endswith("_[k]")} == {
        n for n in plain if n in {perf_name(k) for k in kernel}}


def perf_name(raw: str) -> str:
    from wallflame.names import normalize

    return normalize(raw)


def test_stack_quality_recorded_and_warned() -> None:
    good = fold(FIX / "mix-dwarf.txt")
    q = good.meta.extra["perf_quality"]
    assert q["samples"] == len(headers(FIX / "mix-dwarf.txt")) and q["shallow_samples"] == 0
    assert good.meta.rates["perf_hz"] == 199.0 and not good.meta.warnings
    shallow = b"app 7 1.0: 10 cpu-clock: \n\t1 [unknown] (/lib/x.so)\n\n"
    deep = "".join(f"\t{i:x} f{i} (/bin/app)\n" for i in range(127))
    p = fold(shallow * 3 + f"app 7 2.0: 10 cpu-clock: \n{deep}\n".encode())
    assert p.meta.extra["perf_quality"] == {"samples": 4, "shallow_samples": 3,
                                            "mostly_unknown_samples": 3, "max_depth_samples": 1}
    assert len(p.meta.warnings) == 3


def test_unknown_frames_named_after_their_module() -> None:
    text = (b"app 7 1.000000: 1000 cpu-clock: \n\t7f01 [unknown] (/usr/lib/libfoo.so.1)\n"
            b"\t55 [unknown] ([unknown])\n\t7f02  (/usr/lib/libbar.so)\n\n")
    (key,) = fold(text).stacks
    assert key.frames == ("[libbar.so]", "[unknown]", "[libfoo.so.1]")


# -- header variants and events -------------------------------------------------------------------

@pytest.mark.parametrize("header,comm,pid,tid,weight,unit", [
    ("app 7 1.5: 1000 cpu-clock: ", "app", 0, 7, 1000, "ns"),
    ("app 3/7 [001] 1.5: 1000 cpu-clock:ppp: ", "app", 3, 7, 1000, "ns"),
    ("V8 Worker 3 7 1.5: 1000 cpu-clock: ", "V8 Worker 3", 0, 7, 1000, "ns"),
    ("app 7 1.5: cpu-clock: ", "app", 0, 7, 1, "samples"),
    ("app 7 1000 cpu-clock: ", "app", 0, 7, 1000, "ns"),
    ("app 7 cpu-clock: ", "app", 0, 7, 1, "samples"),
    ("app 7 ", "app", 0, 7, 1, "samples"),
    ("   app 7 1.5: 20 cycles:u: ", "app", 0, 7, 20, "samples"),
    ("a: b 7 1.5: 1000 cpu-clock: ", "a: b", 0, 7, 1000, "ns"),
])
def test_header_field_sets(header: str, comm: str, pid: int, tid: int, weight: int,
                           unit: str) -> None:
    p = fold(f"{header}\n\t1 main+0x4 (/bin/app)\n\n".encode())
    (key,) = p.stacks
    assert (key.thread, key.pid, key.tid, key.frames) == (comm, pid, tid, ("main",))
    assert p.stacks[key] == weight
    assert p.meta.unit == unit


def test_frame_on_the_header_line() -> None:
    text = (b"app 7 1.000000: 500 cpu-clock:  ffffffff9aa3 do_idle+0x1 ([kernel.kallsyms])\n"
            b"app 7 1.000100: 500 cpu-clock:  4005 main+0x2 (/bin/app)\n")
    p = fold(text)
    assert {k.frames: w for k, w in p.stacks.items()} == {("do_idle",): 500, ("main",): 500}


def test_two_events_all_folded_with_a_warning() -> None:
    hs_c = headers(FIX / "mix-two-events.txt", "cpu-clock")
    hs_t = headers(FIX / "mix-two-events.txt", "task-clock")
    p = fold(FIX / "mix-two-events.txt")
    assert p.meta.samples["perf:cpu-clock"] == len(hs_c)
    assert p.meta.samples["perf:task-clock"] == len(hs_t)
    assert p.total() == sum(h[3] for h in hs_c + hs_t)
    assert any("several on-CPU events" in w and "--event" in w for w in p.meta.warnings)
    only = fold(FIX / "mix-two-events.txt", event="cpu-clock")
    assert only.total() == sum(h[3] for h in hs_c)
    assert not any("several" in w for w in only.meta.warnings)
    assert only.meta.samples["perf:task-clock"] == len(hs_t)  # seen, counted, not folded


def test_periods_that_vary_per_sample_stay_fast_and_small(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Hardware events in frequency mode (``-e cycles -F 99``) have a new period in nearly
    every sample: still summed exactly, still on the fast path, memory bounded by stacks."""
    rec = b"app 7 %d.000000: %d cycles: \n\t1 work (/bin/app)\n\t2 main (/bin/app)\n\n"
    text = b"".join(rec % (i, 1000 + i) for i in range(1, 5001))
    slow = 0  # records parsed in full in Python
    real = perf_lines.PerfState.slow_lines
    real_learn = perf_lines.PerfState._learn

    def counting(self: perf_lines.PerfState, *a: object, **k: object) -> None:
        nonlocal slow
        slow += 1
        real(self, *a, **k)  # type: ignore[arg-type]

    def learning(self: perf_lines.PerfState, rec: bytes) -> bool:
        nonlocal slow
        slow += 1
        return real_learn(self, rec)

    monkeypatch.setattr(perf_lines.PerfState, "slow_lines", counting)
    monkeypatch.setattr(perf_lines.PerfState, "_learn", learning)
    st_holder: list[perf_lines.PerfState] = []
    real_init = perf_lines.PerfState.__init__

    def keep(self: perf_lines.PerfState, *a: object) -> None:
        real_init(self, *a)  # type: ignore[arg-type]
        st_holder.append(self)

    monkeypatch.setattr(perf_lines.PerfState, "__init__", keep)
    p = fold(text)
    assert p.total() == sum(1000 + i for i in range(1, 5001))
    assert p.meta.samples["perf:cycles"] == 5000 and p.meta.unit == "samples"
    assert slow <= 1
    st = st_holder[0]
    assert len(st.tails) <= perf_lines.MAX_TAILS and len(st.sem_w) == 1


def test_event_selected_by_base_name() -> None:
    text = b"app 7 1.0: 10 cpu-clock:ppp: \n\t1 main (/bin/app)\n\n"
    assert fold(text, event="cpu-clock").total() == 10
    missing = fold(text, event="task-clock")
    assert missing.total() == 0
    assert missing.meta.warnings == [
        "no samples of event task-clock (events in this input: cpu-clock:ppp)"]


def test_other_tracepoints_are_left_out_and_named() -> None:
    text = (b"app 7 [000] 1.0: syscalls:sys_enter_read: fd: 3\n\t1 read (/lib/libc.so)\n\n"
            b"app 7 [000] 1.1: 250 cpu-clock: \n\t1 main (/bin/app)\n\n")
    p = fold(text)
    assert p.total() == 250
    assert any("syscalls:sys_enter_read" in w and "--event" in w for w in p.meta.warnings)
    chosen = fold(text, event="syscalls:sys_enter_read")
    assert [k.frames for k in chosen.stacks] == [("read",)]


def test_offcpu_time_samples_are_off_cpu_nanoseconds() -> None:
    text = (b"app 7 1.000000: 5000000 offcpu-time: \n\t1 __lll_lock_wait (/lib/libc.so.6)\n"
            b"\t2 pthread_mutex_lock@@GLIBC_2.2.5 (/lib/libc.so.6)\n\t3 main (/bin/app)\n\n")
    ((key, w),) = fold(text).stacks.items()
    assert (key.state, key.wait, w) == (OFF, "mutex", 5_000_000)
    assert key.frames == ("main", "pthread_mutex_lock", "__lll_lock_wait")


# -- scheduler records ----------------------------------------------------------------------------

def test_sched_switch_gives_exact_off_cpu_time() -> None:
    p = fold(FIX / "mix-sched.txt")
    sched = p.meta.extra["sched"]
    assert sched["inferred_switch_in"] == 0 and sched["exact_switch_in"] > 100
    assert all(k.state == OFF for k in p.stacks)
    assert p.meta.unit == "ns"
    rq = p.meta.extra["runqueue_ns"]
    assert p.per_class()["runnable"] == sum(rq.values()) > 0
    for t in p.per_thread():
        assert t.off + t.runnable <= p.meta.window_ns
        assert t.runnable == rq.get(str(t.tid), 0)
    sleep = {k for k in p.stacks if k.wait == "sleep"}
    assert any("nap" in k.frames or "clock_nanosleep" in k.frames for k in sleep)
    workers = [t for t in p.per_thread() if t.name.startswith("mix-") and t.name != "mix-ticker"]
    assert len(workers) == 3 and all(t.wait["sleep"] > 0 for t in workers)


def test_sched_switch_with_dwarf_stacks_sees_the_condvar() -> None:
    p = fold(FIX / "mix-sched-dwarf.txt")
    condvar = [k for k in p.stacks if k.wait == "condvar"]
    assert condvar and all("pthread_cond_wait" in k.frames for k in condvar)
    assert p.per_class()["condvar"] > 0 and p.per_class()["sleep"] > 0


def test_switch_ins_inferred_without_switch_records() -> None:
    """The same records without PERF_RECORD_SWITCH: intervals close at the next evidence of
    running, never earlier than the exact switch-in, and the reader is told."""
    text = (FIX / "mix-sched.txt").read_bytes()
    stripped = b"".join(line for line in text.splitlines(keepends=True)
                        if b"PERF_RECORD_SWITCH" not in line)
    exact, inferred = fold(text), fold(stripped)
    assert inferred.meta.extra["sched"]["inferred_switch_in"] > 0
    assert any("--switch-events" in w for w in inferred.meta.warnings)
    ex = {t.tid: t.off for t in exact.per_thread()}
    # Without the trailing switch records the capture ends earlier: intervals still open
    # then are closed earlier by at most that much.
    assert exact.meta.window_ns >= inferred.meta.window_ns
    slack = exact.meta.window_ns - inferred.meta.window_ns + 1_000_000
    for t in inferred.per_thread():
        assert t.off >= ex.get(t.tid, 0) - slack
    assert fold(FIX / "mix-sched-noswitch.txt").meta.extra["sched"]["inferred_switch_in"] > 0


def test_preempted_switch_outs_are_runnable_time_not_blocked() -> None:
    text = (b"app 7 [000] 1.000000: sched:sched_switch: prev_comm=app prev_pid=7 prev_prio=120 "
            b"prev_state=R+ ==> next_comm=x next_pid=9 next_prio=120\n\t1 schedule (k)\n\n"
            b"x 9 [000] 1.000300: sched:sched_switch: prev_comm=x prev_pid=9 prev_prio=120 "
            b"prev_state=S ==> next_comm=app next_pid=7 next_prio=120\n"
            b"\t1 schedule (k)\n\t2 nanosleep (/lib/libc.so.6)\n\n"
            b"app 7 [000] 1.000500: sched:sched_switch: prev_comm=app prev_pid=7 prev_prio=120 "
            b"prev_state=D ==> next_comm=y next_pid=5 next_prio=120\n"
            b"\t1 schedule (k)\n\t2 io_schedule (k)\n\t3 read (/lib/libc.so.6)\n\n"
            b"x 9 [000] 1.002500: PERF_RECORD_SWITCH OUT\n"
            b"app 7 [000] 1.002500: PERF_RECORD_SWITCH IN\n")
    p = fold(text)
    assert p.meta.extra["runqueue_ns"] == {"7": 300_000}
    got = {(k.tid, k.wait): w for k, w in p.stacks.items()}
    # 9 closed at capture end; 7's preemption is runnable, kept with the stack it was preempted at
    assert got == {(7, "io"): 2_000_000, (9, "sleep"): 2_200_000, (7, "runnable"): 300_000}
    assert p.per_thread()[0].off + p.per_thread()[0].runnable == p.per_thread()[0].total
    assert p.meta.extra["sched"]["closed_at_end"] == 1


def test_on_cpu_samples_close_intervals_when_no_switch_in_was_recorded() -> None:
    switch = (b"app 7 [000] 1.000000: sched:sched_switch: prev_comm=app prev_pid=7 "
              b"prev_prio=120 prev_state=S ==> next_comm=x next_pid=9 next_prio=120\n"
              b"\t1 schedule (k)\n\t2 nanosleep (/lib/libc.so.6)\n\n")
    sample = b"app 7 [000] %b: 1000 cpu-clock: \n\t1 main (/bin/app)\n\n"
    # the same sample seen first by the slow path, then (repeated) by the fast path
    text = (sample % b"0.500000" + switch + sample % b"1.250000" + switch.replace(
        b"1.000000", b"2.000000") + sample % b"2.125000" + sample % b"3.000000")
    p = fold(text)
    off = {k.frames: w for k, w in p.stacks.items() if k.state == OFF}
    assert off == {("nanosleep", "schedule"): 250_000_000 + 125_000_000}
    assert p.meta.extra["sched"]["inferred_switch_in"] == 2
    assert p.meta.window_ns == 2_500_000_000


def test_garbage_records_do_not_stretch_the_window() -> None:
    good = b"app 7 1.000000: 10 cpu-clock: \n\t1 main (/bin/app)\n\n"
    p = fold(good + b"hello 99999: x\n\n" + good.replace(b"1.000000", b"2.000000"))
    assert p.meta.window_ns == 1_000_000_000


def test_sched_fields_cannot_be_forged_by_a_thread_name() -> None:
    text = (b"a prev_pid=9 7 [000] 1.0: sched:sched_switch: prev_comm=a prev_pid=9 prev_pid=7 "
            b"prev_prio=120 prev_state=S ==> next_comm=b next_pid=1 next_pid=8 next_prio=120\n"
            b"\t1 nanosleep (/lib/libc.so.6)\n\n"
            b"b 8 [000] 1.5: PERF_RECORD_SWITCH OUT\nx 7 [000] 2.0: PERF_RECORD_SWITCH IN\n")
    ((key, w),) = fold(text).stacks.items()
    assert (key.tid, w) == (7, 1_000_000_000)


# -- losses and bad input -------------------------------------------------------------------------

def test_lost_records_are_losses_not_samples() -> None:
    text = (FIX / "mix-lost.txt").read_text()
    lost = [(no, int(m.group(1))) for no, line in enumerate(text.splitlines(), 1)
            if (m := re.search(r"PERF_RECORD_LOST lost (\d+)", line))]
    assert lost, "fixture has lost records"
    p = fold(FIX / "mix-lost.txt")
    loss = p.meta.losses["lost perf events (PERF_RECORD_LOST)"]
    assert (loss.count, loss.first_line) == (sum(n for _, n in lost), lost[0][0])
    hs = headers(FIX / "mix-lost.txt")
    assert p.meta.samples["perf"] == len(hs) and p.total() == sum(h[3] for h in hs)


def test_crlf_reads_as_lf() -> None:
    lf, crlf = fold(FIX / "mix-fp.txt"), fold(FIX / "mix-fp-crlf.txt")
    assert crlf.stacks == lf.stacks and not crlf.meta.losses
    assert crlf.meta.window_ns == lf.meta.window_ns


def test_truncated_last_record_dropped_and_counted() -> None:
    data = (FIX / "mix-fp-truncated.txt").read_bytes()
    start = data.rfind(b"\n\n") + 2
    p = fold(data)
    loss = p.meta.losses["truncated last record"]
    assert (loss.count, loss.first_line) == (1, data.count(b"\n", 0, start) + 1)
    assert p.stacks == fold(data[:start]).stacks


def test_nothing_recognised_is_an_input_error() -> None:
    with pytest.raises(InputError):
        fold(b"this is not\nperf script output\n")
    with pytest.raises(InputError):
        fold(b"\x00\xff\xfe garbage\n\n\t  more\n")
    assert fold(b"").total() == 0


def test_unparsable_lines_are_counted_once_per_kind() -> None:
    good = b"app 7 1.0: 10 cpu-clock: \n\t1 main (/bin/app)\n\n"
    p = fold(good + b"%%% what\n\n" + good + b"%%% again\n\n")
    loss = p.meta.losses["unrecognised perf script line"]
    assert (loss.count, loss.first_line) == (2, 4)
    assert p.total() == 20


def test_lost_chunks_reported_by_perf_are_losses() -> None:
    good = b"app 7 1.0: 10 cpu-clock: \n\t1 main (/bin/app)\n\n"
    p = fold(good + b"Warning:\nProcessed 12 events and lost 3 chunks!\n\n")
    assert p.meta.losses["lost perf chunks (reported by perf)"].count == 3


# -- streaming ------------------------------------------------------------------------------------

def _same(a: Profile, b: Profile) -> None:
    assert a.stacks == b.stacks
    assert a.meta.losses == b.meta.losses
    assert (a.meta.window_ns, a.meta.samples, a.meta.threads, a.meta.extra) == (
        b.meta.window_ns, b.meta.samples, b.meta.threads, b.meta.extra)


@pytest.mark.parametrize("chunk", [1, 7, 64, 4096])
@pytest.mark.parametrize("fixture", ["mix-fp-crlf.txt", "mix-fp-truncated.txt", "mix-lost.txt",
                                     "mix-sched.txt", "deep-fp.txt"])
def test_any_chunk_size_gives_the_same_profile(fixture: str, chunk: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    data = (FIX / fixture).read_bytes()
    if chunk == 1:
        data = data[:3000]
    whole = fold(data)
    monkeypatch.setattr(perf_reader, "CHUNK", chunk)
    _same(fold(data), whole)


def test_fold_stream_reads_a_pipe_as_it_is_written() -> None:
    data = (FIX / "mix-fp.txt").read_bytes()
    r, w = os.pipe()

    def writer() -> None:
        with os.fdopen(w, "wb") as f:
            for i in range(0, len(data), 1000):
                f.write(data[i:i + 1000])
                f.flush()

    t = threading.Thread(target=writer)
    t.start()
    p = Profile()
    with os.fdopen(r, "rb") as f:
        perf.fold_stream(f, FoldOptions(), p)
    t.join()
    _same(p, fold(FIX / "mix-fp.txt"))


# -- properties -----------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_any_bytes_give_a_profile_or_an_input_error(data: bytes) -> None:
    try:
        p = fold(data)
    except InputError:
        return
    assert all(w > 0 for w in p.stacks.values())


_NAME = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\n\r\x00"),
                min_size=1, max_size=12).filter(lambda s: s.strip() == s and "+0x" not in s)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([b"\n", b"\r\n", b"\n\n", b"\t", b" ", b"cpu-clock:",
                                 b"app 7 1.0: 10 cpu-clock: ", b"\t1 main (/bin/app)",
                                 b"PERF_RECORD_LOST lost 2", b"sched:sched_switch:",
                                 b"prev_state=S ==>", b"\xff"]), max_size=40))
def test_perf_shaped_noise_never_crashes(parts: list[bytes]) -> None:
    with contextlib.suppress(InputError):
        fold(b"".join(parts))


@settings(max_examples=100, deadline=None)
@given(st.lists(_NAME, min_size=1, max_size=6), _NAME)
def test_names_round_trip_through_folded_text(frames: list[str], comm: str) -> None:
    comm = comm.replace(" ", "_")
    lines = "".join(f"\t{i:x} {name} (/bin/app)\n" for i, name in enumerate(reversed(frames)))
    text = f"{comm} 7 1.0: 10 cpu-clock: \n{lines}\n".encode()
    try:
        p = fold(text)
    except InputError:
        return
    for key in p.stacks:
        out = io.StringIO()
        write_folded(p, out, ThreadRoot.NONE)
        line = out.getvalue().split("\n")[0]
        stack, _, weight = line.rpartition(" ")
        assert [unescape(f) for f in stack.split(";")] == list(key.frames)
        assert int(weight) == 10


def test_ten_thousand_frames() -> None:
    frames = "".join(f"\t{i:x} f{i} (/bin/app)\n" for i in range(10_000))
    text = f"app 7 1.0: 10 cpu-clock: \n{frames}\n".encode() * 3
    t0 = time.perf_counter()
    p = fold(text)
    assert time.perf_counter() - t0 < 10
    ((key, w),) = p.stacks.items()
    assert len(key.frames) == 10_000 and key.frames[0] == "f9999" and w == 30
    out = io.StringIO()
    write_folded(p, out)
    assert out.getvalue().count(";") == 10_000


@pytest.mark.parametrize("line", [
    b"1 " * 500_000,                       # a million digit words: tid candidates
    b"1 " * 30_000,                        # the same under the header length limit
    b"a 1.1: " * 150_000,                  # many time-like fields
    b"a 1.1: " * 9_000,
    b"x 7 1.0: 1 e:" + b"f:" * 30_000,     # a long event-like word
    b"x 7 1.0: 1 cpu-clock: \n\t1 f" + b"@GLIBC_" * 150_000 + b" (/x)",  # a long frame
    b"x 7 1.0: 1 cpu-clock: \n\t1 f" + b"(" * 300_000 + b" (/x)",
])
def test_long_hostile_lines_take_linear_time(line: bytes) -> None:
    good = b"app 7 1.0: 10 cpu-clock: \n\t1 main (/bin/app)\n\n"
    t0 = time.perf_counter()
    p = fold(good + line + b"\n\n" + good)
    assert time.perf_counter() - t0 < 5
    assert p.meta.samples["perf"] >= 2


def test_hostile_names_stay_data() -> None:
    text = (b"<img src=x> 7 1.0: 10 cpu-clock: \n\t1 <script>alert(1)</script>;x (/bin/a b)\n"
            b"\t2 \xff\xfe\x1b[31m (/bin/app)\n\n")
    ((key, w),) = fold(text).stacks.items()
    assert key.thread == "<img src=x>" and w == 10
    assert key.frames == ("\ufffd\ufffd\x1b[31m", "<script>alert(1)</script>;x")


@pytest.mark.parametrize("jobs", [2, 3, 7])
@pytest.mark.parametrize("fixture", ["mix-fp.txt", "deep-fp.txt", "mix-lost.txt", "mix-sched.txt",
                                     "mix-fp-crlf.txt", "mix-fp-truncated.txt",
                                     "mix-two-events.txt", "mix-dwarf.txt"])
def test_folding_in_parts_gives_the_same_profile(fixture: str, jobs: int, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A file folded in parts by several processes gives what one process gives: stacks in
    the same order, counts, losses with their first lines, warnings (parts after scheduler
    records are folded in order by the parent)."""
    data = (FIX / fixture).read_bytes()
    path = tmp_path / "in.txt"
    path.write_bytes(data * 3)
    whole = Profile()
    perf.fold(str(path), FoldOptions(), whole)
    monkeypatch.setattr(perf_reader, "PARALLEL_MIN", 0)
    parts = Profile()
    perf.fold_parallel(str(path), FoldOptions(), parts, jobs)
    assert list(parts.stacks.items()) == list(whole.stacks.items())
    assert parts.meta.to_json() == whole.meta.to_json()


@given(st.lists(st.sampled_from([*"ab 1.:\t[]/", "\u0663", "\u2003", "x" * 30]), max_size=40)
       .map("".join))
def test_header_precheck_rejects_only_non_headers(line: str) -> None:
    """``detect`` skips parsing a line with neither a word of digits in its first 64
    characters nor a time: the parser would not take it for a header either."""
    from wallflame.fold import heads
    from wallflame.fold.perf.lines import parse_header

    if (heads._PERF_DIGIT_WORD.search(line, 0, heads.PERF_TID_END) is None
            and heads._PERF_TIME.search(line) is None):
        assert parse_header(line) is None


def test_a_sample_perf_could_not_name_is_tid_minus_one() -> None:
    """An exiting thread's last samples (inside ``do_exit``, after perf dropped it) come as
    ``:-1 -1``: tid -1, never the period taken for a thread id."""
    from wallflame.fold.perf.lines import parse_header

    h = parse_header(":-1    -1 [001] 23418.037926:    2004008 cpu-clock: ")
    assert h is not None and (h.comm, h.pid, h.tid, h.period, h.event) == \
        (":-1", 0, -1, 2004008, "cpu-clock")
    h = parse_header("python 11669/-1    23415.198133765:          1 sched:sched_switch: x")
    assert h is not None and (h.pid, h.tid) == (11669, -1)
    h = parse_header("python 11862 [001] 23418.035922:    2004008 cpu-clock: ")
    assert h is not None and (h.tid, h.period) == (11862, 2004008)
