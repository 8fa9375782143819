"""The libdw snapshot loop stops only threads /proc does not show running.

A running thread's stack is never used (``fold.snapshots``: its snapshot time goes to
``pmp_running_ns``), so it is listed without frames instead of being stopped; its next stack
then weighs from this snapshot.  Other backends stop the whole process and list every thread."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any, cast

import pytest

from wallflame.collect import pmp
from wallflame.collect.pmp import Dump, LibdwBackend, SnapshotLoop
from wallflame.collect.target import Target
from wallflame.fold import FoldOptions, eustack, gdb
from wallflame.fold.snapshots import fold_log
from wallflame.profile import OFF, Profile
from wallflame.runfiles import SNAPSHOTS_MAGIC


class _Reader:
    def __init__(self, states: dict[int, str]) -> None:
        self.states = states

    def read(self) -> list[dict[str, Any]]:
        return [{"tid": tid, "comm": f"t{tid}", "state": st, "wchan": "", "syscall": 202,
                 "arg0": "0x0"} for tid, st in self.states.items()]


class _Backend(LibdwBackend):
    def __init__(self) -> None:  # no library, no process
        self.pid = 4242
        self.unwinder = None
        self.realtime = False
        self.commands = []
        self.attach_ms = 0.0
        self.calls: list[tuple[list[int], list[int] | None]] = []

    def snapshot(self, timeout_s: float, tids: list[int], watch: Any = None,
                 listed: list[int] | None = None) -> Dump:
        self.calls.append((tids, listed))
        text = f"PID {self.pid} - process\n" + "".join(
            f"TID {t}:\n#0  0x0000000000401000 pthread_cond_wait\n#1  0x0000000000401100 "
            f"worker_main\n" for t in tids) + "".join(f"TID {t}:\n" for t in listed or ())
        return Dump(text, 0.1, 0.2)


class _Target:
    pid = 4242
    start_ticks = 1
    stopped_at_start = False

    def alive(self) -> bool:
        return True


def _loop(backend: LibdwBackend, log: io.StringIO) -> SnapshotLoop:
    return SnapshotLoop(cast(Target, _Target()), backend, log, 2.0, 50.0, threading.Event())


def test_running_threads_are_listed_not_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pmp, "ensure_running", lambda *a: [])
    backend = _Backend()
    log = io.StringIO()
    loop = _loop(backend, log)
    states = {1: "S", 2: "R", 3: "D", 4: "S", 5: "R", 6: "Z"}
    assert loop._one(cast(Any, _Reader(states)), 5.0)
    (tids, listed), = backend.calls
    assert tids == [1, 4] and listed == [2, 5]  # D is not attached, Z is gone
    assert log.getvalue().count("TID ") == 4


def test_a_listed_running_thread_adds_no_stack_and_keeps_its_time(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Folded, the listed thread counts as running (its time in ``pmp_running_ns``), adds
    no stack, and the blocked threads' stacks are there."""
    monkeypatch.setattr(pmp, "ensure_running", lambda *a: [])
    backend = _Backend()
    log = io.StringIO()
    log.write(SNAPSHOTS_MAGIC + ' {"backend": "libdw", "pid": 4242, "rate_hz": 2.0}\n')
    loop = _loop(backend, log)
    for _ in range(3):
        assert loop._one(cast(Any, _Reader({1: "S", 2: "R"})), 5.0)
    path = tmp_path / "snapshots.log"
    path.write_text(log.getvalue())
    profile = Profile()
    fold_log(str(path), FoldOptions(), profile, [eustack.parse_header, gdb.parse_header],
             {"eu-stack": eustack.frame, "gdb": gdb._frame})
    tids = {k.tid for k in profile.stacks}
    assert tids == {1}, profile.stacks
    assert all(k.state == OFF for k in profile.stacks)
    assert "2" in profile.meta.extra.get("pmp_running_ns", {}), profile.meta.extra
    assert not profile.meta.losses, profile.meta.losses  # not "thread without frames"
    # include_running adds the running threads' stacks: a thread listed bare has none
    profile = Profile()
    fold_log(str(path), FoldOptions(include_running=True), profile,
             [eustack.parse_header, gdb.parse_header],
             {"eu-stack": eustack.frame, "gdb": gdb._frame})
    assert {k.tid for k in profile.stacks} == {1}, profile.stacks
