"""Rendering a report: inputs read (or a range of run directories), one report written.

What ``wallflame report`` does once its command line is read, by click
(``wallflame.commands.report``) or by the plain report's short way (``wallflame.entry``).
"""

from __future__ import annotations

import gc
import os

from wallflame.errors import say
from wallflame.exits import quick_exit
from wallflame.fold import FoldOptions, load_inputs
from wallflame.output import print_losses
from wallflame.profile import Profile
from wallflame.report.writers import extension, format_for
from wallflame.runfiles import is_run_dir


def default_output(inputs: tuple[str, ...], fmt: str | None) -> str:
    if fmt == "txt":
        return "-"
    ext = extension(fmt or "html")
    if len(inputs) == 1 and is_run_dir(inputs[0]):
        return os.path.join(inputs[0], f"report{ext}")
    return f"report{ext}"


def load_range(inputs: tuple[str, ...], from_s: float | None, to_s: float | None
               ) -> Profile:
    """The run directories restricted to ``[from_s, to_s)`` seconds into each one's window,
    merged."""
    from wallflame import timeline
    from wallflame.errors import InputError
    from wallflame.profile import merge_all
    from wallflame.report.timerange import restrict, window_range
    from wallflame.rundir import load_run_dir

    parts = []
    for path in inputs:
        if not is_run_dir(path):
            raise InputError(f"{path}: --from/--to need a run directory (its timeline)",
                             "give a directory written by wallflame collect")
        tl = timeline.load(path)
        parts.append(restrict(load_run_dir(path), tl, window_range(tl, from_s, to_s)))
    return parts[0] if len(parts) == 1 else merge_all(parts)


#: ``--view``: the wall-clock time of the threads, or the critical path of their waits.
VIEWS = ("wall", "blame")


def blame_inputs(inputs: tuple[str, ...], output: str | None, fmt: str | None
                 ) -> tuple[tuple[str, ...], str]:
    """``--view blame``: the run directory's ``blame.folded`` (ns of waiting) and where its
    report goes (default ``RUN/blame.html``; a folded report to standard output)."""
    from wallflame.errors import InputError
    from wallflame.runfiles import BLAME

    if len(inputs) != 1 or not is_run_dir(inputs[0]):
        raise InputError("--view blame needs one run directory",
                         "give a directory written by wallflame collect")
    path = os.path.join(inputs[0], BLAME)
    if not os.path.exists(path):
        raise InputError(f"{inputs[0]}: no {BLAME}: the wakers were not recorded (without "
                         "--wakers, a light collect, --off-cpu pmp or none, or not root)",
                         "collect again as root with the scheduler and --wakers: wallflame "
                         "collect --wakers ...")
    if output is None:
        ext = extension(fmt or "html")
        output = "-" if ext == ".folded" or fmt == "txt" else \
            os.path.join(inputs[0], f"blame{ext}")
    return (path,), output


def run(inputs: tuple[str, ...], output: str | None = None, fmt: str | None = None,
        state: str = "all", unit: str = "samples", title: str | None = None,
        rules: str | None = None, from_s: float | None = None,
        to_s: float | None = None, view: str = "wall") -> None:
    """Render ``inputs`` as one report (the parameters are ``wallflame report``'s)."""
    from wallflame.classify import load_rules, set_label_rules
    from wallflame.report.exports import add_run_facts, write_report

    if view == "blame":
        if from_s is not None or to_s is not None:
            from wallflame.errors import InputError

            raise InputError("--view blame covers the whole window",
                             "leave out --from/--to")
        inputs, output = blame_inputs(inputs, output, fmt)
        if format_for(output, fmt) == "folded":  # the file is the export
            from wallflame.output import open_output

            with open(inputs[0], encoding="utf-8", errors="replace") as src, \
                    open_output(output) as dst:
                dst.write(src.read())
            return
        unit, title = "ns", title or "Who made them wait (critical path of each wait)"

    # Reading a profile allocates millions of objects and frees almost none of them, which
    # makes the cyclic collector scan the growing heap again and again (a tenth of the run
    # time) for cycles that are not there.
    collecting, ending = gc.isenabled(), False
    gc.disable()
    try:
        extra = load_rules(rules) if rules else None
        set_label_rules(extra)
        if from_s is None and to_s is None:
            profile = load_inputs(inputs, FoldOptions(folded_unit=unit, rules=extra))
        else:
            profile = load_range(inputs, from_s, to_s)
        add_run_facts(profile, inputs)
        if state != "all":
            profile = profile.on_cpu() if state == "on" else profile.off_cpu()
        out = output or default_output(inputs, fmt)
        kind = format_for(out, fmt)
        if not (out == "-" and kind == "txt"):  # the text report lists them itself, at its end
            print_losses(profile.meta)
        write_report(profile, kind, out, title)
        ending = quick_exit(profile)  # the process ends soon: nothing is freed or collected
    finally:
        if collecting and not ending:
            gc.enable()
    if out != "-":
        size = os.path.getsize(out)
        say(f"wallflame: wrote {out} ({kind}, {size / 1024:.0f} KiB, "
            f"{len(profile.stacks)} stacks, {len(profile.per_thread())} threads)")


__all__ = ["default_output", "load_range", "run"]
