"""Stacks of every thread through elfutils' unwinder (libdw), loaded once and kept warm.

``eu-stack -p PID`` spends most of each snapshot starting up: exec, reading every module's
ELF headers and symbol tables, parsing CFI.  Only a small part of that time has a thread
stopped, but all of it is CPU taken from a busy target.  This backend calls the same library
in-process through ``ctypes``: the ``Dwfl`` session (modules, symbol tables, CFI) is built
once per run and reused, so a snapshot costs only what stopping and unwinding each thread
costs.

Each thread is stopped on its own (``PTRACE_ATTACH``, unwind, ``PTRACE_DETACH``, done by
libdwfl), exactly as eu-stack does: the process as a whole never stops and a snapshot is not
consistent across threads.  The pause of a snapshot is the longest single-thread stop in it
(timed around each thread's unwind, so an upper bound).  Symbols are looked up after every
thread was let go.  Output is eu-stack's text format, so ``fold.eustack`` reads it.

A stopped thread stays stopped until the tracer is scheduled to read it: on a busy machine
that wake-up, not the unwinding (about 50 us), is most of the stop (1-3 ms per thread per
snapshot on two cores, measured by benchmarks/overhead.py).  So while it unwinds, the calling
thread runs under ``SCHED_FIFO`` at the lowest real-time priority when it may (root or
CAP_SYS_NICE), which makes the wake-up immediate (0.1-0.5 ms); it returns to its normal policy
after every snapshot.  ``realtime`` says whether that was allowed.

libdwfl calls back for every frame while the thread is stopped.  A callback in Python takes
the interpreter's lock each time, and another thread of the collect may hold it (preempted
by the target): the stopped thread then waits for that one to run again, so any busy
Python thread of the collect lengthens the target's stops.  So the frames are taken by a
callback in C (``_speedups.frame_callback``) and the whole stop runs without the lock.  The
owner sampler's stops of a lock holder are the ones that matter most (every waiter of the lock
waits with it), and what they must learn while the holder is stopped (the lock's owner field,
the holder's own system call) is read by the same callback (``stack(reads=StopReads(...))``,
two ``pread`` at the first frame) and judged after the release (``collect.locks.holders``).

ptrace is per OS thread: one ``Unwinder`` must be used from a single Python thread.  A SIGKILL
of wallflame while a thread is attached leaves that thread stopped; the guard process
(``collect.safety``) resumes it, as it does for a killed eu-stack or gdb.
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import os
import platform
import time
from dataclasses import dataclass
from typing import Any

from wallflame.errors import ToolError
from wallflame.speedups import native

#: Deepest stack kept per thread (eu-stack's default is 256).
MAX_FRAMES = 1024

#: ``dwfl_getthread_frames`` called with the native callback: the call, the thread's whole stop,
#: runs without the interpreter's lock.
_GETTHREAD_FRAMES = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                     ctypes.c_void_p, ctypes.c_void_p)


class _Frames(ctypes.Structure):
    """The native frame callback's buffer (``struct wf_frames`` in ``_speedups_src/libdw.c``)."""

    _fields_ = [("frame_pc", ctypes.c_void_p), ("t_first", ctypes.c_int64),
                ("t_last", ctypes.c_int64), ("n", ctypes.c_int32), ("max", ctypes.c_int32),
                ("pcs", ctypes.POINTER(ctypes.c_uint64)),
                ("act", ctypes.POINTER(ctypes.c_ubyte)),
                ("mem_fd", ctypes.c_int32), ("sys_fd", ctypes.c_int32),
                ("mem_addr", ctypes.c_uint64), ("mem_size", ctypes.c_int32),
                ("mem_got", ctypes.c_int32), ("sys_got", ctypes.c_int32),
                ("mem_errno", ctypes.c_int32), ("sys_errno", ctypes.c_int32),
                ("sys_size", ctypes.c_int32),
                ("mem_buf", ctypes.POINTER(ctypes.c_ubyte)),
                ("sys_buf", ctypes.POINTER(ctypes.c_ubyte))]


