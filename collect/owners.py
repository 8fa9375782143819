"""Mutex waiters and their owners, read from /proc without stopping anything.

``ProcReader`` gives the per-thread records of a snapshot (``# wallflame-proc`` lines);
``OwnerSampler`` samples only futex waiters, at a rate snapshots cannot afford.  Both read a
waiter's owner from the mutex (``collect.mutex``) and its call site from a scan of its stack
for return addresses.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from wallflame.collect.mutex import SYS_FUTEX_X86_64, MemReader, Symbols, mutex_owner
from wallflame.collect.target import list_tids, parse_syscall, read_text, read_threads, syscall_sp


class OwnerSampler(threading.Thread):
    """Mutex waiters and their owners from /proc alone, at a rate snapshots cannot afford.

    No ptrace: only each thread's ``syscall`` file and, for a thread in ``futex``, 12 bytes
    of the target's memory and 1 KiB of its stack (scanned for return addresses: the call
    site).  One JSON line per waiter seen with an owner goes to ``log``:
    ``{"t_ns", "tid", "comm", "lock", "owner", "sites"}``.  With scheduler off-CPU time
    these samples name the lock and the holder of each exact mutex wait
    (``wallflame.finish``)."""

    def __init__(self, pid: int, log: IO[str], rate_hz: float, stop: threading.Event,
                 alive: Callable[[], bool] = lambda: True) -> None:
        super().__init__(name="wallflame-owners", daemon=True)
        self.pid = pid
        self.alive = alive  # false once the process ended (or its PID was reused)
        self.log = log
        self.interval = 1.0 / rate_hz
        self.stop_event = stop
        self.samples = 0
        self.waiters = 0

    def run(self) -> None:
        mem = MemReader(self.pid)
        symbols = Symbols(self.pid)
        names: dict[int, str] = {}
        next_t = time.monotonic()
        try:
            while not self.stop_event.is_set() and self.alive():
                self._sample(mem, symbols, names)
                next_t = max(next_t + self.interval, time.monotonic())
                self.stop_event.wait(next_t - time.monotonic())
        finally:
            mem.close()
            self.log.flush()

    def _sample(self, mem: MemReader, symbols: Symbols, names: dict[int, str]) -> None:
        tids = set(list_tids(self.pid))
        t_ns = time.time_ns()
        self.samples += 1
        for tid in sorted(tids):
            try:
                text = read_text(f"/proc/{self.pid}/task/{tid}/syscall") or ""
            except PermissionError:
                return
            nr, arg0 = parse_syscall(text)
            if nr != SYS_FUTEX_X86_64 or not arg0:
                continue
            owner = mutex_owner(mem, arg0, tids, tid)
            if not owner:
                continue
            lock = names.get(arg0)
            if lock is None:
                lock = names[arg0] = symbols.name(arg0)
            comm = (read_text(f"/proc/{self.pid}/task/{tid}/comm") or "").strip()
            sites = symbols.return_sites(mem, syscall_sp(text))
            self.waiters += 1
            self.log.write(json.dumps({"t_ns": t_ns, "tid": tid, "comm": comm, "lock": lock,
                                       "owner": owner, "sites": sites}, sort_keys=True)
                           + "\n")


class ProcReader:
    """Per-thread /proc records with mutex owners, for ``# wallflame-proc`` lines."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.mem = MemReader(pid)
        self.symbols = Symbols(pid)
        self.names: dict[int, str] = {}

    def lock_name(self, addr: int) -> str:
        name = self.names.get(addr)
        if name is None:
            name = self.names[addr] = self.symbols.name(addr)
        return name

    def read(self) -> list[dict[str, Any]]:
        threads = read_threads(self.pid)
        tids = {t.tid for t in threads}
        out = []
        for t in threads:
            rec = t.to_json()
            if t.syscall == SYS_FUTEX_X86_64 and t.arg0:
                owner = mutex_owner(self.mem, t.arg0, tids, t.tid)
                if owner:
                    rec["owner"] = owner
                    rec["lock"] = self.lock_name(t.arg0)
                    rec["sites"] = self.symbols.return_sites(self.mem, t.sp)
            out.append(rec)
        return out

    def close(self) -> None:
        self.mem.close()


