"""The collect plan: every decision a collect makes, made once, before anything starts.

``plan(request, targets, machine)`` is a pure function.  ``Request`` is what the user asked
(``None``: left to its default); ``Targets`` and ``Machine`` are what was read from ``/proc``
before the window (``collect.run.observe``).  The ``CollectPlan`` it returns holds the
settings the collectors run with (``settings``, a complete ``CollectOptions``), the modes
they add up to, and each automatic choice with its reason in words.  The collector executes
a plan and decides nothing; ``finish`` reads the settings from the capture and decides
nothing either.  The plan is printed in one line when the collect starts (``start_line``)
and stored whole in ``capture.json`` and ``meta.json`` (``plan``).

The rules, in the order ``plan`` applies them:

1. ``--overhead`` (``Overhead``): ``auto`` lets the rules below choose; ``light`` and
   ``exact`` fix the off-CPU options, and the advanced off-CPU options may not be given
   with them.
2. The scheduler where perf may not record it: ``--off-cpu sched`` is refused; ``both``
   becomes ``pmp`` with a warning.
3. Light: an attached collect whose off-CPU options were all left to their defaults, and
   whose target switches so often that recording every switch would cost more than
   ``budget.LIGHT_ABOVE_LOSS`` of the machine's CPUs (``budget.too_costly``), records no
   scheduler: each thread's totals come from the kernel's counters, its blocked time is split
   over snapshots at ``budget.LIGHT_PMP_HZ``, no owner sampler (``budget.LIGHT_OWNER_HZ``).
4. The on-CPU rate left to its default: ``window_freq_hz`` (a longer window, a lower rate
   for as many samples); a light collect samples at ``budget.LIGHT_FREQ_HZ``.
5. A target stopped by job control keeps its threads as they were only with libdw or
   eu-stack: gdb's backends are replaced by libdw.
6. Scheduler stacks (``StackPolicy``): a stack rate given (``--sched-stack-hz``) is kept; a
   data-rate budget given (``--max-data-mb-per-s``) gives the rate (``budget.plan``); an
   attached target that switches so often that a stack at every switch would write more
   than ``budget.AUTO_ABOVE_MB_PER_S`` gets ``budget.AUTO_MB_PER_S`` (``budget.automatic``);
   otherwise every switch has its stack.  Attached and allowed to record every CPU, the
   scheduler is recorded on every CPU and the rate becomes one switch in N per CPU
   (``budget.stack_period``).
7. Inlined frames left to their default: on, but off for an attached target none of whose
   executables has debug information (none could be found; each lookup only costs).
8. Snapshots per second left to their default: ``PMP_HZ`` alone, ``BOTH_PMP_HZ`` beside the
   scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from wallflame.collect import budget, perf
from wallflame.collect.budget import Plan as StackBudget
from wallflame.errors import PermissionDenied, UsageError
from wallflame.rundir import CollectOptions, OffCpu, SnapshotBackend

#: The settings of a collect nobody asked anything of (``CollectOptions``' defaults).
DEFAULTS = CollectOptions()
#: Seconds an attached collect lasts when not told (a launched command's lasts as it does).
ATTACHED_DURATION_S = 10.0
#: Snapshots per second left to the default: the only off-CPU evidence (``--off-cpu pmp``)...
PMP_HZ = 10.0
#: ... or beside the scheduler, which gives the times (snapshots name the locks).
BOTH_PMP_HZ = 2.0
#: The on-CPU rate left to its default: ``DEFAULTS.freq_hz`` for a window of up to this many
#: samples per CPU (10 s at 499 Hz), then as many samples, down to ``WINDOW_MIN_HZ``.
WINDOW_SAMPLES_PER_CPU = 5_000
WINDOW_MIN_HZ = 99
#: The snapshot backends that leave a job-control-stopped thread as they found it.
KEEPS_STOPPED = (SnapshotBackend.LIBDW, SnapshotBackend.EU_STACK)


class Overhead(StrEnum):
    """What a collect may cost the target (``--overhead``)."""

    AUTO = "auto"  # the plan's rules choose (light on a busy target)
    LIGHT = "light"  # no scheduler recording, whatever the target
    EXACT = "exact"  # every switch recorded with its stack, whatever it costs


class StackPolicy(StrEnum):
    """Which scheduler switches carry a call chain."""

    NONE = "none"  # no scheduler recording
    EVERY_SWITCH = "every switch"
    PER_THREAD_HZ = "stacks per second per thread"
    ONE_IN_N_PER_CPU = "one switch in N per CPU"


class BudgetSource(StrEnum):
    NONE = "none"
    GIVEN = "given"  # --max-data-mb-per-s
    AUTOMATIC = "automatic"  # budget.automatic


@dataclass(frozen=True)
class Request:
    """What the user asked; ``None``: left to its default."""

    attached: bool = True
    overhead: Overhead = Overhead.AUTO
    duration_s: float | None = None
    off_cpu: OffCpu | None = None
    pmp_backend: SnapshotBackend | None = None
    pmp_rate_hz: float | None = None
    owner_rate_hz: float | None = None
    holder_stacks: bool | None = None
    freq_hz: int | None = None
    call_graph: str | None = None
    sched_call_graph: str | None = None
    max_pause_ms: float | None = None
    max_data_mb_per_s: float | None = None
    sched_stack_hz: float | None = None
    release_sites: bool | None = None
    inline_frames: bool | None = None
    wakers: bool | None = None

    def off_cpu_left(self) -> bool:
        """Every off-CPU option left to its default (what lets a collect go light)."""
        return all(v is None for v in (self.off_cpu, self.pmp_rate_hz, self.owner_rate_hz,
                                       self.max_data_mb_per_s, self.sched_stack_hz))


@dataclass(frozen=True)
class Targets:
    """What was read of the target before the window.  ``switch_rates``: each thread's
    switches per second (``budget.switch_rates``), empty when not measured
    (``needs_switch_rates``)."""

    switch_rates: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))
    measured: bool = False
    debug_info: bool = True
    stopped: bool = False


@dataclass(frozen=True)
class Machine:
    """What was read of the machine: its CPUs, what perf may record, and (measured with the
    target's rates) its switches a second and idle share."""

    cpus: int = 1
    sched_allowed: bool = True
    system_wide_allowed: bool = True
    switches_per_s: float | None = None
    idle: float | None = None


@dataclass(frozen=True)
class CollectPlan:
    """Every decision of a collect.  ``settings``: what the collectors run with, nothing left
    to decide.  ``reasons``: each automatic choice in words; ``warnings``: what the run's
    warnings say of the plan."""

    request: Request
    settings: CollectOptions
    light: bool
    stacks: StackPolicy
    budget_source: BudgetSource
    #: Attached: on-CPU samples and the scheduler recorded on every CPU, and the wake-ups.
    oncpu_every_cpu: bool
    sched_every_cpu: bool
    wakeups: bool
    #: With the wake-ups, each one's waker (``collect.perf.WAKER_EVENT``): the critical path.
    wakers: bool
    #: Chunks folded while recording (a window longer than one chunk of every recorder).
    streamed: bool
    budget_plan: StackBudget | None = None
    #: The switch rates measured and the light rule's figures (``postprocess.light``).
    light_measure: dict[str, Any] | None = None
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def kernel_counters(self) -> bool:
        """Without a scheduler recording, each thread's last kernel counters are kept: a
        thread that ends within the window has its figures from them."""
        return not self.settings.sched

    def start_line(self) -> str:
        """The plan in one line, printed when the collect starts."""
        s = self.settings
        parts: list[str] = []
        if self.light:
            parts.append("kernel counters for each thread's totals")
        elif s.sched:
            where = "on every CPU" if self.sched_every_cpu else "per thread"
            if self.stacks is StackPolicy.EVERY_SWITCH:
                parts.append(f"every switch with its stack ({where})")
            elif self.stacks is StackPolicy.ONE_IN_N_PER_CPU:
                parts.append(f"every switch, a stack for 1 in {s.sched_stack_period} per CPU")
            else:
                parts.append(f"every switch, stacks at {_rate(s.sched_stack_hz)}/s per thread")
            if self.budget_plan is not None:
                parts[-1] += f" within {self.budget_plan.budget_mb_per_s:g} MB/s"
        if s.snapshots:
            parts.append(f"snapshots at {s.pmp_rate_hz:g}/s ({s.pmp_backend})")
            parts.append(f"lock owners at {s.owner_rate_hz:g}/s" if s.owner_rate_hz
                         else "no owner sampler")
        parts.append(f"on-CPU at {s.freq_hz} Hz")
        head = ("light collect" if self.light else
                "exact collect" if self.stacks is StackPolicy.EVERY_SWITCH else
                "sampled collect" if s.sched else
                "snapshot collect" if s.snapshots else "on-CPU collect")
        why = f" ({'; '.join(self.reasons)})" if self.reasons else ""
        return f"{head}: {', '.join(parts)}{why}"

    def to_json(self) -> dict[str, Any]:
        return {"request": {k: v for k, v in asdict(self.request).items() if v is not None},
                "light": self.light, "stacks": self.stacks.value,
                "budget": self.budget_source.value,
                "oncpu_every_cpu": self.oncpu_every_cpu,
                "sched_every_cpu": self.sched_every_cpu, "wakeups": self.wakeups,
                "wakers": self.wakers,
                "streamed": self.streamed, "reasons": list(self.reasons),
                "start_line": self.start_line()}


def _rate(hz: float | None) -> str:
    """A rate as the start line shows it: 3 significant figures, whole numbers from 100."""
    hz = hz or 0.0
    return f"{hz:,.0f}" if hz >= 100 else f"{hz:.3g}"


def validate(request: Request) -> None:
    """What no target or machine can make plannable: ``--overhead light`` or ``exact`` with
    an advanced off-CPU option (checked before anything is read or started)."""
    if request.overhead is not Overhead.AUTO and not request.off_cpu_left():
        raise UsageError(f"--overhead {request.overhead} sets the off-CPU options itself",
                         f"give --overhead or {', '.join(_ADVANCED_OFF_CPU)}, not both")


def wants_scheduler(request: Request) -> bool:
    """Whether the collect would record the scheduler if perf may (so whether to ask perf)."""
    if request.overhead is not Overhead.AUTO:
        return request.overhead is Overhead.EXACT
    return (request.off_cpu or DEFAULTS.off_cpu) in (OffCpu.SCHED, OffCpu.BOTH)


def needs_switch_rates(request: Request, machine: Machine) -> bool:
    """Whether ``plan`` needs the target's switch rates (half a second of reading ``/proc``
    before the window): an attached collect that may record the scheduler, for the light
    rule, the budget or the stack period on every CPU; not when every switch's stack was
    asked for, nor for a stack rate per thread."""
    if not request.attached or request.overhead is not Overhead.AUTO \
            or not wants_scheduler(request) or not machine.sched_allowed:
        return False
    if request.sched_stack_hz is not None:
        return request.sched_stack_hz > 0 and machine.system_wide_allowed
    return True


def needs_debug_info(request: Request) -> bool:
    """Whether ``plan`` needs to know if the target's executables have debug information:
    an attached collect whose inlined frames were left to their default."""
    return request.attached and request.inline_frames is None


def window_freq_hz(duration_s: float | None, default_hz: int) -> int:
    """The on-CPU rate of a collect whose ``-F`` was left to ``default_hz``: that rate for a
    window of up to ``WINDOW_SAMPLES_PER_CPU / default_hz`` seconds or of no set length; for
    a longer window, the rate that takes about as many samples per CPU, down to
    ``WINDOW_MIN_HZ`` (99 Hz for a minute), ending in 9 as 99 and 499 do, off the 10 ms ticks
    of a program's own timers.  The samples only place on-CPU time over stacks, and the flame
    graph's error goes with their number, so a longer window needs no higher a rate; each
    sample is a timer interrupt in the target (its cost: ``benchmarks/overhead.py``)."""
    if duration_s is None or duration_s <= 0:
        return default_hz
    hz = WINDOW_SAMPLES_PER_CPU / duration_s
    if hz >= default_hz:
        return default_hz
    return max(WINDOW_MIN_HZ, int(hz) // 10 * 10 - 1)


_ADVANCED_OFF_CPU = ("--off-cpu", "--pmp-rate", "--owner-rate", "--max-data-mb-per-s",
                     "--sched-stack-hz")


@dataclass
class _Notes:
    """What ``plan`` says of its choices: the reasons (the start line) and the warnings."""

    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Stacks:
    policy: StackPolicy
    stack_hz: float | None
    period: int | None
    max_data: float | None
    source: BudgetSource
    budget_plan: StackBudget | None


def plan(request: Request, targets: Targets, machine: Machine) -> CollectPlan:
    """Every decision of a collect (the module's rules 1-8, one function each)."""
    r, notes = request, _Notes()
    off = _off_cpu(r, machine, notes)
    light, light_measure = _light(r, off, targets, machine, notes)
    if light:
        off = OffCpu.PMP
    freq = _freq(r, light, notes)
    snapshots = off in (OffCpu.PMP, OffCpu.BOTH)
    sched = off in (OffCpu.SCHED, OffCpu.BOTH)
    stacks = _stacks(r, sched, freq, targets, machine, notes)
    duration = r.duration_s if r.duration_s is not None else (
        ATTACHED_DURATION_S if r.attached else None)
    settings = CollectOptions(
        duration_s=duration, off_cpu=off, pmp_backend=_backend(r, targets, snapshots, notes),
        pmp_rate_hz=_pmp_rate(r, off, light) if snapshots else None,
        owner_rate_hz=(budget.LIGHT_OWNER_HZ if light else DEFAULTS.owner_rate_hz
                       if r.owner_rate_hz is None else r.owner_rate_hz),
        holder_stacks=DEFAULTS.holder_stacks if r.holder_stacks is None else r.holder_stacks,
        release_sites=bool(r.release_sites), freq_hz=freq,
        call_graph=r.call_graph or DEFAULTS.call_graph,
        sched_call_graph=r.sched_call_graph or DEFAULTS.sched_call_graph,
        max_pause_ms=r.max_pause_ms or DEFAULTS.max_pause_ms,
        max_data_mb_per_s=stacks.max_data, sched_stack_hz=stacks.stack_hz,
        sched_stack_period=stacks.period, inline_frames=_inline(r, targets, notes))
    if light:
        notes.warnings.append(_light_warning(settings, light_measure, r.overhead))
    every_cpu = r.attached and machine.system_wide_allowed
    return CollectPlan(
        request=r, settings=settings, light=light, stacks=stacks.policy,
        budget_source=stacks.source, oncpu_every_cpu=every_cpu,
        sched_every_cpu=sched and every_cpu, wakeups=sched and machine.system_wide_allowed,
        # the wakers only when asked: several points of a switchy program's throughput
        # (``benchmarks/wakers_cost.py``)
        wakers=sched and machine.system_wide_allowed and r.wakers is True,
        streamed=not perf.one_chunk(duration), budget_plan=stacks.budget_plan,
        light_measure=light_measure, reasons=tuple(notes.reasons),
        warnings=tuple(notes.warnings))


def _off_cpu(r: Request, machine: Machine, notes: _Notes) -> OffCpu:
    """Rules 1 and 2: the off-CPU evidence asked for, by ``--overhead`` or ``--off-cpu``,
    and what perf may record."""
    validate(r)
    off = {Overhead.LIGHT: OffCpu.PMP, Overhead.EXACT: OffCpu.BOTH}.get(
        r.overhead, OffCpu(r.off_cpu or DEFAULTS.off_cpu))
    if off in (OffCpu.SCHED, OffCpu.BOTH) and not machine.sched_allowed:
        fix = ("run as root, or sysctl -w kernel.perf_event_paranoid=-1 and make "
               "/sys/kernel/tracing readable, or grant CAP_PERFMON")
        if off is OffCpu.SCHED or r.overhead is Overhead.EXACT:
            raise PermissionDenied("perf may not record sched:sched_switch here", fix)
        notes.warnings.append(f"scheduler events are not permitted ({fix}); off-CPU time comes "
                              "from snapshots only")
        off = OffCpu.PMP
    return off


def _light(r: Request, off: OffCpu, targets: Targets, machine: Machine,
           notes: _Notes) -> tuple[bool, dict[str, Any] | None]:
    """Rule 3: whether the collect is light, and the figures the rule read
    (``postprocess.light``; ``None`` when it did not apply)."""
    if r.overhead is not Overhead.AUTO or not r.attached or off is not OffCpu.BOTH \
            or not r.off_cpu_left() or not targets.measured:
        return r.overhead is Overhead.LIGHT, None
    switches = sum(targets.switch_rates.values())
    cost = budget.recording_cost(switches, machine.cpus)
    light = budget.too_costly(dict(targets.switch_rates), machine.cpus)
    if light:
        notes.reasons.append(f"{switches:,.0f} switches/s would cost about {100 * cost:.0f}% "
                             f"of {machine.cpus} CPUs to record")
    return light, {"switches_per_s": round(switches),
                   "idle": round(1.0 if machine.idle is None else machine.idle, 3),
                   "machine_switches_per_s": round(machine.switches_per_s or 0.0),
                   "cost": round(cost, 3), "chosen": light}


def _freq(r: Request, light: bool, notes: _Notes) -> int:
    """Rule 4: the on-CPU sampling rate."""
    if r.freq_hz is not None:
        return r.freq_hz
    if light:
        return budget.LIGHT_FREQ_HZ
    freq = window_freq_hz(r.duration_s, DEFAULTS.freq_hz)
    if freq != DEFAULTS.freq_hz:
        notes.reasons.append(f"{freq} Hz keeps a {r.duration_s:g} s window at about "
                             f"{WINDOW_SAMPLES_PER_CPU:,} samples per CPU")
    return freq


def _pmp_rate(r: Request, off: OffCpu, light: bool) -> float:
    """Rule 8: snapshots per second."""
    if r.pmp_rate_hz:
        return r.pmp_rate_hz
    return budget.LIGHT_PMP_HZ if light else PMP_HZ if off is OffCpu.PMP else BOTH_PMP_HZ


def _backend(r: Request, targets: Targets, snapshots: bool, notes: _Notes) -> SnapshotBackend:
    """Rule 5: the snapshot tool, libdw for a stopped target that gdb would resume."""
    backend = SnapshotBackend(r.pmp_backend or DEFAULTS.pmp_backend)
    if targets.stopped and snapshots and backend not in KEEPS_STOPPED:
        notes.warnings.append(f"--pmp-backend {backend} would resume the stopped target; "
                              "used libdw instead")
        return SnapshotBackend.LIBDW
    return backend


def _stacks(r: Request, sched: bool, freq: int, targets: Targets, machine: Machine,
            notes: _Notes) -> _Stacks:
    """Rule 6: which switches carry a stack, and the budget that decided it."""
    if not sched:
        return _Stacks(StackPolicy.NONE, None, None, r.max_data_mb_per_s, BudgetSource.NONE,
                       None)
    rates = dict(targets.switch_rates)
    every_cpu = r.attached and machine.system_wide_allowed
    stack_hz = 0.0 if r.overhead is Overhead.EXACT else r.sched_stack_hz
    max_data = r.max_data_mb_per_s
    source = BudgetSource.NONE if max_data is None else BudgetSource.GIVEN
    if stack_hz is None and max_data is None and r.attached \
            and r.overhead is Overhead.AUTO and targets.measured:
        auto = budget.automatic(rates, freq, perf.PerfOptions.stack_bytes, machine.cpus)
        if auto is not None:
            every = budget.every_switch_mb_per_s(rates, freq, perf.PerfOptions.stack_bytes,
                                                 machine.cpus)
            max_data, source = auto, BudgetSource.AUTOMATIC  # said once, by its warning
            notes.warnings.append(
                f"the target switches {sum(rates.values()):,.0f} times a second: a stack at "
                f"every switch would write about {every:,.0f} MB/s, so scheduler stacks are "
                f"sampled within {auto:g} MB/s (blocked and runnable times stay exact; "
                "--max-data-mb-per-s to choose the rate, --sched-stack-hz 0 for a stack at "
                "every switch)")
    bplan = None
    if stack_hz is None and max_data is not None:
        bplan = budget.plan(rates, max_data, freq, perf.SAMPLED_STACK_BYTES, machine.cpus,
                            machine=machine.switches_per_s if every_cpu else None)
        stack_hz = bplan.stack_hz
    stack_hz = stack_hz or 0.0  # no budget, no rate: a stack at every switch
    if every_cpu:
        period = budget.stack_period(rates, stack_hz)
        policy = StackPolicy.EVERY_SWITCH if period == 1 else StackPolicy.ONE_IN_N_PER_CPU
        return _Stacks(policy, stack_hz, period, max_data, source, bplan)
    policy = StackPolicy.EVERY_SWITCH if not stack_hz else StackPolicy.PER_THREAD_HZ
    return _Stacks(policy, stack_hz, None, max_data, source, bplan)


def _inline(r: Request, targets: Targets, notes: _Notes) -> bool:
    """Rule 7: inlined frames."""
    if r.inline_frames is not None:
        return r.inline_frames
    inline = targets.debug_info or not r.attached
    if not inline:
        notes.reasons.append("no debug information in the target's executables: no inlined "
                             "frames")
    return inline


def _light_warning(s: CollectOptions, measure: dict[str, Any] | None,
                   overhead: Overhead) -> str:
    why = ("--overhead light" if measure is None else
           f"the target switches {measure['switches_per_s']:,.0f} times a second: recording "
           f"every switch would cost about {100 * measure['cost']:.0f}% of the machine's "
           "CPUs, in the target's own switches")
    return (f"{why}, so this collect is light: no scheduler recording (each thread's "
            "on-CPU, runnable and blocked times come from the kernel's counters, its blocked "
            f"time is split over snapshots at {s.pmp_rate_hz:g}/s), on-CPU samples at "
            f"{s.freq_hz} Hz, "
            + (f"lock owners sampled at {s.owner_rate_hz:g}/s" if s.owner_rate_hz else
               "lock owners named from the snapshots' /proc records, without holder stacks")
            + " (--overhead exact records every switch and takes them)")


__all__ = ["ATTACHED_DURATION_S", "BOTH_PMP_HZ", "DEFAULTS", "PMP_HZ", "BudgetSource",
           "CollectPlan", "Machine", "Overhead", "Request", "StackPolicy", "Targets",
           "needs_debug_info", "needs_switch_rates", "plan", "validate", "wants_scheduler",
           "window_freq_hz"]
