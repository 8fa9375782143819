"""Multi-process targets: process names as ps shows them, the members of a tree or cgroup,
threads named after their process."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest
from livehelp import WALLFLAME

from wallflame import procnames
from wallflame.assemble.profile import logs
from wallflame.collect import procs
from wallflame.errors import InputError
from wallflame.profile import OFF, ON, Profile, StackKey
from wallflame.rundir import Capture


def test_display_name_is_the_rewritten_command_line_with_control_characters_shown() -> None:
    assert procs.display_name(b"postgres: bench bench [local] UPDATE\0\0\0\0") == \
        "postgres: bench bench [local] UPDATE"
    assert procs.display_name(b"nginx\0-g\0daemon off;\0") == "nginx -g daemon off;"
    assert procs.display_name(b"x \x1b[2J\x07<b>\0") == "x ?[2J?<b>"
    assert procs.display_name(b"", "kworker") == "[kworker]"
    long = procs.display_name(b"a" * 1000)
    assert len(long) == procs.NAME_MAX and long.endswith("\u2026")


def test_descendants_follow_parent_pids() -> None:
    ppids = {10: 1, 11: 10, 12: 10, 13: 11, 20: 1}
    assert procs.descendants(10, ppids) == [10, 11, 13, 12]
    assert procs.descendants(20, ppids) == [20]


def test_cgroup_pids_include_the_cgroups_below(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "cgroup.procs").write_text("5\n7\n")
    (tmp_path / "a" / "cgroup.procs").write_text("")
    (tmp_path / "a" / "b" / "cgroup.procs").write_text("9\n5\n")
    assert procs.cgroup_pids(tmp_path) == [5, 7, 9]
    assert procs.cgroup_dir(str(tmp_path)) == tmp_path


def test_a_missing_cgroup_is_an_input_error() -> None:
    r = subprocess.run([*WALLFLAME, "collect", "--cgroup", "/no/such/cgroup", "-o", "/tmp/x"],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.parametrize("path", ["", "  ", "../cpu", "a/../../cpu"])
def test_an_empty_cgroup_or_one_outside_the_v2_hierarchy_is_refused(path: str) -> None:
    """An empty --cgroup (an unset variable) would be the root: every process; ``..`` would
    reach a v1 hierarchy (whose directories have a cgroup.procs too) on a hybrid mount."""
    try:
        procs.cgroup2_root()
    except InputError:
        pytest.skip("no cgroup v2 hierarchy mounted")
    with pytest.raises(InputError):
        procs.cgroup_dir(path)


def test_pid_tree_of_init_is_refused() -> None:
    """PID 1 is never stopped, even as the root of a tree: a one-line target error."""
    r = subprocess.run([*WALLFLAME, "collect", "--pid-tree", "1", "-d", "1", "-o",
                        "/tmp/wallflame-procs-init-run"], capture_output=True, text=True,
                       check=False)
    assert r.returncode == 4, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("wallflame: error:")]
    assert len(errors) == 1 and "refusing to profile PID 1" in errors[0], r.stderr
    assert "Traceback" not in r.stderr
    assert not os.path.exists("/tmp/wallflame-procs-init-run/raw/perf.data")


def test_a_named_pid_taken_by_a_newcomer_is_not_a_member(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """``--pid 100``: once that process has ended, a process that takes PID 100 is a stranger;
    a cgroup's (or a tree's) new process at a reused PID is a member like any other."""
    from wallflame.collect.target import Stat

    ticks = {100: 5}
    monkeypatch.setattr(procs, "read_stat",
                        lambda pid: Stat("mix", "S", 1, 0, ticks[pid]) if pid in ticks else None)
    monkeypatch.setattr(procs, "read_name", lambda pid: "mix")
    stop = threading.Event()
    named = procs.Watch(lambda: [100], stop, named=[100])
    listed = procs.Watch(lambda: [100], stop)
    assert [s.pid for s in named.poll()] == [100] == [s.pid for s in listed.poll()]
    ticks[100] = 9  # ended; its PID reused
    assert named.poll() == [] and named.seen[100].exited and named.seen[100].start_ticks == 5
    assert [s.start_ticks for s in listed.poll()] == [9]


def test_logs_are_the_first_process_then_the_others_by_pid(tmp_path: Path) -> None:
    for name in ("snapshots.log", "snapshots.20.log", "snapshots.3.log", "snapshots.x.log"):
        (tmp_path / name).write_text("")
    assert [p.name for p in logs(tmp_path, "snapshots.log")] == [
        "snapshots.log", "snapshots.3.log", "snapshots.20.log"]


def test_threads_are_named_after_their_process_and_the_processes_summed() -> None:
    p = Profile()
    p.add(StackKey(("main", "spin"), 100, "srv", 100, ON), 3)
    p.add(StackKey(("main", "poll"), 101, "io", 100, OFF, "poll"), 5)
    p.add(StackKey(("main", "spin"), 200, "srv", 200, ON), 7)
    p.add(StackKey(("main", "spin"), 300, "tiny", 300, ON), 1)
    cap = Capture(processes=[{"pid": 100, "name": "srv: master"},
                             {"pid": 200, "name": "srv: worker 1"},
                             {"pid": 400, "name": "srv: idle"}])
    procnames.apply(p, cap)
    assert p.meta.threads[100] == "srv: master"
    assert p.meta.threads[101] == "srv: master: io"
    assert p.meta.threads[200] == "srv: worker 1"
    assert 300 not in p.meta.threads  # only perf saw it: warned, its own name kept
    assert any("seen only by perf" in w for w in p.meta.warnings)
    from wallflame.report.summary import build_summary

    s = build_summary(p)
    by = {g["name"]: g for g in s["processes"]}
    assert by["srv: master"]["threads"] == 2 and by["srv: idle"]["threads"] == 0
    assert {r["tid"]: r.get("pid") for r in s["threads"]}[101] == 100


def test_on_cpu_samples_get_the_pid_the_other_evidence_names() -> None:
    """perf's samples name the thread only: their stacks take the pid the switches or the
    snapshots give the same thread, or the only process's."""
    p = Profile()
    p.add(StackKey(("main", "spin"), 101, "io", 0, ON), 3)
    p.add(StackKey(("main", "poll"), 101, "io", 100, OFF, "poll"), 5)
    p.add(StackKey(("main", "spin"), 201, "w", 0, ON), 7)
    p.add(StackKey(("main", "spin"), 300, "gone", 0, ON), 1)  # nothing names its process
    procnames.apply(p, Capture(processes=[{"pid": 100, "name": "srv: master"},
                                          {"pid": 200, "name": "srv: worker 1"}]))
    assert {(k.tid, k.pid) for k in p.stacks if k.state == ON} == {(101, 100), (201, 0),
                                                                    (300, 0)}
    q = Profile()
    q.add(StackKey(("main", "spin"), 7, "one", 0, ON), 3)
    procnames.apply(q, Capture(processes=[{"pid": 5, "name": "one"}]))
    assert [k.pid for k in q.stacks] == [5]
    assert sum(q.stacks.values()) == 3
