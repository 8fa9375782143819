"""User-facing failures: one line on stderr, a documented exit code, the fix.

Anything that is not a ``WallflameError`` is a bug and may show a traceback.
The exit codes are listed in the README; keep the two in step.
"""

from __future__ import annotations

from typing import IO, Any

import click

EXIT_OK = 0
EXIT_REGRESSION = 1  # wallflame check: a threshold was exceeded
EXIT_USAGE = 2  # bad command line (click's own code)
EXIT_INPUT = 3  # unreadable or unusable input file
EXIT_TARGET = 4  # target process missing, zombie, kernel thread, reused PID, already traced
EXIT_PERMISSION = 5  # perf or ptrace not permitted
EXIT_TOOL = 6  # a required external tool is missing or failed
EXIT_INCONCLUSIVE = 7  # wallflame check: not enough or partial data to judge
EXIT_INTERRUPTED = 130


class WallflameError(click.ClickException):
    """A failure the user can fix: what happened and what to do about it."""

    exit_code = EXIT_INPUT

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix

    def format_message(self) -> str:
        return f"{self.message} (fix: {self.fix})" if self.fix else self.message

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"wallflame: error: {self.format_message()}", err=True)


class InputError(WallflameError):
    exit_code = EXIT_INPUT


class TargetError(WallflameError):
    exit_code = EXIT_TARGET


class PermissionDenied(WallflameError):
    exit_code = EXIT_PERMISSION


class ToolError(WallflameError):
    exit_code = EXIT_TOOL


class Inconclusive(WallflameError):
    exit_code = EXIT_INCONCLUSIVE