#: Largest read of each kind made while a thread is stopped.
MAX_MEM_READ = 64
MAX_SYSCALL_READ = 512


@dataclass(frozen=True)
class StopReads:
    """What to read while a thread is stopped, at its first frame: ``size`` bytes (at most
    ``MAX_MEM_READ``) at ``addr`` through ``mem_fd`` (``/proc/PID/mem``), and the text behind
    ``sys_fd`` (``/proc/PID/task/TID/syscall``, read from offset 0).  -1: not read."""

    mem_fd: int
    addr: int
    size: int
    sys_fd: int = -1


@dataclass
class StopRead:
    """What ``StopReads`` got: the bytes, or ``None`` with the reason in ``*_error``."""

    mem: bytes | None = None
    syscall: bytes | None = None
    mem_error: str = "not read"
    syscall_error: str = "not read"


class _Callbacks(ctypes.Structure):
    _fields_ = [("find_elf", ctypes.c_void_p), ("find_debuginfo", ctypes.c_void_p),
                ("section_address", ctypes.c_void_p),
                ("debuginfo_path", ctypes.POINTER(ctypes.c_char_p))]


class _Sym(ctypes.Structure):
    """``GElf_Sym`` (``Elf64_Sym``)."""

    _fields_ = [("st_name", ctypes.c_uint32), ("st_info", ctypes.c_ubyte),
                ("st_other", ctypes.c_ubyte), ("st_shndx", ctypes.c_uint16),
                ("st_value", ctypes.c_uint64), ("st_size", ctypes.c_uint64)]


#: ``STT_SECTION``, ``STT_FILE``, ``STT_TLS``: never a frame's symbol.
_NOT_CODE = (3, 4, 6)
#: ``GELF_ST_BIND`` as libdwfl ranks it (higher wins): global, weak, local.
_BIND_RANK = {1: 3, 2: 2, 0: 1}
#: Symbols looked at, at most, below an address for those that contain it.
_MAX_WALK = 64
#: A module with more symbols than this keeps libdw's own lookup.
_MAX_INDEXED = 2_000_000
#: Where a symbol's value is the address libdwfl matches (``ebl_resolve_sym_value`` changes
#: none: no function descriptors), so that ``dwfl_module_getsym_info``'s value is the one
#: its lookup compares.
_SAME_VALUES = platform.machine() in ("x86_64", "aarch64")


