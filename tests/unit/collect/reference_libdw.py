"""The reference the native libdw frame callback (``_speedups.frame_callback``) is held to: the
same unwind with a frame callback in Python, which takes the interpreter's lock at every frame
(tests only: a stop must not wait for that lock, ``collect/libdw.py``)."""

from __future__ import annotations

import ctypes
import os
import time

from wallflame.collect.libdw import (
    MAX_MEM_READ,
    MAX_SYSCALL_READ,
    StopRead,
    StopReads,
    ThreadStack,
    Unwinder,
)

_DWARF_CB_OK, _DWARF_CB_ABORT = 0, 1
_FRAME_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_GETTHREAD_FRAMES = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, _FRAME_CB,
                                     ctypes.c_void_p)


def read_now(reads: StopReads) -> StopRead:
    """``reads`` done now, in Python."""
    out = StopRead()
    size = max(0, min(reads.size, MAX_MEM_READ))
    if reads.mem_fd >= 0 and size and reads.addr > 0:
        try:
            data = os.pread(reads.mem_fd, size, reads.addr)
            out.mem, out.mem_error = (data, "") if len(data) == size else \
                (None, f"short read ({len(data)} of {size} bytes)")
        except (OSError, OverflowError) as e:
            out.mem_error = type(e).__name__
    if reads.sys_fd >= 0:
        try:
            out.syscall, out.syscall_error = os.pread(reads.sys_fd, MAX_SYSCALL_READ, 0), ""
        except OSError as e:
            out.syscall_error = type(e).__name__
    return out


def python_stack(u: Unwinder, tid: int, reads: StopReads | None = None) -> ThreadStack:
    """``u.stack(tid, reads)`` with the frames (and ``reads``) taken by a callback in Python."""
    dw = u.lib.dw
    pcs: list[tuple[int, bool]] = []
    pc, act = ctypes.c_uint64(0), ctypes.c_bool(False)
    got: list[StopRead] = []
    t0 = time.monotonic_ns()
    times = [t0, t0]  # the first and the last frame's

    def frame(f: int, _arg: int) -> int:
        if not dw.dwfl_frame_pc(f, ctypes.byref(pc), ctypes.byref(act)):
            return _DWARF_CB_ABORT
        if not pcs:
            times[0] = time.monotonic_ns()
            if reads is not None:  # the thread is stopped (attached) until released
                got.append(read_now(reads))
        pcs.append((pc.value, act.value))
        times[1] = time.monotonic_ns()
        return _DWARF_CB_OK if len(pcs) < u.max_frames else _DWARF_CB_ABORT

    call = _GETTHREAD_FRAMES(ctypes.cast(dw.dwfl_getthread_frames, ctypes.c_void_p).value)
    rc = call(u.dwfl, tid, _FRAME_CB(frame), None)
    t1 = time.monotonic_ns()
    error = u.lib.error() if rc != 0 and not pcs else ""
    read = (got[0] if got else StopRead()) if reads is not None else None
    stopped, held = times
    return ThreadStack(tid, pcs, (t1 - stopped) / 1e6, (t1 - t0) / 1e6, error, read,
                       (held - stopped) / 1e6, stopped if pcs else 0)
