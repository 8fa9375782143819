"""The timeline's spans from the interval log by the native loop (``_speedups.span_rows``)
against the Python loop of ``unit.hub.reference_timeline``: the same rows in every thread,
the same stacks interned in the same order, the same lock sets, whatever the log holds
(blocked, runnable and leading rows, sampled or not, the tracer's own stops, lock waits with
and without lock evidence)."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from unit.hub.reference_timeline import add_spans
from wallflame import timebuild
from wallflame.fold import FoldOptions
from wallflame.fold.locks import LockEvidence
from wallflame.timeline import IntervalLog, Timeline

STACKS = [("main", "take", "__lll_lock_wait"), ("main", "idle", "pthread_cond_wait"),
          ("main", "f", "ptrace_stop"), ("main", "io", "read"), ("main", "g"),
          ("main", "rd", "pthread_rwlock_rdlock")]


def spans(log: IntervalLog, evidence: LockEvidence | None, stops: bool,
          add: Callable[..., None] = timebuild.add_spans) -> Timeline:
    tl = Timeline(t0=0, t1=10**9, off_source="sched")
    add(tl, log, FoldOptions().get_rules(), evidence, stops)
    return tl


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 3]), st.integers(0, 10**9),
                          st.integers(1, 10**6), st.sampled_from([0, 1, 2]),
                          st.integers(-1, 11), st.integers(0, 9),
                          st.sampled_from(["S", "D", "R"])), max_size=60),
       st.booleans(), st.booleans())
def test_native_spans_as_python_spans(rows: list[tuple[int, int, int, int, int, int, str]],
                                      with_evidence: bool, tracer_stops: bool) -> None:
    log = IntervalLog()
    for tid, start, dur, kind, si, period, state in rows:
        sample = None if si < 0 or kind == 2 else (STACKS[si % len(STACKS)], state, period)
        log.add(tid, start, dur, kind, sample)
    evidence = None
    if with_evidence:
        evidence = LockEvidence()
        evidence.observe({"tid": 1, "lock": "0x10", "sites": ["__lll_lock_wait", "take"]},
                         False)
        evidence.observe({"tid": 2, "lock": "0x20", "sites": ["pthread_rwlock_rdlock"]},
                         False)
    native = spans(log, evidence, tracer_stops)
    python = spans(log, evidence, tracer_stops, add_spans)
    assert native.threads == python.threads
    assert (native.stacks.frames, native.stacks.nodes) == (python.stacks.frames,
                                                          python.stacks.nodes)
    assert (native.locks, native.lock_sets) == (python.locks, python.lock_sets)
