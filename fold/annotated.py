"""wallflame's own annotated folded files (``# wallflame-folded 1``), as written by collect."""

from __future__ import annotations

from wallflame.fold.options import FoldOptions
from wallflame.folded import MAGIC, read_annotated
from wallflame.profile import Profile
from wallflame.textio import iter_lines

NAME = "wallflame"


def detect(head: str) -> bool:
    return head.startswith(MAGIC)


def fold(path: str, options: FoldOptions, profile: Profile) -> None:
    read_annotated(iter_lines(path), profile)
