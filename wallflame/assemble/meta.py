"""What ``meta.json`` says about a run besides its evidence: the capture's settings, losses and
warnings in the profile's ``Meta`` (``annotate``), and what assembling it cost
(``postprocess_meta``)."""

from __future__ import annotations

import resource
import time
from typing import Any

from wallflame.profile import Profile
from wallflame.rundir import Capture


def _stack_copy_bytes(command: object) -> int:
    """The user stack perf copied per DWARF stack, from its recorded command
    (``--call-graph dwarf,SIZE``; 8 KiB, perf's own default, when it does not say)."""
    if isinstance(command, list):
        for arg in command:
            kind, _, size = str(arg).partition(",")
            if kind == "dwarf" and size.isdigit():
                return int(size)
    return 8192


def annotate(profile: Profile, cap: Capture, warnings: list[str], bad_chunks: int) -> None:
    """What the capture says about the run, in ``profile.meta``: the window, the rates, the
    snapshots' pause, the losses, the frames the unwinding misses, the warnings."""
    meta = profile.meta
    if cap.window.window_ns:
        meta.window_ns = cap.window.window_ns
    opts = cap.options
    meta.rates["perf_hz"] = 0.0 if cap.reconstructed else float(opts.freq_hz)
    pmp = cap.pmp
    if pmp:
        meta.rates["pmp_hz"] = float(pmp.final_rate_hz or pmp.rate_hz)
        pause = pmp.pause
        if isinstance(pause, dict):  # which backend, and what its pause figure measures
            pause = {**pause, "backend": pmp.backend,
                     **({"measure": pmp.pause_measure} if pmp.pause_measure else {})}
        meta.extra["pause"] = pause
        meta.extra["pmp_consistent"] = pmp.consistent
        meta.extra["attach_ms"] = pmp.attach_ms
        if pmp.failed:
            meta.lose("failed snapshots", 0, pmp.failed, "; ".join(pmp.errors[:2]))
    perf_info = cap.perf
    for stem in ("perf", "sched", "wake"):
        rec = cap.perf_recording(stem)
        if rec.get("lost_chunks"):
            meta.lose(f"{stem} record lost chunks", 0, int(rec["lost_chunks"]),
                      "; ".join(rec.get("lost_lines", [])[:2]))
    if bad_chunks:
        meta.lose("unreadable perf chunks", 0, bad_chunks)
    missing: dict[str, str] = {}
    known = not cap.reconstructed  # a made-up description knows no unwinding
    if known and opts.call_graph == "fp":
        missing["oncpu"] = ("frame-pointer unwinding: a sample inside code built without "
                            "frame pointers (glibc, most distribution libraries) loses its "
                            "caller; --call-graph dwarf keeps it")
    if known and perf_info.get("sched") and opts.sched_call_graph == "fp":
        missing["offcpu"] = ("scheduler stacks unwound with frame pointers lose the caller of "
                             "a blocking glibc function (glibc has no frame pointers); "
                             "--sched-call-graph dwarf keeps it")
    if known and perf_info.get("sched") and opts.sched_call_graph == "dwarf":
        kib = _stack_copy_bytes(cap.commands.get("sched_record")) // 1024
        missing.setdefault("offcpu", f"DWARF unwinding copies {kib} KiB of stack per "
                           "scheduler stack: deeper stacks are cut at that depth")
    meta.extra["missing_frames"] = missing
    ended = cap.ended_by
    if ended == "target exited":
        meta.lose("target exited during collection", 0)
    for w in [*cap.warnings, *cap.problems, *warnings]:
        meta.warn(w)
    meta.extra["collect"] = {"target": cap.target, "ended_by": ended,
                             "off_cpu": opts.off_cpu}


class Clock:
    """CPU (this process and its children) and wall time since it was made."""

    def __init__(self) -> None:
        self.wall = time.monotonic()
        self.cpu = _cpu()

    def elapsed(self) -> tuple[float, float]:
        return time.monotonic() - self.wall, _cpu() - self.cpu


def _cpu() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def postprocess_meta(cap: Capture, clock: Clock, streamed: bool) -> dict[str, Any]:
    """``meta.json``'s ``postprocess``: the budget plan, what the streaming cost while and
    after recording, what ``finish`` cost, and the data the run wrote."""
    wall, cpu = clock.elapsed()
    out: dict[str, Any] = dict(cap.postprocess)
    out["finish"] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "streamed": streamed}
    return out


__all__ = ["Clock", "annotate", "postprocess_meta"]
