"""The ``wallflame`` command line: a click group wiring the stages together."""

from __future__ import annotations

import importlib
import os
import sys

import click

from wallflame import __version__
from wallflame.errors import EXIT_INTERRUPTED

#: The modules of ``wallflame.commands`` (a test checks the list against the package).
COMMANDS = ("check", "collect", "demo", "diff", "doctor", "finish", "fold", "report")


class LazyGroup(click.Group):
    """Commands are modules of ``wallflame.commands``, imported only when used: starting
    ``wallflame fold`` does not pay for the report's or the collector's imports."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        mod = importlib.import_module(f"wallflame.commands.{cmd_name}")
        cmd = getattr(mod, "command", None)
        return cmd if isinstance(cmd, click.Command) else None


def _version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"wallflame, version {__version__}")
        ctx.exit()


# (``click.version_option`` would look up its texts' translations on every start)
@click.group(cls=LazyGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Show the version and exit.")
def cli() -> None:
    """Where did each thread's wall-clock time go?

    Merges on-CPU samples (perf) with off-CPU evidence (stack snapshots, scheduler events) of a
    native Linux process into one time axis, and renders reports. Exit codes: 0 ok,
    1 regression (check), 2 usage, 3 bad input, 4 target problem, 5 permission denied,
    6 external tool missing or failed, 7 inconclusive (check), 130 interrupted.
    """


#: Set by a command that leaves nothing to clean up (``report``): its process then ends
#: without freeing, one by one, the millions of objects a big profile is made of (a tenth of
#: the command's time).
_quick_exit = False
_kept: list[object] = []


def quick_exit(*keep: object) -> bool:
    """Let a successful run of this process end with ``os._exit`` once its streams are
    flushed, holding on to ``keep`` until then (not freed when the command returns).  Only
    ``main`` (a real process) acts on it, never a test's in-process run; says whether it
    will."""
    global _quick_exit
    _quick_exit = True
    if _in_main:
        _kept.extend(keep)
    return _in_main


_in_main = False


def main() -> None:
    global _in_main
    _in_main = True
    try:
        cli.main(standalone_mode=True)
    except SystemExit as done:
        if _quick_exit and not done.code:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except OSError:
                pass  # the reader went away: as below, not an error
            os._exit(0)
        raise
    except KeyboardInterrupt:
        click.echo("wallflame: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        # The reader went away (``wallflame fold x | head``): not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
