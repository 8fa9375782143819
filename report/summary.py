"""``summary.json``: the stable, machine-readable result of a run (used by CI and by tests).

All times are seconds when the profile's unit is ``ns``; for profiles of unknown unit (plain
folded files) the same keys hold sample counts and ``unit`` says so.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

from wallflame import procnames
from wallflame.classify import (
    classify,
    default_rules,
    find_wait,
    idle_label,
    idle_thread,
    label_rules,
)
from wallflame.names import is_unknown
from wallflame.profile import (
    OFF,
    ON,
    RUNNABLE,
    UNIT_NS,
    WAIT_CLASSES,
    Group,
    Profile,
    StackKey,
    ThreadTotals,
)
from wallflame.report.sublabels import label_totals, tracer_stops
from wallflame.speedups import native
from wallflame.stops import stopped_ns, tid_ns
from wallflame.waitclasses import LOCK_CLASSES

#: A stack this shallow (frames below the thread) has most likely lost its callers.
SHALLOW_DEPTH = 2

_LOCK_WRAPPERS = ("std::lock_guard", "std::unique_lock", "std::scoped_lock", "std::shared_lock",
                  "__gthread_", "__gthrw_", "__pthread_mutex_cond_lock")


def seconds(value: int, unit: str) -> float:
    return round(value / 1e9, 6) if unit == UNIT_NS else float(value)


#: The frames where a stack enters the kernel (kernel frames are not always marked).
KERNEL_ENTRY = ("entry_SYSCALL", "asm_exc_", "asm_sysvec_", "asm_common_interrupt",
                "ret_from_fork")


def user_frames(frames: tuple[str, ...]) -> tuple[str, ...]:
    """The frames above the kernel entry point (kernel frames are not always marked)."""
    for i, f in enumerate(frames):
        if f.startswith(KERNEL_ENTRY) or f.endswith("_[k]"):
            return frames[:i]
    return frames


#: The frames every thread starts in (the C library's and the thread library's), left out at
#: a stack's root: what the thread itself runs comes after them.
RUNTIME_ROOT = frozenset({"_start", "__libc_start_main", "__libc_start_call_main",
                          "__libc_start_main_impl", "clone", "clone3", "start_thread",
                          "__clone", "__clone3", "thread_start"})


def runtime_root(user: tuple[str, ...]) -> int:
    """How many frames at the root of ``user`` are the runtime's: those of ``RUNTIME_ROOT``,
    and a shared library without a symbol among them (``[libstdc++.so.6]``: its thread
    trampoline); never all of them."""
    i = 0
    while i < len(user) - 1 and (user[i] in RUNTIME_ROOT or
                                 (i and user[i].startswith("[lib") and ".so" in user[i])):
        i += 1
    return i


#: A thread that shares its name with at least this many others is named by its role.
ROLE_MIN_SHARED = 3


def thread_roles(profile: Profile, rows: list[dict[str, Any]]) -> None:
    """Threads that carry one name with ``ROLE_MIN_SHARED`` others or more (a server that
    names none of its threads) get a ``role``: the first named function of their stacks past
    the runtime's root frames (``handle_one_connection``), the one with the most of the
    thread's time (a stack without one, ``[mariadbd]`` or a pseudo-frame alone, names none)."""
    counts = Counter(r["name"] for r in rows if r["tid"])
    want = {r["tid"] for r in rows if r["tid"] and counts[r["name"]] > ROLE_MIN_SHARED}
    if not want:
        return
    weights: dict[int, Counter[str]] = {}
    for k, w in profile.stacks.items():
        if k.tid in want:
            role = _root_function(k.frames)
            if role:
                weights.setdefault(k.tid, Counter())[role] += w
    for r in rows:
        if r["tid"] in weights:
            r["role"] = weights[r["tid"]].most_common(1)[0][0]


def _root_function(frames: tuple[str, ...]) -> str:
    """The first named frame of ``frames`` past the runtime's root frames, before the kernel
    (empty when there is none)."""
    user = user_frames(frames)
    return next((f for f in user[runtime_root(user):] if not f.startswith("[")), "")


