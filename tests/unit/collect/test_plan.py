"""``collect.plan``: every decision of a collect, one table row per rule (no perf, no root).

Each row is what the user asked, what was read of the target and the machine, the settings
and modes the plan must give, and the line the collect prints when it starts.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import ROOT

from wallflame.collect import budget
from wallflame.collect.plan import (
    BOTH_PMP_HZ,
    PMP_HZ,
    BudgetSource,
    Machine,
    Overhead,
    Request,
    StackPolicy,
    Targets,
    needs_debug_info,
    needs_switch_rates,
    plan,
    validate,
    wants_scheduler,
    window_freq_hz,
)
from wallflame.errors import PermissionDenied, UsageError
from wallflame.rundir import OffCpu, SnapshotBackend

#: 150 switches a second: cheap to record, a stack at every switch well within the budget.
QUIET = Targets(switch_rates={1: 100.0, 2: 50.0}, measured=True)
#: 20,000 a second: recording every switch costs 5% of 2 CPUs (more than 3%).
BUSY = Targets(switch_rates={i: 1000.0 for i in range(20)}, measured=True)
#: 5,000 a second: 1.25% of 2 CPUs, but a stack at every switch writes about 45 MB/s.
MEDIUM = Targets(switch_rates={i: 500.0 for i in range(10)}, measured=True)
TWO = Machine(cpus=2, switches_per_s=30_000.0, idle=0.2)
SIXTEEN = Machine(cpus=16, switches_per_s=30_000.0, idle=0.5)
NOT_WIDE = Machine(cpus=2, system_wide_allowed=False)
NO_SCHED = Machine(cpus=2, sched_allowed=False)


@dataclass
class Case:
    name: str
    request: Request
    targets: Targets
    machine: Machine
    line: str
    #: settings (``CollectOptions`` fields) and plan fields expected
    settings: dict[str, Any] = field(default_factory=dict)
    modes: dict[str, Any] = field(default_factory=dict)
    warning: str = ""


EXACT_LINE = ("exact collect: every switch with its stack (on every CPU), snapshots at 2/s "
              "(libdw), lock owners at 20/s, on-CPU at 499 Hz")

CASES = [
    Case("a quiet attached target: every switch with its stack",
         Request(), QUIET, TWO, EXACT_LINE,
         {"off_cpu": OffCpu.BOTH, "sched_stack_hz": 0.0, "sched_stack_period": 1,
          "pmp_rate_hz": BOTH_PMP_HZ, "owner_rate_hz": 20.0, "freq_hz": 499,
          "duration_s": 10.0, "inline_frames": True, "max_data_mb_per_s": None},
         {"light": False, "stacks": StackPolicy.EVERY_SWITCH, "budget_source": BudgetSource.NONE,
          "oncpu_every_cpu": True, "sched_every_cpu": True, "wakeups": True, "wakers": False}),
    Case("a busy attached target left to the defaults: light",
         Request(), BUSY, TWO,
         "light collect: kernel counters for each thread's totals, snapshots at 1/s (libdw), no "
         "owner sampler, on-CPU at 99 Hz (20,000 switches/s would cost about 5% of 2 CPUs to "
         "record)",
         {"off_cpu": OffCpu.PMP, "pmp_rate_hz": budget.LIGHT_PMP_HZ, "owner_rate_hz": 0.0,
          "freq_hz": budget.LIGHT_FREQ_HZ, "sched_stack_hz": None},
         {"light": True, "stacks": StackPolicy.NONE, "kernel_counters": True,
          "light_measure": {"switches_per_s": 20_000, "idle": 0.2,
                            "machine_switches_per_s": 30_000, "cost": 0.05, "chosen": True}},
         "so this collect is light"),
    Case("light keeps an -F given",
         Request(freq_hz=499), BUSY, TWO,
         "light collect: kernel counters for each thread's totals, snapshots at 1/s (libdw), no "
         "owner sampler, on-CPU at 499 Hz (20,000 switches/s would cost about 5% of 2 CPUs to "
         "record)", {"freq_hz": 499}, {"light": True}, "so this collect is light"),
    Case("an off-CPU option given: never light; the automatic budget instead",
         Request(off_cpu=OffCpu.BOTH), BUSY, TWO,
         "sampled collect: every switch, a stack for 1 in 171 per CPU within 8 MB/s, snapshots "
         "at 2/s (libdw), lock owners at 20/s, on-CPU at 499 Hz",
         {"off_cpu": OffCpu.BOTH, "max_data_mb_per_s": budget.AUTO_MB_PER_S,
          "sched_stack_period": 171},
         {"light": False, "stacks": StackPolicy.ONE_IN_N_PER_CPU,
          "budget_source": BudgetSource.AUTOMATIC, "light_measure": None},
         "so scheduler stacks are sampled within 8 MB/s"),
    Case("too many stacks but cheap to record: the automatic budget",
         Request(), MEDIUM, TWO,
         "sampled collect: every switch, a stack for 1 in 36 per CPU within 8 MB/s, snapshots "
         "at 2/s (libdw), lock owners at 20/s, on-CPU at 499 Hz",
         {"max_data_mb_per_s": budget.AUTO_MB_PER_S, "sched_stack_period": 36},
         {"light": False, "budget_source": BudgetSource.AUTOMATIC,
          "light_measure": {"switches_per_s": 5_000, "idle": 0.2,
                            "machine_switches_per_s": 30_000, "cost": 0.013, "chosen": False}},
         "so scheduler stacks are sampled within 8 MB/s"),
    Case("not allowed every CPU: stacks per second per thread, no wake-ups",
         Request(), MEDIUM, NOT_WIDE,
         "sampled collect: every switch, stacks at 21.7/s per thread within 8 MB/s, snapshots "
         "at 2/s (libdw), lock owners at 20/s, on-CPU at 499 Hz",
         {"sched_stack_period": None},
         {"stacks": StackPolicy.PER_THREAD_HZ, "oncpu_every_cpu": False,
          "sched_every_cpu": False, "wakeups": False, "wakers": False},
         "so scheduler stacks are sampled within 8 MB/s"),
    Case("16 CPUs: the same switches cost little, the stacks still too many",
         Request(), BUSY, SIXTEEN,
         "sampled collect: every switch, a stack for 1 in 265 per CPU within 8 MB/s, snapshots "
         "at 2/s (libdw), lock owners at 20/s, on-CPU at 499 Hz",
         {}, {"light": False, "budget_source": BudgetSource.AUTOMATIC},
         "so scheduler stacks are sampled within 8 MB/s"),
    Case("a budget given",
         Request(max_data_mb_per_s=4.0), QUIET, TWO,
         "sampled collect: every switch, a stack for 1 in 6 per CPU within 4 MB/s, snapshots at "
         "2/s (libdw), lock owners at 20/s, on-CPU at 499 Hz",
         {"max_data_mb_per_s": 4.0, "sched_stack_period": 6},
         {"budget_source": BudgetSource.GIVEN, "light": False}),
    Case("--sched-stack-hz 0: every switch, nothing measured",
         Request(sched_stack_hz=0.0), Targets(), TWO, EXACT_LINE,
         {"sched_stack_hz": 0.0, "sched_stack_period": 1}, {"light": False}),
    Case("--sched-stack-hz 50 on every CPU: one switch in N",
         Request(sched_stack_hz=50.0), BUSY, TWO,
         "sampled collect: every switch, a stack for 1 in 20 per CPU, snapshots at 2/s (libdw), "
         "lock owners at 20/s, on-CPU at 499 Hz",
         {"sched_stack_hz": 50.0, "sched_stack_period": 20},
         {"stacks": StackPolicy.ONE_IN_N_PER_CPU, "budget_source": BudgetSource.NONE}),
    Case("--off-cpu pmp: snapshots alone, at their own rate",
         Request(off_cpu=OffCpu.PMP), Targets(), TWO,
         "snapshot collect: snapshots at 10/s (libdw), lock owners at 20/s, on-CPU at 499 Hz",
         {"pmp_rate_hz": PMP_HZ, "sched_stack_hz": None, "sched_stack_period": None},
         {"stacks": StackPolicy.NONE, "kernel_counters": True, "wakeups": False,
          "wakers": False}),
    Case("--off-cpu none", Request(off_cpu=OffCpu.NONE), Targets(), TWO,
         "on-CPU collect: on-CPU at 499 Hz", {"pmp_rate_hz": None}, {"kernel_counters": True}),
    Case("--off-cpu sched: no snapshots", Request(off_cpu=OffCpu.SCHED), QUIET, TWO,
         "exact collect: every switch with its stack (on every CPU), on-CPU at 499 Hz",
         {"pmp_rate_hz": None}, {"stacks": StackPolicy.EVERY_SWITCH}),
    Case("the scheduler not permitted: snapshots only, said",
         Request(), Targets(), NO_SCHED,
         "snapshot collect: snapshots at 10/s (libdw), lock owners at 20/s, on-CPU at 499 Hz",
         {"off_cpu": OffCpu.PMP, "pmp_rate_hz": PMP_HZ}, {"light": False},
         "scheduler events are not permitted"),
    Case("--overhead light on a quiet target", Request(overhead=Overhead.LIGHT), Targets(),
         TWO, "light collect: kernel counters for each thread's totals, snapshots at 1/s "
         "(libdw), no owner sampler, on-CPU at 99 Hz", {"off_cpu": OffCpu.PMP},
         {"light": True, "light_measure": None}, "--overhead light, so this collect is light"),
    Case("--overhead exact on a busy target", Request(overhead=Overhead.EXACT), Targets(),
         TWO, EXACT_LINE, {"off_cpu": OffCpu.BOTH, "sched_stack_hz": 0.0},
         {"light": False, "budget_source": BudgetSource.NONE}),
    Case("a launched command: per thread, until it exits",
         Request(attached=False), Targets(), TWO,
         "exact collect: every switch with its stack (per thread), snapshots at 2/s (libdw), "
         "lock owners at 20/s, on-CPU at 499 Hz",
         {"duration_s": None, "inline_frames": True, "sched_stack_period": None},
         {"oncpu_every_cpu": False, "sched_every_cpu": False, "wakeups": True,
          "streamed": True}),
    Case("--wakers: the wake-ups with their wakers (the critical path)",
         Request(wakers=True), QUIET, TWO, EXACT_LINE, {"off_cpu": OffCpu.BOTH},
         {"wakeups": True, "wakers": True}),
    Case("a launched command for a minute: a lower on-CPU rate",
         Request(attached=False, duration_s=60.0), Targets(), TWO,
         "exact collect: every switch with its stack (per thread), snapshots at 2/s (libdw), "
         "lock owners at 20/s, on-CPU at 99 Hz (99 Hz keeps a 60 s window at about 5,000 "
         "samples per CPU)", {"freq_hz": 99, "duration_s": 60.0}),
    Case("a launched command with a budget: its rates are not known before it runs",
         Request(attached=False, max_data_mb_per_s=4.0), Targets(), TWO,
         "sampled collect: every switch, stacks at 10,000/s per thread within 4 MB/s, "
         "snapshots at 2/s (libdw), lock owners at 20/s, on-CPU at 499 Hz",
         {"sched_stack_hz": budget.MAX_HZ}, {"budget_source": BudgetSource.GIVEN}),
    Case("20 s attached: 249 Hz", Request(duration_s=20.0), QUIET, TWO,
         "exact collect: every switch with its stack (on every CPU), snapshots at 2/s (libdw), "
         "lock owners at 20/s, on-CPU at 249 Hz (249 Hz keeps a 20 s window at about 5,000 "
         "samples per CPU)", {"freq_hz": 249}, {"streamed": True}),
    Case("a 3 s window is one chunk: folded after it", Request(duration_s=3.0), QUIET, TWO,
         EXACT_LINE, {"duration_s": 3.0}, {"streamed": False}),
    Case("a stopped target: gdb replaced by libdw",
         Request(pmp_backend=SnapshotBackend.GDB), Targets(stopped=True), TWO, EXACT_LINE,
         {"pmp_backend": SnapshotBackend.LIBDW}, {}, "would resume the stopped target"),
    Case("a running target keeps gdb", Request(pmp_backend=SnapshotBackend.GDB), QUIET, TWO,
         EXACT_LINE.replace("libdw", "gdb"), {"pmp_backend": SnapshotBackend.GDB}),
    Case("no debug information: no inlined frames",
         Request(), Targets(debug_info=False), TWO,
         EXACT_LINE + " (no debug information in the target's executables: no inlined "
         "frames)", {"inline_frames": False}),
    Case("--inline-frames given", Request(inline_frames=True), Targets(debug_info=False), TWO,
         EXACT_LINE, {"inline_frames": True}),
    Case("--owner-rate 0 and --no-holder-stacks",
         Request(owner_rate_hz=0.0, holder_stacks=False), QUIET, TWO,
         EXACT_LINE.replace("lock owners at 20/s", "no owner sampler"),
         {"owner_rate_hz": 0.0, "holder_stacks": False}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_plan_of_each_case(case: Case) -> None:
    p = plan(case.request, case.targets, case.machine)
    assert p.start_line() == case.line
    for name, want in case.settings.items():
        assert getattr(p.settings, name) == want, name
    for name, want in case.modes.items():
        assert getattr(p, name) == want, name
    if case.warning:
        assert any(case.warning in w for w in p.warnings), p.warnings
    else:
        assert p.warnings == ()
    # the automatic budget is said once, by its warning: the start line does not repeat it
    assert "would write about" not in case.line
    assert p.to_json()["start_line"] == case.line


def test_a_plan_is_the_same_for_the_same_inputs() -> None:
    for case in CASES:
        assert plan(case.request, case.targets, case.machine) == \
            plan(case.request, case.targets, case.machine)


@pytest.mark.parametrize(("request_", "machine", "error", "text"), [
    (Request(off_cpu=OffCpu.SCHED), NO_SCHED, PermissionDenied, "sched:sched_switch"),
    (Request(overhead=Overhead.EXACT), NO_SCHED, PermissionDenied, "sched:sched_switch"),
    (Request(overhead=Overhead.LIGHT, off_cpu=OffCpu.PMP), TWO, UsageError, "--overhead light"),
    (Request(overhead=Overhead.EXACT, max_data_mb_per_s=4.0), TWO, UsageError,
     "--overhead exact sets"),
])
def test_what_cannot_be_planned_is_refused(request_: Request, machine: Machine,
                                           error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        plan(request_, Targets(), machine)
    if error is UsageError:  # refused before anything is read
        with pytest.raises(error, match=text):
            validate(request_)


@pytest.mark.parametrize(("request_", "machine", "rates", "debug"), [
    (Request(), TWO, True, True),
    (Request(attached=False), TWO, False, False),
    (Request(off_cpu=OffCpu.PMP), TWO, False, True),
    (Request(off_cpu=OffCpu.SCHED), TWO, True, True),
    (Request(sched_stack_hz=0.0), TWO, False, True),
    (Request(sched_stack_hz=50.0), TWO, True, True),
    (Request(sched_stack_hz=50.0), NOT_WIDE, False, True),  # a rate per thread: no period
    (Request(max_data_mb_per_s=4.0), NOT_WIDE, True, True),
    (Request(), NO_SCHED, False, True),
    (Request(overhead=Overhead.LIGHT), TWO, False, True),
    (Request(overhead=Overhead.EXACT), TWO, False, True),
    (Request(inline_frames=False), TWO, True, False),
])
def test_what_is_read_before_planning(request_: Request, machine: Machine, rates: bool,
                                      debug: bool) -> None:
    """The switch rates (half a second of ``/proc``) only where a rule uses them."""
    assert needs_switch_rates(request_, machine) is rates
    assert needs_debug_info(request_) is debug


@pytest.mark.parametrize(("request_", "wants"), [
    (Request(), True), (Request(off_cpu=OffCpu.SCHED), True), (Request(off_cpu=OffCpu.PMP), False),
    (Request(off_cpu=OffCpu.NONE), False), (Request(overhead=Overhead.LIGHT), False),
    (Request(overhead=Overhead.EXACT), True), (Request(attached=False), True),
])
def test_perf_is_asked_about_the_scheduler_only_when_it_would_record_it(
        request_: Request, wants: bool) -> None:
    assert wants_scheduler(request_) is wants


def test_the_light_rule_at_its_threshold() -> None:
    """Light just above ``LIGHT_ABOVE_LOSS`` of the machine's CPUs, not at it."""
    at = budget.LIGHT_ABOVE_LOSS * 2 / budget.RECORD_S_PER_SWITCH  # switches/s on 2 CPUs
    below = Targets(switch_rates={1: at * 0.99}, measured=True)
    above = Targets(switch_rates={1: at * 1.01}, measured=True)
    assert not plan(Request(), below, TWO).light
    assert plan(Request(), above, TWO).light
    assert not plan(Request(), above, Machine(cpus=4)).light


