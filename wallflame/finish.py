"""A finished raw capture -> the run directory's folded files, meta.json and summary.json.

Reads only ``RUN/raw/`` (with ``raw/capture.json`` written by ``collect``), so a run can be
finished again later (``finish(run_dir)``) with newer folders.

Which evidence gives off-CPU time:

* ``pmp``: the snapshots (statistical: each blocked thread's snapshot weighs the time since its
  previous one), with lock identity and holders.
* ``sched`` and ``both``: the scheduler's switch-out/switch-in intervals (exact).  With
  ``both`` the snapshots' /proc records still name the locks and their owners: each thread's
  exact mutex wait is split over the (lock, owner) pairs its records saw, in the proportions
  they saw them, and the holders table is scaled the same way (``split_locks``).  The merged
  view never counts a blocked interval twice.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wallflame import rundir
from wallflame.errors import InputError, WallflameError
from wallflame.fold import FoldOptions, fold_file
from wallflame.folded import write_folded
from wallflame.names import normalize
from wallflame.output import open_output
from wallflame.profile import OFF, HolderKey, Profile
from wallflame.textio import iter_lines

CAPTURE = "capture.json"
SNAPSHOT_LOG = "snapshots.log"
OWNERS_LOG = "owners.log"


def _fold(path: Path, fmt: str, profile_meta_warn: list[str]) -> Profile | None:
    try:
        return fold_file(str(path), FoldOptions(), fmt)
    except WallflameError as e:
        profile_meta_warn.append(f"{path.name}: could not be folded: {e.format_message()}")
        return None


def perf_script(raw: Path, stem: str, warnings: list[str]) -> tuple[Path | None, int]:
    """``perf script`` of every chunk of ``raw/STEM.data*``, in order, into
    ``raw/STEM.script``; unreadable chunks (a perf killed mid-write) are counted."""
    from wallflame.collect import perf

    chunks = perf.data_chunks(raw, stem)
    if not chunks:
        return None, 0
    sched = stem == "sched"
    out = raw / f"{stem}.script"
    bad = 0
    with open(out, "wb") as f, open(raw / f"{stem}-script.stderr", "wb") as err:
        for chunk, code in perf.write_script(chunks, f, sched, err):
            if code != 0:
                bad += 1
                warnings.append(f"perf script could not read {chunk.name} (exit {code})")
    return out, bad


@dataclass
class LockSamples:
    """What the snapshots' /proc records (and ``raw/owners.log``) saw of mutex waits.

    pairs:   waiter tid -> (lock, owner) -> times seen.
    holders: (lock, owner, owner's stack in the same dump) -> times seen.
    sites:   lock -> call-site signatures of its waiters: the two innermost functions on
             the waiter's stack (the collector's stack scan above the futex call, ``sites``
             in the records).  A scheduler stack is attributed only to the locks whose
             signature it contains as caller and callee (``_matches``), so waits on two
             mutexes (a condition variable's relock, say) are not mixed.  Only DWARF
             scheduler stacks keep those frames; with frame pointers the split falls back
             to the thread's proportions.
    """

    pairs: dict[int, dict[tuple[str, int], int]] = field(default_factory=dict)
    holders: dict[HolderKey, int] = field(default_factory=dict)
    sites: dict[str, set[tuple[str, ...]]] = field(default_factory=dict)

    def add(self, rec: dict[str, Any]) -> tuple[int, str, int] | None:
        """Count one waiter record; returns (tid, lock, owner) when it is one."""
        tid, lock, owner = rec.get("tid"), rec.get("lock"), rec.get("owner")
        if not (isinstance(owner, int) and isinstance(tid, int) and isinstance(lock, str)):
            return None
        per = self.pairs.setdefault(tid, {})
        per[(lock, owner)] = per.get((lock, owner), 0) + 1
        sites = rec.get("sites")
        if isinstance(sites, list) and sites:
            sig = tuple(normalize(str(x)) for x in sites[:2])
            self.sites.setdefault(lock, set()).add(sig)
        return tid, lock, owner


def lock_samples(log: Path) -> LockSamples:
    """Read a snapshot log's ``# wallflame-proc`` records and dumps (see ``LockSamples``).

    The /proc records of one snapshot are read within microseconds of each other and without
    stopping anything, so a waiter and its owner agree even when the stack dump (eu-stack:
    one thread at a time) does not; the owner's stack is the one from the same dump."""
    from wallflame.fold import eustack, gdb

    out = LockSamples()
    stacks: dict[int, list[str]] = {}
    procs: list[dict[str, Any]] = []
    current: list[str] | None = None
    kind = ""
    for _, line in iter_lines(str(log)):
        if line.startswith("# wallflame-proc "):
            try:
                rec = json.loads(line[len("# wallflame-proc "):])
            except ValueError:
                continue
            if isinstance(rec, dict):
                procs.append(rec)
        elif line.startswith("TS "):
            _close_dump(procs, stacks, out)
            procs, stacks, current = [], {}, None
        elif line.startswith("#") and line[1:2].isdigit() and current is not None:
            parse = gdb.parse_frame if kind == "gdb" else eustack.parse_frame
            current.append(parse(line).name)
        else:
            head = eustack.parse_header(line) or gdb.parse_header(line)
            if head is not None:
                current = stacks.setdefault(head[0], [])
                kind = head[2]
    return out


def _close_dump(procs: list[dict[str, Any]], stacks: dict[int, list[str]],
                out: LockSamples) -> None:
    comm = {r.get("tid"): str(r.get("comm", "")) for r in procs}
    for r in procs:
        got = out.add(r)
        if got is None:
            continue
        _, lock, owner = got
        frames = tuple(reversed(stacks.get(owner, [])))
        key = HolderKey(lock, owner, comm.get(owner, ""), frames)
        out.holders[key] = out.holders.get(key, 0) + 1


def owner_samples(log: Path, out: LockSamples) -> None:
    """Add the /proc-only waiter -> owner samples of ``raw/owners.log``."""
    for _, line in iter_lines(str(log)):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.add(rec)


def _matches(leaf_first: list[str], sig: tuple[str, ...]) -> bool:
    """``sig`` (innermost caller first) is where this stack called: its first function is in
    the stack and the next frame towards the root is its second."""
    try:
        i = leaf_first.index(sig[0])
    except ValueError:
        return False
    return len(sig) < 2 or (i + 1 < len(leaf_first) and leaf_first[i + 1] == sig[1])


def _candidates(shares: dict[tuple[str, int], int], frames: Sequence[str], tid: int,
                sites: dict[str, set[tuple[str, ...]]]) -> list[tuple[tuple[str, int], int]]:
    """The (lock, owner) pairs a scheduler mutex stack may be attributed to (see
    ``LockSamples.sites``); without signatures, all of the thread's pairs."""
    items = sorted((p, n) for p, n in shares.items() if p[1] != tid)
    if not sites:
        return items
    leaf_first = list(reversed(frames))
    match = {lk for lk, sigs in sites.items() if any(_matches(leaf_first, g) for g in sigs)}
    if match:
        return [(p, n) for p, n in items if p[0] in match]
    # No signature matches: only locks never seen with a signature may be this wait.
    return [(p, n) for p, n in items if not sites.get(p[0])]


def split_locks(sched_off: Profile, samples: LockSamples) -> Profile:
    """Exact scheduler off-CPU time, with each thread's mutex waits attributed to locks and
    holders in the proportions its /proc records saw them (a thread never seen on a named
    mutex gets the process-wide split), matched by call site; the holders table is scaled
    to the exact times."""
    seen, holders = samples.pairs, samples.holders
    overall: defaultdict[tuple[str, int], int] = defaultdict(int)
    for shares_of in seen.values():
        for pair, n in shares_of.items():
            overall[pair] += n
    out = Profile(meta=sched_off.meta)
    exact_by_lock: defaultdict[str, int] = defaultdict(int)
    for k, w in sched_off.stacks.items():
        shares = (seen.get(k.tid) or overall) if k.state == OFF and k.wait == "mutex" \
            and not k.lock else None
        items = _candidates(shares or {}, k.frames, k.tid, samples.sites)
        total = sum(n for _, n in items)
        if not total:
            out.add(k, w)
            continue
        given = 0
        for i, ((lock, holder), n) in enumerate(items):
            part = w - given if i == len(items) - 1 else w * n // total
            given += part
            out.add(k._replace(lock=lock, holder=holder), part)
            exact_by_lock[lock] += part
    # Holders: each lock's exact wait goes to its owners in the proportions the /proc samples
    # saw them, and each owner's share to the stacks the dumps caught it with (none: no stack).
    by_lock: defaultdict[str, int] = defaultdict(int)
    for (lock, _), n in overall.items():
        by_lock[lock] += n
    stacks: defaultdict[tuple[str, int], dict[HolderKey, int]] = defaultdict(dict)
    for h, n in holders.items():
        stacks[(h.lock, h.tid)][h] = n
    for (lock, owner), n in sorted(overall.items()):
        share = exact_by_lock.get(lock, 0) * n // by_lock[lock]
        known = stacks.get((lock, owner)) or {
            HolderKey(lock, owner, sched_off.meta.threads.get(owner, ""), ()): 1}
        denom = sum(known.values())
        for h, m in sorted(known.items()):
            out.add_holder(h, share * m // denom)
    return out


def work_done(raw: Path) -> dict[str, Any] | None:
    """The launched command's work counter: the last JSON line of ``raw/target.stdout`` with
    a numeric ``work`` (the samples print ``{"work": N, "unit": "messages", ...}``), as
    ``{"count", "unit", ...}`` for ``wallflame check``'s CPU-per-work rule."""
    path = raw / "target.stdout"
    if not path.exists():
        return None
    found = None
    for _, line in iter_lines(str(path)):
        line = line.strip()
        if not (line.startswith("{") and '"work"' in line):
            continue
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and isinstance(d.get("work"), int | float) \
                and not isinstance(d.get("work"), bool):
            found = d
    if found is None:
        return None
    out = {k: v for k, v in found.items() if isinstance(v, str | int | float)}
    out["count"] = float(found["work"])
    out["unit"] = str(found.get("unit") or "units")
    return out


def _snapshot_format(backend: str) -> str:
    return "eu-stack" if backend in ("eu-stack", "libdw") else "gdb"  # libdw: eu-stack's text


def build_profile(raw: Path, cap: dict[str, Any]) -> Profile:
    warnings: list[str] = []
    opts = cap.get("options", {})
    mode = str(opts.get("off_cpu", "pmp"))
    script, bad_chunks = perf_script(raw, "perf", warnings)
    perf_profile = _fold(script, "perf", warnings) if script is not None else None
    sched_profile = None
    if mode in ("sched", "both"):
        sscript, bad = perf_script(raw, "sched", warnings)
        bad_chunks += bad
        sched_profile = _fold(sscript, "perf", warnings) if sscript is not None else None
    pmp_profile = None
    if (raw / SNAPSHOT_LOG).exists():
        backend = str(cap.get("pmp", {}).get("backend", opts.get("pmp_backend", "eu-stack")))
        pmp_profile = _fold(raw / SNAPSHOT_LOG, _snapshot_format(backend), warnings)
    profile = Profile()
    if perf_profile is not None:
        profile.merge(perf_profile.on_cpu())
    if sched_profile is not None:
        off = sched_profile.off_cpu()
        samples = LockSamples()
        if (raw / SNAPSHOT_LOG).exists():
            samples = lock_samples(raw / SNAPSHOT_LOG)
        if (raw / OWNERS_LOG).exists():
            owner_samples(raw / OWNERS_LOG, samples)
        if opts.get("sched_call_graph", "dwarf") != "dwarf":
            samples.sites.clear()  # frame-pointer stacks lack the glibc caller frames
        if samples.pairs:
            off = split_locks(off, samples)
        profile.merge(off)
        profile.meta.extra["offcpu_source"] = "sched"
    if pmp_profile is not None:
        if mode == "pmp" or (mode == "both" and sched_profile is None):
            profile.merge(pmp_profile.off_cpu())
            profile.meta.extra["offcpu_source"] = "pmp"
        else:
            # Keep the snapshot evidence's metadata (pause, running time, counts).
            profile.meta.merge(pmp_profile.meta)
    _annotate_meta(profile, cap, warnings, bad_chunks)
    work = work_done(raw)
    if work is not None:
        profile.meta.extra["work"] = work
    return profile


def _annotate_meta(profile: Profile, cap: dict[str, Any], warnings: list[str],
                   bad_chunks: int) -> None:
    meta = profile.meta
    window = cap.get("window", {}).get("window_ns", 0)
    if window:
        meta.window_ns = int(window)
    opts = cap.get("options", {})
    meta.rates["perf_hz"] = float(opts.get("freq_hz", 0))
    pmp = cap.get("pmp") or {}
    if pmp:
        meta.rates["pmp_hz"] = float(pmp.get("final_rate_hz") or pmp.get("rate_hz") or 0)
        pause = pmp.get("pause")
        if isinstance(pause, dict):  # which backend, and what its pause figure measures
            pause = {**pause, "backend": pmp.get("backend", ""),
                     **({"measure": pmp["pause_measure"]} if pmp.get("pause_measure") else {})}
        meta.extra["pause"] = pause
        meta.extra["pmp_consistent"] = bool(pmp.get("consistent"))
        meta.extra["attach_ms"] = pmp.get("attach_ms", 0.0)
        if pmp.get("failed"):
            meta.lose("failed snapshots", 0, int(pmp["failed"]),
                      "; ".join(pmp.get("errors", [])[:2]))
    perf_info = cap.get("perf") or {}
    for stem in ("perf", "sched"):
        rec = perf_info.get(stem) or {}
        if rec.get("lost_chunks"):
            meta.lose(f"{stem} record lost chunks", 0, int(rec["lost_chunks"]),
                      "; ".join(rec.get("lost_lines", [])[:2]))
    if bad_chunks:
        meta.lose("unreadable perf chunks", 0, bad_chunks)
    missing: dict[str, str] = {}
    if opts.get("call_graph") == "fp":
        missing["oncpu"] = ("frame-pointer unwinding: a sample inside code built without "
                            "frame pointers (glibc, most distribution libraries) loses its "
                            "caller; --call-graph dwarf keeps it")
    if perf_info.get("sched") and opts.get("sched_call_graph") == "fp":
        missing["offcpu"] = ("scheduler stacks unwound with frame pointers lose the caller of "
                             "a blocking glibc function (glibc has no frame pointers); "
                             "--sched-call-graph dwarf keeps it")
    if perf_info.get("sched") and opts.get("sched_call_graph") == "dwarf":
        missing.setdefault("offcpu", "DWARF unwinding copies 8 KiB of stack per switch: "
                           "deeper stacks are cut at that depth")
    meta.extra["missing_frames"] = missing
    ended = cap.get("ended_by", "")
    if ended == "target exited":
        meta.lose("target exited during collection", 0)
    for w in [*cap.get("warnings", []), *warnings]:
        meta.warn(w)
    meta.extra["collect"] = {"target": cap.get("target"), "ended_by": ended,
                             "off_cpu": opts.get("off_cpu")}


def finish(run_dir: str | Path) -> Profile:
    """Build (or rebuild) the run directory's derived files from ``raw/``."""
    from wallflame.report.summary import build_summary

    out = Path(run_dir)
    raw = out / rundir.RAW
    try:
        cap = json.loads((raw / CAPTURE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{raw / CAPTURE}: unreadable ({e})",
                         "is this a run directory written by wallflame collect?") from None
    profile = build_profile(raw, cap)
    with open_output(str(out / rundir.ONCPU)) as f:
        write_folded(profile.on_cpu(), f, annotate=True)
    with open_output(str(out / rundir.OFFCPU)) as f:
        write_folded(profile.off_cpu(), f, annotate=True)
    with open_output(str(out / rundir.MEMORY)) as f:
        f.write(json.dumps(cap.get("memory", {}), indent=1, sort_keys=True) + "\n")
    meta = {
        "profile": profile.meta.to_json(),
        "target": cap.get("target"),
        "launched": cap.get("launched"),
        "commands": cap.get("commands"),
        "tools": cap.get("tools"),
        "window": cap.get("window"),
        "options": cap.get("options"),
        "rates": profile.meta.rates,
        "losses": {k: v.count for k, v in sorted(profile.meta.losses.items())},
        "pause": (cap.get("pmp") or {}).get("pause"),
        "pmp": cap.get("pmp"),
        "perf": cap.get("perf"),
        "warnings": profile.meta.warnings,
        "ended_by": cap.get("ended_by"),
        "owners": cap.get("owners"),
    }
    with open_output(str(out / rundir.META)) as f:
        f.write(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    with open_output(str(out / rundir.SUMMARY)) as f:
        f.write(json.dumps(build_summary(profile), indent=1, sort_keys=True) + "\n")
    _write_slices(out)
    return profile


def _write_slices(out: Path) -> None:
    """``RUN/slices.json``: per-slice figures for ``wallflame check``'s noise estimates
    (``wallflame.report.slices``).  A run without them is still a complete run."""
    from wallflame.report.slices import write_slices

    try:
        write_slices(out)
    except (OSError, WallflameError) as e:
        print(f"wallflame: warning: {out / 'slices.json'} not written: {e}", file=sys.stderr)


__all__ = ["LockSamples", "build_profile", "finish", "lock_samples", "split_locks"]
