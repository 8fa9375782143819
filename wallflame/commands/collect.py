"""``wallflame collect``: profile a running process or a command into a run directory."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click

from wallflame.assemble.assembly import assemble
from wallflame.collect import budget
from wallflame.collect.plan import (
    ATTACHED_DURATION_S,
    BOTH_PMP_HZ,
    DEFAULTS,
    PMP_HZ,
    WINDOW_SAMPLES_PER_CPU,
    CollectPlan,
    Overhead,
    Request,
    validate,
    window_freq_hz,
)
from wallflame.collect.procs import selection
from wallflame.collect.run import Progress, collect
from wallflame.collect.stream import StreamProcess
from wallflame.errors import (
    EXIT_INCONCLUSIVE,
    EXIT_INPUT,
    InputError,
    UsageError,
    say,
)
from wallflame.output import print_losses
from wallflame.report.findings import Finding
from wallflame.report.text import finding_lines
from wallflame.rundir import BACKENDS, OFF_CPU_MODES, SUMMARY, OffCpu, SnapshotBackend

#: The folding process (``wallflame.assemble.streaming``): folds perf's chunks while they are
#: recorded, then writes the run directory.
STREAM_COMMAND = [sys.executable, "-m", "wallflame.assemble.streaming"]


def _finish(out: str, streaming: StreamProcess | None) -> None:
    """The run directory, written by the folding process; if there was none (a window that
    is one chunk of every recorder, ``collect.perf.one_chunk``), or that process could not
    start or failed otherwise than with one of wallflame's errors (which it has printed),
    assembled here from every chunk in raw/, as ``wallflame finish`` does, with what that
    cost in ``meta.json`` ``postprocess.cost``."""
    code = None if streaming is None else streaming.finish()
    if code == 0:
        return
    if code is not None and EXIT_INPUT <= code <= EXIT_INCONCLUSIVE:
        sys.exit(code)
    if code is not None:  # (one that never started is already among the warnings)
        say(f"wallflame: warning: the folding process failed (exit {code}): every chunk is "
            "folded now")
    print_losses(assemble(out, after_collect=True).meta)


def _progress_printer() -> tuple[object, object]:
    """A live one-line status on a terminal (rich); nothing on a pipe."""
    if not sys.stderr.isatty():
        return None, None
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    live = Live(Text(""), console=Console(stderr=True), refresh_per_second=4, transient=True)

    def show(p: Progress) -> None:
        live.update(Text(f"collecting {p.elapsed_s:5.1f}s  perf chunks {p.chunks}  "
                         f"snapshots {p.snapshots}  target paused {p.pause_ms:.0f} ms in all  "
                         f"failed {p.failed}"))

    return live, show


def _what(pids: tuple[int, ...], trees: tuple[int, ...], cgroups: tuple[str, ...]) -> str:
    return ", ".join([*(f"PID {p}" for p in pids), *(f"PID {p} and its descendants"
                                                      for p in trees),
                      *(f"cgroup {c}" for c in cgroups)])


def _positive(value: float | None, zero: bool = False) -> bool:
    """Unset, or a finite number above zero (or zero itself, with ``zero``): ``nan`` and
    ``inf``, which click's FLOAT accepts, are refused."""
    return value is None or (math.isfinite(value) and (value > 0 or (zero and value == 0)))


#: The fine knobs, listed apart in ``--help``: ``--overhead`` and the plan choose them.
ADVANCED = ("off_cpu", "pmp_backend", "pmp_rate", "owner_rate", "holder_stacks", "freq",
            "call_graph", "sched_call_graph", "max_pause_ms", "max_data_mb_per_s",
            "sched_stack_hz", "release_sites", "wakers", "inline_frames")