def test_the_help_states_the_plans_constants() -> None:
    from wallflame.cli import cli

    r = CliRunner().invoke(cli, ["collect", "--help"], terminal_width=200)
    text = " ".join(r.output.split())
    assert f"more than {budget.LIGHT_ABOVE_LOSS:.0%} of the machine's CPUs" in text
    assert f"more than {budget.AUTO_ABOVE_MB_PER_S:g} MB/s" in text
    assert f"within {budget.AUTO_MB_PER_S:g} MB/s" in text
    assert f"snapshots at {budget.LIGHT_PMP_HZ:g}/s, on-CPU at {budget.LIGHT_FREQ_HZ} Hz" in text
    assert f"({window_freq_hz(60, 499)} Hz for a minute, no lower)" in text
    assert f"default: {PMP_HZ:g} with --off-cpu pmp; {BOTH_PMP_HZ:g} with both" in text
    advanced = text.index("Advanced options")
    assert text.index("--overhead") < advanced < text.index("--off-cpu")


def test_only_the_plan_reads_what_the_user_asked() -> None:
    """Outside ``collect/plan.py``, no product module reads a field of a ``Request``: the
    command line builds one, the collector passes it to the plan and runs the plan's
    settings."""
    fields = set(Request.__dataclass_fields__)
    found = []
    for path in [*ROOT.glob("collect/*.py"), *ROOT.glob("fold/**/*.py"),
                 *ROOT.glob("report/**/*.py"), *ROOT.glob("wallflame/**/*.py")]:
        if path.name == "plan.py" or path.is_symlink() or "wallflame/collect" in str(path):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in fields | {"off_cpu_left"} \
                    and isinstance(node.value, ast.Name) and node.value.id == "request":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} request.{node.attr}")
    assert found == []
