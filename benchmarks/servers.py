#!/usr/bin/env python3
"""Real servers under load for benchmarks and live tests: MariaDB + sysbench, redis.

Nothing is installed here.  ``missing("mariadb")`` / ``missing("redis")`` name the Debian
packages that are absent (``mariadb-server sysbench``, ``redis-server redis-tools``) and
``require()`` raises ``Missing`` with the ``apt-get install`` line to run.

Each server is a child of this process with its data directory, socket, port and logs in a
private temporary directory (removed at ``stop()`` unless ``keep=True``); it never touches a
system instance.  It is stopped by its PID (SIGTERM, then SIGKILL after a grace period), never
by name.

Library use::

    from benchmarks.servers import MariaDB, Redis

    with MariaDB(tables=4, table_size=10_000) as db:    # mariadb-install-db + mariadbd
        db.prepare()                                     # sysbench ... prepare
        print(db.pid)                                    # mariadbd's PID, to profile
        tps = db.sysbench("oltp_update_index", threads=32, seconds=10)   # transactions/s
        job = db.sysbench_start("oltp_read_write", threads=32, seconds=60)  # in background
        ...                                              # profile db.pid meanwhile
        tps = job.result()                               # waits, parses sysbench's output

    with Redis() as r:                                   # redis-server on a private port
        ops = r.benchmark(clients=50, requests=200_000, tests="set,get")  # requests/s
        job = r.benchmark_start(clients=50, seconds=10)  # loops until the time is up
        ops = job.result()

``sysbench_start``/``benchmark_start`` return a ``Load`` whose ``result()`` gives the rate
(transactions/s or requests/s over the whole load), whose ``intervals()`` gives sysbench's
per-second reports so far, and whose ``stop()`` ends it early.

Script use (prints one JSON line per measurement)::

    .venv/bin/python benchmarks/servers.py mariadb [--test oltp_update_index] [--threads 32]
        [--seconds 10] [--tables 4] [--table-size 10000] [--runs 1]
    .venv/bin/python benchmarks/servers.py redis [--clients 50] [--requests 200000] [--runs 1]
    .venv/bin/python benchmarks/servers.py check        # which packages are missing (exit 1 if any)

Defaults are small (4 tables of 10,000 rows: prepared in a few seconds).  The server runs
with an InnoDB buffer pool of 256 MB and otherwise Debian's compiled-in settings, with
``--no-defaults`` so that no system option file is read.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from wallflame.systools import find_program, package_of

#: The programs each server's harness runs (their packages: ``wallflame.systools.PACKAGES``).
PROGRAMS = {
    "mariadb": ["mariadbd", "mariadb-install-db", "mariadb", "sysbench"],
    "redis": ["redis-server", "redis-benchmark", "redis-cli"],
}

#: The schema of the throughput benchmarks (a profiler's cost as the server's own
#: transactions/s): 8 tables of 100,000 rows.  With the small default (4 of 10,000), 32
#: clients of ``oltp_update_index`` fight over 40,000 rows and the server's figure moved by
#: 26-31% (lowest to highest, over the median) from one 10 s window to the next of the same
#: run, and by 21-36% on a data directory in memory without fsync; with this schema, 9.5%
#: (2026-11-26, 80 s runs, no profiler; the 10 s windows of one run: 9,210-10,123).
THROUGHPUT_TABLES = 8
THROUGHPUT_TABLE_SIZE = 100_000


def wallflame_env() -> dict[str, str]:
    """The environment a timed ``python -m wallflame`` runs in: bytecode cached, as an
    installed package has it.  A machine that sets ``PYTHONDONTWRITEBYTECODE`` otherwise
    compiles every module from source at every start, about a second of CPU a collect that
    a user's installed wallflame does not spend."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "wallflame-bench-pycache")
    return env


def warm_bytecode(root: Path) -> None:
    """Fill ``wallflame_env``'s bytecode cache: every module of the checkout at ``root``
    imported once, so that no timed run compiles one."""
    subprocess.run([sys.executable, "-c", "import importlib, pkgutil, wallflame\n"
                    "for m in pkgutil.walk_packages(wallflame.__path__, 'wallflame.'):\n"
                    "    if not m.name.endswith('__main__'):\n"
                    "        importlib.import_module(m.name)\n"],
                   cwd=str(root), env=wallflame_env(), check=True)


