"""wallflame's own annotated folded files (``# wallflame-folded 1``), as written by collect."""

from __future__ import annotations

from wallflame.fold import heads
from wallflame.fold.options import FoldOptions
from wallflame.folded import read_annotated
from wallflame.profile import Profile
from wallflame.textio import iter_lines

NAME = "wallflame"
detect = heads.annotated


def fold(path: str, options: FoldOptions, profile: Profile) -> None:
    read_annotated(iter_lines(path), profile)
