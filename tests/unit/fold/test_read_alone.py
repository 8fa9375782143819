"""Records read alone (``# wallflame-read``): they carry a snapshot log's weights and classes,
the snapshots' stacks only say where each thread waited (``fold.snapshots.Accumulator.read``)."""

from __future__ import annotations

import json
from pathlib import Path

from wallflame.fold import FoldOptions, fold_file
from wallflame.fold.snapshots import ALONE_FRAME
from wallflame.profile import OFF
from wallflame.rundir import PROC_LINE, READ_LINE, SNAPSHOT_LINE, SNAPSHOTS_MAGIC

BASE = 10**18
MS = 1_000_000


def _log(tmp_path: Path, reads: list[dict[str, object]], header: bool = True) -> Path:
    """Two snapshots 1 s apart of thread 5 asleep in nanosleep (``sleeper``), then
    ``reads``."""
    head = {"backend": "libdw", "pid": 5, "rate_hz": 1.0}
    if header:
        head["read_alone"] = True
    lines = [SNAPSHOTS_MAGIC + " " + json.dumps(head)]
    for n in range(2):
        lines += ["PID 5 - process", "TID 5:", "#0  0x00007f0000001000 clock_nanosleep",
                  "#1  0x00007f0000001100 sleeper", "#2  0x00007f0000004000 start_thread",
                  PROC_LINE + json.dumps({"tid": 5, "state": "S", "comm": "w",
                                          "syscall": 230, "wchan": "hrtimer_nanosleep"}),
                  SNAPSHOT_LINE + json.dumps({"t_ns": BASE + n * 10**9, "pause_ms": 0.1}),
                  f"TS 000000000.{BASE // 10**9 + n}"]
    lines += [READ_LINE + json.dumps(r) for r in reads]
    path = tmp_path / "snapshots.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def _read(at_ms: int, **fields: object) -> dict[str, object]:
    return {"tid": 5, "comm": "w", "t_ns": BASE + at_ms * MS, **fields}


def test_the_reads_carry_the_weight_and_the_snapshots_the_stacks(tmp_path: Path) -> None:
    sleep = {"state": "S", "syscall": 230, "wchan": "hrtimer_nanosleep"}
    poll = {"state": "S", "syscall": 7, "wchan": "do_sys_poll"}
    log = _log(tmp_path, [_read(100, **sleep), _read(400, **poll), _read(1000, **sleep),
                          _read(1200, state="R", syscall=-1, wchan=""),
                          _read(1900, **sleep)])
    p = fold_file(str(log), FoldOptions(), "eu-stack")
    got = {(k.frames[-1], k.wait): w for k, w in p.stacks.items() if k.state == OFF}
    # the first read weighs the snapshots' median interval (1 s); then 300, 600 and 700 ms
    # (the 200 ms before the read running are running time, not added)
    assert got == {("clock_nanosleep", "sleep"): 10**9 + 600 * MS + 700 * MS,
                   (ALONE_FRAME, "poll"): 300 * MS}, got
    assert p.meta.extra["pmp_running_ns"] == {"5": 200 * MS}
    sleeper = next(k for k in p.stacks if k.frames[-1] == "clock_nanosleep")
    assert sleeper.frames == ("start_thread", "sleeper", "clock_nanosleep")


def test_without_reads_the_snapshots_weigh_as_before(tmp_path: Path) -> None:
    p = fold_file(str(_log(tmp_path, [], header=False)), FoldOptions(), "eu-stack")
    assert sum(p.stacks.values()) == 2 * 10**9  # the first weighs the median interval


def test_reads_in_a_log_that_does_not_say_so_are_counted_not_added(tmp_path: Path) -> None:
    """Without ``read_alone`` in its header the snapshots weigh the time: records read alone
    there would count it twice."""
    sleep = {"state": "S", "syscall": 230, "wchan": "hrtimer_nanosleep"}
    log = _log(tmp_path, [_read(100, **sleep), _read(900, **sleep)], header=False)
    p = fold_file(str(log), FoldOptions(), "eu-stack")
    assert sum(p.stacks.values()) == 2 * 10**9
    assert p.meta.losses["wallflame-read line in a log whose header does not say "
                         "read_alone"].count == 2


def test_a_bad_read_line_is_counted_not_fatal(tmp_path: Path) -> None:
    log = _log(tmp_path, [{"tid": 5}, {"tid": "x", "t_ns": 5}])
    with log.open("a") as f:
        f.write(READ_LINE + "{not json\n")
    p = fold_file(str(log), FoldOptions(), "eu-stack")
    assert p.meta.losses["bad wallflame-read line"].count == 3


def test_an_idle_io_uring_worker_waits_in_no_call_of_its_own(tmp_path: Path) -> None:
    """An io_uring worker (``iou-wrk-N``, a kernel thread of the process) idle in
    ``io_wq_worker`` shows its creator's user stack and system call: a wait the rules call
    I/O (``read``), which the kernel does not see as any call of the worker's.  Snapshot and
    record read alone both give it ``other``."""
    head = {"backend": "libdw", "pid": 5, "rate_hz": 1.0, "read_alone": True}
    rec = {"tid": 7, "state": "S", "comm": "iou-wrk-5", "syscall": 426,
           "wchan": "io_wq_worker"}
    lines = [SNAPSHOTS_MAGIC + " " + json.dumps(head)]
    for n in range(2):
        lines += ["PID 5 - process", "TID 7:", "#0  0x00007f0000001000 read",
                  "#1  0x00007f0000004000 start_thread", PROC_LINE + json.dumps(rec),
                  SNAPSHOT_LINE + json.dumps({"t_ns": BASE + n * 10**9, "pause_ms": 0.1}),
                  f"TS 000000000.{BASE // 10**9 + n}"]
    lines += [READ_LINE + json.dumps({**rec, "t_ns": BASE + at * MS}) for at in (300, 800)]
    log = tmp_path / "snapshots.log"
    log.write_text("\n".join(lines) + "\n")
    p = fold_file(str(log), FoldOptions(), "eu-stack")
    assert {(k.frames[-1], k.wait) for k in p.stacks} == {("read", "other")}
    assert sum(p.stacks.values()) == 10**9 + 500 * MS
