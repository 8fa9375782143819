"""A run's timeline as a Perfetto trace (``wallflame report RUN --format perfetto``).

ui.perfetto.dev opens the file: one process track, one track per thread, and on each thread's
track

* a slice for every span off a CPU, named by its state (``mutex 0x... <lock>``, ``condvar``,
  ``runnable``, ``stopped (wallflame)``, ``blocked (stack not sampled)``), with the stack at
  which the thread blocked or was preempted (as the slice's callstack, and as text in its
  ``stack`` argument) and the lock in its arguments;
* the on-CPU samples as perf samples (``PerfSample``: the callstack, the period in
  ``timebase_count``), which the UI shows as a flame graph of any selected range;
* when the wake-ups were recorded, each wake-up of a thread by another as a flow (an arrow
  from the waker's ``wakes NAME`` to the woken thread's ``woken by NAME``).

Only the window (or the range given with ``--from``/``--to``) is written: spans are clipped
to it, samples outside it are left out, as ``summary.json`` counts them.  Timestamps are the
timeline's (``CLOCK_MONOTONIC`` for a collect), in the trace's default clock.

The few messages needed are written here by hand (protobuf's wire format: varints and
length-delimited fields), with the field numbers of Perfetto's ``perfetto_trace.proto``; the
tests decode the file with the ``perfetto`` package's own generated classes.  Strings are the
target's bytes as UTF-8: Perfetto's UI shows them as text.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from typing import IO

from wallflame.critpath import waker_of
from wallflame.output import require_binary, write_bytes
from wallflame.profile import WAIT_CLASSES, Profile
from wallflame.report.timerange import Range, timeline_of
from wallflame.timeline import KINDS, RUNNABLE, STOPPED, UNSAMPLED, ThreadLine, Timeline

# TracePacket
_P_TIMESTAMP, _P_SEQ_ID, _P_TRACK_EVENT, _P_INTERNED, _P_SEQ_FLAGS = 8, 10, 11, 12, 13
_P_TRACK_DESCRIPTOR, _P_PERF_SAMPLE = 60, 66
_SEQ_CLEARED, _SEQ_NEEDS = 1, 2
# TrackDescriptor, ProcessDescriptor, ThreadDescriptor
_TD_UUID, _TD_NAME, _TD_PROCESS, _TD_THREAD, _TD_PARENT = 1, 2, 3, 4, 5
_PD_PID, _PD_NAME = 1, 6
_THD_PID, _THD_TID, _THD_NAME = 1, 2, 5
# TrackEvent, DebugAnnotation
_TE_ANNOTATIONS, _TE_TYPE, _TE_TRACK, _TE_CATEGORIES, _TE_NAME = 4, 9, 11, 22, 23
_TE_CALLSTACK_IID = 56
_TE_FLOW_IDS, _TE_TERMINATING_FLOW_IDS = 47, 48
_SLICE_BEGIN, _SLICE_END, _INSTANT = 1, 2, 3
_DA_NAME_IID, _DA_STRING, _DA_NAME, _DA_STRING_IID = 1, 6, 10, 17
# InternedData, InternedString, Frame, Callstack, Mapping
_ID_FUNCTIONS, _ID_FRAMES, _ID_CALLSTACKS, _ID_PATHS, _ID_MAPPINGS = 5, 6, 7, 17, 19
_ID_ANNOTATION_NAMES, _ID_ANNOTATION_STRINGS = 3, 29
_IS_IID, _IS_STR = 1, 2
_FR_IID, _FR_NAME, _FR_MAPPING, _FR_PC = 1, 2, 3, 4
_CS_IID, _CS_FRAMES = 1, 2
_MP_IID, _MP_PATHS = 1, 7
# PerfSample
_PS_CPU, _PS_PID, _PS_TID, _PS_CALLSTACK, _PS_COUNT = 1, 2, 3, 4, 6

SEQUENCE = 1
CATEGORY = "wallflame"
#: The frame of a sample or span with no stack (a callstack needs at least one frame).
NO_FRAMES = "[no stack]"


def _varint(n: int) -> bytes:
    if n < 0:
        n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _uint(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _bytes(field: int, data: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _str(field: int, text: str) -> bytes:
    return _bytes(field, text.encode("utf-8", "replace"))


def _packet(*parts: bytes) -> bytes:
    """One ``TracePacket`` as the ``packet`` field (1) of ``Trace``."""
    return _bytes(1, b"".join([*parts, _uint(_P_SEQ_ID, SEQUENCE)]))


def _uuid(pid: int, tid: int = -1) -> int:
    """A track's id: the process's, or one of its threads'."""
    return (pid << 32) + (tid + 1 if tid >= 0 else 0) + 1


