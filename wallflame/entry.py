"""The ``wallflame`` process: its entry point, how it ends, and the plain report's short way.

``wallflame report INPUT... [-o OUT] [--format F] [--title T]``, the command a ticket or a CI
job runs most, is read here without click (whose import, with the standard library it pulls
in, is a fifth of such a run); any other command line, and any option this reader does not
know, goes to the full command line (``wallflame.cli``), which parses it the same way
(``tests/unit/hub/test_entry.py`` compares the two).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from wallflame.errors import EXIT_INTERRUPTED, WallflameError, say

#: Set by a command that leaves nothing to clean up (``report``): its process then ends
#: without freeing, one by one, the millions of objects a big profile is made of (a tenth of
#: the command's time).
_quick_exit = False
_kept: list[object] = []
_in_main = False


def quick_exit(*keep: object) -> bool:
    """Let a successful run of this process end with ``os._exit`` once its streams are
    flushed, holding on to ``keep`` until then (not freed when the command returns).  Only
    ``run_main`` (a real process) acts on it, never a test's in-process run; says whether it
    will."""
    global _quick_exit
    _quick_exit = True
    if _in_main:
        _kept.extend(keep)
    return _in_main


def run_main(body: Callable[[], Any]) -> None:
    """Run ``body`` as the process: a quick exit once it succeeded (``quick_exit``), one line
    and exit 130 on Ctrl-C, silence when the reader of standard output went away."""
    global _in_main
    _in_main = True
    try:
        body()
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
        say("wallflame: interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        # The reader went away (``wallflame fold x | head``): not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)


#: The report options read without click: option -> parameter name.
_VALUED = {"-o": "output", "--output": "output", "--format": "fmt", "--title": "title"}


def plain_report(args: Sequence[str]) -> dict[str, Any] | None:
    """The parameters of ``wallflame report ARGS`` when ARGS hold only inputs and the options
    in ``_VALUED`` (as click would read them: the next word, or ``--opt=value``, the last
    one given wins); ``None`` for anything else (help, other options, an unknown format,
    no input), which the full command line then reads."""
    from wallflame.report.writers import NAMES

    params: dict[str, Any] = {"output": None, "fmt": None, "title": None}
    inputs: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "-" or not word.startswith("-"):
            inputs.append(word)
            i += 1
            continue
        name, eq, value = word.partition("=")
        if name not in _VALUED or (eq and not name.startswith("--")):
            return None
        if not eq:
            if i + 1 >= len(args):
                return None
            value = args[i + 1]
            i += 1
        params[_VALUED[name]] = value
        i += 1
    if not inputs or (params["fmt"] is not None and params["fmt"] not in NAMES):
        return None
    return {"inputs": tuple(inputs), **params}


def _report(params: dict[str, Any]) -> None:
    from wallflame.reportrun import run

    try:
        run(**params)
    except WallflameError as e:
        e.show()
        sys.exit(e.exit_code)
    sys.exit(0)


def main() -> None:
    args = sys.argv[1:]
    params = plain_report(args[1:]) if args[:1] == ["report"] else None
    if params is not None:
        run_main(lambda: _report(params))
        return
    from wallflame.cli import main as full

    full()


__all__ = ["main", "plain_report", "quick_exit", "run_main"]
