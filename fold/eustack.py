"""``eu-stack -p PID`` output (elfutils), plain or with ``-i`` (inlines), ``-m`` (modules) and
``-s`` (source lines), one dump or a snapshot log (pt-pmp ``TS`` lines, wallflame logs with the
eu-stack backend).

A dump starts with ``PID N - process``; its thread and frame lines are read by
``wallflame.fold.eustackframes``; ``-s`` adds indented source lines, ignored.
eu-stack prints no thread names: they come from the log's ``wallflame-proc`` lines when
present.  Weighting: see ``wallflame.fold.snapshots``.
"""

from __future__ import annotations

from wallflame.fold import heads
from wallflame.fold.options import FoldOptions
from wallflame.profile import Profile

NAME = "eu-stack"
detect = heads.eustack


def fold(path: str, options: FoldOptions, profile: Profile) -> None:
    from wallflame.fold import eustackframes, gdb, snapshotlog

    snapshotlog.fold_log(path, options, profile, [eustackframes.parse_header, gdb.parse_header],
                         {"eu-stack": eustackframes.frame, "gdb": gdb.frame})
