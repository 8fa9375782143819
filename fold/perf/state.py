"""The line-by-line reading of ``perf script`` text and the state both paths share.

``wallflame.fold.perf.reader`` hands every record that is not in the common shape to
``PerfState.slow_lines``; this path also teaches the fast path (caches of headers, events and
frame blocks) so that the next record with the same stack is cheap.  Both paths count into
the same tables and ``finish`` turns them into stacks.
"""

from __future__ import annotations

from collections import defaultdict

from wallflame.classify import classify
from wallflame.errors import InputError
from wallflame.fold.options import FoldOptions
from wallflame.fold.perf.lines import (
    LOST_RE,
    NEXT_TID_RE,
    PERIOD_EVENT_RE,
    TIME_RE,
    Header,
    event_kind,
    frame_name,
    parse_header,
    parse_time,
    parse_who,
)
from wallflame.fold.perf.switches import SchedTracker, parse_switch_fields
from wallflame.profile import OFF, ON, Profile, StackKey
from wallflame.speedups import native
from wallflame.textio import decode

#: Cache bounds: beyond these the caches start over (memory stays bounded on any input).
MAX_BLOCKS = 1 << 16
MAX_COMBOS = 1 << 16
MAX_TAILS = 1 << 12
MAX_LINES = 1 << 18
#: Fast-path values are ``(key, add)``: ``key = event << EVENT_SHIFT | stack << LINE_BITS |
#: lines`` (``lines``: the record's line count with the blank line after it) and ``add =
#: period << COUNT_BITS | 1``, so one sum accumulates the weight and the sample count.
LINE_BITS = 20
LINE_MASK = (1 << LINE_BITS) - 1
EVENT_SHIFT = 44
COUNT_BITS = 40
COUNT_MASK = (1 << COUNT_BITS) - 1


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
        self.combos: dict[bytes, tuple[int, int]] = {}
        self.tails: dict[bytes, tuple[int, int]] = {}
        self.event_ids: dict[bytes, int] = {}
        self.event_list: list[str] = []
        self.heads: dict[bytes, tuple[str, int, int]] = {}
        self.skipped_by_name: dict[str, int] = {}
        # shared: (comm, pid, tid, event, stack id) -> weight, sample count
        self.sem_w: dict[tuple[str, int, int, str, int], int] = {}
        self.sem_n: dict[tuple[str, int, int, str, int], int] = {}
        self.no_period: set[str] = set()
        self.lines: dict[bytes, str | None] = {}
        self.fids: dict[tuple[str, ...], int] = {}
        self.stacks: list[tuple[str, ...]] = []
        self.kinds: dict[str, str] = {}
        self.threads: dict[int, str] = {}
        self.seen_threads: set[tuple[int, str]] = set()
        self.seen_order: list[tuple[int, str]] = []
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
        # the native fast path (``wallflame.fold.perf.reader._native``)
        self.native = native.PerfFolder()
        self.shared: dict[str, str] = {}
        self.valid_headers: dict[bytes, bool] = {}

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
            self.seen_order.append((tid, comm))
            self.threads[tid] = comm

    def who(self, head: bytes) -> tuple[str, int, int]:
        w = self.heads.get(head)
        if w is None:
            w = self.heads[head] = parse_who(decode(head))
        return w

    def parse_tail(self, tail: bytes) -> tuple[int, int] | None:
        """``<period> <event>:`` of a known event as ``(event key, add)`` (parsed here when
        periods vary from sample to sample)."""
        parts = tail.split()
        if len(parts) != 2 or not parts[0].isdigit():
            return None
        ev = self.event_ids.get(parts[1])
        if ev is None:
            return None
        t = (ev, int(parts[0]) << COUNT_BITS | 1)
        if len(self.tails) >= MAX_TAILS:
            self.tails.clear()
        self.tails[tail] = t
        return t

    def count(self, comm: str, pid: int, tid: int, event: str, period: int | None,
              fid: int, n: int = 1, weight: int | None = None) -> None:
        key = (comm, pid, tid, event, fid)
        if period is None:
            self.no_period.add(event)
        w = weight if weight is not None else n * (period if period is not None else 1)
        self.sem_w[key] = self.sem_w.get(key, 0) + w
        self.sem_n[key] = self.sem_n.get(key, 0) + n

    def running(self, head: bytes, time: bytes) -> None:
        tid = self.who(head)[2]
        if tid in self.tracker.open:
            self.tracker.running(tid, parse_time(time))

    # -- the slow path ---------------------------------------------------------------------

    def slow_lines(self, text: bytes, line_no: int, end: bool, learn: bool = True) -> None:
        """Fold ``text`` line by line; ``end``: it finishes a record (a blank line follows).
        ``learn``: try it as a record in the common shape first."""
        if learn and end and not self.continuing and self._learn(text):
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

    def common_header(self, hdr: bytes) -> tuple[bytes, Header, str] | None:
        """``(thread part, parsed header, event)`` of a header in the common shape,
        ``<thread part> <time>: <period> <event>:``, else None."""
        a, sep, tail = hdr.partition(b": ")
        head, _, time = a.rpartition(b" ")
        if not sep or not head or hdr[:1] <= b" " or not TIME_RE.fullmatch(time):
            return None
        t = PERIOD_EVENT_RE.fullmatch(tail)
        if t is None:
            return None
        h = parse_header(decode(hdr))
        if h is None or h.record or h.frame is not None or h.period is None:
            return None
        event = decode(t.group(2))
        if (h.comm, h.pid, h.tid) != parse_who(decode(head)) or h.event != event:
            return None
        if self.kind(event) == "sched" or h.period != int(t.group(1)):
            return None
        return head, h, event

    def valid_header(self, hdr: bytes) -> bool:
        """Whether ``hdr`` is in the common shape, remembered for headers equal to it but for
        their digits (which decide nothing in ``common_header``: the regular expressions
        look at classes of characters, and the fields compared are parsed from the same
        places)."""
        ok = self.common_header(hdr) is not None
        if len(self.valid_headers) >= MAX_TAILS:
            self.valid_headers.clear()
        self.valid_headers[hdr.translate(bytes.maketrans(b"123456789", b"000000000"))] = ok
        return ok

    def event_key(self, tail: bytes, event: str) -> int:
        token = tail.split()[1]
        ev = self.event_ids.get(token)
        if ev is None:
            ev = self.event_ids[token] = len(self.event_list) << EVENT_SHIFT
            self.event_list.append(event)
        return ev

    def _learn(self, rec: bytes) -> bool:
        """A record in the common shape: fold it and teach the fast path its parts.

        The shape: ``<thread part> <time>: <period> <event>:`` then tab-indented frames.
        (The caller notes its time.)"""
        hdr, _, block = rec.partition(b"\n")
        common = self.common_header(hdr)
        if common is None:
            return False
        head, h, event = common
        kind = self.kind(event)
        v = self.blocks.get(block)
        if v is None:
            lines = block.split(b"\n") if block else []
            if len(lines) + 2 > LINE_MASK or len(self.stacks) >> (EVENT_SHIFT - LINE_BITS):
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
        tail = hdr.partition(b": ")[2]
        self.event_key(tail, event)
        tail_v = self.parse_tail(tail)
        assert tail_v is not None  # the shape was checked above
        self.acc[head, tail_v[0] | v] += tail_v[1]
        if kind in ("on", "offcpu") and self.tracker.open and h.time is not None:
            self.tracker.running(h.tid, h.time)
        return True

    # -- what the native fast path asks ------------------------------------------------------

    def native_header(self, key: bytes, rec: bytes) -> None:
        """Teach the native path what headers like the one of ``rec`` are (``key``: the
        header with its time and period digits as zeros: they decide nothing else)."""
        hdr = rec.partition(b"\n")[0]
        common = self.common_header(hdr)
        if common is None:
            self.native.add_header(key, None, 0)
            return
        head, _, event = common
        self.recognised += 1
        self.native.add_header(key, head, self.event_key(hdr.partition(b": ")[2], event))

    def native_name(self, key: bytes, raw: bytes) -> None:
        """Teach the native path the name of frame lines with this ``key`` (``raw``: one of
        them), one shared string per name."""
        name = self.frame(raw)
        if name is not None:
            if len(self.shared) >= MAX_LINES:
                self.shared.clear()
            name = self.shared.setdefault(name, name)
        self.native.add_name(key, name)

    def header_line(self, raw: bytes, no: int) -> None:
        self.end_event()
        line = decode(raw)
        h = parse_header(line)
        if h is None:
            self.skipping = True
            lost = LOST_RE.search(line)
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
            m = LOST_RE.search(h.rest)
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
            nxt = NEXT_TID_RE.search(h.rest)
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
        self.count(h.comm, h.pid, h.tid, h.event, h.period, self.intern(frames))
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
        """The counts still held into the profile (its meta: ``perf.meta.record_meta``)."""
        self.end_event()
        if not self.recognised and self.profile.meta.losses:
            raise InputError(f"{name}: no perf script sample or record recognised",
                             "give the text output of `perf script` (or pick another --format)")
        fid_mask = (1 << (EVENT_SHIFT - LINE_BITS)) - 1
        for (head, v), total in self.acc.items():
            event = self.event_list[v >> EVENT_SHIFT]
            n = total & COUNT_MASK
            if self.kind(event) not in ("on", "offcpu"):
                self.skipped_by_name[event] = self.skipped_by_name.get(event, 0) + n
                continue
            comm, pid, tid = self.who(head)
            self.thread_seen(tid, comm)
            self.count(comm, pid, tid, event, 0, (v >> LINE_BITS) & fid_mask, n,
                       total >> COUNT_BITS)
        self.acc.clear()
        if self.tracker.switch_outs:
            if self.last_time is None:
                self.profile.meta.lose("open off-CPU interval", line_no, len(self.tracker.open))
                self.tracker.open.clear()
            self.tracker.finish(self.last_time or 0)

    def add_stacks(self) -> dict[str, int]:
        """Turn the counted samples into stacks; returns folded samples per event."""
        per_event: dict[str, int] = {}
        classes: dict[int, str] = {}
        for key, weight in self.sem_w.items():
            comm, pid, tid, event, fid = key
            per_event[event] = per_event.get(event, 0) + self.sem_n[key]
            frames = self.stacks[fid]
            if self.kind(event) == "offcpu":
                wait = classes.get(fid)
                if wait is None:
                    wait = classes[fid] = classify(frames, "", self.rules)
                self.profile.add(StackKey(frames, tid, comm, pid, OFF, wait), weight)
            else:
                self.profile.add(StackKey(frames, tid, comm, pid, ON), weight)
        return per_event
