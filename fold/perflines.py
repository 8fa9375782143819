"""The line-by-line reading of ``perf script`` text and the state both paths share.

``wallflame.fold.perf`` hands every record that is not in the common shape to
``PerfState.slow_lines``; this path also teaches the fast path (caches of headers, events and
frame blocks) so that the next record with the same stack is cheap.  Both paths count into
the same tables and ``finish`` turns them into stacks.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from wallflame.classify import classify
from wallflame.errors import InputError
from wallflame.fold.options import FoldOptions
from wallflame.fold.sched import SchedTracker, parse_switch_fields
from wallflame.names import UNKNOWN, normalize, unknown_in
from wallflame.profile import OFF, ON, UNIT_NS, UNIT_SAMPLES, Profile, StackKey
from wallflame.textio import decode

SCHED_SWITCH = "sched:sched_switch"
OFFCPU = "offcpu-time"
#: Events whose period is nanoseconds of thread time.
TIME_EVENTS = ("cpu-clock", "task-clock", OFFCPU)

#: Cache bounds: beyond these the caches start over (memory stays bounded on any input).
MAX_BLOCKS = 1 << 16
MAX_COMBOS = 1 << 16
MAX_LINES = 1 << 18
#: A cached block's value is ``stack_id << LINE_BITS | lines`` (lines of its record, with the
#: blank line after it); blocks too long for that are never cached.
LINE_BITS = 20
LINE_MASK = (1 << LINE_BITS) - 1
#: A learned period-and-event text is ``tail_id << TAIL_SHIFT`` (above any stack id).
TAIL_SHIFT = 64

_TID = re.compile(r"(?:^|(?<=\s))(\d+)(?:/(\d+))?(?=\s|$)")
_EVENT = r"([A-Za-z_][\w.\-]*(?::[\w.\-]+)*):(?=\s|$)\s*(.*)"
_TAIL = re.compile(r"\s*(?:\[\d+\]\s+)?(?:(\d+\.\d+):\s*)?(?:(\d+)\s+)?(?:" + _EVENT + r")?$")
_RECORD = re.compile(r"\s*(?:\[\d+\]\s+)?(?:(\d+\.\d+):\s*)?(PERF_RECORD_[A-Z_]+)\b:?\s*(.*)$")
_NO_TID = re.compile(r"^\s*(.*?)\s+(?:\[\d+\]\s+)?(\d+\.\d+):\s+(?:(\d+)\s+)?" + _EVENT + "$")
_OFFSET = re.compile(r"\+0x[0-9a-fA-F]*$")
_MODIFIERS = re.compile(r"[ukhIGHpPSDWeb]+")
_LOST = re.compile(r"\blost (\d+)\b")
_NEXT_TID = re.compile(r"next pid/tid:\s*-?\d+/(\d+)")
_TIME = re.compile(rb"\d+\.\d+")
_PERIOD_EVENT = re.compile(rb"\s*(\d+) +([A-Za-z_][\w.\-]*(?::[\w.\-]+)*):\s*")
_WHO_END = re.compile(r"\s*(?:\[\d+\])?\s*$")


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
    record = "PERF_RECORD_" in line
    for m in _TID.finditer(line):
        tail = line[m.end():]
        pid, tid = (int(m.group(1)), int(m.group(2))) if m.group(2) else (0, int(m.group(1)))
        comm = line[: m.start()].strip()
        if record:
            r = _RECORD.match(tail)
            if r:
                t = parse_time(r.group(1)) if r.group(1) else None
                return Header(comm, pid, tid, t, None, "", r.group(3).strip(), r.group(2))
            continue
        t_m = _TAIL.match(tail)
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


def parse_who(head: str) -> tuple[str, int, int]:
    """``(comm, pid, tid)`` from the part of a header before its time (``comm [pid/]tid
    [cpu]``), by the same rule as ``parse_header``."""
    for m in _TID.finditer(head):
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
    return name == selected or _base(name) == _base(selected)


def _base(name: str) -> str:
    """``cycles:ppp`` -> ``cycles`` (modifiers dropped); tracepoint names stay whole."""
    head, sep, mods = name.rpartition(":")
    return head if sep and _MODIFIERS.fullmatch(mods) else name


class PerfState:
    """Everything the two paths share while one input is folded."""

    def __init__(self, options: FoldOptions, profile: Profile) -> None:
        self.options = options
        self.profile = profile
        self.kernel = options.kernel
        self.rules = options.get_rules()
        # fast-path tables, keyed by raw bytes
        self.acc: defaultdict[tuple[bytes, int], int] = defaultdict(int)
        self.blocks: dict[bytes, int] = {}
        self.combos: dict[bytes, int] = {}
        self.tails: dict[bytes, int] = {}
        self.tail_list: list[tuple[int, str]] = []
        self.heads: dict[bytes, tuple[str, int, int]] = {}
        self.skipped_by_name: dict[str, int] = {}
        # shared
        self.sem: dict[tuple[str, int, int, str, int | None, int], int] = {}
        self.lines: dict[bytes, str | None] = {}
        self.fids: dict[tuple[str, ...], int] = {}
        self.stacks: list[tuple[str, ...]] = []
        self.kinds: dict[str, str] = {}
        self.threads: dict[int, str] = {}
        self.seen_threads: set[tuple[int, str]] = set()
        self.records: dict[str, int] = {}
        self.tracker = SchedTracker(profile, self.rules)
        self.recognised = 0
        self.first_time: int | None = None
        self.last_time: int | None = None
        self.continuing = False
        # slow-path event in progress
        self.cur: Header | None = None
        self.cur_frames: list[str] = []
        self.cur_line = 0
        self.skipping = False
        # line-number cursor over the current batch
        self._lo_recs: list[bytes] | None = None
        self._lo_i = 0
        self._lo_line = 0

    # -- small helpers -------------------------------------------------------------------

    def note_time(self, t: int) -> None:
        if t <= 0:
            return
        if self.first_time is None or t < self.first_time:
            self.first_time = t
        if self.last_time is None or t > self.last_time:
            self.last_time = t

    def kind(self, event: str) -> str:
        k = self.kinds.get(event)
        if k is None:
            k = self.kinds[event] = event_kind(event, self.options.event)
        return k

    def intern(self, frames: tuple[str, ...]) -> int:
        fid = self.fids.get(frames)
        if fid is None:
            fid = self.fids[frames] = len(self.stacks)
            self.stacks.append(frames)
        return fid

    def frame(self, raw: bytes) -> str | None:
        name = self.lines.get(raw, "\0")
        if name == "\0":
            if len(self.lines) >= MAX_LINES:
                self.lines.clear()
            name = self.lines[raw] = frame_name(decode(raw), self.kernel)
        return name

    def thread_seen(self, tid: int, comm: str) -> None:
        if (tid, comm) not in self.seen_threads:
            self.seen_threads.add((tid, comm))
            self.threads[tid] = comm

    def line_of(self, recs: list[bytes], i: int, base: int) -> int:
        """Line number of ``recs[i]`` (amortised: calls come in increasing ``i``)."""
        if self._lo_recs is not recs or i < self._lo_i:
            self._lo_recs, self._lo_i, self._lo_line = recs, 0, base
        while self._lo_i < i:
            self._lo_line += recs[self._lo_i].count(b"\n") + 2
            self._lo_i += 1
        return self._lo_line

    def who(self, head: bytes) -> tuple[str, int, int]:
        w = self.heads.get(head)
        if w is None:
            w = self.heads[head] = parse_who(decode(head))
        return w

    def running(self, head: bytes, time: bytes) -> None:
        tid = self.who(head)[2]
        if tid in self.tracker.open:
            self.tracker.running(tid, parse_time(time))

    # -- the slow path ---------------------------------------------------------------------

    def slow_lines(self, text: bytes, line_no: int, end: bool) -> None:
        """Fold ``text`` line by line; ``end``: it finishes a record (a blank line follows)."""
        if end and not self.continuing and self._learn(text):
            return
        self.continuing = not end
        no = line_no - 1
        for raw in text.split(b"\n"):
            no += 1
            if raw[:1] == b"#":
                continue
            if not raw.strip():
                self.end_event()
                continue
            if self.skipping and raw[:1] in (b" ", b"\t"):
                continue
            if self.cur is not None and (raw[:1] == b"\t" or (
                    raw[:1] == b" " and parse_header(decode(raw)) is None)):
                name = self.frame(raw)
                if name is None:
                    self.profile.meta.lose("unparsed frame line", no)
                elif name:
                    self.cur_frames.append(name)
                continue
            self.header_line(raw, no)
        if end:
            self.end_event()

    def _learn(self, rec: bytes) -> bool:
        """A record in the common shape: fold it and teach the fast path its parts.

        The shape: ``<thread part> <time>: <period> <event>:`` then tab-indented frames."""
        hdr, _, block = rec.partition(b"\n")
        a, sep, tail = hdr.partition(b": ")
        head, _, time = a.rpartition(b" ")
        if not sep or not head or hdr[:1] <= b" " or not _TIME.fullmatch(time):
            return False
        t = _PERIOD_EVENT.fullmatch(tail)
        if t is None:
            return False
        h = parse_header(decode(hdr))
        if h is None or h.record or h.frame is not None or h.period is None:
            return False
        event = decode(t.group(2))
        if (h.comm, h.pid, h.tid) != parse_who(decode(head)) or h.event != event:
            return False
        kind = self.kind(event)
        if kind == "sched" or h.period != int(t.group(1)):
            return False
        v = self.blocks.get(block)
        if v is None:
            lines = block.split(b"\n") if block else []
            if len(lines) + 2 > LINE_MASK or len(self.stacks) >> (TAIL_SHIFT - LINE_BITS):
                return False
            names: list[str] = []
            for raw in lines:
                if raw[:1] != b"\t":
                    return False
                name = self.frame(raw)
                if name is None:
                    return False
                if name:
                    names.append(name)
            names.reverse()
            v = self.intern(tuple(names)) << LINE_BITS | (len(lines) + 2)
            if len(self.blocks) >= MAX_BLOCKS:
                self.blocks.clear()
            self.blocks[block] = v
        self.recognised += 1
        if h.time is not None:
            self.note_time(h.time)
        tail_v = self.tails.get(tail)
        if tail_v is None:
            tail_v = self.tails[tail] = len(self.tail_list) << TAIL_SHIFT
            self.tail_list.append((h.period, event))
        self.acc[head, tail_v | v] += 1
        if kind in ("on", "offcpu") and self.tracker.open and h.time is not None:
            self.tracker.running(h.tid, h.time)
        return True

    def header_line(self, raw: bytes, no: int) -> None:
        self.end_event()
        line = decode(raw)
        h = parse_header(line)
        if h is None:
            self.skipping = True
            lost = _LOST.search(line)
            if lost and "chunks" in line:
                self.profile.meta.lose("lost perf chunks (reported by perf)", no,
                                       int(lost.group(1)))
            elif "lost" in line and "%" in line:
                self.profile.meta.warn(f"perf reported: {line.strip()}")
            else:
                self.profile.meta.lose("unrecognised perf script line", no)
            return
        self.skipping = False
        self.recognised += 1
        if h.time is not None:
            self.note_time(h.time)
        if h.record:
            self.record(h, no)
            return
        self.cur, self.cur_frames, self.cur_line = h, [], no
        frame = h.frame
        if frame is not None:
            name = frame_name(frame, self.kernel)
            if name:
                self.cur_frames.append(name)

    def record(self, h: Header, no: int) -> None:
        """A side-band record: losses and context switches."""
        self.records[h.record] = self.records.get(h.record, 0) + 1
        meta = self.profile.meta
        if h.record.startswith("PERF_RECORD_LOST"):
            m = _LOST.search(h.rest)
            meta.lose("lost perf events (PERF_RECORD_LOST)", no, int(m.group(1)) if m else 1)
            return
        if not h.record.startswith("PERF_RECORD_SWITCH"):
            return
        if h.time is None:
            meta.lose("switch record without a time", no)
            return
        direction = h.rest.split(None, 1)[0] if h.rest else ""
        if direction == "IN":
            self.tracker.switch_in(h.tid, h.time)
        elif direction == "OUT":
            nxt = _NEXT_TID.search(h.rest)
            if nxt:
                self.tracker.switch_in(int(nxt.group(1)), h.time)

    def end_event(self) -> None:
        h = self.cur
        if h is None:
            return
        self.cur = None
        frames = tuple(reversed(self.cur_frames))
        kind = self.kind(h.event)
        self.thread_seen(h.tid, h.comm)
        if kind == "sched":
            self._switch(h, frames)
            return
        if kind not in ("on", "offcpu"):
            self.skipped_by_name[h.event] = self.skipped_by_name.get(h.event, 0) + 1
            return
        key = (h.comm, h.pid, h.tid, h.event, h.period, self.intern(frames))
        self.sem[key] = self.sem.get(key, 0) + 1
        if self.tracker.open and h.time is not None:
            self.tracker.running(h.tid, h.time)

    def _switch(self, h: Header, frames: tuple[str, ...]) -> None:
        fields = parse_switch_fields(h.rest)
        meta = self.profile.meta
        if fields is None:
            meta.lose("unparsed sched_switch record", self.cur_line)
            return
        if h.time is None:
            meta.lose("scheduler record without a time", self.cur_line)
            return
        prev, state, nxt = fields
        self.tracker.switch_in(nxt, h.time)
        self.tracker.switch_out(prev, h.pid, h.comm, h.time, frames, state)

    # -- the end ---------------------------------------------------------------------------

    def finish(self, line_no: int, name: str = "-") -> None:
        self.end_event()
        if not self.recognised and self.profile.meta.losses:
            raise InputError(f"{name}: no perf script sample or record recognised",
                             "give the text output of `perf script` (or pick another --format)")
        fid_mask = (1 << (TAIL_SHIFT - LINE_BITS)) - 1
        for (head, v), n in self.acc.items():
            period, event = self.tail_list[v >> TAIL_SHIFT]
            if self.kind(event) not in ("on", "offcpu"):
                self.skipped_by_name[event] = self.skipped_by_name.get(event, 0) + n
                continue
            comm, pid, tid = self.who(head)
            self.thread_seen(tid, comm)
            key = (comm, pid, tid, event, period, (v >> LINE_BITS) & fid_mask)
            self.sem[key] = self.sem.get(key, 0) + n
        self.acc.clear()
        if self.tracker.switch_outs:
            if self.last_time is None:
                self.profile.meta.lose("open off-CPU interval", line_no, len(self.tracker.open))
                self.tracker.open.clear()
            self.tracker.finish(self.last_time or 0)
        record_meta(self)

    def add_stacks(self) -> dict[str, int]:
        """Turn the counted samples into stacks; returns folded samples per event."""
        per_event: dict[str, int] = {}
        classes: dict[int, str] = {}
        for (comm, pid, tid, event, period, fid), n in self.sem.items():
            per_event[event] = per_event.get(event, 0) + n
            frames = self.stacks[fid]
            weight = n * period if period is not None else n
            if self.kind(event) == "offcpu":
                wait = classes.get(fid)
                if wait is None:
                    wait = classes[fid] = classify(frames, "", self.rules)
                self.profile.add(StackKey(frames, tid, comm, pid, OFF, wait), weight)
            else:
                self.profile.add(StackKey(frames, tid, comm, pid, ON), weight)
        return per_event


def unit_of(events: dict[str, bool]) -> str:
    """``ns`` when every folded event weighs nanoseconds, else ``samples``.

    ``events`` maps each folded event to whether all its samples carried a period."""
    ok = all(had_period and _base(e) in TIME_EVENTS for e, had_period in events.items())
    return UNIT_NS if ok else UNIT_SAMPLES


def record_meta(st: PerfState) -> None:
    """Stacks into the profile, and what the reader should know about them into its meta."""
    meta = st.profile.meta
    per_event = st.add_stacks()
    had_period: dict[str, bool] = {}
    for _comm, _pid, _tid, event, period, _fid in st.sem:
        had_period[event] = had_period.get(event, True) and period is not None
    for event, n in sorted(per_event.items()):
        meta.count(f"perf:{event or '(no event name)'}", n)
    on_events = sorted(e for e in per_event if st.kind(e) == "on")
    folded_on = sum(per_event[e] for e in on_events)
    if folded_on:
        meta.count("perf", folded_on)
    for name, n in sorted(st.skipped_by_name.items()):
        meta.count(f"perf:{name}", n)
        if st.kind(name) == "trace":
            meta.warn(f"{n} samples of event {name} were not folded (fold them with "
                      f"--event {name})")
    if len(on_events) > 1:
        counts = ", ".join(f"{e}: {per_event[e]}" for e in on_events)
        meta.warn(f"several on-CPU events were merged ({counts} samples); pick one with "
                  "--event")
    if per_event:
        meta.unit = unit_of(had_period)
        if meta.unit != UNIT_NS:
            names = ", ".join(sorted(e or "(no event name)" for e in had_period))
            meta.warn(f"weights are sample counts or event periods ({names}), not time")
            if st.tracker.switch_outs:
                meta.warn("scheduler off-CPU time is in ns but on-CPU weights are not")
    if st.first_time is not None and st.last_time is not None:
        meta.window_ns = max(meta.window_ns, st.last_time - st.first_time)
    meta.threads.update(st.threads)
    if st.records:
        meta.extra.setdefault("perf_records", dict(sorted(st.records.items())))
    _quality(st, folded_on)


#: perf's default ``kernel.perf_event_max_stack``: a stack this deep was probably cut.
MAX_STACK = 127


def _quality(st: PerfState, folded_on: int) -> None:
    """How trustworthy the on-CPU stacks are: shallow (frame pointers missing), unresolved
    frames, and stacks cut at perf's depth limit; warned when they are a large share."""
    if not folded_on:
        return
    shallow = unknown = deep = 0  # samples with <= 2 frames, half unresolved, at the limit
    periods: dict[int, int] = {}
    for _comm, _pid, _tid, event, period, fid in st.sem:
        if st.kind(event) != "on":
            continue
        n = st.sem[_comm, _pid, _tid, event, period, fid]
        frames = st.stacks[fid]
        if len(frames) <= 2:
            shallow += n
        unresolved = sum(1 for f in frames if f.startswith("[")
                         and f.removesuffix("_[k]").endswith("]"))
        if frames and unresolved * 2 >= len(frames):
            unknown += n
        if len(frames) >= MAX_STACK:
            deep += n
        if period is not None and _base(event) in TIME_EVENTS:
            periods[period] = periods.get(period, 0) + n
    meta = st.profile.meta
    meta.extra.setdefault("perf_quality", {
        "samples": folded_on, "shallow_samples": shallow, "mostly_unknown_samples": unknown,
        "max_depth_samples": deep})
    if periods:
        period = max(periods.items(), key=lambda kv: (kv[1], -kv[0]))[0]
        if period > 0:
            meta.rates.setdefault("perf_hz", round(1e9 / period, 1))
    if shallow * 10 >= folded_on * 3:
        meta.warn(f"{100 * shallow // folded_on}% of perf samples have at most 2 frames "
                  "(no frame pointers?): record with --call-graph dwarf")
    if unknown * 10 >= folded_on * 3:
        meta.warn(f"{100 * unknown // folded_on}% of perf samples have mostly unresolved frames "
                  "(stripped binaries or missing debug symbols)")
    if deep:
        meta.warn(f"{deep} perf samples reached the {MAX_STACK}-frame limit and may be cut "
                  "(raise kernel.perf_event_max_stack)")