def span_name(tl: Timeline, kind: int, lock_ref: int) -> str:
    """A span's slice name: its wait class and lock, or its state."""
    if kind < UNSAMPLED:
        lock = tl.lock_of(lock_ref)
        return f"{WAIT_CLASSES[kind]} {lock}" if lock else WAIT_CLASSES[kind]
    return {UNSAMPLED: "blocked (stack not sampled)", RUNNABLE: "runnable",
            STOPPED: "stopped (wallflame)"}.get(kind, KINDS[kind])


def trace_bytes(tl: Timeline, rng: Range | None = None, process: str = "") -> bytes:
    """The whole trace (see the module docstring); ``rng``: only that range (default: the
    window)."""
    rng = rng or Range(tl.t0, tl.t1)
    return b"".join(_packets(tl, rng, process))


def _packets(tl: Timeline, rng: Range, process: str) -> Iterator[bytes]:
    threads = [th for th in tl.sorted_threads() if _has_events(th, rng)]
    yield _interned(tl, threads, rng)
    pids = sorted({th.pid for th in threads})
    for pid in pids:
        desc = _uint(_PD_PID, pid) + _str(_PD_NAME, process or f"pid {pid}")
        yield _packet(_bytes(_P_TRACK_DESCRIPTOR, _uint(_TD_UUID, _uuid(pid))
                             + _bytes(_TD_PROCESS, desc)))
    for th in threads:
        desc = _uint(_THD_PID, th.pid) + _uint(_THD_TID, th.tid) + _str(_THD_NAME, th.name)
        yield _packet(_bytes(_P_TRACK_DESCRIPTOR, _uint(_TD_UUID, _uuid(th.pid, th.tid))
                             + _uint(_TD_PARENT, _uuid(th.pid)) + _bytes(_TD_THREAD, desc)))
    for th in threads:
        yield from _slices(tl, th, rng)
        yield from _samples(th, rng)
    yield from _wakes(tl, {th.tid: th for th in threads}, rng)


def _has_events(th: ThreadLine, rng: Range) -> bool:
    return any(rng.start <= t < rng.end for t in th.s_time) or any(
        rng.clip(s, d) for s, d in zip(th.p_start, th.p_dur, strict=True))


def _interned(tl: Timeline, threads: list[ThreadLine], rng: Range) -> bytes:
    """The first packet: every frame name, one mapping, the callstacks of the samples and
    spans written (iid: stack id + 1), and each span stack's text for its slice's
    arguments, for the packets after it to refer to."""
    sampled = {sid for th in threads for t, sid in zip(th.s_time, th.s_stack, strict=True)
               if rng.start <= t < rng.end}
    spans = {sid for th in threads for s, d, sid in zip(th.p_start, th.p_dur, th.p_stack,
                                                        strict=True) if rng.clip(s, d)}
    names: dict[str, int] = {}
    data = [_bytes(_ID_PATHS, _uint(_IS_IID, 1) + _str(_IS_STR, "[wallflame]")),
            _bytes(_ID_MAPPINGS, _uint(_MP_IID, 1) + _uint(_MP_PATHS, 1))]
    stacks = []
    for sid in sorted(sampled | spans):
        frames = tl.stacks.frames_of(sid) or (NO_FRAMES,)
        ids = [names.setdefault(f, len(names) + 1) for f in frames]
        stacks.append(_uint(_CS_IID, sid + 1) + b"".join(_uint(_CS_FRAMES, i) for i in ids))
        if sid in spans:
            data.append(_bytes(_ID_ANNOTATION_STRINGS, _uint(_IS_IID, sid + 1)
                               + _str(_IS_STR, "\n".join(frames))))
    data.append(_bytes(_ID_ANNOTATION_NAMES, _uint(_IS_IID, 1) + _str(_IS_STR, "stack")))
    for name, i in names.items():
        data.append(_bytes(_ID_FUNCTIONS, _uint(_IS_IID, i) + _str(_IS_STR, name)))
        data.append(_bytes(_ID_FRAMES, _uint(_FR_IID, i) + _uint(_FR_NAME, i)
                           + _uint(_FR_MAPPING, 1) + _uint(_FR_PC, i)))
    data += [_bytes(_ID_CALLSTACKS, s) for s in stacks]
    return _packet(_uint(_P_SEQ_FLAGS, _SEQ_CLEARED), _bytes(_P_INTERNED, b"".join(data)))


