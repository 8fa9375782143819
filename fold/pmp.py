"""Placeholder: being written."""

from __future__ import annotations

from wallflame.errors import InputError
from wallflame.fold.options import FoldOptions
from wallflame.profile import Profile

NAME = "pmp"


def detect(head: str) -> bool:
    return False


def fold(path: str, options: FoldOptions, profile: Profile) -> None:
    raise InputError(f"format {NAME} is not supported yet")
