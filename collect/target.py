"""The target process as /proc shows it: identity, threads and their kernel states.

Everything here reads /proc without stopping anything.  ``stat`` is split at the **last** ``)``
because ``comm`` may hold spaces, brackets and parentheses of its own.  A PID is identified by
its start time (field 22 of ``stat``) so that a reused PID is detected instead of profiled.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field

from wallflame.errors import PermissionDenied, TargetError

#: Kernel states that mean "stopped" (job control) and "stopped by a tracer".
STOPPED = "T"
TRACED = "t"

# Flag of a kernel thread in /proc/PID/stat field 9 (include/linux/sched.h PF_KTHREAD).
_PF_KTHREAD = 0x00200000


@dataclass(frozen=True)
class Stat:
    """The fields of /proc/PID[/task/TID]/stat that collection needs."""

    comm: str
    state: str
    ppid: int
    flags: int
    start_ticks: int


def parse_stat(text: str) -> Stat:
    """Parse one stat line; ``comm`` is everything between the first ``(`` and the last ``)``."""
    open_ = text.find("(")
    close = text.rfind(")")
    if open_ < 0 or close < open_:
        raise ValueError("malformed stat line")
    comm = text[open_ + 1:close]
    rest = text[close + 2:].split()
    # rest[0] is field 3 (state); field N is rest[N - 3].
    if len(rest) < 20:
        raise ValueError("short stat line")
    return Stat(comm, rest[0], int(rest[1]), int(rest[6]), int(rest[19]))


#: At most this many ``/proc`` files a ``TaskFiles`` keeps open, and all of them together
#: ``MAX_KEPT_TOTAL``; past either, each read opens its file.  The default soft limit of open
#: files is 1024, and a descriptor numbered 1024 or more cannot be waited on with ``select``
#: (``collect.launch``): the collect's own pipes and perf's must stay below it.
MAX_KEPT_FILES = 256
MAX_KEPT_TOTAL = 384
_kept = [0]  # descriptors kept open by every TaskFiles of this process
_kept_lock = threading.Lock()


def _keep_one() -> bool:
    with _kept_lock:
        if _kept[0] >= MAX_KEPT_TOTAL:
            return False
        _kept[0] += 1
        return True


def _release_one() -> None:
    with _kept_lock:
        _kept[0] -= 1


class TaskFiles:
    """One ``/proc/PID/task/TID/NAME`` file per thread, kept open and read again with
    ``pread`` from its start: 1-4 us a read in Python, against 16-20 us to open, read and
    close it (the owner sampler reads every thread's ``syscall`` 5-20 times a second, the
    process watch every thread's ``schedstat`` 4 times).  A kept file stays bound to its
    thread: once the thread has ended it reads nothing, never another thread's."""

    def __init__(self, pid: int, name: str, most: int = MAX_KEPT_FILES) -> None:
        self.pid, self.name, self.most = pid, name, most
        self.fds: dict[int, int] = {}

    def _open(self, tid: int) -> int | None:
        """Open ``tid``'s file and keep it: its descriptor, or ``None`` when ``most`` files
        (or the budget of all of them) are already kept.  ``OSError`` (``PermissionError``
        among them) when it cannot be opened."""
        if len(self.fds) >= self.most or not _keep_one():
            return None
        try:
            fd = self.fds[tid] = os.open(f"/proc/{self.pid}/task/{tid}/{self.name}",
                                         os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            _release_one()
            raise
        return fd

    def read(self, tid: int) -> str | None:
        """The file's text, ``None`` once the thread is gone (``PermissionError`` raised)."""
        fd = self.fds.get(tid)
        if fd is None:
            try:
                fd = self._open(tid)
            except PermissionError:
                raise
            except OSError:
                return None
            if fd is None:
                return read_text(f"/proc/{self.pid}/task/{tid}/{self.name}")
        try:
            data = os.pread(fd, 4096, 0)
        except PermissionError:
            raise
        except OSError:
            data = b""
        if not data:
            self.drop(tid)
            return None
        return data.decode("utf-8", "replace")

    def fd(self, tid: int) -> int:
        """The kept descriptor of ``tid``'s file, opened now if need be (-1: none: gone,
        refused, or ``most`` already kept)."""
        fd = self.fds.get(tid)
        if fd is None:
            try:
                fd = self._open(tid)
            except OSError:
                return -1
        return -1 if fd is None else fd

    def drop(self, tid: int) -> None:
        fd = self.fds.pop(tid, None)
        if fd is not None:
            os.close(fd)
            _release_one()

    def keep_only(self, tids: set[int]) -> None:
        """Close the files of threads not in ``tids`` (those that ended)."""
        for tid in [t for t in self.fds if t not in tids]:
            self.drop(tid)

    def close(self) -> None:
        for tid in list(self.fds):
            self.drop(tid)


def parse_schedstat(text: str | bytes | None) -> tuple[int, int, int] | None:
    """``/proc/PID/task/TID/schedstat``: (on-CPU ns, run-queue ns, timeslices), or ``None``."""
    parts = (text or "").split()
    if len(parts) < 3 or not all(p.isdigit() for p in parts[:3]):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


def read_text(path: str) -> str | None:
    """A /proc file's text, or ``None`` if the process or thread is gone."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    except PermissionError:
        raise
    except OSError:
        return None


def read_stat(pid: int, tid: int | None = None) -> Stat | None:
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    text = read_text(path)
    if text is None:
        return None
    try:
        return parse_stat(text)
    except ValueError:
        return None


def status_field(pid: int, name: str, tid: int | None = None) -> str | None:
    path = f"/proc/{pid}/status" if tid is None else f"/proc/{pid}/task/{tid}/status"
    text = read_text(path)
    if text is None:
        return None
    prefix = name + ":"
    for line in text.splitlines():
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    return None


def tracer_of(pid: int, tid: int | None = None) -> int:
    value = status_field(pid, "TracerPid", tid)
    try:
        return int(value or 0)
    except ValueError:
        return 0


def list_pids() -> list[int]:
    """Every process ``/proc`` lists now."""
    return sorted(int(e) for e in os.listdir("/proc") if e.isdigit())


def list_tids(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if t.isdigit())
    except OSError:
        return []


def thread_states(pid: int) -> dict[int, str]:
    """tid -> kernel state letter for every thread that still exists."""
    out: dict[int, str] = {}
    for tid in list_tids(pid):
        st = read_stat(pid, tid)
        if st is not None:
            out[tid] = st.state
    return out


def proc_name(pid: int) -> str:
    st = read_stat(pid)
    return st.comm if st else "?"


@dataclass
class Target:
    """A process identified by PID *and* start time."""

    pid: int
    start_ticks: int
    comm: str
    exe: str = ""
    cmdline: list[str] = field(default_factory=list)
    stopped_at_start: bool = False

    def alive(self) -> bool:
        """True while the same process (not a reused PID) exists and is not a zombie."""
        st = read_stat(self.pid)
        return st is not None and st.start_ticks == self.start_ticks and st.state not in "ZX"

    def reused(self) -> bool:
        st = read_stat(self.pid)
        return st is not None and st.start_ticks != self.start_ticks

    def threads(self) -> list[int]:
        return list_tids(self.pid)

    def identity(self) -> dict[str, object]:
        return {"pid": self.pid, "start_ticks": self.start_ticks, "comm": self.comm,
                "exe": self.exe, "cmdline": self.cmdline,
                "stopped_at_start": self.stopped_at_start}


def own_tree() -> set[int]:
    """Our own PID and our ancestors: never a target."""
    out = {os.getpid()}
    pid = os.getppid()
    while pid > 1 and pid not in out:
        out.add(pid)
        st = read_stat(pid)
        if st is None:
            break
        pid = st.ppid
    return out


def open_target(pid: int, allow_own_child: bool = False) -> Target:
    """Check that ``pid`` is a profilable user process and pin its identity.

    Raises ``TargetError`` for a missing PID, a zombie, a kernel thread, PID 1, our own process
    tree, or a process already traced by another (named) tracer.
    """
    if pid <= 0:
        raise TargetError(f"invalid PID {pid}", "give the PID of a running process")
    if pid == 1:
        raise TargetError("refusing to profile PID 1 (init): stopping it even briefly can hang "
                          "the machine", "profile a service process instead")
    if pid in own_tree() and not allow_own_child:
        raise TargetError(f"PID {pid} is wallflame itself or one of its parents",
                          "give the PID of another process")
    try:
        st = read_stat(pid)
    except PermissionError:
        raise PermissionDenied(f"cannot read /proc/{pid}/stat", "run as the target's user or "
                               "as root") from None
    if st is None:
        raise TargetError(f"no process with PID {pid}", "check the PID (ps -e)")
    if st.state in ("Z", "X"):
        raise TargetError(f"PID {pid} ({st.comm}) is a zombie: it has exited and waits for "
                          "its parent", "profile a live process")
    if st.flags & _PF_KTHREAD:
        raise TargetError(f"PID {pid} ({st.comm}) is a kernel thread: it has no user stacks",
                          "profile a user process; for kernel work use perf record -a")
    tracer = tracer_of(pid)
    if tracer and tracer != os.getpid() and not os.path.exists(f"/proc/self/task/{tracer}"):
        raise TargetError(f"PID {pid} ({st.comm}) is already traced by PID {tracer} "
                          f"({proc_name(tracer)})",
                          f"detach that debugger or tracer first (PID {tracer})")
    exe = ""
    with contextlib.suppress(OSError):
        exe = os.readlink(f"/proc/{pid}/exe")
    raw = read_text(f"/proc/{pid}/cmdline") or ""
    cmdline = [a for a in raw.split("\0") if a]
    states = thread_states(pid)
    stopped = bool(states) and all(s == STOPPED for s in states.values())
    return Target(pid, st.start_ticks, st.comm, exe, cmdline, stopped)


def check_trace_access(pid: int) -> None:
    """Raise ``PermissionDenied`` with the fix if we may not ptrace ``pid`` (the check the
    kernel applies to /proc/PID/mem is the ptrace attach check)."""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except PermissionError:
        uid = (status_field(pid, "Uid") or "?").split()[0]
        fix = (f"run as root or as uid {uid}, or give wallflame's user CAP_SYS_PTRACE and "
               "CAP_PERFMON")
        scope = read_text("/proc/sys/kernel/yama/ptrace_scope")
        if scope is not None and scope.strip() != "0":
            fix += (f"; kernel.yama.ptrace_scope is {scope.strip()}: "
                    "sysctl -w kernel.yama.ptrace_scope=0")
        raise PermissionDenied(f"may not trace PID {pid} ({proc_name(pid)}, uid {uid}): "
                               "ptrace permission denied", fix) from None
    except OSError:
        return
    os.close(fd)


@dataclass
class ThreadProc:
    """What /proc says about one thread at one instant (a ``# wallflame-proc`` record)."""

    tid: int
    comm: str
    state: str
    wchan: str
    syscall: int  # -1: not in a system call, -2: running or unknown
    arg0: int
    sp: int = 0
    #: the thread's timeslice count (``schedstat``'s third field) read just before the rest
    #: (``ThreadReader``; -1: not read)
    pcount: int = -1
    #: the ``syscall`` file's text as read (not written to the record)
    call: str = ""

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"tid": self.tid, "comm": self.comm, "state": self.state,
                                  "wchan": self.wchan, "syscall": self.syscall,
                                  "arg0": hex(self.arg0)}
        if self.pcount >= 0:
            out["pcount"] = self.pcount
        return out


def syscall_sp(text: str) -> int:
    """The user stack pointer in ``/proc/.../syscall`` (the second-to-last field), or 0."""
    parts = text.split()
    if len(parts) < 3 or parts[0] == "running":
        return 0
    try:
        return int(parts[-2], 16)
    except ValueError:
        return 0


def parse_syscall(text: str) -> tuple[int, int]:
    """``/proc/.../syscall``: ``NR arg0 ... sp pc``, ``-1 sp pc``, or ``running``."""
    parts = text.split()
    if not parts or parts[0] == "running":
        return -2, 0
    try:
        nr = int(parts[0])
        arg0 = int(parts[1], 16) if nr >= 0 and len(parts) > 1 else 0
    except ValueError:
        return -2, 0
    return nr, arg0


def read_thread(pid: int, tid: int) -> ThreadProc | None:
    base = f"/proc/{pid}/task/{tid}"
    st = read_stat(pid, tid)
    if st is None:
        return None
    wchan = (read_text(base + "/wchan") or "").strip()
    try:
        text = read_text(base + "/syscall") or ""
    except PermissionError:
        text = ""
    nr, arg0 = parse_syscall(text)
    return ThreadProc(tid, st.comm, st.state, "" if wchan == "0" else wchan, nr, arg0,
                      syscall_sp(text))


class ThreadReader:
    """``read_threads`` round after round, each thread's ``stat``, ``wchan`` and ``syscall``
    kept open (``TaskFiles``): opening each file at every reading costs about 0.2 ms of CPU a
    thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.stat = TaskFiles(pid, "stat")
        self.wchan = TaskFiles(pid, "wchan")
        self.syscall = TaskFiles(pid, "syscall")
        self.schedstat = TaskFiles(pid, "schedstat")

    def read(self) -> list[ThreadProc]:
        """Every thread of the process, one after the other."""
        out = []
        for tid in self.listing():
            t = self.read_one(tid)
            if t is not None:
                out.append(t)
        return out

    def listing(self) -> list[int]:
        """The process's threads now; the files of those that ended are closed."""
        tids = list_tids(self.pid)
        alive = set(tids)
        for f in (self.stat, self.wchan, self.syscall, self.schedstat):
            f.keep_only(alive)
        return tids

    def read_one(self, tid: int) -> ThreadProc | None:
        """One thread's record (``None`` once it has ended)."""
        # the timeslice count first: a thread whose count is the same when it is stopped
        # for its stack (but for the stop's own) did not run in between, so the state
        # read after it is the state the stack was taken in
        counts = parse_schedstat(self.schedstat.read(tid))
        pcount = counts[2] if counts is not None else -1
        text = self.stat.read(tid)
        if text is None:
            return None
        try:
            st = parse_stat(text)
        except ValueError:
            return None
        wchan = (self.wchan.read(tid) or "").strip()
        try:
            call = self.syscall.read(tid) or ""
        except PermissionError:
            call = ""
        nr, arg0 = parse_syscall(call)
        return ThreadProc(tid, st.comm, st.state, "" if wchan == "0" else wchan, nr,
                          arg0, syscall_sp(call), pcount, call)

    def close(self) -> None:
        for f in (self.stat, self.wchan, self.syscall, self.schedstat):
            f.close()


def read_threads(pid: int) -> list[ThreadProc]:
    out = []
    for tid in list_tids(pid):
        t = read_thread(pid, tid)
        if t is not None:
            out.append(t)
    return out