def call_site(frames: tuple[str, ...]) -> str:
    """The frame that called into the lock: the first frame above the leaf-most lock or wait
    frame (kernel, glibc and ``std::lock_guard`` machinery skipped).  Kernel frames are not
    always marked, so the scan anchors on the wait frame rather than on the leaf."""
    rules = default_rules()
    seen_wait = False
    fallback = ""
    for f in reversed(user_frames(frames)):
        if rules.frame_class(f) is not None:
            seen_wait = True
            continue
        if f.endswith("_[k]") or is_unknown(f) or f.startswith(_LOCK_WRAPPERS):
            continue
        if seen_wait:
            return f
        fallback = fallback or f
    return fallback or (frames[0] if frames else "[unknown]")


def thread_row(t: ThreadTotals, unit: str, window: int, runqueue: int = 0,
               stopped: int = 0, alive: int | None = None) -> dict[str, Any]:
    """One thread's split of the window: on-CPU, runnable (waiting for a CPU: preempted, or
    woken and not yet running), blocked (``off_cpu_s``, by class in ``wait``) and stopped by
    the collect; ``coverage`` is their sum over the window, or over the part of it the
    thread lived (``alive``: it began or exited within the window; ``alive_s``).
    ``runqueue``: the run-queue time the metadata records, used only for a profile without
    runnable stacks (folded before runnable time had stacks of its own)."""
    runnable = t.runnable or runqueue
    row: dict[str, Any] = {
        "tid": t.tid,
        "name": t.name,
        "on_cpu_s": seconds(t.on, unit),
        "runnable_s": seconds(runnable, unit),
        "off_cpu_s": seconds(t.off, unit),
        "wait": {c: seconds(t.wait[c], unit) for c in WAIT_CLASSES},
        "runqueue_s": seconds(runnable, unit),  # the same figure, under its former name
        "stopped_s": seconds(stopped, unit),  # stopped by the collect's own tracer
    }
    if window and unit == UNIT_NS and t.tid >= 0:  # -1: samples perf could not name
        lived = window
        if alive is not None and 0 < alive < window:
            lived = alive
            row["alive_s"] = seconds(alive, unit)
        row["coverage"] = round((t.on + runnable + t.off + stopped) / lived, 4)
    return row


def _alive(profile: Profile, tid: int) -> int | None:
    """The part of the window a thread lived, when it began or exited within it (the
    scheduler's ``sched_threads``, or without it the kernel's counters':
    ``schedstat_alive_ns``)."""
    row = (profile.meta.extra.get("sched_threads") or {}).get(str(tid))
    v = row.get("alive_ns") if isinstance(row, dict) else None
    if v is None:
        v = (profile.meta.extra.get("schedstat_alive_ns") or {}).get(str(tid))
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def runnable_after(profile: Profile, groups: Iterable[Group] | None = None
                   ) -> dict[int, dict[str, int]]:
    """Each thread's runnable time by the class of the stack it waited for a CPU at: woken
    from a mutex wait, it is still inside the lock call as the program sees it (the queue
    sample's own lock-wait clock counts it), preempted, the class of a running stack
    (``other``).  ``groups`` (``profile.grouped()``'s, when at hand) spare the pass over the
    stacks when no thread waited for a CPU."""
    out: dict[int, dict[str, int]] = {}
    if groups is not None and not any(g.state == OFF and g.wait == RUNNABLE for g in groups):
        return out
    for k, w in profile.stacks.items():
        if k.state == OFF and k.wait == RUNNABLE:
            per = out.setdefault(k.tid, {})
            cls = classify(k.frames)
            per[cls] = per.get(cls, 0) + w
    return out


def on_cpu_in(profile: Profile) -> dict[int, dict[str, int]]:
    """Each thread's on-CPU time inside a waiting call, by the call's class: a stack whose
    frames a wait rule matches while it runs (``__lll_lock_wait`` entering or leaving the
    futex, a spin loop a rule names) is on a CPU, and shown so, but a program that clocks its
    lock call counts it as the wait; running stacks no rule matches are not in it."""
    out: dict[int, dict[str, int]] = {}
    # Only a stack with a frame some rule names can match.  The distinct names are looked up
    # together (``Rules.named``), the stacks compared with those found in C (the rules on
    # every frame of 20,000 stacks were 90 ms, most of a report's time), the frames a stack
    # shares with the one before it not looked at twice.
    named = default_rules().named(native.frame_names(profile.stacks, OFF))
    if not named:
        return out
    running = native.stacks_naming(profile.stacks, OFF, named)
    for k, w in running:
        cls = find_wait(k.frames)
        if cls is not None:
            per = out.setdefault(k.tid, {})
            per[cls] = per.get(cls, 0) + w
    return out


