"""Building a run's timeline (``wallflame.timeline``) from what ``finish`` has at hand.

The on-CPU samples are read again from ``raw/perf.script`` (the folder aggregates them as it
reads, times dropped), each record's frames named by the folder's own function so that the
timeline's stacks are those of ``oncpu.folded``.  The scheduler's intervals come from the
``IntervalLog`` the scheduler folder filled while it paired the switches; each blocked one is
classified by the same rules as the folded stacks, given the locks its thread was observed
waiting on at that call site (``wallflame.fold.locks``), and marked stopped when the collect's own
tracer stopped it (``wallflame.stops``), as ``finish`` does for the folded stacks.
"""

from __future__ import annotations

from pathlib import Path

from wallflame import stops
from wallflame.classify import Rules, classify
from wallflame.fold import locks
from wallflame.fold.perf.lines import TIME_EVENTS, frame_name, parse_header
from wallflame.locks import lockshare
from wallflame.profile import ON, WAIT_CLASSES, Profile, StackKey
from wallflame.rundir import PERF_SCRIPT, Capture, Window
from wallflame.speedups import native
from wallflame.timeline import (
    RUNNABLE,
    STOPPED,
    UNSAMPLED,
    IntervalLog,
    Timeline,
)
from wallflame.waitclasses import FALLBACK

#: perf.script is read this many bytes at a time (records never straddle two reads).
_CHUNK = 1 << 22


def build(raw: Path, cap: Capture, profile: Profile, log: IntervalLog | None,
          rules: Rules, evidence: locks.LockEvidence | None, tracer_stops: bool,
          wakers: dict[int, list[int]] | None = None) -> Timeline:
    """The timeline of the run whose ``raw/`` and finished ``profile`` are given; ``wakers``:
    per thread, its wakings as flat ``[time, waker tid, ...]`` pairs (the scheduler folder's
    ``wakers``), or None when they were not recorded."""
    window = cap.window
    clock = "CLOCK_MONOTONIC" if window.perf_clock == "mono" else "perf"
    tl = Timeline(clock=clock, off_source=str(profile.meta.extra.get("offcpu_source", "")))
    pids = {k.tid: k.pid for k in profile.stacks}
    on_tids = {k.tid for k in profile.stacks if k.state == ON}
    script = raw / PERF_SCRIPT
    if script.exists():
        read_samples(script, tl, on_tids)
    if log is not None and tl.off_source == "sched":
        add_spans(tl, log, rules, evidence, tracer_stops)
    elif tl.off_source:
        tl.notes.append(f"off-CPU time comes from {tl.off_source}: no spans off a CPU")
    for th in tl.threads.values():
        th.pid = th.pid or pids.get(th.tid, 0)
        th.name = profile.meta.threads.get(th.tid, th.name)
    _bounds(tl, window, clock)
    if wakers and tl.off_source == "sched":
        add_wakes(tl, wakers)
    return tl


def add_wakes(tl: Timeline, wakers: dict[int, list[int]]) -> None:
    """Each target thread's wake-ups in the window and who woke it; the wakers outside the
    target named as ``/proc`` shows them now (``outside_name``)."""
    tl.wakes = True
    for tid, th in tl.threads.items():
        pairs = wakers.get(tid, [])
        times, who = pairs[0::2], pairs[1::2]
        keep = [i for i, t in enumerate(times) if tl.t0 <= t <= tl.t1]
        th.w_time = [times[i] for i in keep]
        th.w_waker = [who[i] for i in keep]
    outside = {w for th in tl.threads.values() for w in th.w_waker} - set(tl.threads) - {0}
    tl.waker_names = {w: outside_name(w) for w in sorted(outside)}


