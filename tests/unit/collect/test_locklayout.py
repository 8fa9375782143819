"""Owner fields of glibc 2.36 x86-64 locks: the layouts read, and those refused."""

from __future__ import annotations

import struct

import pytest

from wallflame.collect.locks.locklayout import (
    FutexCall,
    parse_futex,
    read_lock,
    read_mutex,
    read_rwlock,
)

TIDS = {100, 101, 102}


def mutex(lock: int = 2, count: int = 0, owner: int = 101, nusers: int = 1, kind: int = 0,
          spins: int = 0, elision: int = 0, prev: int = 0, nxt: int = 0) -> bytes:
    """A ``pthread_mutex_t`` as bits/struct_mutex.h lays it out on x86-64."""
    data = struct.pack("<iIiIihhQQ", lock, count, owner, nusers, kind, spins, elision, prev, nxt)
    assert len(data) == 40
    return data


def rwlock(readers: int = 0, writers: int = 0, wrphase: int = 0, writers_futex: int = 0,
           cur_writer: int = 101, shared: int = 0, flags: int = 0, pad: int = 0) -> bytes:
    """A ``pthread_rwlock_t`` as bits/struct_rwlock.h lays it out on x86-64."""
    data = struct.pack("<IIIIIIiib7sQI4x", readers, writers, wrphase, writers_futex, pad, 0,
                       cur_writer, shared, 0, bytes(7), 0, flags)
    assert len(data) == 56
    return data


@pytest.mark.parametrize(("kind", "name"), [(0, "normal"), (1, "recursive"),
                                            (2, "errorcheck"), (3, "adaptive"),
                                            (256, "normal"), (512 | 3, "adaptive")])
def test_mutex_kinds_read(kind: int, name: str) -> None:
    got = read_mutex(mutex(kind=kind, count=3 if name == "recursive" else 0))
    assert (got.kind, got.owner, got.refused) == (f"mutex:{name}", 101, "")


@pytest.mark.parametrize(("kind", "why"), [(16, "robust"), (16 | 1, "robust"),
                                           (32, "priority-inheritance"),
                                           (64, "priority-protect"), (128, "process-shared")])
def test_mutex_kinds_refused(kind: int, why: str) -> None:
    got = read_mutex(mutex(kind=kind))
    assert got.owner == 0 and got.refused.startswith(why)


def test_mutex_fields_that_cannot_be_a_mutex_are_refused() -> None:
    assert read_mutex(mutex(kind=7)).refused.startswith("not a glibc mutex")
    assert read_mutex(mutex(kind=-1)).refused.startswith("not a glibc mutex")
    assert read_mutex(mutex(lock=5)).refused.startswith("not a glibc mutex")
    assert read_mutex(mutex(prev=0x1000)).refused.startswith("not a glibc mutex")
    assert read_mutex(mutex(count=2)).refused.startswith("not a glibc mutex")  # not recursive
    assert read_mutex(mutex(kind=1, count=0)).refused.startswith("not a glibc mutex")
    assert read_mutex(mutex()[:39]).refused == "short read"


def test_free_or_ownerless_mutex_names_no_one() -> None:
    assert read_mutex(mutex(lock=0, owner=0, nusers=0)).owner == 0
    assert read_mutex(mutex(lock=0, owner=0, nusers=0)).refused == "free"
    assert read_mutex(mutex(owner=0)).refused == "no owner recorded"


def test_mutex_retaken_after_a_condition_wait_is_read() -> None:
    # __pthread_mutex_cond_lock takes the lock without counting a user
    assert read_mutex(mutex(nusers=0)).owner == 101


@pytest.mark.parametrize(("flags", "name"), [(0, "prefer-reader"), (1, "prefer-writer"),
                                             (2, "prefer-writer-nonrecursive")])
