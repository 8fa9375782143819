"""User-facing failures: one line on stderr, a documented exit code, the fix.

Anything that is not a ``WallflameError`` is a bug and may show a traceback.
The exit codes are listed in the README; keep the two in step.
"""

from __future__ import annotations

import sys
from typing import IO, Any

EXIT_OK = 0
EXIT_REGRESSION = 1  # wallflame check: a threshold was exceeded
EXIT_USAGE = 2  # bad command line (click's own code)
EXIT_INPUT = 3  # unreadable or unusable input file
EXIT_TARGET = 4  # target process missing, zombie, kernel thread, reused PID, already traced
EXIT_PERMISSION = 5  # perf or ptrace not permitted
EXIT_TOOL = 6  # a required external tool is missing or failed
EXIT_INCONCLUSIVE = 7  # wallflame check: not enough or partial data to judge
EXIT_INTERRUPTED = 130


def say(line: str, file: IO[Any] | None = None) -> None:
    """One line on standard error (or ``file``), whatever it holds: control characters (a
    newline in a path or a thread name) are written escaped, and so is what the stream's
    encoding cannot hold."""
    stream = file if file is not None else sys.stderr
    if not line.isprintable():  # a newline in a path or name must not start a second line
        line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)
    try:
        stream.write(line + "\n")
    except UnicodeEncodeError:
        enc = getattr(stream, "encoding", None) or "utf-8"
        stream.write((line + "\n").encode(enc, "backslashreplace").decode(enc))
    stream.flush()


class WallflameError(Exception):
    """A failure the user can fix: what happened and what to do about it.  Not a click
    exception, so that the code which raises it does not import click; the command line
    (``wallflame.cli``) shows it and exits with ``exit_code``."""

    exit_code = EXIT_INPUT

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def format_message(self) -> str:
        return f"{self.message} (fix: {self.fix})" if self.fix else self.message

    def show(self, file: IO[Any] | None = None) -> None:
        say(f"wallflame: error: {self.format_message()}", file)


class InputError(WallflameError):
    exit_code = EXIT_INPUT


class UsageError(WallflameError):
    """An option's value that no run could take (``nan``, a negative duration): a bad command
    line, as click's own errors are, in one line."""

    exit_code = EXIT_USAGE


class TargetError(WallflameError):
    exit_code = EXIT_TARGET


class PermissionDenied(WallflameError):
    exit_code = EXIT_PERMISSION


class ToolError(WallflameError):
    exit_code = EXIT_TOOL


class Inconclusive(WallflameError):
    exit_code = EXIT_INCONCLUSIVE
