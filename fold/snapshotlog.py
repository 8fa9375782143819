"""A snapshot log read line by line: a sequence of whole-process dumps (gdb ``thread apply all
bt`` or ``eu-stack -p``), each closed by a pt-pmp ``TS`` line; wallflame's own logs add
``# wallflame-proc`` (kernel state, wchan, lock owner per thread) and ``# wallflame-snapshot``
(pause) comment lines before it.  Without ``TS`` lines a dump ends where the next one starts.
Each complete dump goes to ``wallflame.fold.snapshots.Accumulator``, which weighs it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from wallflame.errors import InputError
from wallflame.fold.options import FoldOptions
from wallflame.fold.procrecords import int_or_none, record
from wallflame.fold.snapshots import Accumulator, Dump, Thread
from wallflame.profile import Profile
from wallflame.rundir import PROC_LINE, READ_LINE, SNAPSHOT_LINE, SNAPSHOTS_MAGIC
from wallflame.textio import iter_lines

_TS = re.compile(r"^TS (\d+)\.(\d+)(?: |$)")
_PID_LINE = re.compile(r"^PID (\d+) - process$")
_DETACHED = re.compile(r"^\[Inferior \d+ \(process (\d+)\) detached\]$")
_NOISE = ("[New ", "[Thread debugging", "Using host libthread_db", "[Inferior ",
          "warning: ", "Backtrace stopped", "(More stack frames follow")


def parse_ts(line: str) -> int | None:
    """Nanoseconds since the epoch from ``TS <ns>.<s> date time`` (pt-pmp's ``%N.%s``), or
    from ``TS <s>.<ns>`` when the first number is ten digits of epoch seconds."""
    m = _TS.match(line)
    if m is None:
        return None
    a, b = m.group(1), m.group(2)
    if len(a) == 10 and len(b) <= 9:
        return int(a) * 1_000_000_000 + int(b.ljust(9, "0"))
    if len(a) <= 9:
        return int(b) * 1_000_000_000 + int(a)
    return None


#: Reads one thread header line; returns (tid, name, kind) or None.
HeaderParser = Callable[[str], "tuple[int, str, str] | None"]
#: Reads one frame line (``#N ...``) of a thread of its kind: (frame name, lock id).
FrameParser = Callable[[str], "tuple[str, str]"]


class _LogReader:
    """The line-by-line state machine of a snapshot log: it builds one ``Dump`` at a time and
    hands each complete one to the ``Accumulator``."""

    def __init__(self, acc: Accumulator, headers: list[HeaderParser],
                 frames: dict[str, FrameParser]) -> None:
        self.acc = acc
        self.meta = acc.meta
        self.headers = headers
        self.frames = frames
        self.dump = Dump(1)
        self.thread: Thread | None = None
        self.seen_ts = False

    def new_dump(self, line: int, close: bool = True) -> None:
        if close:
            self.acc.close(self.dump, None)
        self.dump, self.thread = Dump(line), None

    def line(self, no: int, line: str) -> None:
        if line[0] == "#":
            self.comment(no, line)
        elif line.startswith("TS "):
            ts = parse_ts(line)
            if ts is None:
                self.meta.lose("bad TS line", no)
            self.seen_ts = True
            self.acc.close(self.dump, ts)
            self.new_dump(no + 1, close=False)
        elif not self.header(no, line):
            self.other(no, line)

    def comment(self, no: int, line: str) -> None:
        """Frame lines (``#N ...``) and wallflame's ``# wallflame-...`` lines."""
        if line[1:2].isdigit():
            if self.thread is None:
                self.meta.lose("frame outside a thread", no)
                return
            name, lock = self.frames[self.thread.kind](line)
            self.thread.frames.append(name)
            if lock and not self.thread.lock:
                self.thread.lock = lock
        elif line.startswith(PROC_LINE):
            rec = record(line[len(PROC_LINE):])
            tid = int_or_none(rec.get("tid")) if rec else None
            if rec is None or tid is None:
                self.meta.lose("bad wallflame-proc line", no)
            else:
                self.dump.procs[tid] = rec
        elif line.startswith(READ_LINE):
            rec = record(line[len(READ_LINE):])
            if rec is None:
                self.meta.lose("bad wallflame-read line", no)
            else:
                self.acc.read(rec, no)
        elif line.startswith(SNAPSHOT_LINE):
            rec = record(line[len(SNAPSHOT_LINE):])
            if rec is None:
                self.meta.lose("bad wallflame-snapshot line", no)
            else:
                self.dump.pause = rec
        elif line.startswith(SNAPSHOTS_MAGIC) and no == 1:
            self.acc.header(line[len(SNAPSHOTS_MAGIC):], no)

    def header(self, no: int, line: str) -> bool:
        """A thread header starts a thread (and a new dump if that thread was already seen)."""
        for parse in self.headers:
            head = parse(line)
            if head is not None:
                tid, name, kind = head
                if tid in self.dump.tids:  # a new dump without a TS line between
                    self.new_dump(no)
                self.thread = Thread(tid, name, no, kind)
                self.dump.threads.append(self.thread)
                self.dump.tids.add(tid)
                return True
        return False

    def other(self, no: int, line: str) -> None:
        dump = self.dump
        m = _PID_LINE.match(line)
        if m is not None:  # eu-stack's "PID N - process" starts a dump
            if dump.threads:
                self.new_dump(no)
            self.dump.pid = int(m.group(1))
            self.thread = None
        elif line.startswith("[New ") and dump.threads and not self.seen_ts:
            self.new_dump(no)  # the preamble of the next concatenated gdb dump
        elif (m := _DETACHED.match(line)) is not None:
            dump.pid = dump.pid or int(m.group(1))
        elif line.startswith(_NOISE) or line.startswith(("    ", "\t")) or line[:2] == "0x":
            if line.startswith("Backtrace stopped") and self.thread is not None:
                self.meta.lose("truncated stack (Backtrace stopped)", no)
        else:
            self.meta.lose("unrecognised line", no)

    def end(self) -> None:
        if not self.dump.threads:
            return
        if self.seen_ts:
            self.meta.lose("truncated last snapshot (no TS line)", self.dump.line,
                           detail="the capture was cut short; its last dump is not counted")
        else:
            self.acc.close(self.dump, None)


def fold_log(path: str, options: FoldOptions, profile: Profile,
             headers: list[HeaderParser], frames: dict[str, FrameParser]) -> None:
    """Fold a snapshot log whose thread headers and frame lines the given parsers read."""
    acc = Accumulator(profile, options)
    reader = _LogReader(acc, headers, frames)
    last_no = 0
    for no, line in iter_lines(path):
        last_no = no
        if line.strip():
            reader.line(no, line)
    reader.end()
    if acc.snapshots == 0:
        raise InputError(f"{path}: no thread stacks found ({last_no} lines read)",
                         "give gdb 'thread apply all bt', eu-stack or pt-pmp output, or name "
                         "the format with --format")
    source: dict[str, Any] = {"lines": last_no}
    acc.finish(source)
    profile.meta.extra.setdefault("snapshot_sources", []).append(source)