def test_rwlock_writer_read(flags: int, name: str) -> None:
    got = read_rwlock(rwlock(flags=flags, writers_futex=3))
    assert (got.kind, got.owner) == (f"rwlock:{name}", 101)


def test_rwlock_refusals() -> None:
    assert read_rwlock(rwlock(shared=1)).refused.startswith("process-shared")
    assert read_rwlock(rwlock(flags=9)).refused == "not a glibc rwlock"
    assert read_rwlock(rwlock(pad=1)).refused == "not a glibc rwlock"
    assert read_rwlock(rwlock(cur_writer=0)).refused.startswith("no writer")
    assert read_rwlock(rwlock()[:50]).refused == "short read"


def _memory(base: int, data: bytes) -> dict[int, int]:
    return {base + i: b for i, b in enumerate(data)}


def _reader(mem: dict[int, int]):  # type: ignore[no-untyped-def]
    def read(addr: int, size: int) -> bytes | None:
        return bytes(mem.get(addr + i, 0) for i in range(size))
    return read


def test_parse_futex_from_proc_syscall() -> None:
    call = parse_futex("202 0x5566aa000040 0x80 0x2 0x0 0x0 0x0 0x7ffd1000 0x7f0012")
    assert call == FutexCall(0x5566AA000040, 0x80, 2) and call.waits
    wake = parse_futex("202 0x10 0x81 0x1 0x0 0x0 0x0 0x7ffd1000 0x7f0012")
    assert wake is not None and wake.waits is False
    assert parse_futex("230 0x1 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x7f") is None
    assert parse_futex("running") is None


def test_read_lock_mutex_waiter() -> None:
    read = _reader(_memory(0x1000, mutex()))
    got = read_lock(read, FutexCall(0x1000, 0x80, 2), ["__lll_lock_wait", "worker"], TIDS, 100)
    assert (got.kind, got.base, got.owner) == ("mutex:normal", 0x1000, 101)
    # the owner must be another live thread of the target
    assert read_lock(read, FutexCall(0x1000, 0x80, 2), [], TIDS, 101).refused == \
        "owner is the waiter"
    assert read_lock(read, FutexCall(0x1000, 0x80, 2), [], {100}, 100).refused == \
        "owner is not a thread of the target"


def test_read_lock_refuses_futex_waits_of_other_objects() -> None:
    read = _reader(_memory(0x1000, mutex()))
    # a condition variable's wait (FUTEX_WAIT_BITSET, value not 2) is not a mutex
    got = read_lock(read, FutexCall(0x1000, 0x189, 0), ["pthread_cond_wait"], TIDS, 100)
    assert got.owner == 0 and got.refused.startswith("futex wait of no lock")
    assert read_lock(read, FutexCall(0x1000, 0x81, 1), [], TIDS, 100).refused == \
        "not a futex wait"


@pytest.mark.parametrize(("off", "site"), [(12, "pthread_rwlock_wrlock"),
                                           (8, "pthread_rwlock_wrlock"),
                                           (8, "pthread_rwlock_rdlock"),
                                           (0, "pthread_rwlock_rdlock")])
def test_read_lock_rwlock_waiter_on_each_word(off: int, site: str) -> None:
    for flags in (0, 1, 2):
        data = rwlock(readers=0x10, writers=1, wrphase=3, writers_futex=3, flags=flags)
        read = _reader(_memory(0x2000, data))
        got = read_lock(read, FutexCall(0x2000 + off, 0x189, 3), [site], TIDS, 100)
        assert (got.base, got.owner, got.refused) == (0x2000, 101, ""), (off, flags, got)


def test_read_lock_rwlock_without_a_recognisable_layout_is_refused() -> None:
    read = _reader(_memory(0x2000, bytes(range(1, 57))))
    got = read_lock(read, FutexCall(0x2008, 0x189, 3), ["pthread_rwlock_wrlock"], TIDS, 100)
    assert got.owner == 0 and got.refused == "rwlock layout not recognised"
