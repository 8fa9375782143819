"""The findings' rules, one table of cases each: what is found, in what order, with what
figure; and the thread groups they name."""

from __future__ import annotations

from typing import Any

import pytest

from wallflame.locks.lockshare import lock_name
from wallflame.profile import OFF, ON, Meta, Profile, StackKey
from wallflame.report.findingrules import CALL
from wallflame.report.findings import MAX_FINDINGS, RULE, RULES, cpu_rank, findings, summarize
from wallflame.report.text import finding_lines
from wallflame.threadgroups import group_label, groups, name_pattern


def row(tid: int, name: str, on: float = 0.0, runnable: float = 0.0,
        **wait: float) -> dict[str, Any]:
    return {"tid": tid, "name": name, "on_cpu_s": on, "runnable_s": runnable,
            "off_cpu_s": sum(wait.values()), "wait": {"runnable": runnable, **wait}}


def lock(wait: float, waiters: list[tuple[int, str]], caught: int = 3,
         of: int = 10) -> dict[str, Any]:
    return {"lock": "0x1000 <g_lock+0x28>", "kind": "mutex", "wait_s": wait, "observations": of,
            "waiters": [{"tid": t, "name": n, "s": wait / len(waiters)} for t, n in waiters],
            "call_sites": [{"frame": "Queue::pop", "s": wait}],
            "held_confirmed": {"count": caught, "of": of},
            "holders": [{"stack": "main;worker;Queue::pop;Stats::record;hash", "name": "w-1",
                         "tid": 1}]}


EMPTY = Profile(meta=Meta(unit="ns"))


def kinds(summary: dict[str, Any], profile: Profile = EMPTY) -> list[str]:
    return [f.kind for f in findings(summary, profile)]


@pytest.mark.parametrize(("threads", "locks", "expected"), [
    # nothing notable: no finding
    ([row(1, "w-1", on=1.0, sleep=1.0)], [], []),
    # a lock waited on for 5% of its waiters' time and no more: found (the threshold is inclusive)
    ([row(1, "w-1", on=9.5, mutex=0.5)], [lock(0.5, [(1, "w-1")])], ["lock"]),
    # under 5%: not found
    ([row(1, "w-1", on=9.6, mutex=0.4)], [lock(0.4, [(1, "w-1")])], []),
    # runnable 20% of the busy threads' time: CPU saturation
    ([row(1, "w-1", on=4.0, runnable=1.0)], [], ["cpu"]),
    ([row(1, "w-1", on=4.1, runnable=0.9)], [], []),
    # I/O 10% of the time
    ([row(1, "w-1", on=9.0, io=1.0)], [], ["io"]),
    ([row(1, "w-1", on=9.1, io=0.9)], [], []),
    # an idle thread is named last and kept out of the other rules
    ([row(1, "w-1", on=9.0, io=1.0), row(2, "listener", poll=9.0, runnable=3.0)], [],
     ["io", "idle"]),
    # ranked by the thread time each accounts for: the lock (3 s) before the CPU (2 s)
    ([row(1, "w-1", on=3.0, runnable=2.0, mutex=3.0)], [lock(3.0, [(1, "w-1")])],
     ["lock", "cpu"]),
    ([row(1, "w-1", on=3.0, runnable=4.0, mutex=3.0)], [lock(3.0, [(1, "w-1")])],
     ["cpu", "lock"]),
    # waiting for a CPU once woken from the lock is the lock's convoy: ranked with the lock
    # (3 + 2 s against the 2 s of CPU the convoy does not account for)
    ([{**row(1, "w-1", on=3.0, runnable=4.0, mutex=3.0), "runnable_after": {"mutex": 2.0}}],
     [lock(3.0, [(1, "w-1")])], ["lock", "cpu"]),
])
def test_the_rules_find_what_reaches_their_thresholds(
        threads: list[dict[str, Any]], locks: list[dict[str, Any]], expected: list[str]) -> None:
    assert kinds({"threads": threads, "locks": locks}) == expected


