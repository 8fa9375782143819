"""The scheduler chunk's switch records read from its perf.data (``_speedups.perf_switches``,
``SampledSched.feed(..., switches=...)``) against the same records read from text, as
``perf script --show-switch-events`` prints them: the same threads, intervals and profile.

Files are built here record by record (the layout of ``linux/perf_event.h`` and perf's
``perf.data`` header), with records out of time order as per-CPU buffers leave them, task
events among them, and records of other kinds to pass over; then cut short and corrupted,
which the reader must take without an error.  ``tests/live/test_sampled_switches_live.py`` does the
same on a capture perf recorded."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unit.fold.test_sampled_switches_native import patched, sched, state
from wallflame.fold.options import FoldOptions
from wallflame.fold.perf import sched_reader
from wallflame.fold.perf.sampled_switches import SampledSched
from wallflame.fold.perf.sched_reader import read_switches
from wallflame.profile import Profile

SAMPLE_TYPE = 0x1 | 0x2 | 0x4 | 0x80 | 0x10000  # IP | TID | TIME | CPU | IDENTIFIER
SAMPLE_ID_ALL = 1 << 18


def attr(sample_type: int = SAMPLE_TYPE, flags: int = SAMPLE_ID_ALL) -> bytes:
    a = bytearray(128)
    struct.pack_into("=IIQQQQQ", a, 0, 2, 128, 0x174, 1, sample_type, 0, flags)
    return bytes(a) + struct.pack("=QQ", 0, 0)  # and its ids section: none


def trailer(pid: int, tid: int, t: int, cpu: int = 0) -> bytes:
    return struct.pack("=IIQIIQ", pid, tid, t, cpu, 0, 7)


def switch(out: bool, preempt: bool, pid: int, tid: int, t: int, cpu: int = 0) -> bytes:
    misc = (1 << 13 if out else 0) | (1 << 14 if preempt else 0)
    body = struct.pack("=II", 0, 0) + trailer(pid, tid, t, cpu)
    return struct.pack("=IHH", 15, misc, 8 + len(body)) + body


def comm(pid: int, tid: int, name: bytes, t: int) -> bytes:
    padded = name + b"\0" * (8 - len(name) % 8)
    body = struct.pack("=II", pid, tid) + padded + trailer(pid, tid, t)
    return struct.pack("=IHH", 3, 0, 8 + len(body)) + body


def fork(pid: int, ppid: int, tid: int, ptid: int, t: int) -> bytes:
    body = struct.pack("=IIIIQ", pid, ppid, tid, ptid, t) + trailer(pid, tid, t)
    return struct.pack("=IHH", 7, 0, 8 + len(body)) + body


def other(t: int) -> bytes:  # a sample, or any record of another kind
    body = struct.pack("=Q", 0xFFFF) + trailer(1, 1, t) + b"\x01" * 24
    return struct.pack("=IHH", 9, 0, 8 + len(body)) + body


def perf_data(records: list[bytes], attrs: list[bytes] | None = None) -> bytes:
    attrs = attrs if attrs is not None else [attr(), attr()]
    data = b"".join(records)
    attrs_off = 104
    data_off = attrs_off + sum(len(a) for a in attrs)
    head = b"PERFILE2" + struct.pack("=QQQQQQQQ", 104, len(attrs[0]), attrs_off,
                                     len(attrs[0]) * len(attrs), data_off, len(data), 0, 0)
    return head + b"\0" * 32 + b"".join(attrs) + data


def text_line(comm_name: str, pid: int, tid: int, t: int, rec: str) -> str:
    return f"{comm_name:>16} {pid:>6}/{tid:<6} {t // 10**9}.{t % 10**9:09d}: {rec}"


@st.composite
def captures(draw: st.DrawFn) -> tuple[bytes, str]:
    """A chunk's file and the text perf script prints for its switch records: threads 101
    and 102 of process 100 named by COMM records, 103 forked from 101 (named after it), 201
    of another process, their records spread over two CPUs' buffers."""
    names = {101: "mariadbd", 102: "é worker", 201: "other"}
    t = 81269_000_000_000
    events: list[tuple[int, int, bytes, str | None]] = []  # time, cpu, record, text
    for tid in (101, 102, 201):
        pid = 200 if tid == 201 else 100
        events.append((0, 0, comm(pid, tid, names[tid].encode(), 0), None))
    on = {101: True, 102: False, 103: False, 201: True}
    forked = False
    for _ in range(draw(st.integers(0, 50))):
        t += draw(st.sampled_from([0, 1, 900, 40_000]))
        if not forked and draw(st.integers(0, 9)) == 0:
            events.append((t, 0, fork(100, 100, 103, 101, t), None))
            names[103] = names[101]
            forked = True
            continue
        tid = draw(st.sampled_from([101, 102, 201, *([103] if forked else [])]))
        pid = 200 if tid == 201 else 100
        cpu = draw(st.integers(0, 1))
        preempt = on[tid] and draw(st.booleans())
        rec = switch(on[tid], preempt, pid, tid, t, cpu)
        what = (f"PERF_RECORD_SWITCH_CPU_WIDE {'OUT' if on[tid] else 'IN '}"
                f"{' preempt' if preempt else ''}  next pid/tid:  0/0 ")
        events.append((t, cpu, rec, text_line(names.get(tid, ""), pid, tid, t, what)))
        if draw(st.integers(0, 9)):
            on[tid] = not on[tid]
        if draw(st.integers(0, 5)) == 0:
            events.append((t, cpu, other(t), None))
    # the file holds each CPU's records in order, the CPUs' runs one after the other
    cut = draw(st.integers(0, len(events)))
    cpu0 = [e for e in events[:cut]] + [e for e in events[cut:] if e[1] == 0]
    cpu1 = [e for e in events[cut:] if e[1] == 1]
    in_file = cpu0 + cpu1
    data = perf_data([e[2] for e in in_file])
    # perf script prints them in time order, records of one time in the file's order
    text = "\n".join(e[3] for e in sorted(in_file, key=lambda e: e[0]) if e[3] is not None)
    return data, text