class _CollectCommand(click.Command):
    """``--help`` lists the advanced options after the others, under a heading of their own."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: dict[bool, list[tuple[str, str]]] = {False: [], True: []}
        for param in self.get_params(ctx):
            row = param.get_help_record(ctx) if isinstance(param, click.Option) else None
            if row is not None:
                rows[param.name in ADVANCED].append(row)
        with formatter.section("Options"):
            formatter.write_dl(rows[False])
        with formatter.section("Advanced options (chosen by --overhead and the plan when not "
                               "given)"):
            formatter.write_dl(rows[True])


def _default(value: object) -> str:
    """The end of an advanced option's help: its default when the plan does not choose it."""
    return f"  [default: {value}]"


@click.command("collect", cls=_CollectCommand,
               context_settings={"ignore_unknown_options": False})
@click.option("-p", "--pid", "pids", type=int, multiple=True,
              help="Attach to this running process (repeat for several processes).")
@click.option("--pid-tree", "trees", type=int, multiple=True,
              help="Attach to this process and all its descendants, including the processes "
              "they fork during the window (a pre-fork server: give its first process).")
@click.option("--cgroup", "cgroups", multiple=True,
              help="Attach to every process of this cgroup v2 (and of the cgroups below it): "
              "its path as /proc/PID/cgroup shows it (/system.slice/postgresql.service) or "
              "its directory.")
@click.option("-o", "--output", "out", required=True, type=click.Path(file_okay=False),
              help="Run directory to create (must not exist, or be empty).")
@click.option("-d", "--duration", type=float, default=None,
              help=f"Seconds to collect (default: {ATTACHED_DURATION_S:g} with --pid; until "
              "the command exits when launching one).")
@click.option("--overhead", type=click.Choice([o.value for o in Overhead]),
              default=Overhead.AUTO.value, show_default=True,
              help="What the collect may cost the target. auto: every scheduler switch "
              "recorded with its stack, unless recording every switch of an attached target "
              f"would cost more than {budget.LIGHT_ABOVE_LOSS:.0%} of the machine's CPUs "
              "(then light), or its stacks would write more than "
              f"{budget.AUTO_ABOVE_MB_PER_S:g} MB/s (then sampled within "
              f"{budget.AUTO_MB_PER_S:g} MB/s). light: no scheduler recording; each thread's "
              "totals from the kernel's counters, its blocked time split over snapshots at "
              f"{budget.LIGHT_PMP_HZ:g}/s, on-CPU at {budget.LIGHT_FREQ_HZ} Hz, no holder "
              "stacks. exact: every switch with its stack, whatever it costs. The collect "
              "prints what it chose when it starts.")
@click.option("--off-cpu", type=click.Choice(OFF_CPU_MODES), default=None,
              help="Off-CPU evidence: stack snapshots (pmp), scheduler events (sched), both "
              "(exact times from the scheduler; snapshots name the locks waited on and fill in "
              "stacks) or none. Lock holders' stacks come from the owner sampler, which "
              "stops only a lock's owner (modes pmp and both)." + _default(DEFAULTS.off_cpu))
@click.option("--pmp-backend", type=click.Choice(BACKENDS), default=None,
              help="Snapshot tool: libdw (elfutils' unwinder kept loaded in wallflame: lowest "
              "pause and cost, threads stopped one at a time), eu-stack (the same, a new "
              "eu-stack process per snapshot), gdb "
              "(one gdb kept attached, consistent snapshots), gdb-batch (a gdb per snapshot, "
              "like pt-pmp). Any ptrace stop makes blocked calls such as epoll_wait in the "
              "target return early (EINTR); perf and sched never do. While the gdb backend "
              "is attached, a SIGINT sent to the target is held by gdb (other signals pass)."
              + _default(DEFAULTS.pmp_backend))
@click.option("--pmp-rate", type=float, default=None,
              help=f"Snapshots per second (default: {PMP_HZ:g} with --off-cpu pmp; "
              f"{BOTH_PMP_HZ:g} with both, where the scheduler gives the times and snapshots "
              "name the locks and fill in stacks).")
@click.option("--owner-rate", type=float, default=None,
              help="Rounds per second of the owner sampler (modes both and pmp): it reads "
              "each thread's /proc syscall file and stops each lock owner it finds for a "
              "fraction of a millisecond to take its stack (unless --no-holder-stacks); 0 "
              "turns it off (no holder stacks)." + _default(DEFAULTS.owner_rate_hz))