def _slices(tl: Timeline, th: ThreadLine, rng: Range) -> Iterator[bytes]:
    track = _uint(_TE_TRACK, _uuid(th.pid, th.tid))
    for start, c, k, sid, ref in rng.spans(th):
        args = _bytes(_TE_ANNOTATIONS, _uint(_DA_NAME_IID, 1) + _uint(_DA_STRING_IID, sid + 1))
        lock = tl.lock_of(ref)
        if lock:
            args += _bytes(_TE_ANNOTATIONS, _str(_DA_NAME, "lock") + _str(_DA_STRING, lock))
        begin = (_uint(_TE_TYPE, _SLICE_BEGIN) + track + _str(_TE_CATEGORIES, CATEGORY)
                 + _str(_TE_NAME, span_name(tl, k, ref)) + args
                 + _uint(_TE_CALLSTACK_IID, sid + 1))
        yield _packet(_uint(_P_TIMESTAMP, start), _uint(_P_SEQ_FLAGS, _SEQ_NEEDS),
                      _bytes(_P_TRACK_EVENT, begin))
        yield _packet(_uint(_P_TIMESTAMP, start + c),
                      _bytes(_P_TRACK_EVENT, _uint(_TE_TYPE, _SLICE_END) + track))


def _fixed64(field: int, value: int) -> bytes:
    return _varint(field << 3 | 1) + value.to_bytes(8, "little")


def _instant(t: int, th: ThreadLine, name: str, flow: bytes) -> bytes:
    event = (_uint(_TE_TYPE, _INSTANT) + _uint(_TE_TRACK, _uuid(th.pid, th.tid))
             + _str(_TE_CATEGORIES, CATEGORY) + _str(_TE_NAME, name) + flow)
    return _packet(_uint(_P_TIMESTAMP, t), _uint(_P_SEQ_FLAGS, _SEQ_NEEDS),
                   _bytes(_P_TRACK_EVENT, event))


def _wakes(tl: Timeline, threads: dict[int, ThreadLine], rng: Range) -> Iterator[bytes]:
    """Each wake-up of a thread by another thread of the trace, as a flow: an instant
    ``wakes NAME`` on the waker's track at its waking, to an instant ``woken by NAME`` on the
    woken thread's track where its blocked span ends (``wallflame.critpath.waker_of``)."""
    flow = 0
    for th in threads.values():
        for start, dur, kind in zip(th.p_start, th.p_dur, th.p_kind, strict=True):
            end = start + dur
            if kind > UNSAMPLED or not rng.start < end < rng.end:
                continue
            w = waker_of(th, start, end)
            waker = threads.get(w) if w else None
            if waker is None or waker is th:
                continue
            flow += 1
            at = th.w_time[bisect_right(th.w_time, end) - 1]
            yield _instant(at, waker, f"wakes {th.name}", _fixed64(_TE_FLOW_IDS, flow))
            yield _instant(end, th, f"woken by {waker.name}",
                           _fixed64(_TE_TERMINATING_FLOW_IDS, flow))


def _samples(th: ThreadLine, rng: Range) -> Iterator[bytes]:
    for t, w, sid in zip(th.s_time, th.s_weight, th.s_stack, strict=True):
        if rng.start <= t < rng.end:
            sample = (_uint(_PS_CPU, 0) + _uint(_PS_PID, th.pid) + _uint(_PS_TID, th.tid)
                      + _uint(_PS_CALLSTACK, sid + 1) + _uint(_PS_COUNT, w))
            yield _packet(_uint(_P_TIMESTAMP, t), _uint(_P_SEQ_FLAGS, _SEQ_NEEDS),
                          _bytes(_P_PERF_SAMPLE, sample))


def write(profile: Profile, out: IO[str], title: str | None) -> None:
    """The ``perfetto`` format's writer (``report/writers.py``): the run's timeline as a trace
    (its process track named by ``title``, else by the target)."""
    require_binary(out, "a Perfetto trace", "pass -o FILE.pftrace")
    tl, rng = timeline_of(profile)
    write_bytes(out, trace_bytes(tl, rng, title or _process_name(profile)))


def _process_name(profile: Profile) -> str:
    """The target's name for a trace's process track (its command, else its pid)."""
    target = profile.meta.extra.get("target")
    if isinstance(target, dict):
        for key in ("comm", "name", "exe"):
            if isinstance(target.get(key), str) and target[key]:
                return str(target[key])
    return ""


__all__ = ["span_name", "trace_bytes", "write"]