class SymbolIndex:
    """One module's symbols sorted by address: the name libdw's ``dwfl_module_addrname``
    gives an address, without its scan of every symbol for each address.

    libdwfl (0.188) looks an address up by reading the whole symbol table: about 1 ms an address
    in a server binary of 30,000 symbols, most of a snapshot's CPU.  This index gives the same
    answer by libdwfl's own rules (``__libdwfl_addrsym``), for the symbols of some size whose
    extent holds the address: the symbols in the table's global part first, the local part only
    when none of those holds it; in table order, a symbol replaces the one kept when it starts
    higher or binds more strongly (global, weak, local), or starts at the same address, binds as
    strongly and is smaller.  Where those rules turn on a symbol of no size (an assembly label,
    which libdwfl also matches to the address's section), and where more than ``_MAX_WALK``
    symbols below an address must be looked at, ``lookup`` answers ``None`` and libdw is
    asked.  ``tests/live/test_libdw_symbols_live.py`` holds the two to the same answer at the
    boundaries of a sample of the symbols of every module of two live processes;
    benchmarks/lab/libdw_symbols.py checks every boundary of a server binary's and measures both
    lookups."""

    def __init__(self, dw: Any, mod: int) -> None:
        n = dw.dwfl_module_getsymtab(mod)
        first_global = dw.dwfl_module_getsymtab_first_global(mod) if n > 0 else -1
        #: whether this index answers at all (else libdw is asked for every address)
        self.ok = 0 < n <= _MAX_INDEXED and first_global >= 0 and _SAME_VALUES
        # start, end, index in the table, in the global part, binding rank, name
        rows: list[tuple[int, int, int, bool, int, bytes]] = []
        labels: list[int] = []
        sym, value = _Sym(), ctypes.c_uint64(0)
        for ndx in range(1, n if self.ok else 0):
            raw = dw.dwfl_module_getsym_info(mod, ndx, ctypes.byref(sym), ctypes.byref(value),
                                             None, None, None)
            if not raw or sym.st_shndx == 0 or sym.st_info & 0xF in _NOT_CODE:
                continue
            if sym.st_size == 0:
                labels.append(value.value)
            else:
                rows.append((value.value, value.value + sym.st_size, ndx,
                             ndx >= first_global, _BIND_RANK.get(sym.st_info >> 4, 0), raw))
        rows.sort()
        self.rows = rows
        self.starts = [r[0] for r in rows]
        #: the highest end of the symbols up to each one (by start), of all and of the globals
        self.reach: list[int] = []
        self.reach_global: list[int] = []
        top = top_global = 0
        for row in rows:
            top = max(top, row[1])
            if row[3]:
                top_global = max(top_global, row[1])
            self.reach.append(top)
            self.reach_global.append(top_global)
        self.labels = sorted(labels)

    def lookup(self, address: int) -> tuple[bool, bytes | None]:
        """``(True, name)``; ``(True, None)``: no symbol (libdw would name none);
        ``(False, None)``: not decided here, ask libdw."""
        if not self.ok:
            return False, None
        i = bisect.bisect_right(self.starts, address) - 1
        holding = []
        j = i
        while j >= 0 and self.reach[j] > address:
            if i - j >= _MAX_WALK:
                return False, None
            if self.rows[j][1] > address:
                holding.append(self.rows[j])
            j -= 1
        k = bisect.bisect_right(self.labels, address) - 1
        label = self.labels[k] if k >= 0 else None
        for global_part in (True, False):
            kept = None
            for row in sorted((r for r in holding if r[3] == global_part), key=lambda r: r[2]):
                if kept is None or kept[0] < row[0] or kept[4] < row[4] or (
                        kept[0] == row[0] and kept[1] > row[1] and kept[4] <= row[4]):
                    kept = row
            if kept is not None:
                return True, kept[5]
            if label == address:
                return False, None  # a label here may end the search before the locals
        if label is not None and (i < 0 or label >= self.reach_global[i]):
            return False, None  # a label no global symbol covers may name it
        return True, None


@dataclass
class ThreadStack:
    tid: int
    pcs: list[tuple[int, bool]]  # (pc, is_activation), innermost first
    stop_ms: float  # from the thread's registers being read to its release
    span_ms: float  # from the attach request to the release (includes waiting for a CPU)
    error: str = ""
    read: StopRead | None = None  # what ``stack(reads=...)`` read while the thread was stopped
    #: from its first frame read to its last: certainly stopped throughout (``stop_ms`` ends
    #: when this process reads its clock after the release, which can wait for the GIL)
    held_ms: float = 0.0
    #: ``CLOCK_MONOTONIC`` when its first frame was read: the thread was in its stop then
    stopped_ns: int = 0