def outside_name(tid: int, proc: Path = Path("/proc")) -> str:
    """``comm (pid N)`` of a task outside the target, as ``ps`` names it; ``tid N, exited``
    when it is gone."""
    try:
        comm = (proc / str(tid) / "comm").read_text(errors="replace").strip()
        status = (proc / str(tid) / "status").read_text(errors="replace")
    except OSError:
        return f"tid {tid}, exited"
    pid = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("Tgid:")), "")
    return f"{comm} (pid {pid})" if pid else f"{comm} (tid {tid})"


def _bounds(tl: Timeline, window: Window, clock: str) -> None:
    """The window in the timeline's clock: the collect's monotonic bounds when perf recorded
    with that clock, else the first and last event."""
    bounds = window.on_perf_clock()
    if clock == "CLOCK_MONOTONIC" and bounds is not None:
        tl.t0, tl.t1 = bounds
        return
    first = [v for th in tl.threads.values() for v in (th.s_time[:1] + th.p_start[:1])]
    last = [max([*th.s_time[-1:], *(s + d for s, d in zip(th.p_start, th.p_dur, strict=True))])
            for th in tl.threads.values() if th.s_time or th.p_start]
    tl.t0, tl.t1 = (min(first), max(last)) if first else (0, 0)
    tl.notes.append("the window's bounds are those of the first and last event (perf's own "
                    "clock, not CLOCK_MONOTONIC)")


def drop_outside(profile: Profile, tl: Timeline, start: int, end: int) -> None:
    """Take the on-CPU samples outside ``[start, end)`` out of ``profile`` (perf starts
    recording before the window opens, while the other recorders get ready); they stay in
    the timeline, and their count and time go to ``meta.extra["outside_window"]``."""
    keys: dict[tuple[int, tuple[str, ...]], list[StackKey]] = {}
    for k in profile.stacks:
        if k.state == ON:
            keys.setdefault((k.tid, k.frames), []).append(k)
    n = ns = 0
    for th in tl.threads.values():
        for t, w, sid in zip(th.s_time, th.s_weight, th.s_stack, strict=True):
            if start <= t < end:
                continue
            left = w
            for k in keys.get((th.tid, tl.stacks.frames_of(sid)), []):
                take = min(left, profile.stacks.get(k, 0))
                if take:
                    profile.stacks[k] -= take
                    if not profile.stacks[k]:
                        del profile.stacks[k]
                    left -= take
                if not left:
                    break
            n += 1
            ns += w - left
    out = profile.meta.extra.setdefault("outside_window", {})
    out["oncpu_samples"] = n
    out["oncpu_ns"] = ns


def scale_samples(profile: Profile, tl: Timeline, start: int, end: int) -> None:
    """Give each thread's samples in ``[start, end)`` the weights that add up to its on-CPU
    stacks in ``profile`` (measured from the switches, ``wallflame.window``), in proportion
    to their periods: a range then holds its share of the measured time, as the folded
    files do.  A thread whose on-CPU time had no sample keeps none in the timeline."""
    on: dict[int, int] = {}
    for k, w in profile.stacks.items():
        if k.state == ON:
            on[k.tid] = on.get(k.tid, 0) + w
    for th in tl.threads.values():
        inside = [i for i, t in enumerate(th.s_time) if start <= t < end]
        sampled = sum(th.s_weight[i] for i in inside)
        target = on.get(th.tid, 0)
        if not inside or not sampled or not target:
            continue
        given = 0
        for n, i in enumerate(inside):
            w = target - given if n == len(inside) - 1 else th.s_weight[i] * target // sampled
            th.s_weight[i] = w
            given += w


def read_samples(path: Path, tl: Timeline, tids: set[int], kernel: bool = False) -> int:
    """Add the on-CPU samples of ``raw/perf.script`` (threads in ``tids``); returns how many
    records were not samples of those threads."""
    by_block: dict[bytes, int] = {}
    names: dict[str, str | None] = {}
    skipped = 0
    carry = b""
    with open(path, "rb") as f:
        while True:
            data = f.read(_CHUNK)
            buf = carry + data
            if not data:
                recs, carry = ([buf] if buf.strip() else []), b""
            else:
                recs = buf.split(b"\n\n")
                carry = recs.pop()
            for rec in recs:
                if not _sample(rec.replace(b"\r\n", b"\n"), tl, tids, kernel, by_block,
                               names):
                    skipped += 1
            if not data:
                break
    return skipped