def first_line(e: BaseException) -> str:
    """An error's first line, for a benchmark's one-line message (its type when it says
    nothing)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class Missing(RuntimeError):
    """A package the harness needs is not installed."""


def which(prog: str) -> str | None:
    """``prog``'s path, on PATH or in the sbin directories (``mariadbd``)."""
    return find_program(prog)


def missing(kind: str) -> list[str]:
    """The Debian packages of ``kind`` (``mariadb`` or ``redis``) whose programs are absent."""
    return sorted({package_of(p) for p in PROGRAMS[kind] if which(p) is None})


def require(kind: str) -> None:
    gone = missing(kind)
    if gone:
        raise Missing(f"{kind}: missing packages: {' '.join(gone)} "
                      f"(apt-get install -y {' '.join(gone)})")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop_pid(proc: subprocess.Popen[Any], grace_s: float) -> int | None:
    """SIGTERM the child by its PID, SIGKILL after ``grace_s``; returns its exit code."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return proc.returncode


class Load:
    """A load generator running in the background; ``result()`` parses its rate."""

    def __init__(self, cmd: list[str], parse: _Parser, log: Path) -> None:
        self.command = cmd
        self._parse = parse
        self.log = log
        self.started = time.monotonic()
        with open(log, "wb") as f:
            # A group of its own, so that stop() reaches the shell loop's child too.
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """End the load early and wait for it (SIGINT to its process group: a repeated
        redis-benchmark runs under a shell loop, which kept looping when only the shell got
        the signal).  sysbench then prints no totals: ``result()`` falls back to the mean of its
        per-second reports."""
        for sig, grace_s in ((signal.SIGINT, 3), (signal.SIGTERM, 5), (signal.SIGKILL, 10)):
            # SIGINT is ignored by whatever a non-interactive shell starts in the background
            # (and inherited by its children): then SIGTERM, then SIGKILL.
            if self.proc.poll() is not None:
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace_s)

    def intervals(self) -> list[tuple[float, float]]:
        """sysbench's per-second reports so far: (seconds since its start, transactions/s)."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return [(float(t), float(r)) for t, r in _SysbenchRate.INTERVAL.findall(text)]

    def result(self, timeout_s: float | None = None) -> float:
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _stop_pid(self.proc, 5)
            raise
        text = self.log.read_text(errors="replace")
        rate = self._parse(text)
        if rate is None:
            tail = "\n".join(text.splitlines()[-15:])
            raise RuntimeError(f"{self.command[0]} exited {code} without a rate:\n{tail}")
        return rate


def progress_rate(lines: Iterable[str], start_ns: int, end_ns: int) -> float | None:
    """Work a second between the first and the last of a sample program's progress lines
    (``{"t_ns": ..., "work": ...}``, its running total at that ``CLOCK_MONOTONIC`` instant)
    inside [start_ns, end_ns]; ``None`` with fewer than two inside."""
    points: list[tuple[int, int]] = []
    for line in lines:
        if line.startswith("{") and '"t_ns"' in line:
            d = json.loads(line)
            if "work" in d and start_ns <= d["t_ns"] <= end_ns:
                points.append((int(d["t_ns"]), int(d["work"])))
    if len(points) < 2:
        return None
    (t0, w0), (t1, w1) = points[0], points[-1]
    return (w1 - w0) / ((t1 - t0) / 1e9)


class _Parser:
    def __call__(self, text: str) -> float | None:
        raise NotImplementedError


class _SysbenchRate(_Parser):
    # "    transactions:                        163287 (16325.43 per sec.)"
    _RE = re.compile(r"transactions:\s+\d+\s+\(([\d.]+) per sec")
    # "[ 3s ] thds: 32 tps: 11873.55 qps: ..." (--report-interval=1)
    INTERVAL = re.compile(r"^\[ *([\d.]+)s \] thds: \d+ tps: ([\d.]+)", re.M)

    def __call__(self, text: str) -> float | None:
        m = self._RE.search(text)
        if m:
            return float(m.group(1))
        per_s = [float(r) for _, r in self.INTERVAL.findall(text)]
        return sum(per_s) / len(per_s) if per_s else None


