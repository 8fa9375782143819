"""The references the timeline's native paths are held to, for the tests only: the loop of
its spans (``_speedups.span_rows``, called by ``timebuild.add_spans``) in Python, and its text
written by the JSON module alone (``_speedups.ints_json``, called by ``timeline.json_text``)."""

from __future__ import annotations

import json

from wallflame import stops
from wallflame.classify import Rules, classify
from wallflame.fold import locks
from wallflame.locks import lockshare
from wallflame.profile import WAIT_CLASSES
from wallflame.timebuild import _intern, _known
from wallflame.timeline import LOG_RUNNABLE, RUNNABLE, STOPPED, UNSAMPLED, IntervalLog, Timeline


def add_spans(tl: Timeline, log: IntervalLog, rules: Rules,
              evidence: locks.LockEvidence | None, tracer_stops: bool) -> None:
    """``timebuild.add_spans``."""
    classes: dict[int, tuple[int, int]] = {}  # sample index -> (kind, stack id)
    sets: dict[tuple[int, int], int] = {}     # (tid, sample index) -> lock set
    for i in range(len(log)):
        tid, si = log.tid[i], log.sample[i]
        th = tl.thread(tid)
        th.p_start.append(log.start[i])
        th.p_dur.append(log.dur[i])
        th.p_period.append(log.period[i])
        if log.kind[i] == LOG_RUNNABLE:
            sid = classes[si][1] if si in classes else _intern(tl, log, si)
            stopped = tracer_stops and si >= 0 and stops.is_tracer_stop(log.samples[si][0])
            kind = STOPPED if stopped else RUNNABLE
        elif si < 0:
            kind, sid = UNSAMPLED, 0
        else:
            got = classes.get(si)
            if got is None:
                frames, kstate = log.samples[si]
                stopped = tracer_stops and stops.is_tracer_stop(frames)
                k = STOPPED if stopped else WAIT_CLASSES.index(
                    _known(classify(frames, kstate, rules)))
                got = classes[si] = (k, tl.stacks.intern(frames))
            kind, sid = got
        ref = 0
        if kind < UNSAMPLED and WAIT_CLASSES[kind] in lockshare.LOCK_WAITS and evidence is not None:
            ref = sets.get((tid, si), -1)
            if ref < 0:
                ref = sets[(tid, si)] = tl.lock_set(
                    locks.observed_locks(evidence, tid, log.samples[si][0]))
        th.p_kind.append(kind)
        th.p_stack.append(sid)
        th.p_locks.append(ref)


def json_text(tl: Timeline) -> str:
    """``timeline.json_text``."""
    return json.dumps(tl.to_json(), separators=(",", ":"), ensure_ascii=False)