def _sample(rec: bytes, tl: Timeline, tids: set[int], kernel: bool,
            by_block: dict[bytes, int], names: dict[str, str | None]) -> bool:
    rec = rec.strip(b"\n")
    if not rec:
        return True
    head, _, block = rec.partition(b"\n")
    h = parse_header(head.decode("utf-8", "replace"))
    if h is None or h.record or h.time is None or h.tid not in tids \
            or not h.event.startswith(TIME_EVENTS):
        return False
    sid = by_block.get(block)
    if sid is None:
        frames = []
        for line in block.decode("utf-8", "replace").split("\n"):
            name = names.get(line, "\0")
            if name == "\0":
                name = names[line] = frame_name(line, kernel)
            if name:
                frames.append(name)
        sid = by_block[block] = tl.stacks.intern(tuple(reversed(frames)))
    th = tl.thread(h.tid, h.pid, h.comm)
    th.s_time.append(h.time)
    th.s_weight.append(h.period if h.period is not None else 1)
    th.s_stack.append(sid)
    return True


def add_spans(tl: Timeline, log: IntervalLog, rules: Rules,
              evidence: locks.LockEvidence | None, tracer_stops: bool) -> None:
    """The scheduler's intervals, each with its kind (wait class, runnable, stopped,
    unsampled), stack, period and observed locks, by ``_speedups.span_rows``: a row per
    interval in its thread's columns; each sample's kind and stack worked out here the first
    time a row meets it (stacks interned in the order the rows meet them); a blocked row of
    a lock wait's kind given its thread's observed locks at that call site."""
    classes: dict[int, tuple[int, int]] = {}  # sample index -> (kind, stack id)
    sets: dict[tuple[int, int], int] = {}     # (tid, sample index) -> lock set

    def resolve(si: int, runnable: bool) -> tuple[int, int]:
        frames = log.samples[si][0]
        if runnable:
            sid = classes[si][1] if si in classes else _intern(tl, log, si)
            # woken from a stop of the collect's tracer: that time is the tracer's, as
            # wallflame.stops counts it
            return (STOPPED if tracer_stops and stops.is_tracer_stop(frames) else RUNNABLE,
                    sid)
        got = classes.get(si)
        if got is None:
            k = STOPPED if tracer_stops and stops.is_tracer_stop(frames) else \
                WAIT_CLASSES.index(_known(classify(frames, log.samples[si][1], rules)))
            got = classes[si] = (k, tl.stacks.intern(frames))
        return got

    def ref_of(tid: int, si: int) -> int:
        ref = sets.get((tid, si), -1)
        if ref < 0:
            assert evidence is not None
            ref = sets[(tid, si)] = tl.lock_set(
                locks.observed_locks(evidence, tid, log.samples[si][0]))
        return ref

    lock_kinds = bytes(int(c in lockshare.LOCK_WAITS) for c in WAIT_CLASSES[:UNSAMPLED]) \
        if evidence is not None else b""
    native.span_rows(tl.thread, log.tid, log.start, log.dur, log.kind, log.sample, log.period,
                     resolve, lock_kinds, ref_of, RUNNABLE, UNSAMPLED)


def _intern(tl: Timeline, log: IntervalLog, si: int) -> int:
    return tl.stacks.intern(log.samples[si][0]) if si >= 0 else 0


def _known(cls: str) -> str:
    return cls if cls in WAIT_CLASSES else FALLBACK


__all__ = ["add_spans", "build", "drop_outside", "read_samples", "scale_samples"]
