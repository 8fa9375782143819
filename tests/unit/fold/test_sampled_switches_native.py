"""The native reader of the scheduler capture's switch records (``_speedups.SwitchTracker``,
which also applies them to each thread's state) and ``finish``'s native passes against the
Python reference (``reference_switches.PythonSched``): the same text, read both ways, in one
chunk or two, leaves every thread, interval and counter the same, whatever the comms hold
(digits, slashes, colons, record names, tabs, non-ASCII) and however the numbers run."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from unit.fold.reference_switches import PythonSched
from wallflame.fold.options import FoldOptions
from wallflame.fold.perf import sched_passes
from wallflame.fold.perf.sampled_switches import SampledSched
from wallflame.profile import Profile
from wallflame.report.summary import build_summary
from wallflame.speedups import native
from wallflame.window import exact_oncpu

COMMS = ["mariadbd", "w", "", "a b", "1/2 3.000000004:", "x 7/7 1.000000000: PERF_RECORD_SWITCH",
         "sixteen-chars-ab", "seventeen-chars-x", "t\tab", "é", "-1", "  pad  ", "::", "9/9",
         "PERF_RECORD_SWITCH OUT"]
RECORDS = ["PERF_RECORD_SWITCH_CPU_WIDE OUT          next pid/tid:  {p}/{n} ",
           "PERF_RECORD_SWITCH_CPU_WIDE IN           prev pid/tid:  {p}/{n} ",
           "PERF_RECORD_SWITCH_CPU_WIDE OUT preempt  next pid/tid:  {p}/{n} ",
           "PERF_RECORD_SWITCH OUT", "PERF_RECORD_SWITCH IN", "PERF_RECORD_SWITCH OUT preempt",
           "PERF_RECORD_SWITCH OUT preemptx", "PERF_RECORD_SWITCH INX", "PERF_RECORD_SWITCHX IN",
           "PERF_RECORD_SWITCH_CPU_WIDEX OUT", "PERF_RECORD_SWITCH_CPU_WIDE", "PERF_RECORD_SWITCH",
           "PERF_RECORD_SWITCH  OUT   preempt", "PERF_RECORD_SWITCH\tOUT", "PERF_RECORD_LOST 3",
           "PERF_RECORD_FORK({p}:{n}):(100:100)", "PERF_RECORD_COMM: w:{p}/{n}",
           "PERF_RECORD_SWITCH_CPU_WIDE OUT\x1c", "PERF_RECORD_SWITCH OUT préempt"]


@st.composite
def lines(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return ""
    if kind == 1:
        return "\t" + draw(st.sampled_from(["ffffffff821f8b58 __schedule ([kernel.kallsyms])",
                                            "1000 f (/bin/w)", "x"]))
    if kind == 2:
        return draw(st.text(max_size=60))
    comm = draw(st.sampled_from(COMMS) | st.text(max_size=20))
    pid = draw(st.sampled_from([100, 200, 0, -1, 10**19, 101]))
    tid = draw(st.sampled_from([100, 101, 102, 200, 201, 0, -1, 10**20]))
    # seconds within a capture's span (the bins of the blocked time cover it), and beyond
    # what the 64-bit columns hold
    sec = draw(st.sampled_from([81269, 81270, 10**10]))
    ns = draw(st.integers(0, 999_999_999))
    pad = draw(st.sampled_from([" ", "  ", "      "]))
    frac = draw(st.sampled_from([f"{ns:09d}", f"{ns:09d}"[:8], f"{ns:09d}0"]))
    rec = draw(st.sampled_from(RECORDS)).format(p=pid, n=tid)
    if kind == 3:  # a stack sample's header
        rec = (f"{draw(st.integers(1, 5)):10d} sched:sched_switch: prev_comm=w prev_pid={tid} "
               "prev_prio=120 prev_state=S ==> next_comm=x next_pid=0 next_prio=120")
    return f"{comm}{pad}{pid}/{tid}{pad}{sec}.{frac}:{pad}{rec}"


def state(s: SampledSched) -> dict[str, Any]:
    """Everything a reader leaves behind, but the rules, caches and which reader it was."""
    threads, log = s.threads, s.log  # the native tracker's state handed over
    out = {k: v for k, v in vars(s).items()
           if k not in ("rules", "_frame_cache", "_classes", "_log", "_threads", "_tracker")}
    out["threads"] = {tid: vars(th) for tid, th in threads.items()}
    out["log"] = {k: v for k, v in vars(log).items() if k != "_index"}
    return out


@contextlib.contextmanager
def patched(module: Any, **values: Any) -> Iterator[None]:
    saved = {k: getattr(module, k) for k in values}
    for k, v in values.items():
        setattr(module, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(module, k, v)


def sched(how: str) -> SampledSched:
    """``how``: ``native`` (the product's paths) or ``python`` (the reference)."""
    return (PythonSched if how == "python" else SampledSched)(FoldOptions().get_rules())


def read(chunks: list[bytes], how: str, at_start: list[int] | None) -> SampledSched:
    s = sched(how)
    if at_start is not None:
        s.set_window(0, None, at_start)
    for chunk in chunks:
        s.feed(io.BytesIO(chunk))
    return s


@settings(max_examples=400, deadline=None)
@given(st.lists(lines(), max_size=40), st.sampled_from([None, [100, 101], [201]]),
       st.binary(max_size=3), st.integers(0, 40))
def test_native_reads_as_python_reads(body: list[str], at_start: list[int] | None,
                                      junk: bytes, cut: int) -> None:
    text = "\n".join(body).encode("utf-8", "surrogateescape") + junk
    head = "\n".join(body[:cut]).encode("utf-8", "surrogateescape")
    tail = "\n".join(body[cut:]).encode("utf-8", "surrogateescape") + junk
    for chunks in ([text], [head, tail]):  # one chunk, or two read one after the other
        ways = [read(chunks, how, at_start) for how in ("native", "python")]
        assert state(ways[0]) == state(ways[1])
        profiles = [Profile() for _ in ways]
        for s, p in zip(ways, profiles, strict=True):
            s.finish(p, {"stack_period": 1})
        assert profiles[0].stacks == profiles[1].stacks
        assert profiles[0].meta.extra == profiles[1].meta.extra


def test_lines_split_as_bytes_split() -> None:
    split = native.switch_lines
    for block in (b"", b"a", b"\n", b"a\n\nb\n", b"\xff\xfe\n\t\xe9"):
        got = [x if isinstance(x, str) else "tuple" for x in split(block)]
        assert got == block.decode("utf-8", "replace").split("\n")
    rec = split(b"mariadbd  6103/6174  81269.809876047: PERF_RECORD_SWITCH_CPU_WIDE OUT "
                b"preempt  next pid/tid:  6103/6169 ")
    assert rec == [(7, 6103, 6174, 81269_809876047, "mariadbd")]
    # a comm that looks like a header: the shortest comm wins, as the expression reads it
    rec = split(b"1/2 3.000000004: 5/6 7.000000008: PERF_RECORD_SWITCH IN")
    assert rec == ["1/2 3.000000004: 5/6 7.000000008: PERF_RECORD_SWITCH IN"]
    rec = split(b"a 5/6 7.000000008: PERF_RECORD_SWITCH IN")
    assert rec == [(0, 5, 6, 7_000000008, "a")]


@st.composite
def captures(draw: st.DrawFn) -> list[str]:
    """A capture as perf writes one: times that only go forward, each thread switching out
    and in, some switch-outs preceded by their stack sample (a few microseconds to beyond
    ``reference_switches.MAX_SAMPLE_LEAD_NS`` before), other tasks' records among them on
    every CPU, a comm out of ASCII now and then (those records are read by Python, among the
    native ones)."""
    wide = draw(st.booleans())
    tids = {101: 100, 102: 100, 103: 100, 201: 200}  # 201: another process's
    on = {tid: draw(st.booleans()) for tid in tids}
    t = 81269_000_000_000
    out = []
    for _ in range(draw(st.integers(0, 60))):
        t += draw(st.sampled_from([0, 1, 700, 3_000, 20_000, 9_000_000, 11_000_000]))
        tid = draw(st.sampled_from(sorted(tids)))
        pid = tids[tid]
        comm = draw(st.sampled_from(["mariadbd", "w", "é", "x y", ""]))
        rec = "PERF_RECORD_SWITCH_CPU_WIDE" if wide else "PERF_RECORD_SWITCH"
        head = f"{comm:>16} {pid:>6}/{tid:<6} {t // 10**9}.{t % 10**9:09d}: "
        if draw(st.integers(0, 14)) == 0:
            # the thread exits (its final switch-out may follow; its TID may come back)
            out.append(head + f"PERF_RECORD_EXIT({pid}:{tid}):({pid}:{pid})")
            continue
        if on[tid]:
            if draw(st.booleans()):  # its stack sample first
                state = draw(st.sampled_from(["S", "D", "R", "R+"]))
                period = draw(st.integers(1, 4))
                lead = draw(st.sampled_from([0, 2_000, 10_000_000, 10_000_001]))
                ts = t - lead
                out.append(f"{comm:>16} {pid:>6}/{tid:<6} {ts // 10**9}.{ts % 10**9:09d}: "
                           f"{period:10d} sched:sched_switch: prev_comm={comm} prev_pid={tid} "
                           f"prev_prio=120 prev_state={state} ==> next_comm=x next_pid=0 "
                           "next_prio=120")
                out.append("\tffffffff821f8b58 __schedule ([kernel.kallsyms])")
                out.append(f"\t{tid:x} f{draw(st.integers(0, 3))} (/bin/w)")
                out.append("")
            preempt = draw(st.booleans())
            out.append(head + f"{rec} OUT{' preempt' if preempt else ''}  next pid/tid:  0/0 ")
        else:
            out.append(head + f"{rec} IN  prev pid/tid:  0/0 ")
        if draw(st.integers(0, 9)) > 0:  # now and then a record lost, left in its state
            on[tid] = not on[tid]
    return out


@settings(max_examples=300, deadline=None)
@given(captures(), st.sampled_from([None, [101, 102], [101, 102, 103]]), st.integers(0, 250),
       st.sampled_from([None, 81269_000_500_000]))
def test_tracker_reads_captures_as_python_reads(body: list[str], at_start: list[int] | None,
                                                cut: int, window: int | None) -> None:
    head = "\n".join(body[:cut]).encode()
    tail = "\n".join(body[cut:]).encode()
    ways = []
    for how in ("native", "python"):
        s = sched(how)
        if at_start is not None or window is not None:
            s.set_window(window or 0, None, at_start)
        for chunk in (head, tail):
            s.feed(io.BytesIO(chunk))
        ways.append(s)
    assert state(ways[0]) == state(ways[1])
    profiles = [Profile(), Profile()]
    for s, p in zip(ways, profiles, strict=True):
        s.finish(p, {"stack_period": 1})
    assert profiles[0].stacks == profiles[1].stacks
    assert profiles[0].meta.extra == profiles[1].meta.extra


@settings(max_examples=300, deadline=None)
@given(captures(), st.sampled_from([None, [101, 102], [101, 102, 103]]),
       st.lists(st.tuples(st.sampled_from([101, 102, 103, 201]), st.integers(0, 100),
                          st.sampled_from([-1_000, -1, 0, 1, 5_000])), max_size=30),
       st.sampled_from([None, (81269_000_500_000, 81269_100_000_000),
                        (81269_000_000_000, 81270_000_000_000)]),
       st.integers(-30_000, 30_000), st.booleans())
def test_finish_passes_as_python(body: list[str], at_start: list[int] | None,
                                 wakes: list[tuple[int, int, int]],
                                 window: tuple[int, int] | None,
                                 late: int, listed: bool) -> None:
    """``finish`` with its native passes (the wake-ups' split and merge, the switch-in caps
    and lag, the clip to the window) leaves the threads, the log, the bins and the profile
    as the Python passes do, with the lag applied (its minimum lowered to one switch-in)
    or not."""
    text = "\n".join(body).encode()
    # wake-ups at the records' times (an interval's very end or start) and near them
    times = sorted({int(line.split(": ")[0].split()[-1].replace(".", ""))
                    for line in body if line and not line.startswith("\t")}) or [0]
    wake_text = "".join(f"{7:>7} {t // 10**9}.{t % 10**9:09d}: sched:sched_wakeup: comm=w "
                        f"pid={tid} prio=120 target_cpu=001\n"
                        for tid, t in ((tid, times[k % len(times)] + off)
                                       for tid, k, off in wakes) if t > 0)
    ways = []
    for how in ("native", "python"):
        s = sched(how)
        if at_start is not None:
            s.set_window(window[0] if window else 0, None, at_start)
        s.feed_wakes(io.BytesIO(wake_text.encode()))
        s.feed(io.BytesIO(text))
        listings = None
        if listed:  # the kernel's run time: the records' on-CPU time, ``late`` per switch-in
            lo, hi = window or (81269_000_000_000, 81270_000_000_000)
            rows = {"start": [], "end": []}
            for tid, th in s.threads.items():
                pairs = list(th.on_cpu)
                if th.on_since is not None and hi > th.on_since:
                    pairs += [th.on_since, hi]
                ran = sum(max(0, min(hi, b) - max(lo, a))
                          for a, b in zip(pairs[::2], pairs[1::2], strict=True))
                ran += late * sum(1 for t in th.ins if lo <= t < hi)
                rows["start"].append({"tid": tid, "schedstat": [0, 0, 0]})
                rows["end"].append({"tid": tid, "schedstat": [max(0, ran), 0, 0]})
            listings = {"start": {"mono_ns": lo, "threads": rows["start"]},
                        "end": {"mono_ns": hi, "threads": rows["end"]}}
        p = Profile()
        with patched(sched_passes, LAG_MIN_SWITCH_INS=1):
            s.finish(p, {"stack_period": 1}, window, listings)
        ways.append((s, p))
    (a, pa), (b, pb) = ways
    assert state(a) == state(b)
    assert pa.stacks == pb.stacks
    assert pa.meta.extra == pb.meta.extra
    assert a.class_bins == b.class_bins


WAKE_FIELDS = ["comm=w pid={p} prio=120 target_cpu=001", "comm=w pid={p} prio=-1 success=1 "
               "target_cpu=001  ", "comm=pid=7 prio=1 target_cpu=1 pid={p} prio=120 "
               "target_cpu=000", "comm=w pid={p} prio=120 target_cpu=", "comm=ppid={p} "
               "prio=120 target_cpu=3", "comm=w pid={p} prio=120 success=x target_cpu=1",
               "comm=é pid={p} prio=120 target_cpu=001", "pid={p} prio=120 target_cpu=001\t",
               "comm=w pid={p} prio=120 target_cpu=001 ffffffff813b4dc5 ttwu_do_activate",
               "comm=w pid={p} prio=120 target_cpu=001 ffffffff813b4dc5", "comm=w pid={p} "
               "prio=120 target_cpu=001 xyz ttwu"]
#: Lines of a waking's kernel call chain, and the blank line that ends it.
WAKE_FRAMES = ["\tffffffff813b53c6 try_to_wake_up", "\tffffffff8142de4e hrtimer_wakeup",
               "\tffffffff81369c4d handle_softirqs", "\tffffffff81000e06 "
               "asm_sysvec_apic_timer_interrupt", "\tffffffff81311696 process_timeout", "",
               "\t\u00e9 asm_common_interrupt"]


@st.composite
def wake_lines(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 6))
    if kind == 0:
        return draw(st.text(max_size=40))
    if kind >= 5:
        return draw(st.sampled_from(WAKE_FRAMES))
    tid = draw(st.sampled_from(["18", "10631", "0", "-1", "9" * 19]))
    sec = draw(st.sampled_from(["9298", "0", "1" * 10]))
    frac = draw(st.sampled_from(["795674968", "79567496", "7956749680"]))
    pad = draw(st.sampled_from([" ", "  ", "\t"]))
    event = draw(st.sampled_from(["sched:sched_wakeup: ", "sched:sched_wakeup:",
                                  "sched:sched_waking: ", "sched:sched_waking:", "x: "]))
    fields = draw(st.sampled_from(WAKE_FIELDS)).format(
        p=draw(st.sampled_from(["101", "0", "9" * 19, "102"])))
    return f"{pad}{tid}{pad}{sec}.{frac}:{pad}{event}{fields}"


