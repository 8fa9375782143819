"""Live: real database servers under load, collected by wallflame, read with the server rules.

Each test starts its own server (a private data directory and socket, no TCP port for
PostgreSQL, a private port for MariaDB), loads it, and stops everything it started by PID.  They
need postgresql, pgbench and pt-pmp (percona-toolkit), or mariadb-server and sysbench; without
them they are skipped, unless WALLFLAME_REQUIRE_LIVE=1 says the machine must have them."""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from livehelp import WALLFLAME

from wallflame.classify import find_rule
from wallflame.profile import RUNNABLE
from wallflame.rundir import load_run_dir

pytestmark = pytest.mark.usefixtures("live")
ROOT = Path(__file__).resolve().parent.parent


def _need(*progs: str) -> None:
    missing = [p for p in progs if shutil.which(p) is None]
    if missing and os.environ.get("WALLFLAME_REQUIRE_LIVE") != "1":
        pytest.skip(f"not installed: {', '.join(missing)}")
    assert not missing, f"not installed: {', '.join(missing)}"


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return Path(found[-1]).parent if found else None


class Postgres:
    """A private PostgreSQL cluster: data directory and socket in a temporary directory."""

    def __init__(self, bindir: Path) -> None:
        self.bin = bindir
        self.dir = Path(tempfile.mkdtemp(prefix="wallflame-pg-"))
        self.data, self.sock = self.dir / "data", self.dir / "sock"
        self.sock.mkdir()
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # postgres refuses to run as root
            pw = pwd.getpwnam("postgres")
            for p in (self.dir, self.sock):
                os.chown(p, pw.pw_uid, pw.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.pid = 0

    def run(self, *cmd: str) -> subprocess.CompletedProcess[str]:
        """``cmd`` as the cluster's user (a client's command line already is)."""
        full = list(cmd) if cmd[:1] == tuple(self.as_user[:1]) else [*self.as_user, *cmd]
        r = subprocess.run(full, capture_output=True, text=True, check=False, timeout=300)
        assert r.returncode == 0, f"{cmd[0]} failed: {r.stderr.strip()[-2000:]}"
        return r

    def client(self, prog: str) -> list[str]:
        """A client program's command line, as the cluster's user."""
        return [*self.as_user, str(self.bin / prog), "-h", str(self.sock), "-U", "bench"]

    def start(self) -> None:
        self.run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "bench", "--auth=trust")
        self.run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "log"),
                 "-o", f"-k {self.sock} -c listen_addresses= -c max_connections=40", "-w",
                 "start")
        self.pid = int((self.data / "postmaster.pid").read_text().split()[0])
        self.run(*self.client("createdb"), "bench")
        self.run(*self.client("pgbench"), "-i", "-s", "1", "-q", "bench")

    def backends(self) -> list[int]:
        out = []
        for child in Path("/proc").glob("[0-9]*"):
            try:
                ppid = int((child / "stat").read_text().rsplit(")", 1)[1].split()[1])
                cmd = (child / "cmdline").read_bytes().decode(errors="replace")
            except (OSError, ValueError, IndexError):
                continue
            if ppid == self.pid and "bench bench" in cmd:
                out.append(int(child.name))
        return sorted(out)

    def stop(self) -> None:
        if self.pid:
            for sig in (signal.SIGINT, signal.SIGKILL):  # fast shutdown, then certain
                try:
                    os.kill(self.pid, sig)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + 20
                while Path(f"/proc/{self.pid}").exists() and time.monotonic() < deadline:
                    time.sleep(0.1)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def postgres() -> Iterator[Postgres]:
    bindir = _pg_bin()
    if bindir is None and os.environ.get("WALLFLAME_REQUIRE_LIVE") != "1":
        pytest.skip("postgresql is not installed")
    assert bindir is not None, "postgresql is not installed"
    _need("pt-pmp")
    pg = Postgres(bindir)
    try:
        pg.start()
        yield pg
    finally:
        pg.stop()


