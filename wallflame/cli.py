"""The ``wallflame`` command line: a click group wiring the stages together."""

from __future__ import annotations

import importlib
from typing import Any

import click

from wallflame import __version__
from wallflame.errors import WallflameError
from wallflame.exits import run_main

#: The modules of ``wallflame.commands`` (a test checks the list against the package).
COMMANDS = ("ab", "check", "collect", "demo", "diff", "doctor", "finish", "fold", "report")


class LazyGroup(click.Group):
    """Commands are modules of ``wallflame.commands``, imported only when used: starting
    ``wallflame fold`` does not pay for the report's or the collector's imports."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except WallflameError as e:  # its line, its exit code
            e.show()
            ctx.exit(e.exit_code)

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


def main() -> None:
    """The full command line (``wallflame.entry.main`` sends the plain report elsewhere)."""
    run_main(lambda: cli.main(standalone_mode=True))
