"""``perf script`` text: on-CPU samples, scheduler records and losses.

The text is read in large binary chunks and split into records on blank lines.  A record in
the common shape (a header ``comm tid [cpu] time: period event:`` and indented frame lines)
takes the fast path: everything after the header's first ``": "`` (period, event and frame
block) is looked up as raw bytes in bounded caches, so each distinct stack is parsed once.
Anything else (switch and lost records, comments, other field sets, whitespace-only lines)
goes through the line-by-line path in ``wallflame.fold.perf.state`` (lines parsed by
``wallflame.fold.perf.lines``), which gives the same result for the common shape.

Names follow ``wallflame.names.normalize`` so that perf, gdb and eu-stack agree; the thread
root is the header's comm (the thread name at that sample).  Weights are the sample's period
(cpu-clock and task-clock periods are nanoseconds), or 1 when the header has no period.
"""

from __future__ import annotations

import fcntl
import io
import os
import stat
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from wallflame.fold import heads
from wallflame.fold.options import FoldOptions
from wallflame.profile import Profile
from wallflame.textio import open_binary

if TYPE_CHECKING:  # the parser itself is imported when there is something to parse
    from wallflame.fold.perf.state import PerfState

NAME = "perf"
detect = heads.perf

#: Bytes read at a time.  Records never straddle two batches (the tail is carried over).
CHUNK = 1 << 20
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def fold(path: str, options: FoldOptions, profile: Profile) -> None:
    with open_binary(path) as f:
        fold_stream(f, options, profile, path)


def fold_stream(f: BinaryIO, options: FoldOptions, profile: Profile, name: str = "-") -> None:
    """Fold ``perf script`` text read from ``f`` (a file or a pipe) into ``profile``.

    Streams: memory stays bounded by the number of distinct stacks, whatever the input size.
    ``name`` names the input in error messages.  Text in which nothing at all is recognised
    is an ``InputError``; anything else gives a profile, with every loss counted.
    """
    from wallflame.fold.perf.state import PerfState

    _widen_pipe(f)
    st = PerfState(options, profile)
    _finish(st, _fold_into(st, f), name)


def _finish(st: PerfState, line_no: int, name: str) -> None:
    """The counts into the profile, and what the capture tells about itself into its meta."""
    from wallflame.fold.perf.meta import record_meta

    st.finish(line_no, name)
    record_meta(st)


class _Reader(Protocol):
    def read(self, n: int, /) -> bytes: ...


def _fold_into(st: PerfState, f: _Reader) -> int:
    """Fold all of ``f`` into ``st`` (not finished); returns the next line number."""
    carry = b""
    line_no = 1
    crlf: bool | None = None
    while True:
        data = f.read(CHUNK)
        eof = not data
        buf = carry + data if carry else data
        if crlf is None and buf:
            crlf = b"\r\n" in buf[:CHUNK]
        if crlf and buf:
            if not eof and buf.endswith(b"\r"):
                buf, data = buf[:-1], b"\r"
            else:
                data = b""
            buf = buf.replace(b"\r\n", b"\n")
        else:
            data = b""
        if eof:
            if buf:
                line_no = _last(st, buf, line_no)
            break
        if b"\n\n" in buf:  # the records up to the last blank line (the rest: not complete)
            line_no, pos = _batch_native(st, buf, line_no)
            carry = buf[pos:] + data
            continue
        if len(buf) <= CHUNK:
            carry = buf + data
            continue
        cut = buf.rfind(b"\n")  # one huge record: hand its complete lines to the slow path
        if cut < 0:
            carry = buf + data
            continue
        st.slow_lines(buf[:cut], line_no, end=False)
        line_no += buf.count(b"\n", 0, cut) + 1
        carry = buf[cut + 1:] + data
    return line_no


#: Inputs smaller than this are folded in one process.
PARALLEL_MIN = 32 << 20


class _Range:
    """The bytes ``[start, end)`` of a file, read as a file; counts the newlines read."""

    def __init__(self, f: BinaryIO, start: int, end: int) -> None:
        self.f, self.left, self.newlines = f, end - start, 0
        f.seek(start)

    def read(self, n: int) -> bytes:
        data = self.f.read(min(n, self.left))
        self.left -= len(data)
        self.newlines += data.count(b"\n")
        return data

    def fileno(self) -> int:
        return self.f.fileno()