def idle_waits(profile: Profile) -> dict[int, int]:
    """Each thread's blocked time outside the idle poll that an ``idle`` row of the rules names
    a wait for work (``classify.idle_label``: a pool worker's condvar wait for a task); only
    the stacks naming a frame of those rows are looked at (found in C, as ``on_cpu_in``),
    unless a row reads a stack's root."""
    idle = label_rules().idle
    out: dict[int, int] = {}
    if idle is None:
        return out
    if idle.roots or idle.threads:  # rows on a root or a name: every blocked stack is tried
        stacks: Iterable[tuple[StackKey, int]] = (
            (k, w) for k, w in profile.stacks.items() if k.state == OFF)
    else:
        named = idle.named(native.frame_names(profile.stacks, ON))
        stacks = native.stacks_naming(profile.stacks, ON, named) if named else ()
    by_name: dict[str, bool] = {}  # each thread name's idle row, looked up once
    for k, w in stacks:
        if k.wait in (RUNNABLE, "poll"):
            continue
        named_idle = by_name.get(k.thread)
        if named_idle is None:
            named_idle = by_name[k.thread] = idle_thread(k.thread) is not None
        if named_idle or idle_label(k.frames) is not None:
            out[k.tid] = out.get(k.tid, 0) + w
    return out


def runqueue_ns(profile: Profile) -> dict[int, int]:
    return tid_ns(profile.meta.extra.get("runqueue_ns"))


def locks(profile: Profile, groups: Iterable[Group] | None = None) -> list[dict[str, Any]]:
    """Each lock waited on (``report.locks``).  ``groups`` (those of ``profile.grouped()``,
    when at hand) spare the pass over the stacks when no thread waited on a lock."""
    return lock_sections(profile, groups)[0]


def lock_sections(profile: Profile, groups: Iterable[Group] | None = None) -> tuple[
        list[dict[str, Any]], list[dict[str, Any]]]:
    """(locks, lock waits whose lock was not identified, by call site)."""
    if groups is not None and not any(g.state == OFF and g.wait in LOCK_CLASSES
                                      for g in groups):
        return [], []
    from wallflame.report.locks import lock_entries

    return lock_entries(profile, seconds, call_site)


def stack_weights(profile: Profile) -> tuple[int, int]:
    """The weight of the shallow stacks (``SHALLOW_DEPTH`` frames or fewer) and of those
    holding at least one unknown frame (``names.is_unknown``), in one native pass
    (``_speedups.frame_weights``)."""
    shallow, unknown = native.frame_weights(profile.stacks, SHALLOW_DEPTH)
    return shallow, unknown


def quality(profile: Profile, rows: list[dict[str, Any]]) -> dict[str, Any]:
    total = profile.total()
    shallow, unknown = stack_weights(profile)
    m = profile.meta
    return {
        "losses": {k: v.count for k, v in sorted(m.losses.items())},
        "warnings": list(m.warnings),
        "unknown_frame_share": round(unknown / total, 4) if total else 0.0,
        "shallow_stack_share": round(shallow / total, 4) if total else 0.0,
        "samples": dict(sorted(m.samples.items())),
        "rates": dict(sorted(m.rates.items())),
        "coverage": {str(r["tid"]): r.get("coverage") for r in rows if r["tid"]},
        "machine": machine_load(m.extra.get("machine")),
    }


#: What ``machine`` of meta.json says, in CPUs over the window (``collect.machine``).
MACHINE_KEYS = ("cpus", "busy_cpus", "target_cpus", "collect_cpus", "other_cpus", "steal_cpus")