@pytest.mark.parametrize(("label", "seconds", "expected"), [
    ({"class": "lock", "label": "ProcSleep"}, 0.5, ["waits"]),
    ({"class": "lock", "label": "ProcSleep"}, 0.4, []),
    ({"class": "rwlock", "label": "LWLock LockManager"}, 1.0, ["waits"]),
    ({"class": "mutex", "label": ""}, 1.0, []),  # glibc's: the lock sampler's, not a rule's
    ({"class": "poll", "label": "client read"}, 5.0, []),  # idle, not a lock
])
def test_a_wait_the_rules_name_as_a_lock(label: dict[str, Any], seconds: float,
                                         expected: list[str]) -> None:
    s = {"threads": [row(1, "postgres", on=10.0 - seconds, lock=seconds)], "locks": [],
         "wait_labels": [{**label, "s": seconds}]}
    assert kinds(s) == expected


@pytest.mark.parametrize(("runnable", "machine", "rank"), [
    (4.0, {}, 4.0),                                          # no figures: all of it
    (4.0, {"target_cpus": 2.0, "other_cpus": 0.0}, 4.0),     # the target filled the CPUs
    (4.0, {"target_cpus": 0.5, "other_cpus": 1.5}, 1.0),     # its neighbours did, mostly
    (4.0, {"target_cpus": 0.0, "other_cpus": 0.0}, 4.0),
])
def test_cpu_saturation_ranks_by_the_targets_own_share_of_the_cpus(
        runnable: float, machine: dict[str, float], rank: float) -> None:
    assert cpu_rank(runnable, machine) == rank


def test_the_thresholds_are_the_rules_table() -> None:
    assert (RULE["lock"].min_share, RULE["cpu"].min_share, RULE["io"].min_share) == \
        (0.05, 0.20, 0.10)


def test_a_lock_finding_names_the_group_the_lock_the_call_site_and_the_holder() -> None:
    threads = [row(i, f"consumer-{i}", on=1.0, mutex=1.0) for i in range(1, 9)]
    s = {"threads": threads, "locks": [lock(8.0, [(i, f"consumer-{i}") for i in range(1, 9)])]}
    (f,) = findings(s, EMPTY)
    assert f.text.startswith("consumer-* ×8 spent 50% of their time (8.00 s) waiting for "
                             "mutex g_lock+0x28, taken in Queue::pop; held in Queue::pop → "
                             "Stats::record → hash")
    assert f.evidence == "3 of 10 observations caught its holder"
    assert "q=Queue%3A%3Apop" in f.view


def test_hot_code_is_the_user_function_a_sample_was_taken_in() -> None:
    p = Profile(meta=Meta(unit="ns"))
    p.add(StackKey(("main", "work", "hash"), 1, "w-1", 0, ON), 8 * 10**9)
    p.add(StackKey(("main", "work", "write", "entry_SYSCALL_64", "ksys_write"), 1, "w-1", 0, ON),
          2 * 10**9)
    p.add(StackKey(("main", "nanosleep"), 1, "w-1", 0, OFF, "sleep"), 10**9)
    s = {"threads": [row(1, "w-1", on=10.0, sleep=1.0)], "locks": []}
    hot = [f for f in findings(s, p) if f.kind == "hot"]
    assert [f.text for f in hot] == ["hash ran 80% of the on-CPU time (8.00 s), in w-1",
                                     "write ran 20% of the on-CPU time (2.00 s), in w-1"]


def test_at_most_max_findings() -> None:
    threads = [row(i, f"t{i}x", on=1.0, mutex=1.0, io=1.0, runnable=1.0) for i in range(1, 21)]
    locks = [{**lock(1.0, [(i, f"t{i}x")]), "lock": f"0x{i}"} for i in range(1, 21)]
    assert len(findings({"threads": threads, "locks": locks}, EMPTY)) == MAX_FINDINGS


@pytest.mark.parametrize(("name", "pattern"), [
    ("consumer-3", "consumer-*"), ("worker12", "worker*"), ("pool 7", "pool *"),
    ("mariadbd", "mariadbd"), ("42", "42"), ("", ""), ("a1b", "a1b"),
])
def test_name_pattern(name: str, pattern: str) -> None:
    assert name_pattern(name) == pattern


