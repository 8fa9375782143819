"""Parsing one line of ``perf script`` text: headers, frames, event names.

Pure functions, shared by the fast and the line-by-line paths of the perf folder, and the
header grammar of the scheduler text that wallflame's collect has ``perf script`` print in fixed
fields (``NS_HEADER_RE``, read by ``fold.perf.sampled_switches``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from wallflame.names import UNKNOWN, normalize, unknown_in

SCHED_SWITCH = "sched:sched_switch"
OFFCPU = "offcpu-time"
#: Events whose period is nanoseconds of thread time.
TIME_EVENTS = ("cpu-clock", "task-clock", OFFCPU)

_TID = re.compile(r"(?:^|(?<=\s))(-1|\d+)(?:/(-1|\d+))?(?=\s|$)")
_EVENT = r"([A-Za-z_][\w.\-]*(?::[\w.\-]+)*):(?=\s|$)\s*(.*)"
_TAIL = re.compile(r"\s*(?:\[\d+\]\s+)?(?:(\d+\.\d+):\s*)?(?:(\d+)\s+)?(?:" + _EVENT + r")?$")
_RECORD = re.compile(r"\s*(?:\[\d+\]\s+)?(?:(\d+\.\d+):\s*)?(PERF_RECORD_[A-Z_]+)\b:?\s*(.*)$")
_NO_TID = re.compile(r"^\s*(.{0,64}?)\s+(?:\[\d+\]\s+)?(\d+\.\d+):\s+(?:(\d+)\s+)?" + _EVENT
                     + "$")
_OFFSET = re.compile(r"\+0x[0-9a-fA-F]*$")
_MODIFIERS = re.compile(r"[ukhIGHpPSDWeb]+")
LOST_RE = re.compile(r"\blost (\d+)\b")
NEXT_TID_RE = re.compile(r"next pid/tid:\s*-?\d+/(\d+)")
TIME_RE = re.compile(rb"\d+\.\d+")
PERIOD_EVENT_RE = re.compile(rb"\s*(\d+) +([A-Za-z_][\w.\-]*(?::[\w.\-]+)*):\s*")
_WHO_END = re.compile(r"\s*(?:\[\d+\])?\s*$")
#: A header of the scheduler text that wallflame's collect has ``perf script`` print (``--ns
#: -F comm,pid,tid,time,...``, fixed fields): ``comm pid/tid time: rest``, the time in
#: nanoseconds.  One match where ``parse_header`` (any header of any ``perf script`` text)
#: takes about seven times as long, on a record per context switch.  The comm (at most 15
#: bytes, chosen by the target) is matched greedily within its bound so that a name that looks
#: like a header cannot shift the fields.
NS_HEADER_RE = re.compile(r"^(.{0,16}?) *(-?\d+)/(-?\d+) +(\d+)\.(\d{9}): +(.*)$")
#: The ``rest`` of such a sample's header: ``period event: fields``.
NS_PERIOD_EVENT_RE = re.compile(r"^(\d+) +([\w.:\-]+): ?(.*)$")
#: A header of the wake-up capture's text (``-F tid,time,event,trace --ns``): ``tid time:
#: sched:sched_wakeup: fields`` (or ``sched:sched_waking``: its tid is the waker's).
WAKE_HEADER_RE = re.compile(
    r"^\s*(\d+) +(\d+)\.(\d{9}): +sched:sched_wak(eup|ing): (.*)$")
#: The thread id starts within this many characters (a comm is at most 15 bytes; perf pads
#: it): later candidates are not tried, which keeps parsing linear on any line.
TID_WINDOW = 64
#: Longer lines are not headers (the longest real ones are tracepoints with their fields).
MAX_HEADER = 1 << 16


@dataclass
class Header:
    """One parsed header line (a sample, or a ``PERF_RECORD_*`` side-band record)."""

    comm: str
    pid: int
    tid: int
    time: int | None
    period: int | None
    event: str
    rest: str
    record: str = ""

    @property
    def frame(self) -> str | None:
        """A frame printed on the header line itself (samples without a call chain)."""
        if self.record or self.event == SCHED_SWITCH or not self.rest:
            return None
        word = self.rest.split(None, 1)[0]
        return self.rest if _is_hex(word) else None


def _is_hex(word: str) -> bool:
    return bool(word) and all(c in "0123456789abcdefABCDEF" for c in word)


def parse_time(text: bytes | str) -> int:
    """``12345.678901`` seconds as integer nanoseconds (exact: no float rounding)."""
    s = text.decode("ascii", "replace") if isinstance(text, bytes) else text
    sec, _, frac = s.partition(".")
    try:
        return int(sec) * 1_000_000_000 + int((frac + "000000000")[:9])
    except ValueError:
        return 0


def parse_header(line: str) -> Header | None:
    """Parse a header: ``comm [pid/]tid [cpu] [time:] [period] [event: [rest]]``.

    The thread id is the first all-digit word after which the rest parses as the remaining
    fields, so a thread name with spaces or numbers in it stays whole.
    """
    if len(line) > MAX_HEADER:
        return None
    record = "PERF_RECORD_" in line
    for m in _tid_candidates(line):
        pid, tid = (int(m.group(1)), int(m.group(2))) if m.group(2) else (0, int(m.group(1)))
        comm = line[: m.start()].strip()
        if record:
            r = _RECORD.match(line, m.end())
            if r:
                t = parse_time(r.group(1)) if r.group(1) else None
                return Header(comm, pid, tid, t, None, "", r.group(3).strip(), r.group(2))
            continue
        t_m = _TAIL.match(line, m.end())
        if t_m is None:
            continue
        time_s, period_s, event, rest = t_m.groups()
        return Header(comm, pid, tid, parse_time(time_s) if time_s else None,
                      int(period_s) if period_s else None, event or "", (rest or "").strip())
    n = _NO_TID.match(line)
    if n is None or record:
        return None
    return Header(n.group(1), 0, 0, parse_time(n.group(2)),
                  int(n.group(3)) if n.group(3) else None, n.group(4), n.group(5).strip())


def _tid_candidates(line: str) -> Iterator[re.Match[str]]:
    """All-digit words (``tid`` or ``pid/tid``; -1 where perf could not name an exiting
    thread) that start within ``TID_WINDOW``."""
    end = min(len(line), TID_WINDOW + 24)
    for m in _TID.finditer(line, 0, end):
        if m.start() > TID_WINDOW:
            return
        if m.end() == end < len(line) and not line[end].isspace():
            continue  # a number cut by the window, not a word
        yield m


def parse_who(head: str) -> tuple[str, int, int]:
    """``(comm, pid, tid)`` from the part of a header before its time (``comm [pid/]tid
    [cpu]``), by the same rule as ``parse_header``."""
    for m in _tid_candidates(head):
        if _WHO_END.match(head, m.end()):
            comm = head[: m.start()].strip()
            if m.group(2):
                return comm, int(m.group(1)), int(m.group(2))
            return comm, 0, int(m.group(1))
    return head.strip(), 0, 0


def is_kernel(module: str) -> bool:
    """A kernel frame, judged from its module as stackcollapse-perf.pl does."""
    if module == UNKNOWN:
        return False
    if module.startswith("[") or module.endswith(".ko"):
        return True
    i = module.rfind("vmlinux")
    return i >= 0 and all(c.isascii() and (c.isalnum() or c in "-._") for c in module[i:])


def frame_name(line: str, kernel: bool) -> str | None:
    """The frame name of one call-chain line ``[addr] sym[+off] [(dso)]``.

    ``None``: not a frame line.  Unlike stackcollapse-perf.pl and inferno, a symbol that starts
    with ``(`` (``(anonymous namespace)::f``) is kept: they drop those frames.
    """
    s = line.strip()
    if not s:
        return None
    addr, _, rest = s.partition(" ")
    rest = rest.strip() if _is_hex(addr) else s
    module = ""
    sym = rest
    if rest.endswith(")"):
        j = rest.rfind(" (")
        if j >= 0:
            module, sym = rest[j + 2 : -1], rest[:j].strip()
        elif rest.startswith("("):
            module, sym = rest[1:-1], ""
    if "+0x" in sym:
        sym = _OFFSET.sub("", sym)
    name = unknown_in(module) if (not sym or sym == UNKNOWN) and module else normalize(sym)
    if kernel and is_kernel(module):
        name += "_[k]"
    return name


def event_kind(name: str, selected: str | None) -> str:
    """``on`` (on-CPU stacks), ``offcpu``, ``sched``, ``skip`` (not selected) or ``trace``
    (a tracepoint that is neither, left out unless selected)."""
    if selected is not None and not _matches(name, selected):
        return "skip"
    if name == SCHED_SWITCH:
        return "sched"
    if name == OFFCPU:
        return "offcpu"
    if selected is None and ":" in name and not _MODIFIERS.fullmatch(name.rsplit(":", 1)[1]):
        return "trace"
    return "on"


def _matches(name: str, selected: str) -> bool:
    return name == selected or base_event(name) == base_event(selected)


def base_event(name: str) -> str:
    """``cycles:ppp`` -> ``cycles`` (modifiers dropped); tracepoint names stay whole."""
    head, sep, mods = name.rpartition(":")
    return head if sep and _MODIFIERS.fullmatch(mods) else name
