"""The run's time-ordered evidence (``RUN/timeline.json.gz``) and the range restriction built
on it (``wallflame report RUN --from --to``)."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from unit.fold.test_sampled_switches import LEAF_COND, LEAF_MUTEX, inn, out, sample
from wallflame import timebuild, timeline
from wallflame.errors import InputError
from wallflame.fold import FoldOptions, fold_file
from wallflame.fold.perf.sampled_switches import SampledSched
from wallflame.profile import OFF, ON, Profile, StackKey
from wallflame.report.timerange import Range, restrict, window_range
from wallflame.timeline import RUNNABLE, UNSAMPLED, Timeline

S = 1_000_000_000

#: Thread 1: blocked on a mutex 1.0-1.3 s, runnable 1.5-1.6 s, in a condvar 2.0-2.8 s.
#: Thread 2: its first record is an IN at 1.2 s (blocked since the capture's first record).
CAPTURE = (
    sample(1, 1 * S - 2000, LEAF_MUTEX) + out(1, 1 * S) + inn(1, 13 * S // 10)
    + inn(2, 12 * S // 10, comm="v") + out(1, 15 * S // 10, preempt=True) + inn(1, 16 * S // 10)
    + sample(1, 2 * S - 2000, LEAF_COND) + out(1, 2 * S) + inn(1, 28 * S // 10)
    + out(2, 29 * S // 10, preempt=True, comm="v") + inn(2, 3 * S, comm="v")
)


def _sched() -> tuple[SampledSched, Profile]:
    s = SampledSched(FoldOptions().get_rules())
    s.feed(io.BytesIO(CAPTURE.encode()))
    p = Profile()
    s.finish(p, {})
    return s, p


def _timeline() -> tuple[Timeline, Profile]:
    s, p = _sched()
    tl = Timeline(t0=1 * S, t1=3 * S, off_source="sched")
    timebuild.add_spans(tl, s.log, s.rules, None, tracer_stops=False)
    for th in tl.threads.values():
        th.name = p.meta.threads.get(th.tid, "")
        th.pid = 100
    return tl, p


def test_every_interval_is_logged_with_its_kind_and_stack() -> None:
    tl, _ = _timeline()
    one = tl.threads[1]
    assert one.p_start == [1 * S, 15 * S // 10, 2 * S]
    assert one.p_dur == [3 * S // 10, S // 10, 8 * S // 10]
    assert [timeline.KINDS[k] for k in one.p_kind] == ["mutex", "runnable", "condvar"]
    assert tl.stacks.frames_of(one.p_stack[0]) == tuple(reversed(LEAF_MUTEX))
    assert tl.stacks.frames_of(one.p_stack[2]) == tuple(reversed(LEAF_COND))
    two = tl.threads[2]
    # Blocked from the capture's first record (1.0 s - 2 us) to its first IN, no stack known.
    assert two.p_kind[0] == UNSAMPLED and two.p_start[0] == 1 * S - 2000
    assert two.p_kind[1] == RUNNABLE and two.p_dur[1] == S // 10


def test_the_whole_window_gives_the_folded_profile() -> None:
    """Restricted to a range covering everything, the timeline gives back exactly what the
    scheduler folder gave: the same stacks, weights and run-queue time."""
    tl, p = _timeline()
    full = Profile(meta=p.meta)
    got = restrict(full, tl, Range(0, 10 * S))
    blocked = {k._replace(pid=0, thread=""): w for k, w in got.stacks.items()
               if k.frames != ("[unsampled]",)}
    want = {k._replace(pid=0, thread=""): w for k, w in p.stacks.items()
            if k.frames != ("[unsampled]",)}
    assert blocked.keys() == want.keys()
    # runnable time is split over the same stacks (the last nanosecond of rounding aside)
    assert all(abs(blocked[k] - want[k]) <= 1 for k in want)
    assert all(blocked[k] == want[k] for k in want if k.wait != "runnable")
    assert got.meta.extra["runqueue_ns"] == {"1": S // 10, "2": S // 10}
    # Thread 2 was blocked with no stack sampled: the whole of it under [unsampled], and its
    # runnable time too.
    assert sum(w for k, w in got.stacks.items() if k.tid == 2) == 3 * S // 10 + 2000


def test_a_range_clips_every_interval() -> None:
    tl, p = _timeline()
    got = restrict(Profile(meta=p.meta), tl, window_range(tl, 0.1, 0.55))  # 1.1-1.55 s
    one = {k.wait: w for k, w in got.stacks.items() if k.tid == 1}
    assert one == {"mutex": 2 * S // 10, "runnable": S // 20}
    assert got.meta.extra["runqueue_ns"] == {"1": S // 20}
    assert got.meta.window_ns == 45 * S // 100
    assert got.meta.extra["range"] == {"from_s": 0.1, "to_s": 0.55, "window_s": 2.0}


def test_an_empty_range_is_refused() -> None:
    tl, _ = _timeline()
    with pytest.raises(InputError, match="empty"):
        window_range(tl, 2.0, 1.0)


def test_on_cpu_samples_name_frames_as_the_folder_does() -> None:
    """Every sample of a perf capture lands in the timeline under the stack the perf folder
    gives it: per thread and stack, the weights are the folded ones."""
    path = FIXTURES / "perf" / "mix-fp.txt"
    folded = fold_file(str(path), FoldOptions(), "perf")
    tl = Timeline()
    tids = {k.tid for k in folded.stacks}
    skipped = timebuild.read_samples(path, tl, tids)
    got: dict[tuple[int, tuple[str, ...]], int] = {}
    for th in tl.threads.values():
        assert th.s_time == sorted(th.s_time)
        for w, sid in zip(th.s_weight, th.s_stack, strict=True):
            key = (th.tid, tl.stacks.frames_of(sid))
            got[key] = got.get(key, 0) + w
    want: dict[tuple[int, tuple[str, ...]], int] = {}
    for k, w in folded.stacks.items():
        if k.state == ON:
            want[(k.tid, k.frames)] = want.get((k.tid, k.frames), 0) + w
    assert got == want
    assert skipped == 0


HOSTILE = ("</script><img src=x onerror=alert(1)>", "a;b\nc", "\u2028\u00e9\x00", "\\x3b")


def test_the_file_round_trips_hostile_names(tmp_path: Path) -> None:
    tl, _ = _timeline()
    th = tl.thread(7, 100, HOSTILE[0])
    sid = tl.stacks.intern(HOSTILE)
    th.s_time, th.s_weight, th.s_stack = [2 * S, 15 * S // 10], [10, 20], [sid, 0]
    ref = tl.lock_set({"0x10 <" + HOSTILE[1] + ">": 3, "0x20": 5})
    th.p_start, th.p_dur, th.p_kind = [12 * S // 10], [5], [0]
    th.p_stack, th.p_period, th.p_locks = [sid], [1], [ref]
    timeline.write(tmp_path, tl)
    back = timeline.load(tmp_path)
    assert back.to_json() == tl.to_json()
    assert back.threads[7].name == HOSTILE[0]
    assert back.stacks.frames_of(back.threads[7].s_stack[1]) == HOSTILE  # sorted by time
    assert back.lock_of(ref) == "0x20"  # the most observed first


def test_unreadable_timelines_say_how_to_rebuild(tmp_path: Path) -> None:
    with pytest.raises(InputError) as e:
        timeline.load(tmp_path)
    assert "wallflame finish" in e.value.format_message()
    (tmp_path / timeline.TIMELINE).write_bytes(b"not gzip")
    with pytest.raises(InputError, match="unreadable timeline"):
        timeline.load(tmp_path)
    tl, _ = _timeline()
    d = tl.to_json()
    d["version"] = 99
    (tmp_path / timeline.TIMELINE).write_bytes(gzip.compress(json.dumps(d).encode()))
    with pytest.raises(InputError, match="version 99"):
        timeline.load(tmp_path)
    d = tl.to_json()
    d["threads"][0]["spans"]["s"][0] = 10**6  # a stack that does not exist
    (tmp_path / timeline.TIMELINE).write_bytes(gzip.compress(json.dumps(d).encode()))
    with pytest.raises(InputError, match="outside the tables"):
        timeline.load(tmp_path)
    d = tl.to_json()
    d["threads"][0]["spans"]["d"][0] = "<script>"  # a column damaged or forged
    (tmp_path / timeline.TIMELINE).write_bytes(gzip.compress(json.dumps(d).encode()))
    with pytest.raises(InputError, match="not a list of integers"):
        timeline.load(tmp_path)
    for column in ("d", "p"):  # a negative duration or period: no writer makes one
        d = _timeline()[0].to_json()  # (to_json shares the columns: the one above is forged)
        d["threads"][0]["spans"][column][0] = -7
        (tmp_path / timeline.TIMELINE).write_bytes(gzip.compress(json.dumps(d).encode()))
        with pytest.raises(InputError, match="negative duration, period or weight"):
            timeline.load(tmp_path)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wallflame", *args], capture_output=True,
                          text=True, check=False, timeout=120)


def test_report_range_needs_a_run_directory(tmp_path: Path) -> None:
    r = _cli("report", str(FIXTURES / "perf" / "mix-fp.txt"), "--from", "1", "--to", "2",
             "-o", str(tmp_path / "x.txt"))
    assert r.returncode == 3
    assert r.stderr.count("\n") == 1 and "run directory" in r.stderr, r.stderr
    r = _cli("report", str(FIXTURES / "perf" / "mix-fp.txt"), "--from", "2", "--to", "1")
    assert r.returncode == 2 and "--to" in r.stderr, r.stderr


def test_a_run_without_timeline_names_the_fix(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json").write_text("{}")
    r = _cli("report", str(run), "--from", "0", "--to", "1", "-o", str(tmp_path / "x.txt"))
    assert r.returncode == 3 and "wallflame finish" in r.stderr, r.stderr


def test_every_format_is_restricted(tmp_path: Path) -> None:
    """A run directory made by hand from the capture above: each format of a range holds
    only that range's time."""
    tl, p = _timeline()
    run = tmp_path / "run"
    run.mkdir()
    from wallflame.folded import write_folded

    with open(run / "offcpu.folded", "w") as f:
        write_folded(p.off_cpu(), f, annotate=True)
    (run / "meta.json").write_text(json.dumps({"profile": p.meta.to_json()}))
    timeline.write(run, tl)
    outs = {}
    for fmt, name in (("json", "r.json"), ("folded", "r.folded"), ("txt", "r.txt"),
                      ("speedscope", "r.speedscope.json"), ("pprof", "r.pb.gz"),
                      ("svg", "r.svg"), ("html", "r.html")):
        r = _cli("report", str(run), "--from", "0.1", "--to", "0.55", "--format", fmt,
                 "-o", str(tmp_path / name))
        assert r.returncode == 0, r.stderr
        outs[fmt] = tmp_path / name
    summary = json.loads(outs["json"].read_text())
    assert summary["window_s"] == 0.45
    one = next(t for t in summary["threads"] if t["tid"] == 1)
    assert one["wait"]["mutex"] == 0.2 and one["runqueue_s"] == 0.05
    assert one["wait"]["condvar"] == 0.0
    folded = outs["folded"].read_text()
    assert "pthread_cond_wait" not in folded and "__lll_lock_wait;[off mutex] 200000000" in folded
    assert "pthread_cond_wait" not in outs["svg"].read_text()
    assert "pthread_cond_wait" not in outs["speedscope"].read_text()
    # A damaged timeline: the whole-window page is written without it, and says so.
    (run / timeline.TIMELINE).write_bytes(b"damaged")
    r = _cli("report", str(run), "-o", str(tmp_path / "whole.html"))
    assert r.returncode == 0 and "the page has no timeline" in r.stderr, r.stderr
    assert "the page has no timeline" in (tmp_path / "whole.html").read_text()