def _cuts(f: BinaryIO, size: int, jobs: int) -> list[int]:
    """Where to split the file into about ``jobs`` parts: just after a blank line that
    ``bytes.split(b"\n\n")`` splits at (two newlines, neither a third one before them nor
    one after), so that each part holds the records the whole file does."""
    cuts = [0]
    for j in range(1, jobs):
        pos = size * j // jobs
        f.seek(max(pos - 1, 0))
        window = f.read(1 << 20)
        base = max(pos - 1, 0)
        at = window.find(b"\n\n", 1)
        while at >= 0:
            if window[at - 1:at] != b"\n" and window[at + 2:at + 3] not in (b"\n", b""):
                break
            at = window.find(b"\n\n", at + 1)
        if at < 0 or base + at + 2 <= cuts[-1]:
            continue
        cuts.append(base + at + 2)
    cuts.append(size)
    return cuts


def fold_parallel(path: str, options: FoldOptions, profile: Profile, jobs: int) -> None:
    """``fold`` of a regular file, its parts folded by ``jobs`` processes at once.

    Gives the stacks, counts, losses (with their first lines) and warnings that ``fold``
    gives.  The part folded by a child process is used only when neither it nor the parts
    before it hold scheduler records (their intervals cross parts); otherwise that part is
    folded here, after the ones before it.  The window is noted from the parts' first and
    last records, which for time-ordered input (as ``perf script`` writes it) is the same."""
    import pickle

    from wallflame.fold.perf.state import PerfState

    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    if jobs < 2 or size < PARALLEL_MIN or not hasattr(os, "fork"):
        fold(path, options, profile)
        return
    with open_binary(path) as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            fold_stream(f, options, profile, path)
            return
        cuts = _cuts(f, size, jobs)
        children: list[tuple[int, int]] = []  # (pid, read end of its pipe)
        for j in range(1, len(cuts) - 1):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: fold its part, send back what it counted
                os.close(r)
                code = 0
                try:
                    with open(path, "rb") as g:
                        child = PerfState(options, Profile())
                        part = _Range(g, cuts[j], cuts[j + 1])
                        _fold_into(child, part)
                        payload = pickle.dumps(_counted(child, part.newlines), protocol=5)
                    with os.fdopen(w, "wb") as out:
                        out.write(payload)
                except BaseException:  # the parent folds this part itself
                    code = 1
                os._exit(code)
            os.close(w)
            children.append((pid, r))
        st = PerfState(options, profile)
        part = _Range(f, cuts[0], cuts[1])
        line_no = _fold_into(st, part)
        offset = part.newlines
        for j, (pid, r) in enumerate(children, start=1):
            with os.fdopen(r, "rb") as inp:
                payload = inp.read()
            _, status = os.waitpid(pid, 0)
            counted = pickle.loads(payload) if status == 0 and payload else None
            if counted is None or counted["sched"] or _sched(st):
                part = _Range(f, cuts[j], cuts[j + 1])
                line_no = _fold_into(st, part)
                part_lines = part.newlines
            else:
                _merge(st, counted, offset)
                part_lines = counted["newlines"]
                line_no = offset + part_lines + 1
            offset += part_lines
        _finish(st, line_no, path)


def _sched(st: PerfState) -> bool:
    return bool(st.tracker.switch_outs or st.tracker.open
                or any(r.startswith("PERF_RECORD_SWITCH") for r in st.records))


def _counted(st: PerfState, newlines: int) -> dict[str, object]:
    """What a child process counted, by names (its ids mean nothing to the parent)."""
    from wallflame.fold.perf.state import EVENT_SHIFT, LINE_BITS, LINE_MASK

    fid_mask = (1 << (EVENT_SHIFT - LINE_BITS)) - 1
    meta = st.profile.meta
    return {
        "sched": _sched(st),
        "newlines": newlines,
        "acc": [(head, st.event_list[v >> EVENT_SHIFT], st.stacks[(v >> LINE_BITS) & fid_mask],
                 v & LINE_MASK, total) for (head, v), total in st.acc.items()],
        "sem": [(*key[:4], st.stacks[key[4]], w, st.sem_n[key]) for key, w in st.sem_w.items()],
        "seen": st.seen_order,
        "no_period": st.no_period,
        "skipped": st.skipped_by_name,
        "records": st.records,
        "recognised": st.recognised,
        "times": (st.first_time, st.last_time),
        "losses": [(k, v.count, v.first_line, v.detail) for k, v in meta.losses.items()],
        "warnings": meta.warnings,
    }


