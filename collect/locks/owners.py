"""Lock waiters and their owners, read from /proc, and the owners' confirmed stacks.

``ProcReader`` gives the per-thread records of a snapshot (``# wallflame-proc`` lines);
``OwnerSampler`` samples only futex waiters, at a rate snapshots cannot afford, and stops each
owner it finds to take its stack while it holds the lock (``collect.locks.holders``).  Both read
a waiter's owner from the lock (``collect.locks.locklayout``: glibc mutexes and rwlock writers)
and its call site from a scan of its stack for return addresses.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from wallflame.collect.locks.holders import MAX_PROBES_PER_ROUND, HolderProbe
from wallflame.collect.locks.locklayout import (
    OWNER_IS_WAITER,
    SYS_FUTEX_X86_64,
    parse_futex,
    read_lock,
)
from wallflame.collect.locks.targetmemory import MemReader, Symbols
from wallflame.collect.target import (
    MAX_KEPT_FILES,
    TaskFiles,
    ThreadReader,
    list_tids,
    read_text,
    syscall_sp,
)

#: A waiter's holder status when the sampler stops no owner (``--no-holder-stacks``).
STACKS_OFF = "stacks off"
#: How long a thread's name read by the owner sampler is used before it is read again (s).
COMM_KEPT_S = 2.0
#: Each interval between two rounds of a sampler (snapshots, owners) is drawn uniformly from
#: its nominal length times 1 -/+ this: at a fixed period the rounds keep one phase against
#: whatever the target does periodically (a server may have lock convoys once a second, at
#: one phase of it), and a phase that meets such a moment sees it at every round.
#: The mean interval, hence the rate, is the nominal one.
JITTER = 0.5


def spaced(interval: float, rng: random.Random) -> float:
    """The time to the next round of a sampler whose rounds are ``interval`` apart on
    average: ``interval`` times a uniform draw in ``1 -/+ JITTER``."""
    return interval * rng.uniform(1 - JITTER, 1 + JITTER)


class OwnerSampler(threading.Thread):
    """Lock waiters, their owners and the owners' confirmed stacks, at a rate snapshots
    cannot afford.

    Each round reads every thread's ``syscall`` file; for a thread in a futex wait, 40-56
    bytes of the lock (``collect.locks.locklayout``) and 1 KiB of its stack (scanned for return
    addresses: the call site).  When the lock names an owner, that one thread is stopped to
    take its stack while it is known to hold the lock (``collect.locks.holders``; at most
    ``MAX_PROBES_PER_ROUND`` owners a round, one probe per lock and owner; with ``probe``
    false none is stopped, and a named owner's holder is ``{"tid", "status": STACKS_OFF}``).
    One JSON line per waiter on a recognised lock goes to ``log``: ``{"t_ns", "mono_ns",
    "tid", "comm", "lock", "kind", "owner", "refused", "sites", "holder"}`` (``holder``: the
    probe, shared by the waiters of one lock in one round).  With scheduler off-CPU time
    these records name the lock of each exact mutex wait and who held it
    (``wallflame.fold.locks``)."""

    def __init__(self, pid: int, log: IO[str], rate_hz: float, stop: threading.Event,
                 alive: Callable[[], bool] = lambda: True, start_ticks: int = 0,
                 stopped_before: bool = False, probe: bool = True) -> None:
        super().__init__(name="wallflame-owners", daemon=True)
        self.pid = pid
        self.alive = alive  # false once the process ended (or its PID was reused)
        self.log = log
        self.interval = 1.0 / rate_hz
        self.stop_event = stop
        self.start_ticks = start_ticks
        self.stopped_before = stopped_before
        self.probe_owners = probe
        self.prober: HolderProbe | None = None
        self.samples = 0
        self.waiters = 0
        self.cpu_s = 0.0  # this thread's CPU time, once it has ended
        self.syscalls = TaskFiles(pid, "syscall")
        # each thread's name, read again after COMM_KEPT_S (a thread names itself once,
        # soon after it starts): a read per waiter and round was a fifth of a round's time
        self.comms: dict[int, tuple[float, str]] = {}

    def run(self) -> None:
        mem = MemReader(self.pid)
        symbols = Symbols(self.pid)
        names: dict[int, str] = {}
        if self.probe_owners:
            self.prober = HolderProbe(self.pid, self.start_ticks, self.stopped_before, mem)
        next_t = time.monotonic()
        rng = random.Random()
        try:
            while not self.stop_event.is_set() and self.alive():
                self._sample(mem, symbols, names)
                next_t = max(next_t + spaced(self.interval, rng), time.monotonic())
                self.stop_event.wait(next_t - time.monotonic())
        finally:
            if self.prober is not None:
                self.prober.close()
            mem.close()
            self.syscalls.close()
            self.log.flush()
            self.cpu_s = time.thread_time()

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"samples": self.samples, "waiters": self.waiters,
                               "rate_hz": round(1.0 / self.interval, 3)}
        if self.prober is not None:
            out["probes"] = dict(sorted(self.prober.counts.items()))
            out["pause"] = self.prober.pause_summary()
            if self.prober.error:
                out["probe_error"] = self.prober.error
            if self.prober.resumed:
                out["resumed"] = self.prober.resumed
        return out

    def _comm(self, tid: int) -> str:
        now = time.monotonic()
        kept = self.comms.get(tid)
        if kept is not None and now - kept[0] < COMM_KEPT_S:
            return kept[1]
        comm = (read_text(f"/proc/{self.pid}/task/{tid}/comm") or "").strip()
        if len(self.comms) > 4 * MAX_KEPT_FILES:
            self.comms.clear()
        self.comms[tid] = (now, comm)
        return comm

    def _sample(self, mem: MemReader, symbols: Symbols, names: dict[int, str]) -> None:
        tids = set(list_tids(self.pid))
        t_ns, mono_ns = time.time_ns(), time.monotonic_ns()
        self.samples += 1
        self.syscalls.keep_only(tids)
        probes: dict[tuple[int, int], dict[str, Any]] = {}
        for tid in sorted(tids):
            try:
                text = self.syscalls.read(tid) or ""
            except PermissionError:
                return
            call = parse_futex(text)
            if call is None or not call.waits:
                continue
            sites = symbols.return_sites(mem, syscall_sp(text))
            lr = read_lock(mem.read, call, sites, tids, tid)
            if not lr.kind or lr.refused == OWNER_IS_WAITER:
                # The lock names the waiter itself: its wait ended between the two reads.
                continue
            base = lr.base or call.addr
            lock = names.get(base)
            if lock is None:
                lock = names[base] = symbols.name(base)
            comm = self._comm(tid)
            rec: dict[str, Any] = {"t_ns": t_ns, "mono_ns": mono_ns, "tid": tid, "comm": comm,
                                   "lock": lock, "kind": lr.kind, "owner": lr.owner,
                                   "sites": sites}
            if lr.refused:
                rec["refused"] = lr.refused
            if lr.owner and self.prober is not None:
                key = (base, lr.owner)
                if key not in probes and len(probes) < MAX_PROBES_PER_ROUND:
                    probes[key] = self.prober.probe(lr, tids, tid).to_json()
                if key in probes:
                    rec["holder"] = probes[key]
            elif lr.owner:
                rec["holder"] = {"tid": lr.owner, "status": STACKS_OFF}
            self.waiters += 1
            self.log.write(json.dumps(rec, sort_keys=True) + "\n")


class ProcReader:
    """Per-thread /proc records with mutex owners, for ``# wallflame-proc`` lines."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.mem = MemReader(pid)
        self.symbols = Symbols(pid)
        self.names: dict[int, str] = {}
        self.threads = ThreadReader(pid)

    def lock_name(self, addr: int) -> str:
        name = self.names.get(addr)
        if name is None:
            name = self.names[addr] = self.symbols.name(addr)
        return name

    def read(self) -> list[dict[str, Any]]:
        """One record per thread; a futex waiter's has its call (``futex``: ``[op, value]``)
        and, when the lock at its address was read as a glibc mutex or rwlock, the lock's
        ``kind`` and name (``lock``), with its ``owner`` and the waiter's call ``sites`` when
        one was recorded, else why not (``refused``: a lock seen free was released between
        the two reads; the wait was on it all the same)."""
        tids = self.threads.listing()
        alive = set(tids)
        out = []
        for tid in tids:
            rec = self.read_one(tid, alive)
            if rec is not None:
                out.append(rec)
        return out

    def listing(self) -> list[int]:
        """The process's threads now (``read_one`` reads each)."""
        return self.threads.listing()

    def read_one(self, tid: int, tids: set[int]) -> dict[str, Any] | None:
        """``read``'s record of one thread (``None`` once it has ended); ``tids``: the
        process's threads, of which a lock's owner must be one."""
        t = self.threads.read_one(tid)
        if t is None:
            return None
        rec = t.to_json()
        call = parse_futex(t.call) if t.syscall == SYS_FUTEX_X86_64 and t.arg0 else None
        if call is not None and call.waits:
            rec["futex"] = [call.op, call.val]
            sites = self.symbols.return_sites(self.mem, t.sp)
            lr = read_lock(self.mem.read, call, sites, tids, t.tid)
            if lr.kind:
                rec["kind"] = lr.kind
                rec["lock"] = self.lock_name(lr.base or t.arg0)
                if lr.owner:
                    rec["owner"] = lr.owner
                    rec["sites"] = sites
                elif lr.refused:
                    rec["refused"] = lr.refused
        return rec

    def close(self) -> None:
        self.mem.close()
        self.threads.close()


