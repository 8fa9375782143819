"""The Perfetto export, decoded with the ``perfetto`` package's own generated protobuf classes
(an implementation independent of wallflame's hand-written encoder)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES

from unit.report.test_timeline import HOSTILE, S, _timeline
from wallflame import timeline
from wallflame.folded import write_folded
from wallflame.profile import WAIT_CLASSES, Profile
from wallflame.report.perfetto import NO_FRAMES, span_name, trace_bytes
from wallflame.report.timerange import Range
from wallflame.timeline import KINDS, Timeline

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")


def decode(data: bytes) -> Any:
    trace = pb.Trace()
    trace.ParseFromString(data)
    return trace


class Decoded:
    """What a trace holds, per thread: slices (name, start, end, stack, args) and samples."""

    def __init__(self, data: bytes) -> None:
        trace = decode(data)
        self.packets = list(trace.packet)
        first = self.packets[0]
        assert first.sequence_flags & 1 and first.HasField("interned_data")
        idata = first.interned_data
        self.functions = {s.iid: s.str.decode("utf-8") for s in idata.function_names}
        frames = {f.iid: self.functions[f.function_name_id] for f in idata.frames}
        self.callstacks = {c.iid: tuple(frames[i] for i in c.frame_ids)
                           for c in idata.callstacks}
        self.strings = {s.iid: s.str.decode("utf-8")
                        for s in idata.debug_annotation_string_values}
        names = {s.iid: s.name for s in idata.debug_annotation_names}
        self.threads: dict[int, tuple[int, int, str]] = {}  # uuid -> pid, tid, name
        self.processes: dict[int, tuple[int, str]] = {}
        self.slices: dict[int, list[dict[str, Any]]] = defaultdict(list)
        self.samples: dict[int, list[tuple[int, int, tuple[str, ...]]]] = defaultdict(list)
        open_: dict[int, dict[str, Any]] = {}
        for p in self.packets[1:]:
            assert p.trusted_packet_sequence_id == 1
            if p.HasField("track_descriptor"):
                d = p.track_descriptor
                if d.HasField("thread"):
                    self.threads[d.uuid] = (d.thread.pid, d.thread.tid, d.thread.thread_name)
                else:
                    self.processes[d.uuid] = (d.process.pid, d.process.process_name)
            elif p.HasField("track_event"):
                e = p.track_event
                tid = self.threads[e.track_uuid][1]
                if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
                    assert tid not in open_, "slices on one thread never nest"
                    args = {(a.name or names[a.name_iid]):
                            (a.string_value or self.strings[a.string_value_iid])
                            for a in e.debug_annotations}
                    open_[tid] = {"name": e.name, "start": p.timestamp, "args": args,
                                  "stack": self.callstacks[e.callstack_iid]}
                else:
                    assert e.type == pb.TrackEvent.TYPE_SLICE_END
                    s = open_.pop(tid)
                    s["end"] = p.timestamp
                    self.slices[tid].append(s)
            elif p.HasField("perf_sample"):
                ps = p.perf_sample
                self.samples[ps.tid].append((p.timestamp, ps.timebase_count,
                                             self.callstacks[ps.callstack_iid]))
        assert not open_, "every slice ends"


def state_of(name: str) -> str:
    return name.split(" ", 1)[0]


def _run_dir(tmp_path: Path, tl: Timeline, p: Profile) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    with open(run / "offcpu.folded", "w") as f:
        write_folded(p.off_cpu(), f, annotate=True)
    with open(run / "oncpu.folded", "w") as f:
        write_folded(p.on_cpu(), f, annotate=True)
    (run / "meta.json").write_text(json.dumps({"profile": p.meta.to_json()}))
    timeline.write(run, tl)
    return run


def _with_samples() -> tuple[Timeline, Profile]:
    """The scheduler capture of ``test_timeline`` plus on-CPU samples, some outside the
    window, and hostile names."""
    tl, p = _timeline()
    th = tl.threads[1]
    th.name = HOSTILE[0]
    hostile = tl.stacks.intern(("main", *HOSTILE))
    plain = tl.stacks.intern(("main", "work"))
    th.s_time = [S // 2, 14 * S // 10, 17 * S // 10, 19 * S // 10, 35 * S // 10]
    th.s_weight = [5, 10_000_000, 10_000_000, 10_000_000, 7]
    th.s_stack = [plain, hostile, plain, hostile, plain]
    from wallflame.profile import ON, StackKey

    p.meta.threads[1] = HOSTILE[0]
    for t, w, sid in zip(th.s_time, th.s_weight, th.s_stack, strict=True):
        if tl.t0 <= t < tl.t1:
            p.add(StackKey(tl.stacks.frames_of(sid), 1, HOSTILE[0], 100, ON), w)
    return tl, p


def test_slices_and_samples_stay_inside_the_window() -> None:
    tl, _ = _with_samples()
    d = Decoded(trace_bytes(tl))
    for slices in d.slices.values():
        for s in slices:
            assert tl.t0 <= s["start"] < s["end"] <= tl.t1
    for samples in d.samples.values():
        for t, _, _ in samples:
            assert tl.t0 <= t < tl.t1
    assert [w for _, w, _ in d.samples[1]] == [10_000_000] * 3  # 0.5 s and 3.5 s left out


def test_names_are_intact() -> None:
    tl, _ = _with_samples()
    d = Decoded(trace_bytes(tl, process="</title>\x00"))
    assert {name for _, tid, name in d.threads.values() if tid == 1} == {HOSTILE[0]}
    assert list(d.processes.values()) == [(100, "</title>\x00")]
    stacks = {st for _, _, st in d.samples[1]}
    assert ("main", *HOSTILE) in stacks
    assert set(HOSTILE) <= set(d.functions.values())


def test_slices_carry_state_stack_and_lock() -> None:
    tl, _ = _with_samples()
    ref = tl.lock_set({"0x10 <" + HOSTILE[1] + ">": 4})
    tl.threads[1].p_locks[0] = ref
    d = Decoded(trace_bytes(tl))
    first = d.slices[1][0]
    assert first["name"] == "mutex 0x10 <" + HOSTILE[1] + ">" == span_name(tl, 0, ref)
    assert first["args"]["lock"] == "0x10 <" + HOSTILE[1] + ">"
    leaf_first = ["__lll_lock_wait", "take", "main"]
    assert first["stack"] == tuple(reversed(leaf_first))
    assert first["args"]["stack"] == "\n".join(reversed(leaf_first))
    assert [state_of(s["name"]) for s in d.slices[1]] == ["mutex", "runnable", "condvar"]
    assert d.slices[2][0]["stack"] == (NO_FRAMES,)


def test_state_totals_equal_the_summary(tmp_path: Path) -> None:
    """Per thread, the slices of each state and the samples' periods add up to what the
    JSON summary of the same run directory says, within 1%."""
    tl, p = _with_samples()
    run = _run_dir(tmp_path, tl, p)
    out = tmp_path / "t.pftrace"
    r = subprocess.run([sys.executable, "-m", "wallflame", "report", str(run), "-o", str(out)],
                       capture_output=True, text=True, check=False, timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "wallflame", "report", str(run), "--format",
                        "json", "-o", str(tmp_path / "s.json")],
                       capture_output=True, text=True, check=False, timeout=120)
    assert r.returncode == 0, r.stderr
    check_totals(Decoded(out.read_bytes()), json.loads((tmp_path / "s.json").read_text()))


def check_totals(d: Decoded, summary: dict[str, Any]) -> None:
    rows = {r["tid"]: r for r in summary["threads"]}
    for tid, slices in d.slices.items():
        by: dict[str, int] = defaultdict(int)
        for s in slices:
            by[state_of(s["name"])] += s["end"] - s["start"]
        row = rows[tid]
        blocking = [c for c in WAIT_CLASSES if c != "runnable"]
        blocked = sum(by.get(c, 0) for c in (*blocking, "blocked")) / 1e9
        assert blocked == pytest.approx(row["off_cpu_s"], rel=0.01, abs=1e-5), row
        # Blocked time with no stack sampled (before a thread's first switch) is split over
        # its sampled stacks in the summary: per class only for threads without it, or when
        # it went to [unsampled] (class other) because nothing was sampled.
        if not by.get("blocked") or sum(by.get(c, 0) for c in blocking) == 0:
            for cls in blocking:
                got = (by.get(cls, 0) + (by.get("blocked", 0) if cls == "other" else 0)) / 1e9
                assert got == pytest.approx(row["wait"][cls], rel=0.01, abs=1e-5), (cls, row)
        assert by.get("runnable", 0) / 1e9 == pytest.approx(row["runqueue_s"], rel=0.01,
                                                            abs=1e-5), row
        assert by.get("stopped", 0) / 1e9 == pytest.approx(row["stopped_s"], rel=0.01,
                                                           abs=1e-5), row
    for tid, samples in d.samples.items():  # (a thread with no sample has none here)
        on = sum(w for _, w, _ in samples) / 1e9
        assert on == pytest.approx(rows[tid]["on_cpu_s"], rel=0.01, abs=1e-6)


def test_a_range_restricts_the_trace(tmp_path: Path) -> None:
    tl, p = _with_samples()
    run = _run_dir(tmp_path, tl, p)
    out = tmp_path / "t.pftrace"
    r = subprocess.run([sys.executable, "-m", "wallflame", "report", str(run), "--from", "0.1",
                        "--to", "0.55", "-o", str(out)],
                       capture_output=True, text=True, check=False, timeout=120)
    assert r.returncode == 0, r.stderr
    d = Decoded(out.read_bytes())
    a, b = 11 * S // 10, 155 * S // 100
    assert [(s["start"], s["end"]) for s in d.slices[1]] == [(a, 13 * S // 10),
                                                             (15 * S // 10, b)]
    assert [t for t, _, _ in d.samples[1]] == [14 * S // 10]


def test_perfetto_needs_a_run_directory(tmp_path: Path) -> None:
    fixture = FIXTURES / "perf" / "mix-fp.txt"
    r = subprocess.run([sys.executable, "-m", "wallflame", "report", str(fixture), "-o",
                        str(tmp_path / "x.pftrace")],
                       capture_output=True, text=True, check=False, timeout=120)
    assert r.returncode == 3 and r.stderr.count("\n") == 1, r.stderr
    assert "run directory" in r.stderr


def test_the_encoder_matches_protobuf() -> None:
    """Varints at their boundaries, as protobuf itself decodes them."""
    from wallflame.report.perfetto import _uint

    for v in (0, 1, 127, 128, 300, 2**32, 2**63 - 1):
        msg = pb.TracePacket()
        msg.ParseFromString(_uint(8, v))
        assert msg.timestamp == v
    assert KINDS[-1] == "stopped"


def test_whole_range_equals_default() -> None:
    tl, _ = _with_samples()
    assert trace_bytes(tl) == trace_bytes(tl, Range(tl.t0, tl.t1))


def test_speedscope_has_an_evented_profile_per_thread(tmp_path: Path) -> None:
    """speedscope's export of a run directory adds each thread's time-ordered profile: it
    matches speedscope's schema, its events nest, and a wait is open as long as it lasted."""
    jsonschema = pytest.importorskip("jsonschema")
    tl, p = _with_samples()
    run = _run_dir(tmp_path, tl, p)
    out = tmp_path / "r.speedscope.json"
    r = subprocess.run([sys.executable, "-m", "wallflame", "report", str(run), "-o", str(out)],
                       capture_output=True, text=True, check=False, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    schema = FIXTURES / "report" / "speedscope-schema.json"
    jsonschema.validate(doc, json.loads(schema.read_text()))
    names = [f["name"] for f in doc["shared"]["frames"]]
    evented = {pr["name"]: pr for pr in doc["profiles"] if pr["type"] == "evented"}
    assert len(evented) == 2  # both threads
    one = next(pr for n, pr in evented.items() if n.endswith("(1) over time"))
    opened: list[int] = []
    since: dict[int, int] = {}
    mutex = 0
    last = 0
    for e in one["events"]:
        assert e["at"] >= last
        last = e["at"]
        if e["type"] == "O":
            opened.append(e["frame"])
            since[e["frame"]] = e["at"]
        else:
            assert opened.pop() == e["frame"]
            if names[e["frame"]].startswith("[mutex"):
                mutex += e["at"] - since[e["frame"]]
    assert not opened
    assert mutex == 3 * S // 10  # thread 1 waited on the mutex 1.0-1.3 s


def test_wake_ups_are_flows_from_the_waker_to_the_woken() -> None:
    """A wake-up of a thread by another thread of the trace is a flow: an instant on the
    waker's track at its waking to one on the woken thread's track where its wait ends."""
    from unit.hub.test_critpath import _timeline as chain

    trace = pb.Trace()
    trace.ParseFromString(trace_bytes(chain(2)))
    uuid = {p.track_descriptor.uuid: p.track_descriptor.thread.thread_name for p in trace.packet
            if p.HasField("track_descriptor") and p.track_descriptor.HasField("thread")}
    ends, starts = {}, {}
    for p in trace.packet:
        e = p.track_event
        if p.HasField("track_event") and e.type == e.TYPE_INSTANT:
            for f in e.flow_ids:
                starts[f] = (p.timestamp, uuid[e.track_uuid], e.name)
            for f in e.terminating_flow_ids:
                ends[f] = (p.timestamp, uuid[e.track_uuid], e.name)
    assert sorted((starts[f], ends[f]) for f in starts) == [
        ((895, "io-thread", "wakes req-2"), (900, "req-2", "woken by io-thread")),
        ((1090, "req-2", "wakes req-1"), (1100, "req-1", "woken by req-2"))]