def fed(tmp: Path, data: bytes, text: str, how: str,
        at_start: list[int] | None) -> SampledSched:
    s = sched("python" if how == "python" else "native")
    if at_start is not None:
        s.set_window(0, None, at_start)
    if how == "text":
        s.feed(io.BytesIO(text.encode()))
        return s
    path = tmp / "sched.data.1"
    path.write_bytes(data)
    switches = read_switches(path)
    assert switches is not None
    # "file1": the records applied one per call of ``until`` (the batches a busy server's
    # chunk is applied in)
    with patched(sched_reader,
                 UNTIL_BATCH=1 if how == "file1" else sched_reader.UNTIL_BATCH):
        s.feed(io.BytesIO(b""), switches=switches)
    return s


@settings(max_examples=200, deadline=None)
@given(captures(), st.sampled_from([None, [101, 102]]))
def test_records_read_from_the_file_as_from_text(tmp_path_factory: pytest.TempPathFactory,
                                                 capture: tuple[bytes, str],
                                                 at_start: list[int] | None) -> None:
    tmp = tmp_path_factory.mktemp("chunk")
    data, text = capture
    ways = {how: fed(tmp, data, text, how, at_start)
            for how in ("text", "file", "file1", "python")}
    want = state(ways["text"])
    for how in ("file", "file1", "python"):
        got = state(ways[how])
        got["lines"] = want["lines"]  # text lines counted, records not
        assert got == want, how
    profiles = {how: Profile() for how in ways}
    for how, s in ways.items():
        s.finish(profiles[how], {"stack_period": 1})
    assert profiles["file"].stacks == profiles["text"].stacks
    assert profiles["python"].stacks == profiles["text"].stacks


def test_files_it_does_not_take(tmp_path: Path) -> None:
    """Another layout, or a header cut short: None, and the text is read instead."""
    recs = [switch(True, False, 100, 101, 5)]
    cases = {
        "empty": b"",
        "magic": b"PERFFILE" + perf_data(recs)[8:],
        "no sample_id_all": perf_data(recs, [attr(flags=0), attr(flags=0)]),
        "no time": perf_data(recs, [attr(SAMPLE_TYPE & ~0x4), attr(SAMPLE_TYPE & ~0x4)]),
        "events differ": perf_data(recs, [attr(), attr(SAMPLE_TYPE | 0x40)]),
        "header cut": perf_data(recs)[:100],
        "no data": perf_data([]),
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        assert read_switches(path) is None, name
    assert read_switches(tmp_path / "missing") is None


def test_a_chunk_cut_short_keeps_its_whole_records(tmp_path: Path) -> None:
    recs = [switch(True, True, 100, 101, 30), switch(False, False, 100, 101, 10),
            comm(100, 101, b"w", 0), switch(True, False, 100, 102, 20)]
    data = perf_data(recs)
    path = tmp_path / "cut"
    path.write_bytes(data[:-10])  # the last record cut
    got = read_switches(path)
    assert got is not None
    rows = list(struct.iter_unpack("=qqiiiiii", got[0]))
    assert [(r[0], r[2], r[4]) for r in rows] == [(0, 8, 101), (10, 4, 101), (30, 7, 101)]
    assert got[1] == ["w"]


@settings(max_examples=300, deadline=None)
@given(captures(), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                            max_size=8), st.integers(0, 10**6))
def test_corrupt_files_never_raise(tmp_path_factory: pytest.TempPathFactory,
                                   capture: tuple[bytes, str], flips: list[tuple[int, int]],
                                   cut: int) -> None:
    data = bytearray(capture[0])
    for at, value in flips:
        data[at % len(data)] = value
    path = tmp_path_factory.mktemp("bad") / "sched.data.1"
    path.write_bytes(bytes(data[: max(1, len(data) - cut % 200)]))
    got = read_switches(path)
    if got is not None:  # folded as a collect folds it: within its window
        s = SampledSched(FoldOptions().get_rules())
        s.set_window(81269_000_000_000, 81270_000_000_000, [101, 102])
        s.feed(io.BytesIO(b""), switches=got)
        s.finish(Profile(), {"stack_period": 1})
