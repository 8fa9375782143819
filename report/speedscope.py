"""speedscope's file format: one sampled profile per thread (its thread switcher), frames
shared, weights in nanoseconds (``none`` for folded input of unknown unit).  Off-CPU stacks
end in their wait pseudo-frame (``[mutex 0x... <lock>]``), as in the HTML report."""

from __future__ import annotations

import json
from typing import IO, Any

from wallflame import __version__
from wallflame.profile import OFF, UNIT_NS, Profile
from wallflame.report.tree import thread_label, visible, wait_label

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def speedscope(profile: Profile, name: str = "wallflame") -> dict[str, Any]:
    frames: list[dict[str, str]] = []
    index: dict[str, int] = {}

    def frame(raw: str) -> int:
        i = index.get(raw)
        if i is None:
            i = index[raw] = len(frames)
            frames.append({"name": visible(raw)})
        return i

    threads: dict[tuple[int, str], tuple[list[list[int]], list[int]]] = {}
    for key, w in sorted(profile.stacks.items()):
        if w <= 0:
            continue
        thread = profile.meta.threads.get(key.tid, key.thread) if key.tid else key.thread
        samples, weights = threads.setdefault((key.tid, thread), ([], []))
        stack = [frame(f) for f in key.frames]
        if key.state == OFF:
            stack.append(frame(wait_label(key)))
        samples.append(stack)
        weights.append(w)
    unit = "nanoseconds" if profile.meta.unit == UNIT_NS else "none"
    profiles = [{"type": "sampled", "name": visible(thread_label(tid, thread)), "unit": unit,
                 "startValue": 0, "endValue": sum(weights), "samples": samples,
                 "weights": weights}
                for (tid, thread), (samples, weights) in sorted(
                    threads.items(), key=lambda kv: (-sum(kv[1][1]), kv[0]))]
    profiles += _evented(profile, frame)
    return {"$schema": SCHEMA, "shared": {"frames": frames}, "profiles": profiles,
            "name": visible(name), "activeProfileIndex": 0,
            "exporter": f"wallflame {__version__}"}


def _evented(profile: Profile, frame: Any) -> list[dict[str, Any]]:
    """For a run directory (or a range of it): one time-ordered ``evented`` profile per
    thread from its timeline, each on-CPU sample open for its period and each span off a CPU
    for its length, off-CPU stacks ending in their wait pseudo-frame (runnable and stopped
    ones in ``[runnable]``, ``[stopped]``).  An interval is cut where the next one starts, so
    the events nest."""
    from wallflame.errors import InputError
    from wallflame.report.timerange import timeline_of

    if not isinstance(profile.meta.extra.get("run_dir"), str):
        return []
    try:
        tl, rng = timeline_of(profile)
    except InputError:
        return []
    out = []
    names = profile.meta.threads
    for th in tl.sorted_threads():
        spans = _intervals(tl, th, rng, names.get(th.tid, th.name))
        if not spans:
            continue
        events: list[dict[str, Any]] = []
        opened: list[int] = []  # the frames open now, root first
        until = 0               # when they close unless the next interval continues them
        for i, (start, end, stack) in enumerate(spans):
            if i + 1 < len(spans):
                end = min(end, spans[i + 1][0])
            if end <= start:
                continue
            at0, at1 = start - rng.start, end - rng.start
            ids = [frame(f) for f in stack]
            keep = 0
            if at0 == until:  # adjacent: close and open only where the stacks differ
                while keep < min(len(ids), len(opened)) and ids[keep] == opened[keep]:
                    keep += 1
            events += [{"type": "C", "frame": f, "at": until} for f in reversed(opened[keep:])]
            events += [{"type": "O", "frame": f, "at": at0} for f in ids[keep:]]
            opened, until = ids, at1
        events += [{"type": "C", "frame": f, "at": until} for f in reversed(opened)]
        out.append({"type": "evented",
                    "name": visible(thread_label(th.tid, names.get(th.tid, th.name))
                                    + " over time"),
                    "unit": "nanoseconds", "startValue": 0, "endValue": rng.end - rng.start,
                    "events": events})
    return out


def _intervals(tl: Any, th: Any, rng: Any, name: str) -> list[tuple[int, int, tuple[str, ...]]]:
    from wallflame.profile import StackKey
    from wallflame.timeline import KINDS, UNSAMPLED

    spans = []
    for t, w, sid in zip(th.s_time, th.s_weight, th.s_stack, strict=True):
        if rng.start <= t < rng.end:
            spans.append((t, min(t + w, rng.end), tl.stacks.frames_of(sid)))
    for s, d, k, sid, ref in zip(th.p_start, th.p_dur, th.p_kind, th.p_stack, th.p_locks,
                                 strict=True):
        if not rng.clip(s, d):
            continue
        frames = tl.stacks.frames_of(sid)
        if k < UNSAMPLED:
            key = StackKey(frames, th.tid, name, th.pid, OFF, KINDS[k], tl.lock_of(ref))
            leaf = wait_label(key)
        else:
            leaf = f"[{KINDS[k]}]"
        spans.append((max(s, rng.start), min(s + d, rng.end), (*frames, leaf)))
    spans.sort(key=lambda x: (x[0], x[1]))
    return spans


def write_speedscope(profile: Profile, out: IO[str], name: str = "wallflame") -> None:
    json.dump(speedscope(profile, name), out, separators=(",", ":"))
    out.write("\n")


def write(profile: Profile, out: IO[str], title: str | None) -> None:
    """The ``speedscope`` format's writer (``report/writers.py``)."""
    write_speedscope(profile, out, title or "wallflame")