@pytest.mark.parametrize(("names", "label"), [
    ([f"consumer-{i}" for i in range(8)], "consumer-* ×8"),
    (["consumer-1", "producer"], "consumer-1 and producer"),
    ([*[f"c-{i}" for i in range(3)], "p", "q", "r"], "c-* ×3, p, q and 1 more"),
    (["mariadbd"] * 50, "mariadbd ×50"),
    ([], "no thread"),
])
def test_group_label(names: list[str], label: str) -> None:
    assert group_label(names) == label


def test_groups_count_every_name_once() -> None:
    names = ["a-1", "a-2", "b", "b", "c9"]
    assert sum(n for _, n in groups(names)) == len(names)


@pytest.mark.parametrize(("lock", "name"), [
    ("0x55ab8e245328 <g_mutex_queue+0x28>", "g_mutex_queue+0x28"),
    ("0x7f00deadbeef", "0x7f00deadbeef"),
])
def test_lock_name(lock: str, name: str) -> None:
    assert lock_name(lock) == name


def test_hostile_names_in_findings_are_made_visible_in_text() -> None:
    evil = "w\x1b[31m-1\u202e"
    s = {"threads": [row(1, evil, on=1.0, mutex=1.0)], "locks": [lock(1.0, [(1, evil)])]}
    lines = finding_lines(findings(s, EMPTY))
    assert lines and not any("\x1b" in ln or "\u202e" in ln for ln in lines)


def test_summarize_holds_the_findings_as_data() -> None:
    p = Profile(meta=Meta(unit="ns", window_ns=10**10))
    p.add(StackKey(("main", "read"), 1, "w-1", 0, OFF, "io"), 10**10)
    s = summarize(p)
    assert [f["kind"] for f in s["findings"]] == ["io"]
    assert set(s["findings"][0]) == {"kind", "heading", "text", "evidence", "seconds", "view"}


def test_threads_that_share_the_process_name_are_named_by_their_role() -> None:
    """A server that names none of its threads: each one's role is the first named function
    of its heaviest stack past the runtime's root frames, and the tables group by it."""
    from wallflame.report.summary import build_summary
    from wallflame.threadgroups import merge_rows

    p = Profile(meta=Meta(unit="ns", window_ns=10 * 10**9))
    conn = ("clone3", "start_thread", "[mariadbd]", "handle_one_connection", "do_command")
    pool = ("clone3", "start_thread", "[libstdc++.so.6]", "tpool::worker_main", "get_task")
    for tid in range(10, 14):
        p.add(StackKey((*conn, "poll"), tid, "mariadbd", 1, OFF, "poll"), 9 * 10**9)
        p.add(StackKey(conn, tid, "mariadbd", 1, ON), 10**9)
    for tid in (20, 21):
        p.add(StackKey((*pool, "pthread_cond_wait"), tid, "mariadbd", 1, OFF, "condvar"),
              10 * 10**9)
    p.add(StackKey(("_start", "main", "poll"), 1, "mariadbd", 1, OFF, "poll"), 10 * 10**9)
    s = build_summary(p)
    roles = {r["tid"]: r.get("role") for r in s["threads"]}
    assert roles == {**dict.fromkeys(range(10, 14), "handle_one_connection"),
                     20: "tpool::worker_main", 21: "tpool::worker_main", 1: "main"}
    names = sorted(r["name"] for r in merge_rows(s["threads"]))
    assert names == ["mariadbd: handle_one_connection ×4", "mariadbd: main",
                     "mariadbd: tpool::worker_main ×2"]


def test_threads_with_names_of_their_own_keep_them() -> None:
    from wallflame.report.summary import build_summary

    p = Profile(meta=Meta(unit="ns", window_ns=10**9))
    for tid in range(1, 6):
        p.add(StackKey(("clone3", "start_thread", "work"), tid, f"w-{tid}", 1, ON), 10**9)
    assert not any("role" in r for r in build_summary(p)["threads"])


# The calls whose on-CPU time is a known cost, and retained memory (report/findingrules.py).

CLONE = ("clone3", "start_thread")