def _off_by_rule(run: Path) -> dict[tuple[str, str], float]:
    """Seconds of off-CPU time per (class, label) of a run directory."""
    p = load_run_dir(str(run))
    out: dict[tuple[str, str], float] = {}
    for k, w in p.stacks.items():
        if k.state == "off":
            hit = find_rule(k.frames)
            label = hit[1] if hit and hit[0] == k.wait else ""
            out[(k.wait, label)] = out.get((k.wait, label), 0.0) + w / 1e9
    return out


def test_postgres_row_lock_waits_are_locks(postgres: Postgres, tmp_path: Path) -> None:
    """pgbench's 16 clients on one branch row: a backend's row-lock wait is `lock`, at least
    80% of the share pt-pmp gives ProcSleep on another backend in the same window, and `poll`
    is only the wait for the client."""
    load = subprocess.Popen([*postgres.client("pgbench"), "-c", "16", "-j", "2", "-T", "20", "-n",
                             "bench"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)
        backends = postgres.backends()
        assert len(backends) >= 2, backends
        run = tmp_path / "run"
        collect = subprocess.Popen([*WALLFLAME, "collect", "--pid", str(backends[0]), "-d", "8",
                                    "-o", str(run)], cwd=ROOT, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
        pmp = subprocess.run(["pt-pmp", "--pid", str(backends[1]), "--iterations", "8",
                              "--interval", "0"], capture_output=True, text=True, timeout=120)
        _, err = collect.communicate(timeout=120)
        assert collect.returncode == 0, err.decode(errors="replace")
    finally:
        load.kill()
        load.wait()
    samples = [line.split(None, 1) for line in pmp.stdout.splitlines()
               if line.strip()[:1].isdigit() and "," in line]
    total = sum(int(n) for n, _ in samples)
    proc_sleep = sum(int(n) for n, stack in samples if "ProcSleep" in stack)
    assert total >= 4, pmp.stdout
    by_rule = _off_by_rule(run)
    off = sum(by_rule.values())
    lock = by_rule.get(("lock", "ProcSleep"), 0.0)
    assert lock / off >= 0.8 * proc_sleep / total, (by_rule, proc_sleep, total)
    assert {label for (cls, label) in by_rule if cls == "poll"} <= {"client read"}, by_rule
    summary = json.loads((run / "summary.json").read_text())
    assert summary["totals"]["wait"]["lock"] > 0


def test_mariadb_latches_and_commits_are_named(tmp_path: Path) -> None:
    """sysbench oltp_update_index on a distribution's mariadbd: InnoDB's futex waits under a
    row access are `rwlock`, the commit's wait for the redo log is named, and `other` (the
    profiler's own stops taken out) stays under 5% of off-CPU time."""
    _need("mariadbd", "mariadb-install-db", "sysbench")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from servers import MariaDB  # type: ignore[import-not-found]

    with MariaDB(tables=2, table_size=2000) as db:
        db.prepare()
        load = db.sysbench_start("oltp_update_index", threads=16, seconds=20)
        try:
            time.sleep(3)
            run = tmp_path / "run"
            r = subprocess.run([*WALLFLAME, "collect", "--pid", str(db.pid), "-d", "8", "-o",
                                str(run)], cwd=ROOT, capture_output=True, text=True, timeout=180)
            assert r.returncode == 0, r.stderr
        finally:
            load.stop()
    by_rule = _off_by_rule(run)
    off = sum(by_rule.values())
    other = sum(s for (cls, _), s in by_rule.items() if cls == "other")
    assert other < 0.05 * off, by_rule
    assert by_rule.get(("condvar", "commit (redo flush)"), 0.0) > 0, by_rule
    assert by_rule.get(("rwlock", "InnoDB latch"), 0.0) > 0, by_rule
    for k in load_run_dir(str(run)).stacks:
        # Time woken but not yet running keeps the stack it waited at, under `runnable`.
        if k.state == "off" and k.wait != RUNNABLE and "syscall" in k.frames:
            i = k.frames.index("syscall")
            callers = [f for f in reversed(k.frames[:i]) if not f.startswith("[")][:4]
            if any(f.startswith("handler::") for f in callers) and not any(
                    f.startswith(("ha_commit", "trans_commit")) for f in callers):
                assert (k.wait, find_rule(k.frames)) == ("rwlock", ("rwlock", "InnoDB latch"))