def machine_load(raw: Any) -> dict[str, float]:
    """The run's record of the rest of the machine's load, its numbers only (a meta.json
    edited by hand is not trusted to hold numbers)."""
    if not isinstance(raw, dict):
        return {}
    out = {k: float(raw[k]) for k in MACHINE_KEYS if isinstance(raw.get(k), int | float)
           and not isinstance(raw.get(k), bool) and math.isfinite(float(raw[k]))
           and float(raw[k]) >= 0}
    return out if out.get("cpus") else {}


#: Under this share of the machine's CPUs in use, threads waiting for a CPU were not waiting
#: for a full machine.
FULL_MACHINE = 0.9


def load_words(machine: dict[str, float]) -> str:
    """Who used the machine's CPUs over the window, in words (``machine_load``'s figures: the
    kernel's CPU time counters, ``/proc/stat`` and each process's ``/proc/PID/stat``); without
    them, that the CPUs were busy."""
    cpus, busy = machine.get("cpus", 0.0), machine.get("busy_cpus", 0.0)
    if not cpus:
        return "the machine's CPUs were busy"
    target, other = machine.get("target_cpus", 0.0), machine.get("other_cpus", 0.0)
    use = (f"{busy:.2f} in use over the window, by the kernel's CPU time: the target "
           f"{target:.2f}, other processes {other:.2f}, the collect "
           f"{machine.get('collect_cpus', 0.0):.2f}")
    if busy < FULL_MACHINE * cpus:
        return (f"the machine's {cpus:g} CPUs were not all busy ({use}): a CPU limit (quota, "
                "affinity) may hold the target")
    return (f"the machine's {cpus:g} CPUs were busy ({use})"
            + ("; other processes used more than the target" if other > target else ""))


def build_summary(profile: Profile, groups: dict[Group, int] | None = None) -> dict[str, Any]:
    """The summary of ``profile`` (``groups``: its ``grouped()``, when the caller has them)."""
    m = profile.meta
    unit = m.unit
    window = m.window_ns if unit == UNIT_NS else 0
    rq = runqueue_ns(profile)
    if groups is None:
        groups = profile.grouped()
    threads = profile.per_thread(groups)
    stopped = stopped_ns(profile)
    rows = [thread_row(t, unit, window, rq.get(t.tid, 0) if t.tid else 0,
                       stopped.get(t.tid, 0) if t.tid else 0,
                       _alive(profile, t.tid) if t.tid else None) for t in threads]
    after, inside = runnable_after(profile, groups), on_cpu_in(profile)
    idle = idle_waits(profile)
    thread_roles(profile, rows)
    for r in rows:
        if idle.get(r["tid"]):
            r["idle_s"] = seconds(idle[r["tid"]], unit)
        for key, per in (("runnable_after", after), ("on_cpu_in", inside)):
            if r["tid"] in per:
                r[key] = {c: seconds(ns, unit) for c, ns in sorted(per[r["tid"]].items())}
        pid = procnames.row_pid(profile, r["tid"]) if r["tid"] else 0
        if pid:  # a target of several processes: each thread's process
            r["pid"] = pid
    totals = ThreadTotals(0, "all")  # what ``profile.totals()`` gives, without another pass
    for t in threads:
        totals.on += t.on
        for c, w in t.wait.items():
            totals.wait[c] += w
    pause = m.extra.get("pause") or {"snapshots": 0, "median_ms": 0.0, "max_ms": 0.0,
                                     "total_ms": 0.0}
    return {
        "unit": "seconds" if unit == UNIT_NS else "samples",
        "window_s": seconds(window, UNIT_NS) if window else 0.0,
        "threads": rows,
        "processes": procnames.summary(profile, rows),
        "totals": thread_row(totals, unit, 0, sum(rq.values()), sum(stopped.values())),
        **dict(zip(("locks", "unidentified_lock_waits"), lock_sections(profile, groups),
                   strict=True)),
        "pause": pause,
        "wait_labels": label_totals(profile, groups),  # off-CPU time by the rule that classified it
        "tracer_stops": tracer_stops(profile, pause),
        "quality": quality(profile, rows),
        "sources": [{k: v for k, v in s.items() if isinstance(v, (str, int, float, bool))}
                    for s in m.sources],
        "work": m.extra.get("work"),
    }