class _Lib:
    """libdw's functions with their C signatures."""

    def __init__(self) -> None:
        # debuginfod (network, can stall for 90 s) is set up when libdw is loaded.
        os.environ.pop("DEBUGINFOD_URLS", None)
        try:
            dw = ctypes.CDLL("libdw.so.1", use_errno=True)
        except OSError:
            raise ToolError("libdw (elfutils) is not installed",
                            "apt-get install libdw1, or use --pmp-backend eu-stack") from None
        vp, i, u64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64
        sig = {
            "dwfl_begin": (vp, [ctypes.POINTER(_Callbacks)]),
            "dwfl_end": (None, [vp]),
            "dwfl_linux_proc_report": (i, [vp, i]),
            "dwfl_report_begin": (None, [vp]),
            "dwfl_report_begin_add": (None, [vp]),
            "dwfl_report_end": (i, [vp, vp, vp]),
            "dwfl_linux_proc_attach": (i, [vp, i, ctypes.c_bool]),
            "dwfl_getthread_frames": (i, [vp, i, vp, vp]),  # the callback's address
            "dwfl_frame_pc": (ctypes.c_bool, [vp, ctypes.POINTER(u64),
                                              ctypes.POINTER(ctypes.c_bool)]),
            "dwfl_addrmodule": (vp, [vp, u64]),
            "dwfl_module_addrname": (ctypes.c_char_p, [vp, u64]),
            "dwfl_module_getsymtab": (i, [vp]),
            "dwfl_module_getsymtab_first_global": (i, [vp]),
            "dwfl_module_getsym_info": (ctypes.c_char_p, [vp, i, ctypes.POINTER(_Sym),
                                                          ctypes.POINTER(u64), vp, vp, vp]),
            "dwfl_module_info": (ctypes.c_char_p, [vp, vp, vp, vp, vp, vp,
                                                   ctypes.POINTER(ctypes.c_char_p), vp]),
            "dwfl_errno": (i, []),
            "dwfl_errmsg": (ctypes.c_char_p, [i]),
        }
        for name, (res, args) in sig.items():
            fn = getattr(dw, name)
            fn.restype, fn.argtypes = res, args
        self.dw = dw
        # Loaded now, in the thread that creates the backend, not in the snapshot thread at
        # its first snapshot: a dlopen in one thread while another forks a tool is unsafe.
        self.demangle = _Demangler()
        self.find_elf = ctypes.cast(dw.dwfl_linux_proc_find_elf, ctypes.c_void_p).value
        self.find_debuginfo = ctypes.cast(dw.dwfl_standard_find_debuginfo,
                                          ctypes.c_void_p).value

    def error(self) -> str:
        msg = self.dw.dwfl_errmsg(-1)
        return msg.decode("utf-8", "replace") if msg else "unknown libdw error"


_LIB: _Lib | None = None


def libdw_version() -> str:
    """``libdw 0.188``, or empty when libdw cannot be loaded."""
    try:
        dw = _lib().dw
    except ToolError:
        return ""
    fn = dw.dwfl_version
    fn.restype, fn.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    v = fn(None)
    return f"libdw {v.decode()}" if v else "libdw"


def libdw_library() -> _Lib:
    """libdw, loaded once (``ToolError`` naming the package when it is missing)."""
    return _lib()


def _lib() -> _Lib:
    global _LIB
    if _LIB is None:
        _LIB = _Lib()
    return _LIB


class _Demangler:
    """C++ names demangled by libstdc++'s ``__cxa_demangle``, as eu-stack prints them."""

    def __init__(self) -> None:
        self.fn = None
        self.free = None
        try:
            cxx = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
            libc = ctypes.CDLL(None)
        except OSError:
            return
        fn = getattr(cxx, "__cxa_demangle")  # not a private name of this class
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_int)]
        libc.free.argtypes = [ctypes.c_void_p]
        self.fn, self.free = fn, libc.free

    def __call__(self, raw: bytes) -> bytes:
        if self.fn is None or not raw.startswith(b"_Z"):
            return raw
        status = ctypes.c_int(0)
        ptr = self.fn(raw, None, None, ctypes.byref(status))
        if not ptr:
            return raw
        try:
            return ctypes.string_at(ptr)
        finally:
            assert self.free is not None
            self.free(ptr)


