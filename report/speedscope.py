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
    return {"$schema": SCHEMA, "shared": {"frames": frames}, "profiles": profiles,
            "name": visible(name), "activeProfileIndex": 0,
            "exporter": f"wallflame {__version__}"}


def write_speedscope(profile: Profile, out: IO[str], name: str = "wallflame") -> None:
    json.dump(speedscope(profile, name), out, separators=(",", ":"))
    out.write("\n")


def write(profile: Profile, out: IO[str], title: str | None) -> None:
    """The ``speedscope`` format's writer (``report/writers.py``)."""
    write_speedscope(profile, out, title or "wallflame")
