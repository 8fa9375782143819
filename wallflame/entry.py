"""The ``wallflame`` command's entry point, and the plain report's short way.

``wallflame report INPUT... [-o OUT] [--format F] [--title T]``, the command a ticket or a CI
job runs most, is read here without click (whose import, with the standard library it pulls
in, is a fifth of such a run); any other command line, and any option this reader does not
know, goes to the full command line (``wallflame.cli``), which parses it the same way
(``tests/unit/hub/test_entry.py`` compares the two).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from wallflame.errors import WallflameError
from wallflame.exits import run_main

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


__all__ = ["main", "plain_report"]