def _merge(st: PerfState, c: dict[str, Any], offset: int) -> None:
    """Add a later part's counts to ``st`` as if ``st`` had folded that part itself."""
    from wallflame.fold.perf.state import EVENT_SHIFT, LINE_BITS

    for tid, comm in c["seen"]:
        st.thread_seen(tid, comm)
    meta = st.profile.meta
    for kind, count, first, detail in c["losses"]:
        meta.lose(kind, first + offset if first else 0, count, detail)
    for w in c["warnings"]:
        meta.warn(w)
    events = {e: i for i, e in enumerate(st.event_list)}
    for head, event, frames, lines, total in c["acc"]:
        ev = events.get(event)
        if ev is None:
            ev = events[event] = len(st.event_list)
            st.event_list.append(event)
        st.acc[head, ev << EVENT_SHIFT | st.intern(frames) << LINE_BITS | lines] += total
    for comm, pid, tid, event, frames, w, n in c["sem"]:
        key = (comm, pid, tid, event, st.intern(frames))
        st.sem_w[key] = st.sem_w.get(key, 0) + w
        st.sem_n[key] = st.sem_n.get(key, 0) + n
    st.no_period |= c["no_period"]
    for name, n in c["skipped"].items():
        st.skipped_by_name[name] = st.skipped_by_name.get(name, 0) + n
    for name, n in c["records"].items():
        st.records[name] = st.records.get(name, 0) + n
    st.recognised += c["recognised"]
    for t in c["times"]:
        if t is not None:
            st.note_time(t)


def _widen_pipe(f: BinaryIO) -> None:
    """Let the writer of a pipe (``perf script``) run ahead by one chunk while a chunk is
    folded, instead of blocking on the default 64 KiB pipe buffer."""
    try:
        fd = f.fileno()
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, F_SETPIPE_SZ, CHUNK)
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # not a pipe, or the size is capped (fs.pipe-max-size): keep the default


def _last(st: PerfState, buf: bytes, line_no: int) -> int:
    """The end of the input.  A last line without its newline is cut off: the record it
    belongs to is dropped and counted; every complete line before it is folded."""
    if buf.endswith(b"\n"):
        return _batch(st, buf.rstrip(b"\n").split(b"\n\n"), line_no)
    cut = buf.rfind(b"\n\n")
    if cut >= 0:
        line_no = _batch(st, buf[:cut].split(b"\n\n"), line_no)
        buf = buf[cut + 2:]
    nl = buf.rfind(b"\n")
    if nl >= 0:
        st.slow_lines(buf[:nl], line_no, end=False)
        line_no += buf.count(b"\n", 0, nl) + 1
        buf = buf[nl + 1:]
    meta = st.profile.meta
    if st.continuing and st.cur is not None and buf[:1] in (b" ", b"\t"):
        meta.lose("truncated last record", st.cur_line)  # its last frame line is cut off
        st.cur = None
    elif buf.strip():
        meta.lose("truncated last record", line_no)  # a header line cut off
    st.continuing = False
    return line_no


def _batch(st: PerfState, recs: list[bytes], line_no: int) -> int:
    """Fold whole records (blank-line separated); returns the next line number."""
    if st.continuing:
        first = recs[0]
        st.slow_lines(first, line_no, end=True)
        line_no += first.count(b"\n") + 2
        recs = recs[1:]
    return _fast(st, recs, line_no)


def _fast(st: PerfState, recs: list[bytes], ln: int) -> int:
    """The hot loop (``_native``).  Notes the times of the first and the last record
    folded here."""
    buf = b"\n\n".join(recs) + b"\n\n"  # records never end with a newline
    ln, first, last, _ = _native(st, buf, 0, ln)
    _note(st, first, last)
    return ln


def _note(st: PerfState, first: bytes, last: bytes) -> None:
    from wallflame.fold.perf.lines import parse_time

    if first:
        st.note_time(parse_time(first.rpartition(b" ")[2]))
        st.note_time(parse_time(last.rpartition(b" ")[2]))


def _batch_native(st: PerfState, buf: bytes, ln: int) -> tuple[int, int]:
    """``_batch`` on the records of ``buf`` (up to its last blank line) without splitting
    it; returns the next line number and where the text after the last blank line starts."""
    pos = 0
    if st.continuing:
        pos = buf.index(b"\n\n")
        st.slow_lines(buf[:pos], ln, end=True)
        ln += buf.count(b"\n", 0, pos) + 2
        pos += 2
    ln, first, last, pos = _native(st, buf, pos, ln)
    _note(st, first, last)
    return ln, pos


#: Digits as zeros: headers equal but for their digits are in the common shape or not alike.
_ZEROS = bytes.maketrans(b"123456789", b"000000000")