def on_profile(stacks: list[tuple[tuple[str, ...], int, float]],
               memory: dict[str, Any] | None = None) -> Profile:
    """On-CPU stacks ``(frames, tid, seconds)`` of threads ``w-TID``; ``memory``: the run's
    ``memory.json``."""
    p = Profile(meta=Meta(unit="ns", window_ns=10 * 10**9))
    for frames, tid, s in stacks:
        p.add(StackKey((*CLONE, *frames), tid, f"w-{tid}", 1, ON), int(s * 10**9))
    if memory is not None:
        p.meta.extra["memory"] = memory
    return p


def threads_of(stacks: list[tuple[tuple[str, ...], int, float]], wall: float = 10.0
               ) -> list[dict[str, Any]]:
    on: dict[int, float] = {}
    for _, tid, s in stacks:
        on[tid] = on.get(tid, 0.0) + s
    return [row(tid, f"w-{tid}", on=s, sleep=wall - s) for tid, s in sorted(on.items())]


ALLOC = [(("loop", "handle_request", "std::vector<char>::_M_realloc_insert", "operator new",
           "malloc", "_int_malloc"), 1, 2.0),
         (("loop", "handle_request", "free", "_int_free"), 1, 1.0),
         (("loop", "handle_request", "checksum"), 1, 2.0)]
GC = [(("main.worker", "main.newRecord", "runtime.newobject", "runtime.mallocgc"), 1, 2.0),
      (("runtime.gcBgMarkWorker", "runtime.gcDrain", "runtime.scanobject"), 2, 2.0),
      (("main.worker", "main.score"), 1, 3.0)]
SPIN = [(("event_loop", "epoll_wait", "entry_SYSCALL_64", "do_epoll_wait"), 1, 5.0),
        (("event_loop", "epoll_wait"), 1, 1.0), (("event_loop", "handle"), 1, 1.0)]
ICU = [(("loop", "normalize", "icu_lower", "ucasemap_utf8ToLower_72", "[libicuuc.so.72.1]"),
        1, 0.15),
       (("[unknown]", "[libicuuc.so.72.1]"), 1, 0.1),
       (("loop", "fingerprint", "fnv1a"), 1, 9.75)]


@pytest.mark.parametrize(("stacks", "kind", "words"), [
    # the allocator (of tier 1: first here by its time): its entry frames named, and the
    # program's code that called it (the C++ library's frames skipped)
    (ALLOC, "alloc", ["the allocator (operator new, free) took 60% of the on-CPU time (3.00 s) "
                      "of w-1, called from handle_request; allocation churn"]),
    # Go: the collector's mark workers and the allocating code's mallocgc, called from main
    (GC, "gc", ["Go's garbage collector and allocator (runtime.gcBgMarkWorker, runtime.mallocgc)"
                " took 57% of the on-CPU time (4.00 s) of w-* ×2, called from "
                "main.newRecord"]),
    # an idle poll on a CPU for half its thread's time: a busy-polling loop
    (SPIN, "busypoll", ["w-1 spent 6.00 s on a CPU inside epoll_wait, 60% of the time they "
                        "were not waiting for a CPU",
                        "called from event_loop: a busy-polling loop"]),
    # ICU: 2.5% of the on-CPU time (shown as 2%) is found, named by the function that calls into it
    (ICU, "library", ["ICU (ucasemap_utf8ToLower_72, [libicuuc.so.72.1]) took 2% of the "
                      "on-CPU time (0.25 s) of w-1, called from icu_lower"]),
])
def test_a_known_costly_call_is_its_own_finding_and_comes_first(
        stacks: list[tuple[tuple[str, ...], int, float]], kind: str, words: list[str]) -> None:
    found = findings({"threads": threads_of(stacks), "locks": []}, on_profile(stacks))
    assert found[0].kind == kind, [f.text for f in found]
    assert all(w in found[0].text for w in words), found[0].text
    # the call's samples are not hot code as well
    hot = [f.text.split(" ran ")[0] for f in found if f.kind == "hot"]
    assert hot and not any(CALL[kind].frames.match(fn) for fn in hot), hot


