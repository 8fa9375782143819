"""How the ``wallflame`` process ends: at once after a success, one line on Ctrl-C, quietly
on a closed pipe."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from wallflame.errors import EXIT_INTERRUPTED, say

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


__all__ = ["quick_exit", "run_main"]