#: The native path's status codes (``PerfFolder.fold``).
_DONE, _SLOW, _HEADER, _NAME = range(4)


def _native(st: PerfState, buf: bytes, pos: int, ln: int) -> tuple[int, bytes, bytes, int]:
    """``PerfFolder.fold`` over the records of ``buf`` from ``pos``, answering its
    questions: the parts of a new header or frame line (it then goes on from the same
    record), or a record not in the common shape (folded here).  While scheduler intervals
    are open the Python loop takes over, since it notes which threads run.  Returns the
    next line number, the thread part and time of the first and last records folded, and
    where the text after the last blank line starts."""
    from wallflame.fold.perf.state import EVENT_SHIFT, LINE_BITS

    folder = st.native
    max_stacks = 1 << (EVENT_SHIFT - LINE_BITS)
    first = last = b""
    while True:
        if st.tracker.open:
            recs = buf[pos:].split(b"\n\n")
            ln, f, la = _python(st, recs[:-1], ln)
            return ln, first or f, la or last, len(buf) - len(recs[-1])
        status, pos, ln, fi, la_i, extra = folder.fold(buf, pos, ln, st.acc, st.fids, st.stacks,
                                                        max_stacks)
        if fi >= 0:
            first = first or buf[fi:buf.index(b": ", fi)]
            last = buf[la_i:buf.index(b": ", la_i)]
        if status == _DONE:
            return ln, first, last, pos
        end = buf.index(b"\n\n", pos)
        rec = buf[pos:end]
        if status == _HEADER:
            st.native_header(extra, rec)
            continue
        if status == _NAME:
            for key, raw in extra:
                st.native_name(key, raw)
            continue
        if st._learn(rec):
            first = first or rec.partition(b": ")[0]
            last = rec.partition(b": ")[0]
        else:
            st.slow_lines(rec, ln, end=True, learn=False)
        ln += rec.count(b"\n") + 2
        pos = end + 2


def _python(st: PerfState, recs: list[bytes], ln: int) -> tuple[int, bytes, bytes]:
    """The records of a batch while scheduler intervals are open (``_native`` hands them
    over: the only path for them, since it notes which threads run).

    A header reads ``<thread part> <time>: <period> <event>:``.  Everything after its first
    ``": "`` (period, event and the frame block) is looked up whole; failing that, the frame
    block and the period-and-event text are looked up apart, the latter parsed on the spot
    when its event is known (periods that vary from sample to sample).  Blocks and events
    are learned from records parsed in full.  The value packs what to add (period and one
    sample) and the key: the event, the stack id and the record's line count.  Returns the
    next line number and the thread part and time of the first and last records folded.
    """
    from wallflame.fold.perf.state import EVENT_SHIFT, LINE_MASK, MAX_COMBOS

    acc = st.acc
    combos = st.combos
    blocks = st.blocks
    tails = st.tails
    valid = st.valid_headers
    tracker_open = st.tracker.open
    first = last = b""
    for rec in recs:
        a, _, rest = rec.partition(b": ")
        kv = combos.get(rest)
        if kv is None:
            tail, _, block = rest.partition(b"\n")
            b = blocks.get(block)
            t = tails.get(tail) if b is not None else None
            if t is None and b is not None:
                t = st.parse_tail(tail)
            if t is None or b is None:
                # Uncommon shape, or first sight of this event or stack: parsed in full.
                if rec and st._learn(rec):
                    first = first or a
                    last = a
                elif rec:
                    st.slow_lines(rec, ln, end=True, learn=False)
                ln += rec.count(b"\n") + 2
                continue
            kv = (t[0] | b, t[1])
            if len(combos) >= MAX_COMBOS:
                combos.clear()
            combos[rest] = kv  # (what follows the thread part: the header is checked below)
        # the header's own shape (its digits aside: they decide nothing else)
        nl = rec.find(b"\n")
        hdr = rec if nl < 0 else rec[:nl]
        ok = valid.get(hdr.translate(_ZEROS))
        if ok is None:
            ok = st.valid_header(hdr)
        if not ok:
            st.slow_lines(rec, ln, end=True, learn=False)
            ln += rec.count(b"\n") + 2
            continue
        k, add = kv
        head, _, time = a.rpartition(b" ")
        acc[head, k] += add
        if tracker_open and st.kind(st.event_list[k >> EVENT_SHIFT]) in ("on", "offcpu"):
            st.running(head, time)  # a sample of it: the thread runs (as in ``_learn``)
        ln += k & LINE_MASK
        first = first or a
        last = a
    return ln, first, last