def test_range_keys_are_the_folded_keys() -> None:
    """Off-CPU keys of a range carry the thread's name and pid, as the folded ones do."""
    tl, p = _timeline()
    got = restrict(Profile(meta=p.meta), tl, Range(0, 10 * S))
    assert StackKey(tuple(reversed(LEAF_MUTEX)), 1, "w", 100, OFF, "mutex") in got.stacks


_INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 1 << 22), st.text(max_size=8),
                          st.lists(st.tuples(_INT64, _INT64, _INT64), max_size=5),
                          st.lists(st.tuples(_INT64, _INT64, st.integers(0, 5), _INT64, _INT64,
                                             _INT64), max_size=5)),
                max_size=4, unique_by=lambda t: t[0]),
       st.lists(st.text(max_size=6), max_size=3))
def test_the_timeline_text_is_what_the_json_module_writes(
        threads: list[tuple[int, str, list[tuple[int, ...]], list[tuple[int, ...]]]],
        notes: list[str]) -> None:
    """``timeline.json_text`` (native integer columns) gives the JSON module's text exactly,
    whatever the names (quotes, control characters, any script) and numbers."""
    tl = Timeline(t0=5, t1=9, clock="CLOCK_MONOTONIC", notes=list(notes))
    tl.stacks.intern(("main", 'a"b\\c\u2028'))
    tl.lock_set({"mutex </script>": 2})
    for tid, name, samples, spans in threads:
        th = tl.thread(tid, tid // 2, name)
        for t, w, s in samples:
            th.s_time.append(t), th.s_weight.append(w), th.s_stack.append(s)
        for t, d, k, s, p, lk in spans:
            th.p_start.append(t), th.p_dur.append(d), th.p_kind.append(k)
            th.p_stack.append(s), th.p_period.append(p), th.p_locks.append(lk)
    expected = json.dumps(tl.to_json(), separators=(",", ":"), ensure_ascii=False)
    assert timeline.json_text(tl) == expected


def test_a_thread_never_sampled_takes_its_whole_window_stacks_in_a_range() -> None:
    """Thread 2's switches carried no stack; the whole window's profile took its blocked time
    from the snapshots (an I/O wait here).  A range gives the thread's blocked time in it the
    same stacks, not ``[unsampled]``; with no such stacks it stays ``[unsampled]``."""
    tl, p = _timeline()
    full = Profile(meta=p.meta)
    io_wait = StackKey(("start_thread", "worker", "io_getevents"), 2, "v", 100, OFF, "io")
    full.add(io_wait, 7 * S)
    got = restrict(full, tl, window_range(tl, 0.0, 0.1))  # 1.0-1.1 s: thread 2 blocked
    two = {k: w for k, w in got.stacks.items() if k.tid == 2}
    assert two == {io_wait: S // 10}
    bare = restrict(Profile(meta=p.meta), tl, window_range(tl, 0.0, 0.1))
    assert {k.frames for k in bare.stacks if k.tid == 2} == {("[unsampled]",)}


@pytest.mark.parametrize("bad", [["--from", "nan"], ["--to", "inf"], ["--from", "-inf"],
                                 ["--from", "-1e300", "--to", "1"]])
def test_a_range_that_is_not_a_number_of_seconds_is_refused(tmp_path: Path,
                                                            bad: list[str]) -> None:
    """NaN, infinities and seconds beyond any clock are a usage error (exit 2), one line,
    before anything is read."""
    r = _cli("report", str(FIXTURES / "perf" / "mix-fp.txt"), *bad, "-o",
             str(tmp_path / "x.txt"))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "is not a number of seconds" in r.stderr


def test_the_page_embeds_what_it_needs_to_split_a_range() -> None:
    """The page's timeline carries, for each blocked span with a stack, its period when it is
    not 1 (0: a wait a snapshot's stop showed), the whole duration of a span the window cut
    (its stratum), and, for a thread with unsampled spans, its blocked time of the whole
    profile by flame-tree node and class (where a range with no sampled span of it puts its
    time)."""
    from wallflame.profile import OFF, StackKey
    from wallflame.report.timeline_page import NodeFinder, _embed
    from wallflame.report.timerange import Range
    from wallflame.report.tree import CLASSES, build_tree
    from wallflame.timeline import KINDS, Timeline

    tl = Timeline(t0=10 * S, t1=20 * S, off_source="sched")
    sleep = tl.stacks.intern(("main", "nanosleep"))
    th = tl.thread(7, 100, "w")
    # cut by the window's start; shown by a stop; sampled (period 10); unsampled
    for start, dur, kind, sid, period in ((9 * S, 2 * S, KINDS.index("sleep"), sleep, 10),
                                          (12 * S, S, KINDS.index("sleep"), sleep, 0),
                                          (14 * S, S, KINDS.index("sleep"), sleep, 1),
                                          (16 * S, S, UNSAMPLED, 0, 1)):
        th.span(start, dur, kind, sid, period)
    p = Profile()
    p.meta.threads[7] = "w"
    key = StackKey(("main", "nanosleep"), 7, "w", 100, OFF, "sleep")
    p.add(key, 4 * S)
    tree = build_tree(p)
    finder = NodeFinder(tree)
    row = _embed(tl, Range(10 * S, 20 * S), p, finder)["threads"][0]
    assert row["p"][1] == [S, S, S, S]  # clipped durations
    assert row["pw"] == [[0, 2 * S]]
    assert row["pp"] == [[0, 10], [1, 0]]
    node = finder.node(7, ("main", "nanosleep", "[sleep]"))
    assert tree.names[tree.name[node]] == "[sleep]"
    assert row["wb"] == [[node * len(CLASSES) + CLASSES.index("sleep"), 4 * S]]


def test_a_range_counts_its_own_evidence() -> None:
    """A range's evidence counts (the noise floor's sample sizes for diff and check) are its
    own: the sampled spans in it (not the waits a snapshot's stop showed: those are the
    snapshots' evidence), and the snapshots in proportion to its length, not the whole
    run's."""
    from wallflame.report.timerange import Range, restrict
    from wallflame.timeline import KINDS, Timeline

    tl = Timeline(t0=0, t1=10 * S, off_source="sched")
    sleep = tl.stacks.intern(("main", "nanosleep"))
    th = tl.thread(7, 100, "w")
    for start, period in ((1 * S, 10), (2 * S, 0), (3 * S, 10), (7 * S, 10)):
        th.span(start, S // 2, KINDS.index("sleep"), sleep, period)
    th.span(4 * S, S // 2, UNSAMPLED)
    full = Profile()
    full.meta.threads[7] = "w"
    full.meta.samples.update({"perf": 0, "sched_switch": 3, "snapshots": 20})
    got = restrict(full, tl, Range(0, 5 * S))
    assert got.meta.samples == {"perf": 0, "sched_switch": 2, "snapshots": 10}
    whole = restrict(full, tl, Range(0, 10 * S))
    assert whole.meta.samples == full.meta.samples
