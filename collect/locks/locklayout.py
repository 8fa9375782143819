"""Which thread owns the lock a futex waiter waits on: glibc 2.36 x86-64 layouts, read exactly.

A thread blocked on a lock sits in ``futex`` with the futex word's address as the first argument,
the operation as the second and the value it expects as the third
(``/proc/PID/task/TID/syscall``).  The owner is read from the lock's memory; only these layouts
are read (``bits/struct_mutex.h``, ``bits/struct_rwlock.h`` and nptl's ``pthreadP.h``), anything
else is refused with a reason rather than guessed:

``pthread_mutex_t`` (40 bytes, the futex word is the mutex's first field)::

    0  int __lock      0 free, 1 locked, 2 locked with waiters
    4  uint __count    recursion depth (recursive kind only; 0 otherwise)
    8  int __owner     tid of the owner (set after the lock is taken, cleared before release)
    12 uint __nusers   (not read: a lock re-taken by pthread_cond_wait is not counted)
    16 int __kind      0 normal/timed, 1 recursive, 2 error-checking, 3 adaptive;
                       + 256/512 elision flags.  Robust (16), priority-inheritance (32),
                       priority-protect (64) and process-shared (128) kinds are refused.
    20 short __spins, 22 short __elision, 24 __list (two pointers, used by robust mutexes only)

A waiter of one of these kinds blocks in ``__lll_lock_wait`` (``FUTEX_WAIT``, value 2) or, for
``pthread_mutex_timedlock``/``clocklock``, in ``FUTEX_WAIT_BITSET`` with value 2.

``pthread_rwlock_t`` (56 bytes)::

    0  uint __readers        readers wait here (writer-preferring locks)
    4  uint __writers
    8  uint __wrphase_futex  readers and writers wait here
    12 uint __writers_futex  writers wait here
    16 uint __pad3, 20 uint __pad4   always 0
    24 int __cur_writer      tid of the writer holding it (0: free or held by readers)
    28 int __shared          0 private, 1 process-shared (refused)
    32 signed char __rwelision, 33 uchar __pad1[7] (0), 40 ulong __pad2 (0)
    48 uint __flags          0 prefer readers, 1 prefer writers, 2 prefer writers, no recursion

An rwlock waiter waits with ``FUTEX_WAIT_BITSET`` on one of three words, so which field the
address is cannot be told from the address: the waiter's call site (a stack scan) must name
``pthread_rwlock_*``, and the base is the one candidate (address - 0, 8 or 12) whose padding,
flags and sharing fields read as an rwlock; zero or several candidates: refused.  Only a writer
is named (``__cur_writer``); a lock held by readers has no owner to read.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace

SYS_FUTEX_X86_64 = 202
FUTEX_WAIT = 0
FUTEX_WAIT_BITSET = 9
FUTEX_WAKE = 1
FUTEX_PRIVATE_FLAG = 128
FUTEX_CLOCK_REALTIME = 256

MUTEX_SIZE = 40
MUTEX_OWNER = 8
MUTEX_KIND = 16
#: __kind values read: the type (0-3) with or without the elision flags.
MUTEX_KINDS = {0: "normal", 1: "recursive", 2: "errorcheck", 3: "adaptive"}
_ELISION_FLAGS = 256 | 512
_KIND_MASK = 3
#: Kinds refused, by the flag that makes them different.
_REFUSED_KIND_FLAGS = {16: "robust", 32: "priority-inheritance", 64: "priority-protect",
                       128: "process-shared"}

#: The refusal of a lock whose owner is the waiter itself (its wait has just ended).
OWNER_IS_WAITER = "owner is the waiter"

RWLOCK_SIZE = 56
RWLOCK_CUR_WRITER = 24
#: The words an rwlock waiter may wait on: offset -> field.
RWLOCK_FUTEX_WORDS = {0: "__readers", 8: "__wrphase_futex", 12: "__writers_futex"}
RWLOCK_FLAGS = {0: "prefer-reader", 1: "prefer-writer", 2: "prefer-writer-nonrecursive"}

_MUTEX_SITES = ("pthread_mutex_lock", "__pthread_mutex_lock", "pthread_mutex_timedlock",
                "pthread_mutex_clocklock", "__lll_lock_wait", "__pthread_mutex_cond_lock",
                "__pthread_mutex_clocklock_common", "__pthread_mutex_lock_full")
_RWLOCK_SITES = ("pthread_rwlock_",)


@dataclass(frozen=True)
class FutexCall:
    """A thread's ``futex`` system call as /proc shows it."""

    addr: int
    op: int
    val: int

    @property
    def cmd(self) -> int:
        return self.op & ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME)

    @property
    def waits(self) -> bool:
        return self.cmd in (FUTEX_WAIT, FUTEX_WAIT_BITSET)


def parse_futex(text: str) -> FutexCall | None:
    """``/proc/.../syscall`` text -> the futex call, or ``None`` when it is not one."""
    parts = text.split()
    if len(parts) < 4 or parts[0] != str(SYS_FUTEX_X86_64):
        return None
    try:
        return FutexCall(int(parts[1], 16), int(parts[2], 16) & 0xFFFFFFFF,
                         int(parts[3], 16) & 0xFFFFFFFF)
    except ValueError:
        return None