@click.option("--holder-stacks/--no-holder-stacks", default=None,
              help="Whether the owner sampler stops each lock owner it finds to take its "
              "stack. Without: owners are still named at --owner-rate, nothing is stopped, "
              "and no holder stacks are shown." + _default("--holder-stacks"))
@click.option("-F", "--freq", type=int, default=None,
              help="perf on-CPU sampling frequency (Hz). Left to its default, a window "
              f"longer than {WINDOW_SAMPLES_PER_CPU / DEFAULTS.freq_hz:.0f} s is sampled at "
              "the rate that takes as many samples "
              f"({window_freq_hz(60, DEFAULTS.freq_hz)} Hz for a minute, no lower), and a "
              f"light collect at {budget.LIGHT_FREQ_HZ} Hz." + _default(DEFAULTS.freq_hz))
@click.option("--call-graph", type=click.Choice(["fp", "dwarf"]), default=None,
              help="perf stack unwinding: frame pointers (cheap) or DWARF (keeps frames of "
              "code without frame pointers, such as glibc; costs more)."
              + _default(DEFAULTS.call_graph))
@click.option("--sched-call-graph", type=click.Choice(["fp", "dwarf"]), default=None,
              help="Stack unwinding of scheduler (off-CPU) stacks: DWARF keeps the callers of "
              "blocking glibc functions, which frame pointers lose."
              + _default(DEFAULTS.sched_call_graph))
@click.option("--max-pause-ms", type=float, default=None,
              help="Pause budget per snapshot: three snapshots in a row over it halve the "
              "snapshot rate (ten well under it restore it step by step)."
              + _default(DEFAULTS.max_pause_ms))
@click.option("--max-data-mb-per-s", type=float, default=None,
              help="Data-rate budget for busy servers (for example 4: about 240 MB a "
              "minute): scheduler stacks are then sampled at the rate that keeps it (planned "
              "from the target's switch rate before the window). Every switch is still "
              "recorded, so blocked and run-queue totals stay exact, but their split over "
              "wait classes and stacks is estimated from the sampled stacks "
              "(docs/collecting.md gives its error). Default: see --overhead.")
@click.option("--sched-stack-hz", type=float, default=None,
              help="Scheduler stacks per second per thread (default: every switch, or from "
              "the data-rate budget; 0: every switch, 8 KiB copied per switch with DWARF, "
              "whatever the target's switch rate).")
@click.option("--release-sites/--no-release-sites", default=None,
              help="Also record where locks are released: the target's futex wakes with their "
              "call chains (a perf recording of its own; docs/collecting.md gives its cost)."
              + _default("--no-release-sites"))
@click.option("--wakers/--no-wakers", default=None,
              help="Record each wake-up's waker, for the critical path of every wait "
              "(docs/critical-path.md; root, with the scheduler). It costs a program that "
              "switches often several points of throughput (benchmarks/wakers_cost.py)."
              + _default("--no-wakers"))