def _got(buf: Any, got: int, err: int, fd: int, size: int | None) -> tuple[bytes | None, str]:
    """One native read's result: its bytes, or ``None`` and why."""
    if fd < 0 or (got == -1 and not err):
        return None, "not read"
    if got < 0:
        return None, os.strerror(err) if err else "not read"
    if size is not None and got != size:
        return None, f"short read ({got} of {size} bytes)"
    return bytes(buf[:got]), ""


class Unwinder:
    """One libdwfl session attached to ``pid`` for the whole run."""

    def __init__(self, pid: int, max_frames: int = MAX_FRAMES) -> None:
        self.pid = pid
        self.max_frames = max_frames
        self.lib = _lib()
        self._path = ctypes.c_char_p(None)
        self._callbacks = _Callbacks(self.lib.find_elf, self.lib.find_debuginfo, None,
                                     ctypes.pointer(self._path))
        self._native = self._native_frames()
        self._names: dict[int, str] = {}
        self._symbols: dict[int, SymbolIndex] = {}  # per module (``Dwfl_Module *``)
        self._demangle = self.lib.demangle
        self.reports = 0
        self.realtime: bool | None = None  # None: not tried yet
        self.dwfl: int | None = None
        dw = self.lib.dw
        dwfl = dw.dwfl_begin(ctypes.byref(self._callbacks))
        if not dwfl:
            raise ToolError(f"libdw could not start: {self.lib.error()}", "run wallflame doctor")
        self.dwfl = dwfl
        self._report(add=False)
        if dw.dwfl_linux_proc_attach(dwfl, pid, False) != 0:
            err = self.lib.error()
            self.close()
            raise ToolError(f"libdw could not attach to {pid}: {err}", "run wallflame doctor")

    def _report(self, add: bool) -> None:
        dw = self.lib.dw
        (dw.dwfl_report_begin_add if add else dw.dwfl_report_begin)(self.dwfl)
        rc = dw.dwfl_linux_proc_report(self.dwfl, self.pid)
        dw.dwfl_report_end(self.dwfl, None, None)
        self.reports += 1
        if rc != 0:
            raise ToolError(f"libdw could not read the modules of {self.pid}: "
                            f"{os.strerror(rc) if rc > 0 else self.lib.error()}",
                            "run wallflame doctor")

    def _native_frames(self) -> tuple[int, Any, _Frames, Any]:
        """The native callback, the call that uses it and its buffer (and the arrays the
        buffer points to, kept alive with it)."""
        dw = self.lib.dw
        pcs = (ctypes.c_uint64 * self.max_frames)()
        act = (ctypes.c_ubyte * self.max_frames)()
        mem = (ctypes.c_ubyte * MAX_MEM_READ)()
        sys = (ctypes.c_ubyte * MAX_SYSCALL_READ)()
        frames = _Frames(frame_pc=ctypes.cast(dw.dwfl_frame_pc, ctypes.c_void_p).value,
                         max=self.max_frames, pcs=pcs, act=act, mem_fd=-1, sys_fd=-1,
                         mem_buf=mem, sys_buf=sys)
        address = ctypes.cast(dw.dwfl_getthread_frames, ctypes.c_void_p).value
        assert address  # ctypes found the symbol: it has an address
        call = _GETTHREAD_FRAMES(address)
        return native.frame_callback(), call, frames, (pcs, act, mem, sys)

    def stack(self, tid: int, reads: StopReads | None = None) -> ThreadStack:
        """Stop ``tid``, unwind it, let it go, the frames (and ``reads``: read once while the
        thread is stopped, before its first frame is taken, returned as ``read``) taken by
        the native callback, the whole stop without the interpreter's lock."""
        cb, call, f, _ = self._native
        f.n = 0
        f.t_first = f.t_last = 0
        f.mem_fd = f.sys_fd = -1
        f.mem_got = f.sys_got = -1
        f.mem_errno = f.sys_errno = 0
        if reads is not None:
            f.mem_fd, f.sys_fd = reads.mem_fd, reads.sys_fd
            f.mem_addr = reads.addr if reads.addr > 0 else 0
            f.mem_size = max(0, min(reads.size, MAX_MEM_READ)) if reads.addr > 0 else 0
            f.sys_size = MAX_SYSCALL_READ
        t0 = time.monotonic_ns()
        rc = call(self.dwfl, tid, cb, ctypes.byref(f))
        t1 = time.monotonic_ns()
        pcs = [(f.pcs[i], bool(f.act[i])) for i in range(f.n)]
        stopped = f.t_first if f.n else t0
        held = f.t_last if f.n else t0
        # An error after some frames is the end of what can be unwound (eu-stack: exit 1).
        error = self.lib.error() if rc != 0 and not pcs else ""
        read = None
        if reads is not None:
            read = StopRead()
            if f.n:
                read.mem, read.mem_error = _got(f.mem_buf, f.mem_got, f.mem_errno,
                                                reads.mem_fd, f.mem_size)
                read.syscall, read.syscall_error = _got(f.sys_buf, f.sys_got, f.sys_errno,
                                                        reads.sys_fd, None)
        return ThreadStack(tid, pcs, (t1 - stopped) / 1e6, (t1 - t0) / 1e6, error, read,
                           (held - stopped) / 1e6, stopped if f.n else 0)

    def name(self, pc: int, activation: bool) -> str:
        """``NAME``, ``- MODULE`` or nothing, for an eu-stack frame line."""
        adj = pc if activation else pc - 1
        cached = self._names.get(adj)
        if cached is not None:
            return cached
        dw = self.lib.dw
        mod = dw.dwfl_addrmodule(self.dwfl, adj)
        if not mod and self.reports < 100:
            self._report(add=True)  # a module mapped since the last report (dlopen)
            mod = dw.dwfl_addrmodule(self.dwfl, adj)
        text = ""
        if mod:
            index = self._symbols.get(mod)
            if index is None:
                index = self._symbols[mod] = SymbolIndex(dw, mod)
            known, raw = index.lookup(adj)
            if not known:
                raw = dw.dwfl_module_addrname(mod, adj)
            if raw:
                text = self._demangle(raw).decode("utf-8", "replace")
            else:
                main = ctypes.c_char_p(None)
                modname = dw.dwfl_module_info(mod, None, None, None, None, None,
                                              ctypes.byref(main), None)
                path = main.value or modname or b""
                text = "- " + path.decode("utf-8", "replace") if path else ""
        self._names[adj] = text
        return text

    def boost(self) -> bool:
        """Run under ``SCHED_FIFO`` while threads are stopped, when allowed (see the module
        docstring); ``unboost`` after."""
        return self._boost()

    def unboost(self) -> None:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))

    def _boost(self) -> bool:
        if self.realtime is False:
            return False
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        except OSError:
            self.realtime = False
            return False
        self.realtime = True
        return True

    def dump(self, tids: list[int], reads: dict[int, StopReads] | None = None) -> tuple[
            str, list[ThreadStack]]:
        """eu-stack's text for ``tids`` (in that order) and each thread's stop; ``reads``:
        what to read while each thread is stopped (``stack``)."""
        boosted = self._boost()
        reads = reads or {}
        try:
            stacks = [self.stack(tid, reads.get(tid)) for tid in tids]
        finally:
            if boosted:
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        lines = [f"PID {self.pid} - process"]
        for st in stacks:
            if st.error:
                continue
            lines.append(f"TID {st.tid}:")
            for n, (pc, act) in enumerate(st.pcs):
                name = self.name(pc, act)
                lines.append(f"#{n:<2} 0x{pc:016x} {name}" if name else f"#{n:<2} 0x{pc:016x}")
        return "\n".join(lines) + "\n", stacks

    def close(self) -> None:
        if self.dwfl:
            self.lib.dw.dwfl_end(self.dwfl)
            self.dwfl = None