@dataclass(frozen=True)
class LockRead:
    """What a lock's memory said: its layout (``mutex:normal``, ``rwlock:prefer-writer``...),
    its base address and its owner tid (0 with ``refused`` saying why when none was read)."""

    kind: str = ""
    base: int = 0
    owner: int = 0
    refused: str = ""


def read_mutex(data: bytes) -> LockRead:
    """The 40 bytes of a ``pthread_mutex_t`` -> its kind and owner (base left 0)."""
    if len(data) < MUTEX_SIZE:
        return LockRead(refused="short read")
    lock, count, owner, _nusers, kind = struct.unpack_from("<iIiIi", data, 0)
    prev, nxt = struct.unpack_from("<QQ", data, 24)
    for flag, name in _REFUSED_KIND_FLAGS.items():
        if kind >= 0 and kind & flag:
            return LockRead(refused=f"{name} mutex (layout not read)")
    base_kind = kind & ~_ELISION_FLAGS
    if kind < 0 or base_kind not in MUTEX_KINDS:
        return LockRead(refused=f"not a glibc mutex (__kind {kind})")
    name = MUTEX_KINDS[base_kind & _KIND_MASK]
    if prev or nxt:
        return LockRead(refused="not a glibc mutex (__list set on a non-robust kind)")
    if (count != 0) != (name == "recursive" and lock != 0):
        return LockRead(refused=f"not a glibc mutex (__count {count} for a {name} mutex)")
    if lock == 0:
        return LockRead(kind=f"mutex:{name}", refused="free")
    if lock not in (1, 2):
        return LockRead(refused=f"not a glibc mutex (__lock {lock})")
    # __nusers is not read: a mutex re-taken after a condition-variable wait
    # (__pthread_mutex_cond_lock) is held without being counted there.
    if owner <= 0:
        return LockRead(kind=f"mutex:{name}", refused="no owner recorded")
    return LockRead(kind=f"mutex:{name}", owner=owner)


def read_rwlock(data: bytes) -> LockRead:
    """The 56 bytes of a ``pthread_rwlock_t`` -> its kind and writer (base left 0)."""
    if len(data) < RWLOCK_SIZE:
        return LockRead(refused="short read")
    pad3, pad4, cur_writer, shared = struct.unpack_from("<IIii", data, 16)
    pad1 = data[33:40]
    pad2, flags = struct.unpack_from("<QI", data, 40)
    if pad3 or pad4 or any(pad1) or pad2 or flags not in RWLOCK_FLAGS or shared not in (0, 1):
        return LockRead(refused="not a glibc rwlock")
    if shared:
        return LockRead(refused="process-shared rwlock (layout not read)")
    kind = f"rwlock:{RWLOCK_FLAGS[flags]}"
    if cur_writer <= 0:
        return LockRead(kind=kind, refused="no writer (free or held by readers)")
    return LockRead(kind=kind, owner=cur_writer)


def is_mutex_wait(call: FutexCall) -> bool:
    """The futex call of a mutex waiter of a kind read here (``__lll_lock_wait`` or a timed
    lock): a wait for value 2."""
    return call.waits and call.val == 2


def read_lock(read: Callable[[int, int], bytes | None], call: FutexCall, sites: list[str],
              tids: Collection[int], waiter: int) -> LockRead:
    """The owner of the lock ``waiter`` waits on (``call``), read through ``read(addr, size)``.

    ``sites`` are the functions found on the waiter's stack (innermost first); they decide
    between the mutex and the rwlock layouts.  The owner must be a live thread of the target
    (``tids``) other than the waiter."""
    if not call.waits:
        return LockRead(refused="not a futex wait")
    rw = [s for s in sites if s.startswith(_RWLOCK_SITES)]
    if rw:
        # A writer waits on __wrphase_futex or __writers_futex, a reader on __readers or
        # __wrphase_futex.  Every candidate base is read; they must agree on the owner.
        role = rw[0]
        offsets = [off for off in RWLOCK_FUTEX_WORDS
                   if not ("wrlock" in role and off == 0) and not ("rdlock" in role and off == 12)]
        found: list[LockRead] = []
        for off in offsets:
            data = read(call.addr - off, RWLOCK_SIZE)
            r = read_rwlock(data) if data is not None else LockRead(refused="unreadable")
            if r.kind:
                found.append(replace(r, base=call.addr - off))
        if not found:
            return LockRead(refused="rwlock layout not recognised")
        if len({r.owner for r in found}) > 1:
            return LockRead(refused="rwlock base ambiguous")
        got = found[0] if len(found) == 1 else replace(found[0], base=0)
        if not got.base and got.owner:
            return LockRead(kind=got.kind, refused="rwlock base ambiguous")
    elif is_mutex_wait(call):
        data = read(call.addr, MUTEX_SIZE)
        if data is None:
            return LockRead(refused="unreadable")
        got = replace(read_mutex(data), base=call.addr)
    else:
        return LockRead(refused="futex wait of no lock read here (condition variable, "
                        "semaphore or a lock of its own)")
    if got.owner and (got.owner == waiter or got.owner not in tids):
        return LockRead(kind=got.kind, base=got.base,
                        refused=OWNER_IS_WAITER if got.owner == waiter
                        else "owner is not a thread of the target")
    return got


def is_mutex_site(name: str) -> bool:
    return name.startswith(_MUTEX_SITES)