@click.option("--inline-frames/--no-inline-frames", default=None,
              help="Inlined frames in perf's stacks, resolved by addr2line for every distinct "
              "address. Default: on, unless an attached target's executables have no debug "
              "information (then none can be found, and the lookups cost more CPU than the "
              "rest of perf script).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def command(pids: tuple[int, ...], trees: tuple[int, ...], cgroups: tuple[str, ...], out: str,
            duration: float | None, overhead: str, off_cpu: str | None,
            pmp_backend: str | None, pmp_rate: float | None, owner_rate: float | None,
            holder_stacks: bool | None, freq: int | None, call_graph: str | None,
            sched_call_graph: str | None, max_pause_ms: float | None,
            max_data_mb_per_s: float | None, sched_stack_hz: float | None,
            release_sites: bool | None, wakers: bool | None, inline_frames: bool | None,
            command: tuple[str, ...]) -> None:
    """Collect on-CPU and off-CPU evidence into a run directory.

    \b
      wallflame collect --pid PID [--pid PID...] --duration S -o RUN_DIR
      wallflame collect --pid-tree PID --duration S -o RUN_DIR
      wallflame collect --cgroup /system.slice/x.service --duration S -o RUN_DIR
      wallflame collect -o RUN_DIR [--duration S] -- CMD ARGS...

    Several processes are one profile: each thread is named after its process as ps shows
    it, and the report groups them by that name.  A launched command is followed with every
    process it starts.  Ctrl-C or SIGTERM ends collection early and keeps everything collected
    so far.
    """
    attach = bool(pids or trees or cgroups)
    if attach == bool(command):
        raise InputError("give either --pid/--pid-tree/--cgroup or a command after --",
                         "wallflame collect --pid 1234 -o run, or: "
                         "wallflame collect -o run -- ./app")
    if not all(_positive(v) for v in (pmp_rate, freq, duration, max_pause_ms)):
        raise UsageError("--pmp-rate, -F, --duration and --max-pause-ms must be positive "
                         "numbers", "give each a finite number above 0, e.g. --duration 10")
    if not _positive(max_data_mb_per_s) or not all(
            _positive(v, zero=True) for v in (sched_stack_hz, owner_rate)):
        raise UsageError("--max-data-mb-per-s must be a positive number, --sched-stack-hz and "
                         "--owner-rate numbers not negative", "give finite numbers, e.g. "
                         "--owner-rate 0 for no owner sampler")
    select = selection(pids, trees, cgroups) if attach else None
    request = Request(
        attached=attach, overhead=Overhead(overhead), duration_s=duration,
        off_cpu=None if off_cpu is None else OffCpu(off_cpu),
        pmp_backend=None if pmp_backend is None else SnapshotBackend(pmp_backend),
        pmp_rate_hz=pmp_rate, owner_rate_hz=owner_rate, holder_stacks=holder_stacks,
        freq_hz=freq, call_graph=call_graph, sched_call_graph=sched_call_graph,
        max_pause_ms=max_pause_ms, max_data_mb_per_s=max_data_mb_per_s,
        sched_stack_hz=sched_stack_hz, release_sites=release_sites,
        inline_frames=inline_frames, wakers=wakers)

    validate(request)
    live, show = _progress_printer()

    def announce(p: CollectPlan) -> None:
        if live is None:  # (a terminal shows the live status line instead)
            what = _what(pids, trees, cgroups) if attach else " ".join(command)
            click.echo(f"wallflame: collecting from {what} into {out}", err=True)
        click.echo(f"wallflame: {p.start_line()}", err=True)

    try:
        if live is not None:
            live.__enter__()  # type: ignore[attr-defined]
        col = collect(Path(out), request, command=list(command) or None,
                      progress=show, select=select,  # type: ignore[arg-type]
                      stream_command=STREAM_COMMAND, announce=announce)
    finally:
        if live is not None:
            live.__exit__(None, None, None)  # type: ignore[attr-defined]
    _finish(out, getattr(col, "streaming", None))
    pause = (col.pmp.pause if col.pmp else None) or {}
    if len(col.processes) > 1:
        click.echo(f"wallflame: {len(col.processes)} processes", err=True)
    click.echo(f"wallflame: wrote {out} ({col.window.window_ns / 1e9:.1f} s, "
               f"ended by {col.ended_by}, "
               f"{len(col.perf_recording('perf').get('chunks', []))} perf chunks, "
               f"{pause.get('snapshots', 0)} snapshots, pause median "
               f"{pause.get('median_ms', 0)} ms)", err=True)
    _print_findings(Path(out))


def _print_findings(out: Path) -> None:
    """The run's findings (``summary.json``), as the text report lists them."""
    try:
        found = json.loads((out / SUMMARY).read_text()).get("findings") or []
    except (OSError, ValueError):
        return
    for line in finding_lines([Finding(**f) for f in found]):
        click.echo(f"wallflame: {line}", err=True)