@pytest.mark.parametrize(("stacks", "found"), [
    # under the thresholds: 9% of the on-CPU time in the allocator, 0.9% in ICU
    ([(("loop", "malloc"), 1, 0.9), (("loop", "work"), 1, 9.1)], False),
    ([(("loop", "icu_lower", "ucasemap_utf8ToLower_72"), 1, 0.09), (("loop", "work"), 1, 9.91)],
     False),
    ([(("loop", "icu_lower", "ucasemap_utf8ToLower_72"), 1, 0.1), (("loop", "work"), 1, 9.9)],
     True),
    # a blocking poll's own on-CPU time, 5% of its thread's wall time: not a busy poll, even
    # when it is all the thread's on-CPU time
    ([(("event_loop", "epoll_wait"), 1, 0.5)], False),
    ([(("event_loop", "epoll_wait"), 1, 1.0)], True),
    # frames of the same names inside the kernel are not the call
    ([(("loop", "write", "entry_SYSCALL_64", "free"), 1, 5.0)], False),
])
def test_the_calls_thresholds(stacks: list[tuple[tuple[str, ...], int, float]],
                              found: bool) -> None:
    kinds_found = {f.kind for f in findings({"threads": threads_of(stacks), "locks": []},
                                            on_profile(stacks))}
    assert bool(kinds_found & {"alloc", "library", "busypoll"}) == found, kinds_found


@pytest.mark.parametrize(("on", "blocked", "runnable", "found"), [
    (0.5, 0.0, 9.0, True),    # a spinner on a loaded machine: it waits for a CPU, never blocks
    (0.5, 0.6, 0.0, False),   # blocked in the poll longer than on a CPU in it: it waits
    (0.9, 0.0, 0.0, False),   # 9% of the time it was not waiting for a CPU
])
def test_a_busy_poll_is_a_thread_that_spins_rather_than_blocks(
        on: float, blocked: float, runnable: float, found: bool) -> None:
    stacks = [(("event_loop", "epoll_wait"), 1, on)]
    rows = [row(1, "w-1", on=on, runnable=runnable, poll=blocked,
                sleep=10.0 - on - runnable - blocked)]
    assert (kinds({"threads": rows, "locks": []}, on_profile(stacks))[:1] == ["busypoll"]) == found


def memory(arenas: int, arena_kb: int, rss_kb: int) -> dict[str, Any]:
    return {"arenas": {"count": arenas, "total_rss_kb": arena_kb, "mappings": []},
            "samples": [{"t_s": 1.0, "rss_kb": rss_kb + 1000}, {"t_s": 5.0, "rss_kb": rss_kb}]}


@pytest.mark.parametrize(("mem", "found"), [
    (memory(8, 480 * 1024, 483 * 1024), True),
    (memory(8, 64 * 1024, 128 * 1024), True),     # 64 MB and half the RSS: found
    (memory(8, 63 * 1024, 100 * 1024), False),    # under 64 MB
    (memory(8, 100 * 1024, 201 * 1024), False),   # under half the RSS
    (memory(16, 67 * 1024, 170 * 1024), False),   # a busy MariaDB's arenas: 39% of its RSS
    (memory(1, 480 * 1024, 483 * 1024), False),   # the main arena alone: the heap
    (memory(8, 212, 3540), False),                # trimmed
    ({}, False),
])
def test_retained_memory_in_malloc_arenas(mem: dict[str, Any], found: bool) -> None:
    stacks = [(("loop", "work"), 1, 2.0)]
    s = {"threads": [row(1, "w-1", on=2.0, runnable=6.0, sleep=2.0)], "locks": []}
    out = findings(s, on_profile(stacks, mem))
    # memory is of tier 0: before the CPU saturation that accounts for more thread time
    assert (out[0].kind == "memory") == found, [f.kind for f in out]
    if found:
        assert out[0].text.startswith("8 glibc malloc arenas held ")
        assert "looks like a leak; malloc_trim(0) returns it" in out[0].text


def test_tier_0_comes_before_more_thread_time() -> None:
    stacks = [*ICU[:2], (("loop", "fingerprint", "fnv1a"), 1, 9.75)]
    s = {"threads": [row(1, "w-1", on=10.0, runnable=20.0, mutex=20.0)],
         "locks": [lock(20.0, [(1, "w-1")])]}
    assert kinds(s, on_profile(stacks)) == ["library", "lock", "cpu", "hot"]
    assert [(r.kind, r.tier) for r in RULES if r.tier == 0] == \
        [("memory", 0), ("busypoll", 0), ("library", 0), ("gc", 0), ("alloc", 0)]