@settings(max_examples=400, deadline=None)
@given(st.lists(wake_lines(), max_size=30), st.binary(max_size=3))
def test_wake_lines_read_as_python_reads(body: list[str], junk: bytes) -> None:
    """``_speedups.wake_run`` reads the wake-up capture as ``feed_wakes``'s expressions do
    (the same wake-ups and wakers in the same order, the same counts), whatever the lines
    hold."""
    text = "\n".join(body).encode("utf-8", "surrogateescape") + junk
    ways = []
    for how in ("native", "python"):
        s = sched(how)
        s.feed_wakes(io.BytesIO(text))
        ways.append(s)
    assert ways[0].wakes == ways[1].wakes
    assert ways[0].wakers == ways[1].wakers
    assert (ways[0].wake_records, ways[0].unparsed) == (ways[1].wake_records, ways[1].unparsed)


def test_a_thread_ends_at_its_exit() -> None:
    """IN, then EXIT: on-CPU until the exit, and nothing after it, whether its final
    switch-out follows (it opens no interval) or not; a thread taking its TID again counts
    from its own switch-in.  Python and the native tracker alike."""
    def line(tid: int, t_us: int, what: str) -> str:
        t = 81269_000_000_000 + t_us * 1000
        return f"{'w':>16} {100:>6}/{tid:<6} {t // 10**9}.{t % 10**9:09d}: {what}"

    body = [line(101, 0, "PERF_RECORD_SWITCH_CPU_WIDE IN  prev pid/tid:  0/0 "),
            line(102, 0, "PERF_RECORD_SWITCH_CPU_WIDE IN  prev pid/tid:  0/0 "),
            line(101, 300, "PERF_RECORD_EXIT(100:101):(100:100)"),
            line(102, 400, "PERF_RECORD_EXIT(100:102):(100:100)"),
            # its final switch's sample: perf no longer names the thread (tid -1)
            line(-1, 404, "         1 sched:sched_switch: prev_comm=w prev_pid=102 "
                 "prev_prio=120 prev_state=X ==> next_comm=x next_pid=0 next_prio=120"),
            "\tffffffff821f8b58 __schedule ([kernel.kallsyms])", "",
            line(102, 405, "PERF_RECORD_SWITCH_CPU_WIDE OUT  next pid/tid:  0/0 "),
            line(101, 700, "PERF_RECORD_SWITCH_CPU_WIDE IN  prev pid/tid:  0/0 "),
            line(101, 800, "PERF_RECORD_SWITCH_CPU_WIDE OUT preempt  next pid/tid:  0/0 ")]
    end = 81269_000_000_000 + 1_000_000  # the window: 1 ms
    for how in ("native", "python"):
        s = sched(how)
        s.set_window(81269_000_000_000, end, [101, 102])
        s.feed(io.BytesIO("\n".join(body).encode()))
        p = Profile()
        s.finish(p, {"stack_period": 1})
        exact = p.meta.extra["sched_threads"]
        assert s.unparsed == 0 and s.exit_switch_samples == 1, how
        assert p.meta.extra["sched"]["exited_threads"] == 2, how
        # 101: 300 us to its exit, then 100 us as a new thread, then runnable to the end
        assert exact["101"]["on_ns"] == 300_000 + 100_000, how
        assert exact["101"]["runnable_ns"] == 200_000, how
        # 102: 400 us, its final switch-out 5 us later opens nothing; it lived 400 us of the
        # window, and its coverage is over those
        assert exact["102"] == {"on_ns": 400_000, "runnable_ns": 0, "blocked_ns": 0,
                                "alive_ns": 400_000}, how
        assert "alive_ns" not in exact["101"]  # a thread with its TID lived to the end
        p.meta.window_ns = 1_000_000
        exact_oncpu(p, exact)  # as finish does: the on-CPU time without samples
        rows = {r["tid"]: r for r in build_summary(p)["threads"]}
        assert rows[102]["coverage"] == 1.0 and rows[102]["alive_s"] == 0.0004, how
