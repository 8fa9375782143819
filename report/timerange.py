"""A run restricted to a range of its window (``wallflame report RUN --from 3.0 --to 4.5``).

The profile of the range is built from the run's timeline (``wallflame.timeline``) by the
rules ``finish`` applies to the whole window, so that every output format (and the figures
the page shows) describes only that range:

* on-CPU: the samples whose time falls in the range, each weighing its period;
* blocked: each thread's spans clipped to the range.  Their total is exact; it is split as
  ``wallflame.fold.perf.sampled_switches`` splits the whole window (``wallflame.strata``):
  the spans a snapshot's stop showed keep their stack, the rest goes stratum by stratum of
  the spans' durations over the stacks of the spans in the range that have one, and a
  thread with no sampled span in the range takes its whole-window blocked stacks (with every
  switch sampled, the default, every span is its own stack: the split is exact).  A lock
  wait goes to the locks its thread was observed waiting on at that call site, in proportion
  to the observations;
* runnable and stopped time: clipped to the range, per thread (``runqueue_ns`` and
  ``tracer_stops`` of the metadata, which the summary and the coverage check read);
* the evidence counts (the metadata's ``samples``, which ``diff`` and ``check`` take as the
  noise floor's sample sizes): the on-CPU samples and the sampled spans (``sched_switch``)
  in the range; the waits a stop showed are the snapshots' evidence, and the other counters
  (``snapshots``...) are the range's share of the whole run's, in proportion to its length;
* lock holders: each holder's share of its lock's wait is that of the whole run (the owner
  sampler's observations are not tied to instants of the waits), applied to the lock's wait
  in the range.

The range is given in seconds from the start of the window; the metadata says which range
(``extra["range"]``) and its window is the range's length.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass

from wallflame import strata
from wallflame.errors import InputError
from wallflame.locks import lockshare
from wallflame.names import UNSAMPLED as UNSAMPLED_FRAME
from wallflame.profile import OFF, ON, WAIT_CLASSES, HolderKey, Profile, StackKey
from wallflame.timeline import RUNNABLE, STOPPED, UNSAMPLED, ThreadLine, Timeline
from wallflame.waitclasses import FALLBACK


@dataclass(frozen=True)
class Range:
    """``[start, end)`` in the timeline's clock (ns)."""

    start: int
    end: int

    def clip(self, start: int, dur: int) -> int:
        return max(0, min(self.end, start + dur) - max(self.start, start))

    def spans(self, th: ThreadLine) -> Iterator[tuple[int, int, int, int, int]]:
        """``th``'s spans off a CPU that overlap the range, clipped to it: ``(start, dur,
        kind, stack, lock set)``."""
        for s, d, k, sid, ref in zip(th.p_start, th.p_dur, th.p_kind, th.p_stack, th.p_locks,
                                     strict=True):
            c = self.clip(s, d)
            if c:
                yield max(s, self.start), c, k, sid, ref


def window_range(tl: Timeline, from_s: float | None, to_s: float | None) -> Range:
    """The range ``[from_s, to_s)`` seconds into the window (``None``: its start or end)."""
    start = tl.t0 + round((from_s or 0.0) * 1e9) if from_s is not None else tl.t0
    end = tl.t0 + round(to_s * 1e9) if to_s is not None else tl.t1
    if end <= start:
        raise InputError(f"the range {from_s}..{to_s} s is empty",
                         "give --to after --from (seconds into the window)")
    return Range(start, end)


