"""Each format recognised from the head of an input (its first 64 KiB as text), without
importing its folder.

``wallflame.fold`` tries these in ``ORDER``, then the folded-stacks folder's own ``detect``
(the last format tried, and the one a folded input is read with), so that a report of a folded
file does not import the gdb, eu-stack, pmp and perf folders only to hear that it is none of
theirs.  Each of those folders' ``detect`` is the function here.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from wallflame.folded import MAGIC
from wallflame.runfiles import SNAPSHOTS_MAGIC

#: A poor man's profiler line: a count, then a stack (``fold.ptpmp`` reads them with these).
PMP_LINE = re.compile(r"^ *(\d+) (\S.*)$")
#: The ``date`` line a pmp script may print first.
PMP_DATE = re.compile(r"^[A-Z][a-z]{2} [A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d ")

#: What any perf script header has (``fold.perf.lines.parse_header`` needs one or the other):
#: a word of digits (the thread id) starting in the first 64 characters, or a time followed
#: by a colon.
_PERF_DIGIT_WORD = re.compile(r"(?:^|\s)\d")
PERF_TID_END = 66
_PERF_TIME = re.compile(r"\d\.\d+:")
#: ``\t addr sym+off (dso)`` as perf prints a call-chain line (tab, or spaces then a dso).
_PERF_FRAME = re.compile(r"^(?:\t\s*[0-9a-fA-F]+ .*|\s+[0-9a-fA-F]+ .*\(.*\))$")

_GDB = re.compile(r"^Thread \d+(?:\.\d+)? \(.*\):$|^#\d+ +0x[0-9a-fA-F]+ in \S", re.MULTILINE)
_EUSTACK = re.compile(r"^PID \d+ - process$|^TID \d+:$", re.MULTILINE)


def annotated(head: str) -> bool:
    """wallflame's own annotated folded stacks (a run directory's ``*.folded``)."""
    return head.startswith(MAGIC)


def pmp(head: str) -> bool:
    """Aggregated poor man's profiler output: every line a count and a stack."""
    lines = [ln for ln in head.split("\n")[:40] if ln.strip()]
    if len(lines) > 1 and lines[-1] == head.rstrip("\n").rsplit("\n", 1)[-1]:
        lines = lines[:-1] or lines  # the last line of a 64 KiB head may be cut
    counts = 0
    for ln in lines:
        m = PMP_LINE.match(ln)
        if m is not None and ";" not in ln and not m.group(2).startswith("0x"):
            counts += 1
        elif not PMP_DATE.match(ln):
            return False
    return counts > 0


def perf(head: str) -> bool:
    """A perf script header (with a time or an event name) followed by a frame line, or a
    frame on the header itself, or a ``PERF_RECORD_*`` line."""
    lines = head.replace("\r\n", "\n").split("\n")
    for i, line in enumerate(lines[:-1]):
        if not line.strip() or line.startswith("#"):
            continue
        if _PERF_DIGIT_WORD.search(line, 0, PERF_TID_END) is None and \
                _PERF_TIME.search(line) is None:
            return False  # neither a thread id nor a time: not a header (folded text, ...)
        from wallflame.fold.perf.lines import parse_header

        h = parse_header(line)
        if h is None:
            return False
        if h.record:
            return h.record.startswith("PERF_RECORD_")
        if h.time is None and not h.event:
            return False
        if h.frame is not None:
            return True
        return _PERF_FRAME.match(lines[i + 1]) is not None
    return False


def _snapshot_backend(head: str, backends: tuple[str, ...]) -> bool:
    first = head.split("\n", 1)[0]
    return any(f'"backend": "{b}' in first or f'"backend":"{b}' in first for b in backends)


def gdb(head: str) -> bool:
    """gdb's ``thread apply all bt``, or a snapshot log gdb wrote."""
    if head.startswith(SNAPSHOTS_MAGIC):
        return _snapshot_backend(head, ("gdb",))
    return _GDB.search(head) is not None


def eustack(head: str) -> bool:
    """eu-stack's output, or a snapshot log it (or libdw, elfutils' unwinder in-process, which
    writes eu-stack's text) wrote."""
    if head.startswith(SNAPSHOTS_MAGIC):
        return _snapshot_backend(head, ('eu-stack"', 'libdw"'))
    return _EUSTACK.search(head) is not None


#: (format name, detector), in the order detection tries them: pmp is strict, perf lenient.
ORDER: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("wallflame", annotated), ("pmp", pmp), ("perf", perf), ("gdb", gdb), ("eu-stack", eustack),
)

__all__ = ["ORDER", "PERF_TID_END", "PMP_DATE", "PMP_LINE", "annotated", "eustack", "gdb", "perf",
           "pmp"]