class _RedisRate(_Parser):
    """Requests/s over all tests of one or more redis-benchmark runs in the log: total
    requests over total time (``--csv`` gives per-test rates; ``-q`` lines
    ``SET: 81234.11 requests per second``)."""

    _RE = re.compile(r"^\S+: ([\d.]+) requests per second", re.M)

    def __init__(self, requests: int) -> None:
        self.requests = requests

    def __call__(self, text: str) -> float | None:
        text = text.replace("\r", "\n")
        rates = [float(x) for x in self._RE.findall(text)]
        if not rates:
            return None
        # Each test did the same number of requests: the overall rate is the harmonic mean.
        return len(rates) / sum(1.0 / r for r in rates if r > 0)


class _Server:
    kind = ""

    def __init__(self, base_dir: str | os.PathLike[str] | None, keep: bool) -> None:
        require(self.kind)
        self.dir = Path(tempfile.mkdtemp(prefix=f"wallflame-{self.kind}-", dir=base_dir))
        self.keep = keep
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = free_port()

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"{self.kind} is not running")
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None:
            _stop_pid(self.proc, 60)
            self.proc = None
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> int:
        raise NotImplementedError


class MariaDB(_Server):
    """``mariadbd`` on a private port, socket and data directory, with a sysbench schema.

    tables, table_size: the sysbench schema (``prepare()``).
    buffer_pool_mb:     ``--innodb-buffer-pool-size``.
    extra_args:         more ``mariadbd`` options.
    """

    kind = "mariadb"

    def __init__(self, tables: int = 4, table_size: int = 10_000, buffer_pool_mb: int = 256,
                 extra_args: Sequence[str] = (), base_dir: str | os.PathLike[str] | None = None,
                 keep: bool = False) -> None:
        super().__init__(base_dir, keep)
        self.tables = tables
        self.table_size = table_size
        self.buffer_pool_mb = buffer_pool_mb
        self.extra_args = list(extra_args)
        self.datadir = self.dir / "data"
        self.socket = self.dir / "mysqld.sock"
        self.user, self.password, self.db = "sbtest", "sbtest", "sbtest"

    def _client(self, sql: str) -> None:
        client = which("mariadb")
        assert client is not None
        r = subprocess.run([client, "--no-defaults", f"--socket={self.socket}", "-uroot",
                            "-e", sql], capture_output=True, text=True, timeout=60, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"mariadb client failed: {r.stderr.strip()}")

    def start(self) -> int:
        install = which("mariadb-install-db")
        server = which("mariadbd")
        assert install is not None and server is not None
        self.datadir.mkdir(parents=True)
        user = ["--user=root"] if os.geteuid() == 0 else []
        r = subprocess.run([install, "--no-defaults", f"--datadir={self.datadir}",
                            "--auth-root-authentication-method=socket", "--skip-test-db",
                            *user], capture_output=True, text=True, timeout=300, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed: {r.stderr.strip()[-2000:]}")
        cmd = [server, "--no-defaults", f"--datadir={self.datadir}", f"--socket={self.socket}",
               f"--port={self.port}", "--bind-address=127.0.0.1",
               f"--pid-file={self.dir / 'mysqld.pid'}", f"--log-error={self.dir / 'error.log'}",
               f"--innodb-buffer-pool-size={self.buffer_pool_mb}M", "--max-connections=500",
               "--skip-log-bin", *user, *self.extra_args]
        self.command = cmd
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                log = (self.dir / "error.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"mariadbd exited {self.proc.returncode}:\n{log}")
            if self.socket.exists():
                try:
                    self._client("SELECT 1")
                    break
                except RuntimeError:
                    pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("mariadbd did not accept connections within 120 s")
            time.sleep(0.2)
        self._client(f"CREATE DATABASE IF NOT EXISTS {self.db}; "
                     f"CREATE USER IF NOT EXISTS '{self.user}'@'127.0.0.1' "
                     f"IDENTIFIED BY '{self.password}'; "
                     f"GRANT ALL ON {self.db}.* TO '{self.user}'@'127.0.0.1';")
        return self.pid

    def status_poll(self, names: Sequence[str], interval_s: float = 1.0) -> StatusPoll:
        """Poll these global status variables (``Innodb_history_list_length``...) every
        ``interval_s`` through one client kept connected (not a process per poll)."""
        return StatusPoll(self.socket, names, interval_s)

    def _sysbench_cmd(self, test: str, threads: int, seconds: float, action: str) -> list[str]:
        sb = which("sysbench")
        assert sb is not None
        return [sb, test, "--db-driver=mysql", "--mysql-host=127.0.0.1",
                f"--mysql-port={self.port}", f"--mysql-user={self.user}",
                f"--mysql-password={self.password}", f"--mysql-db={self.db}",
                f"--tables={self.tables}", f"--table-size={self.table_size}",
                f"--threads={threads}", f"--time={max(1, round(seconds))}",
                "--report-interval=1", "--db-ps-mode=auto",
                # deadlocks and lock wait timeouts are retried, not fatal
                "--mysql-ignore-errors=1213,1205,1020", action]

    def prepare(self, threads: int | None = None) -> None:
        """Create and fill the sysbench tables (same schema for every oltp_* test)."""
        cmd = self._sysbench_cmd("oltp_common", threads or min(self.tables, 4), 1, "prepare")
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"sysbench prepare failed: {(r.stdout + r.stderr)[-2000:]}")

    def sysbench_start(self, test: str = "oltp_update_index", threads: int = 32,
                       seconds: float = 10) -> Load:
        return Load(self._sysbench_cmd(test, threads, seconds, "run"), _SysbenchRate(),
                    self.dir / f"sysbench-{time.monotonic_ns()}.log")

    def sysbench(self, test: str = "oltp_update_index", threads: int = 32,
                 seconds: float = 10) -> float:
        """Run ``sysbench TEST run`` and return transactions per second."""
        return self.sysbench_start(test, threads, seconds).result(seconds + 120)


class StatusPoll(threading.Thread):
    """A server's global status variables, read every ``interval_s`` by one ``mariadb`` client
    kept connected: ``rows`` holds (``time.monotonic()`` when read, {name: value}).  What it
    costs the server is one small query a second, in the windows with a profiler and without
    alike."""

    def __init__(self, socket: Path, names: Sequence[str], interval_s: float) -> None:
        super().__init__(name="status-poll", daemon=True)
        client = which("mariadb")
        assert client is not None
        self.names = list(names)
        self.interval_s = interval_s
        self.rows: list[tuple[float, dict[str, float]]] = []
        self._stop_event = threading.Event()
        listed = ",".join(f"'{n}'" for n in self.names)
        self._query = ("SELECT GROUP_CONCAT(CONCAT(VARIABLE_NAME, '=', VARIABLE_VALUE)) FROM "
                       f"information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN ({listed});\n")
        self.proc = subprocess.Popen([client, "--no-defaults", f"--socket={socket}", "-uroot",
                                      "-N", "-B", "-n"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1)

    def run(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            while not self._stop_event.is_set():
                t = time.monotonic()
                self.proc.stdin.write(self._query)
                self.proc.stdin.flush()
                line = self.proc.stdout.readline()
                if not line:
                    return
                row: dict[str, float] = {}
                for item in line.strip().split(","):
                    name, _, value = item.partition("=")
                    with contextlib.suppress(ValueError):
                        row[name.lower()] = float(value)
                self.rows.append((t, row))
                self._stop_event.wait(max(0.0, self.interval_s - (time.monotonic() - t)))
        except (OSError, ValueError):
            return

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)
        _stop_pid(self.proc, 2)


class Redis(_Server):
    """``redis-server`` on a private port, no persistence, one working directory."""

    kind = "redis"

    def __init__(self, extra_args: Sequence[str] = (),
                 base_dir: str | os.PathLike[str] | None = None, keep: bool = False) -> None:
        super().__init__(base_dir, keep)
        self.extra_args = list(extra_args)

    def start(self) -> int:
        server = which("redis-server")
        assert server is not None
        cmd = [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", str(self.dir), "--daemonize", "no",
               "--logfile", str(self.dir / "redis.log"), *self.extra_args]
        self.command = cmd
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        cli = which("redis-cli")
        assert cli is not None
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited {self.proc.returncode}")
            r = subprocess.run([cli, "-h", "127.0.0.1", "-p", str(self.port), "ping"],
                               capture_output=True, text=True, timeout=10, check=False)
            if r.stdout.strip() == "PONG":
                return self.pid
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("redis-server did not answer within 30 s")
            time.sleep(0.1)

    def _bench_cmd(self, clients: int, requests: int, tests: str, pipeline: int) -> list[str]:
        rb = which("redis-benchmark")
        assert rb is not None
        return [rb, "-h", "127.0.0.1", "-p", str(self.port), "-c", str(clients),
                "-n", str(requests), "-t", tests, "-P", str(pipeline), "-q"]

    def benchmark_start(self, clients: int = 50, requests: int = 200_000,
                        tests: str = "set,get", pipeline: int = 1,
                        seconds: float | None = None) -> Load:
        """redis-benchmark in the background; with ``seconds`` it is repeated (through a
        small shell loop) until that much time has passed."""
        cmd = self._bench_cmd(clients, requests, tests, pipeline)
        if seconds is not None:
            quoted = " ".join(f"'{c}'" for c in cmd)
            cmd = ["sh", "-c", f'end=$(($(date +%s%N) + {int(seconds * 1e9)})); '
                   f'while [ "$(date +%s%N)" -lt "$end" ]; do {quoted}; done']
        return Load(cmd, _RedisRate(requests), self.dir / f"bench-{time.monotonic_ns()}.log")

    def benchmark(self, clients: int = 50, requests: int = 200_000, tests: str = "set,get",
                  pipeline: int = 1) -> float:
        """Run redis-benchmark once and return requests per second over its tests."""
        return self.benchmark_start(clients, requests, tests, pipeline).result(600)


def _main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = ap.add_subparsers(dest="kind", required=True)
    m = sub.add_parser("mariadb", help="MariaDB under sysbench: transactions/s")
    m.add_argument("--test", default="oltp_update_index")
    m.add_argument("--threads", type=int, default=32)
    m.add_argument("--seconds", type=float, default=10)
    m.add_argument("--tables", type=int, default=4)
    m.add_argument("--table-size", type=int, default=10_000)
    m.add_argument("--runs", type=int, default=1)
    r = sub.add_parser("redis", help="redis-server under redis-benchmark: requests/s")
    r.add_argument("--clients", type=int, default=50)
    r.add_argument("--requests", type=int, default=200_000)
    r.add_argument("--tests", default="set,get")
    r.add_argument("--runs", type=int, default=1)
    sub.add_parser("check", help="say which packages are missing")
    a = ap.parse_args(argv)
    if a.kind == "check":
        gone = missing("mariadb") + missing("redis")
        print("missing: " + " ".join(gone) if gone else "all present")
        return 1 if gone else 0
    try:
        if a.kind == "mariadb":
            with MariaDB(a.tables, a.table_size) as db:
                t0 = time.monotonic()
                db.prepare()
                print(json.dumps({"prepare_s": round(time.monotonic() - t0, 1),
                                  "pid": db.pid}), flush=True)
                for i in range(a.runs):
                    tps = db.sysbench(a.test, a.threads, a.seconds)
                    print(json.dumps({"run": i, "test": a.test, "threads": a.threads,
                                      "seconds": a.seconds, "tps": round(tps, 1)}), flush=True)
        else:
            with Redis() as rs:
                print(json.dumps({"pid": rs.pid}), flush=True)
                for i in range(a.runs):
                    ops = rs.benchmark(a.clients, a.requests, a.tests)
                    print(json.dumps({"run": i, "clients": a.clients, "requests": a.requests,
                                      "ops_per_s": round(ops, 1)}), flush=True)
    except Missing as e:
        print(f"servers.py: {e}", file=sys.stderr)
        return 6
    return 0


if __name__ == "__main__":
    sys.exit(_main())