def restrict(full: Profile, tl: Timeline, rng: Range) -> Profile:
    """The profile of ``rng`` (see the module docstring); ``full`` gives the metadata and the
    holders of the whole run."""
    out = Profile(meta=copy.deepcopy(full.meta))
    names = full.meta.threads
    samples = spans = 0
    runnable: dict[str, int] = {}
    stopped: dict[str, int] = {}
    whole = whole_blocked(full)
    for th in tl.sorted_threads():
        name = names.get(th.tid, th.name)
        samples += _on_cpu(out, tl, th, name, rng)
        spans += _blocked(out, tl, th, name, rng, whole.get(th.tid, []))
        rq, st = _clipped(th, rng, RUNNABLE), _clipped(th, rng, STOPPED)
        _runnable(out, tl, th, name, rng, rq)
        if rq:
            runnable[str(th.tid)] = rq
        if st:
            stopped[str(th.tid)] = st
    _holders(out, full)
    meta = out.meta
    meta.window_ns = rng.end - rng.start
    meta.extra["runqueue_ns"] = runnable
    meta.extra.pop("tracer_stops", None)
    if stopped:
        meta.extra["tracer_stops"] = {
            "cause": (full.meta.extra.get("tracer_stops") or {}).get("cause", "wallflame"),
            "total_ns": sum(stopped.values()), "ns": stopped}
    # The other counters (snapshots...) are the whole run's: the range's share of them, taken
    # at a steady rate over the window.
    share = (rng.end - rng.start) / max(1, tl.t1 - tl.t0)
    for kind, n in list(meta.samples.items()):
        meta.samples[kind] = round(n * min(1.0, share))
    meta.samples["perf"] = samples
    if tl.off_source == "sched":
        meta.samples["sched_switch"] = spans
    else:
        meta.warn(f"off-CPU time came from {tl.off_source or 'no collector'}, which has no "
                  "time axis in this run: the range holds on-CPU samples only")
    meta.extra["range"] = {"from_s": round((rng.start - tl.t0) / 1e9, 9),
                           "to_s": round((rng.end - tl.t0) / 1e9, 9),
                           "window_s": round((tl.t1 - tl.t0) / 1e9, 9)}
    if rng.start < tl.t0 or rng.end > tl.t1:
        meta.warn(f"the range {meta.extra['range']['from_s']:g}..."
                  f"{meta.extra['range']['to_s']:g} s reaches outside the window "
                  f"(0..{meta.extra['range']['window_s']:g} s)")
    return out


def _on_cpu(out: Profile, tl: Timeline, th: ThreadLine, name: str, rng: Range) -> int:
    n = 0
    for t, w, sid in zip(th.s_time, th.s_weight, th.s_stack, strict=True):
        if rng.start <= t < rng.end:
            out.add(StackKey(tl.stacks.frames_of(sid), th.tid, name, th.pid, ON), w)
            n += 1
    return n


def _clipped(th: ThreadLine, rng: Range, kind: int) -> int:
    return sum(rng.clip(s, d) for s, d, k in zip(th.p_start, th.p_dur, th.p_kind, strict=True)
               if k == kind)


def _runnable(out: Profile, tl: Timeline, th: ThreadLine, name: str, rng: Range,
              total: int) -> None:
    """Add the thread's runnable time in the range (``total``) over the stacks it was
    preempted or had blocked at, as the scheduler's folder splits it: its runnable spans'
    stacks, else its sampled blocked spans', else ``[unsampled]``."""
    if not total:
        return
    own: dict[int, int] = {}
    blocked: dict[int, int] = {}
    for s, d, k, sid, p in zip(th.p_start, th.p_dur, th.p_kind, th.p_stack, th.p_period,
                               strict=True):
        c = rng.clip(s, d)
        if not c or not sid:
            continue
        if k == RUNNABLE:
            own[sid] = own.get(sid, 0) + max(1, p) * c
        elif k < UNSAMPLED:
            blocked[sid] = blocked.get(sid, 0) + max(1, p) * c
    items = sorted((own or blocked).items())
    denom = sum(w for _, w in items)
    if not denom:
        out.add(StackKey((UNSAMPLED_FRAME,), th.tid, name, th.pid, OFF, "runnable"), total)
        return
    given = 0
    for i, (sid, w) in enumerate(items):
        part = total - given if i == len(items) - 1 else total * w // denom
        given += part
        out.add(StackKey(tl.stacks.frames_of(sid), th.tid, name, th.pid, OFF, "runnable"), part)


def whole_blocked(full: Profile) -> dict[int, list[tuple[StackKey, int]]]:
    """Each thread's blocked stacks over the whole window, ``[unsampled]`` aside (the
    snapshots' stacks of a thread whose switches had none: ``fold.perf.chunks``)."""
    by: dict[int, list[tuple[StackKey, int]]] = {}
    for k, w in full.stacks.items():
        if k.state == OFF and k.wait != "runnable" and k.frames != (UNSAMPLED_FRAME,) and w > 0:
            by.setdefault(k.tid, []).append((k, w))
    return by


