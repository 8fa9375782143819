"""The database servers' rules against real captures (tests/fixtures/servers/README.md says how
each was taken): PostgreSQL under pgbench, MariaDB under sysbench, and one-off waits of each."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import FIXTURES

from wallflame.classify import classify_label, find_rule
from wallflame.fold import gdb
from wallflame.fold.options import FoldOptions
from wallflame.profile import OFF, Profile

FIX = FIXTURES / "servers"


def folded(name: str) -> list[tuple[tuple[str, ...], int]]:
    """``(frames, ns)`` of a fixture of off-CPU stacks (the thread's root frame dropped)."""
    out = []
    for line in (FIX / name).read_text().splitlines():
        stack, _, ns = line.rpartition(" ")
        out.append((tuple(stack.split(";")[1:]), int(ns)))
    return out


def by_label(name: str) -> Counter[tuple[str, str]]:
    acc: Counter[tuple[str, str]] = Counter()
    for frames, ns in folded(name):
        acc[classify_label(frames)] += ns
    return acc


def dump(name: str) -> dict[tuple[str, str], list[tuple[str, ...]]]:
    """The off-CPU stacks of a gdb fixture by ``(class, label)``."""
    p = Profile()
    gdb.fold(str(FIX / name), FoldOptions(snapshot_interval_ns=1), p)
    out: dict[tuple[str, str], list[tuple[str, ...]]] = {}
    for k in p.stacks:
        if k.state == OFF:
            hit = find_rule(k.frames)
            assert hit is not None and hit[0] == k.wait, k.frames
            out.setdefault(hit, []).append(k.frames)
    return out


def test_postgres_backend_under_pgbench() -> None:
    """A backend of 16 pgbench clients on one branch row: the row lock is `lock`, most of its
    wait; `poll` only waits on the client."""
    acc = by_label("postgres-backend-pgbench.folded")
    off = sum(acc.values())
    assert acc[("lock", "ProcSleep")] >= 0.8 * off
    assert acc[("rwlock", "LWLock LockManager")] > 0
    assert acc[("io", "WAL flush")] > 0
    assert {label for cls, label in acc if cls == "poll"} == {"client read"}
    assert acc[("other", "")] == 0
    for frames, _ in folded("postgres-backend-pgbench.folded"):
        if classify_label(frames)[0] == "poll":
            assert "secure_read" in frames


def test_postgres_backend_through_pt_pmp() -> None:
    """pt-pmp's own log of another backend of the same load and window, folded: every sample
    in ProcSleep is the row lock (or the LWLock ProcSleep takes), none is idle."""
    p = Profile()
    gdb.fold(str(FIX / "postgres-ptpmp-backend.txt"), FoldOptions(), p)
    acc: Counter[tuple[str, str]] = Counter()
    for k, w in p.stacks.items():
        assert k.state == OFF and "ProcSleep" in k.frames
        hit = find_rule(k.frames)
        assert hit is not None and hit[0] == k.wait
        acc[hit] += w
    assert set(acc) == {("lock", "ProcSleep"), ("rwlock", "LWLock LockManager")}
    assert acc[("lock", "ProcSleep")] >= 0.8 * sum(acc.values())


def test_postgres_wal_under_pgbench_simple_update() -> None:
    """pgbench -N (no row contention): a backend waits for the client, for WALWriteLock and for
    its WAL flush; the WAL writer idles on its latch or takes WALWriteLock."""
    acc = by_label("postgres-backend-pgbench-simple.folded")
    assert acc[("rwlock", "LWLock WALWrite")] > 0.1 * sum(acc.values())
    assert set(acc) == {("poll", "client read"), ("rwlock", "LWLock WALWrite"),
                        ("io", "WAL flush")}
    writer = by_label("postgres-walwriter.folded")
    assert set(writer) == {("poll", "latch"), ("rwlock", "LWLock WALWrite")}
    assert writer[("poll", "latch")] > 0.9 * sum(writer.values())


def test_postgres_processes_under_pgbench() -> None:
    waits = dump("postgres-gdb-pgbench.txt")
    assert len(waits[("lock", "ProcSleep")]) >= 10
    assert all("ProcSleep" in f for f in waits[("lock", "ProcSleep")])
    assert waits[("rwlock", "LWLock LockManager")]
    # the auxiliary processes idle on their latch
    idle = {f for frames in waits[("poll", "latch")] for f in frames
            if f.endswith("Main") or f.startswith(("Start", "Checkpoint"))}
    assert {"WalWriterMain", "BackgroundWriterMain", "CheckpointWriteDelay",
            "ApplyLauncherMain"} <= idle
    assert all("secure_read" in f for f in waits[("poll", "client read")])
    assert set(waits) <= {("lock", "ProcSleep"), ("rwlock", "LWLock LockManager"),
                          ("poll", "latch"), ("poll", "client read"), ("io", "client write")}


@pytest.mark.parametrize(("key", "frame"), [
    (("io", "client write"), "secure_write"),          # COPY TO STDOUT to a client not reading
    (("rwlock", "buffer pin"), "LockBufferForCleanup"),  # VACUUM FREEZE, a cursor holds a pin
    (("condvar", "SyncRep"), "SyncRepWaitForLSN"),      # a commit waiting for a missing standby
    (("sleep", "pg_usleep"), "vacuum_delay_point"),      # VACUUM with a cost delay
])
def test_postgres_waits(key: tuple[str, str], frame: str) -> None:
    waits = dump("postgres-gdb-waits.txt")
    assert waits[key] and all(frame in f for f in waits[key])


def test_mariadb_under_sysbench() -> None:
    """mariadbd without debug symbols under sysbench oltp_update_index, scheduler stacks."""
    acc = by_label("mariadb-sysbench.folded")
    off = sum(acc.values())
    # the commit's wait for the redo log flush: the reply held in net_real_write, and InnoDB's
    # group commit through a bare futex under ha_commit_trans
    assert acc[("condvar", "commit (redo flush)")] > 0.15 * off
    commit = [f for f, _ in folded("mariadb-sysbench.folded")
              if classify_label(f) == ("condvar", "commit (redo flush)")]
    assert any("net_real_write" in f for f in commit)
    assert any("syscall" in f and "ha_commit_trans" in f for f in commit)
    assert acc[("rwlock", "InnoDB latch")] > 0
    assert acc[("io", "io_uring")] > 0  # __do_sys_io_uring_enter in the kernel's frames
    assert acc[("poll", "client read")] > 0.1 * off
    assert acc[("io", "redo log write")] > 0
    # what is left in other is the profiler's own stops
    other = [f for f, _ in folded("mariadb-sysbench.folded") if classify_label(f)[0] == "other"]
    assert all("ptrace_stop" in f for f in other)


def test_mariadb_with_binary_log_under_sysbench() -> None:
    """The same load with --log-bin --sync-binlog=1: followers of the binary log's group commit
    wait to be woken, row locks are held longer (the run's own ptrace stops were taken out)."""
    acc = by_label("mariadb-binlog-sysbench.folded")
    off = sum(acc.values())
    assert acc[("condvar", "binlog group commit")] > 0.1 * off
    assert acc[("lock", "InnoDB row lock")] > 0.05 * off
    assert acc[("condvar", "commit (redo flush)")] > 0
    assert sum(s for (cls, _), s in acc.items() if cls == "other") < 0.05 * off
    for frames, _ in folded("mariadb-binlog-sysbench.folded"):
        if "THD::wait_for_wakeup_ready" in frames:
            assert classify_label(frames) == ("condvar", "binlog group commit")


def test_mariadb_processes_under_sysbench() -> None:
    waits = dump("mariadb-gdb-sysbench.txt")
    assert all("net_real_write" in f or "ha_commit_trans" in f
               for f in waits[("condvar", "commit (redo flush)")])
    assert any("ha_commit_trans" in f for f in waits[("condvar", "commit (redo flush)")])
    assert waits[("io", "redo log flush")]
    assert waits[("io", "io_uring")]
    assert all("vio_read" in f for f in waits[("poll", "client read")])


@pytest.mark.parametrize(("key", "frame"), [
    (("lock", "InnoDB row lock"), "handler::ha_index_read_map"),  # UPDATE of a locked row
    (("lock", "MDL"), "MDL_wait::timed_wait"),             # ALTER TABLE behind an open reader
    (("io", "client write"), "vio_write"),                # a client not reading its result
    (("io", "io_uring"), "__io_uring_get_cqe"),           # InnoDB's I/O completion thread
])
def test_mariadb_waits(key: tuple[str, str], frame: str) -> None:
    waits = dump("mariadb-gdb-waits.txt")
    assert waits[key] and all(frame in f for f in waits[key])