@pytest.mark.parametrize(("before", "after", "first"), [
    (ALLOC, [(("loop", "handle_request", "checksum"), 1, 2.0)],
     "on-CPU time in the allocator (operator new, free) vanished (0.30 s/s before)"),
    (GC, [(("main.worker", "main.score"), 1, 3.0)],
     "on-CPU time in Go's garbage collector and allocator (runtime.gcBgMarkWorker, "
     "runtime.mallocgc) vanished (0.40 s/s before)"),
    (SPIN, [(("event_loop", "handle"), 1, 1.0)],
     "on-CPU time in an idle poll (epoll_wait) vanished (0.60 s/s before)"),
])
def test_the_diff_names_the_finding_that_vanished_first(
        before: list[tuple[tuple[str, ...], int, float]],
        after: list[tuple[tuple[str, ...], int, float]], first: str) -> None:
    from wallflame.report.diff.compare import compare
    from wallflame.report.diff.headline import headline

    a, b = on_profile(before), on_profile(after)
    for p in (a, b):
        p.meta.samples["perf"] = 5000
    lines = headline(compare(a, b))
    assert lines[0] == first, lines
    # the call's own frames are not stated again as functions
    assert not any(w in line for line in lines[1:]
                   for w in ("malloc", "runtime.", "epoll_wait")), lines


def test_the_diff_names_a_small_finding_that_vanished() -> None:
    """ICU at 2.5% of the on-CPU time, 0.025 s/s: under the floor of a class's change, but a
    finding on one side and not the other."""
    from wallflame.report.diff.compare import compare
    from wallflame.report.diff.headline import headline

    a, b = on_profile(ICU), on_profile(ICU[2:])
    for p in (a, b):
        p.meta.samples["perf"] = 5000
    assert headline(compare(a, b))[0] == ("on-CPU time in ICU (ucasemap_utf8ToLower_72, "
                                          "[libicuuc.so.72.1]) vanished (0.03 s/s before)")
    assert headline(compare(a, a)) == []


def test_the_diff_names_memory_kept_in_arenas() -> None:
    from wallflame.report.diff.compare import compare
    from wallflame.report.diff.headline import headline

    stacks = [(("loop", "work"), 1, 2.0)]
    a = on_profile(stacks, memory(8, 480 * 1024, 483 * 1024))
    b = on_profile(stacks, memory(8, 212, 3540))
    assert headline(compare(a, b)) == [
        "memory resident in glibc's malloc arenas shrank from 480.0 MB to 0.2 MB"]
    assert headline(compare(b, b)) == []
    assert headline(compare(a, on_profile(stacks))) == []  # not read after: nothing said


@pytest.mark.parametrize(("frame", "kind"), [
    ("malloc", "alloc"), ("_int_free", "alloc"), ("operator new(unsigned long)", "alloc"),
    ("operator delete[](void*)", "alloc"), ("tc_malloc", "alloc"), ("je_sdallocx", "alloc"),
    ("tcmalloc::ThreadCache::Allocate", "alloc"), ("[libjemalloc.so.2]", "alloc"),
    ("tc_parse", None), ("free_pages", None), ("freeze", None),
    ("runtime.mallocgc", "gc"), ("runtime.gcDrainN", "gc"), ("runtime.gcBgMarkWorker", "gc"),
    ("runtime.newobject", None), ("main.gcStats", None),
    ("epoll_wait", "busypoll"), ("__poll", "busypoll"), ("ppoll", "busypoll"),
    ("do_epoll_wait", None), ("pollster", None),
    ("ucasemap_utf8ToLower_72", "library"), ("icu_72::CaseMap::toLower", "library"),
    ("[libicuuc.so.72.1]", "library"), ("icu_lower", None),
])
def test_the_calls_frames(frame: str, kind: str | None) -> None:
    from wallflame.report.findingrules import which_call

    hit = which_call(("main", frame))
    assert (hit[0].kind if hit else None) == kind