def _blocked(out: Profile, tl: Timeline, th: ThreadLine, name: str, rng: Range,
             whole: list[tuple[StackKey, int]]) -> int:
    """Add the thread's blocked time in the range, split as the whole window's is
    (``wallflame.strata``): a span a snapshot's stop showed (a stack, period 0) keeps its
    own time, the rest goes stratum by stratum of the spans' durations over the stacks of
    that stratum's spans with one, and the strata with none over all the thread's sampled
    stacks in the range; with none, over its blocked stacks of the whole window (``whole``:
    the snapshots' where no switch of it was sampled), else ``[unsampled]``.  Returns how
    many sampled spans it had there (the waits a stop showed are the snapshots' evidence,
    counted as the run counts them)."""
    total = 0
    donors = strata.Donors()
    pooled: dict[tuple[int, int, int], int] = {}  # (stack, kind, lock set) -> period x ns
    n = 0
    for s, d, k, sid, p, ref in zip(th.p_start, th.p_dur, th.p_kind, th.p_stack, th.p_period,
                                    th.p_locks, strict=True):
        if k >= RUNNABLE:
            continue
        c = rng.clip(s, d)
        if not c:
            continue
        total += c
        donors.wait(d, c)
        if k < UNSAMPLED:
            if p:
                donors.sample(d, (sid, k, ref), p * c)
                pooled[(sid, k, ref)] = pooled.get((sid, k, ref), 0) + p * c
                n += 1
            else:
                donors.show(d, (sid, k, ref), c)
    if not total:
        return n
    parts, leftover, _ = strata.split(donors)
    if leftover and not pooled and whole:
        for stack, part in strata.shares(sorted(whole), leftover):
            out.add(stack, part)
    elif leftover and not pooled:
        out.add(StackKey((UNSAMPLED_FRAME,), th.tid, name, th.pid, OFF, FALLBACK), leftover)
    elif leftover:
        for key, part in strata.shares(sorted(pooled.items()), leftover):
            parts[key] = parts.get(key, 0) + part
    for (sid, k, ref), part in sorted(parts.items()):
        if part:
            stack = StackKey(tl.stacks.frames_of(sid), th.tid, name, th.pid, OFF,
                             WAIT_CLASSES[k])
            _add_locked(out, tl, stack, ref, part)
    return n


def _add_locked(out: Profile, tl: Timeline, key: StackKey, ref: int, weight: int) -> None:
    """``weight`` of a wait, split over the locks of its lock set by their observations (as
    ``wallflame.fold.locks.attribute`` splits the whole run's)."""
    observed = tl.lock_sets[ref - 1] if ref else []
    total = sum(n for _, n in observed)
    if not total:
        out.add(key, weight)
        return
    given = 0
    for i, (li, n) in enumerate(sorted(observed, key=lambda p: tl.locks[p[0]])):
        part = weight - given if i == len(observed) - 1 else weight * n // total
        given += part
        out.add(key._replace(lock=tl.locks[li]), part)


def _holders(out: Profile, full: Profile) -> None:
    """Each lock's confirmed holders, their shares of the whole run applied to the range."""
    full_wait = lockshare.wait_by_lock(full)
    range_wait = lockshare.wait_by_lock(out)
    out.holders = {}
    for h, w in full.holders.items():
        waited = full_wait.get(h.lock, 0)
        if waited and range_wait.get(h.lock):
            out.add_holder(HolderKey(h.lock, h.tid, h.thread, h.frames),
                           w * range_wait[h.lock] // waited)


def timeline_of(profile: Profile) -> tuple[Timeline, Range]:
    """The timeline of the run directory ``profile`` was read from, and the range it was
    restricted to (the window when none); an ``InputError`` for any other input."""
    from wallflame import timeline

    run_dir = profile.meta.extra.get("run_dir")
    if not isinstance(run_dir, str):
        raise InputError("this output needs a run directory's timeline (timeline.json.gz)",
                         "give a directory written by wallflame collect")
    tl = timeline.load(run_dir)
    r = profile.meta.extra.get("range")
    if isinstance(r, dict):
        return tl, window_range(tl, float(r["from_s"]), float(r["to_s"]))
    return tl, Range(tl.t0, tl.t1)


__all__ = ["Range", "restrict", "timeline_of", "whole_blocked", "window_range"]
