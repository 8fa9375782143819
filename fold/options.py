"""Options shared by every folder (the ``Folder`` protocol lives in ``wallflame.fold``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wallflame.classify import Rules


@dataclass
class FoldOptions:
    """What a folder is asked to do.

    event:          perf event to keep (``None``: every event, each kept apart in metadata;
                    on-CPU events are folded, scheduler events become off-CPU time).
    kernel:         mark kernel frames with ``_[k]`` (stackcollapse ``--kernel``/``--all``).
    inline:         keep inlined frames (gdb and eu-stack ``-i`` print them; perf with srcline).
    rules:          wait classification rules (built-in table plus a user file).
    folded_unit:    the unit of plain folded input: ``samples`` unless told ``ns``/``us``.
    snapshot_interval_ns: weight of one snapshot of a blocked thread when the log carries no
                    timestamps (pt-pmp logs without ``TS`` lines); default 1 s, pt-pmp's pace.
    include_running: also add snapshots of running threads as on-CPU time (off by default:
                    perf measures on-CPU better; they are always counted for coverage).
    stops_window_ns: the collect's window (ns since the epoch): the tracer's timing of its
                    own stops counts only what lies inside it, as the scheduler's view of them
                    does (``fold.snapshots.windowed_stops``).
    stop_marks:     keep where each blocked thread was stopped (``wallflame.stops.STOP_MARKS``
                    in ``meta.extra``, which the caller pops): ``wallflame finish`` gives them
                    to the scheduler's split.
    """

    event: str | None = None
    kernel: bool = False
    inline: bool = True
    rules: Rules | None = None
    folded_unit: str = "samples"
    snapshot_interval_ns: int = 1_000_000_000
    include_running: bool = False
    stops_window_ns: tuple[int, int] | None = None
    stop_marks: bool = False

    def get_rules(self) -> Rules:
        from wallflame.classify import default_rules

        return self.rules or default_rules()
