"""The holder probe's checks, on what was read while the owner was stopped: the lock must still
name it, and it must not be waiting on that same lock; a stack inside the unlock is not kept."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from wallflame.collect.libdw import StopRead
from wallflame.collect.locks.holders import judge, releasing
from wallflame.collect.locks.locklayout import LockRead

BASE = 0x1000


def _mutex(owner: int) -> bytes:
    """A normal ``pthread_mutex_t`` held by ``owner`` (free when 0)."""
    return struct.pack("<iIiIihhQQ", 2 if owner else 0, 0, owner, 1 if owner else 0, 0, 0, 0,
                       0, 0)


def _read(owner: int, syscall: str = "running", mem: bytes | None = None) -> StopRead:
    """What the probe's reads got while the owner was stopped."""
    data = _mutex(owner) if mem is None else mem
    return StopRead(data, syscall.encode(), "", "")


LOCK = LockRead("mutex:normal", BASE, 7)


def test_owner_still_holding_is_confirmed() -> None:
    # the owner is stopped inside another lock's wait: a nested holder, kept
    moved: list[int] = []
    read = _read(7, "202 0x2000 0x80 0x2 0x0 0x0 0x0 0x7ffd 0x7f")
    assert judge(LOCK, 7, read, moved) == "" and moved == []


def test_lock_passed_on_or_released() -> None:
    moved: list[int] = []
    assert judge(LOCK, 7, _read(8), moved) == "moved" and moved == [8]
    moved = []
    assert judge(LOCK, 7, _read(0), moved) == "released" and moved == [0]


def test_owner_waiting_on_the_same_lock_is_refused() -> None:
    read = _read(7, f"202 {hex(BASE)} 0x80 0x2 0x0 0x0 0x0 0x7ffd 0x7f")
    assert judge(LOCK, 7, read, []) == "owner waits on the same lock"
    # a wait on another word of the same rwlock is the same lock too
    rw = LockRead("rwlock:prefer-reader", BASE, 7)
    data = struct.pack("<6IiiB7xQI4x", 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0)
    assert len(data) == 56
    read = StopRead(data, f"202 {hex(BASE + 12)} 0x80 0x2".encode(), "", "")
    assert judge(rw, 7, read, []) == "owner waits on the same lock"
    read = StopRead(data, f"202 {hex(BASE + 56)} 0x80 0x2".encode(), "", "")
    assert judge(rw, 7, read, []) == ""


def test_a_lock_not_read_again_is_not_confirmed() -> None:
    assert judge(LOCK, 7, None, []) == "not checked"
    assert judge(LOCK, 7, StopRead(None, b"running", "EIO", ""), []) == "not checked"


@given(st.binary(max_size=80), st.binary(max_size=300))
def test_judging_never_raises(mem: bytes, syscall: bytes) -> None:
    for lock in (LOCK, LockRead("rwlock:prefer-writer", BASE, 7)):
        out = judge(lock, 7, StopRead(mem, syscall, "", ""), [])
        assert out in ("", "moved", "released", "owner waits on the same lock") or \
            out.startswith("check failed"), out


def test_a_stack_inside_the_unlock_is_not_a_holding_stack() -> None:
    assert releasing(["__lll_lock_wake", "pthread_mutex_unlock@@GLIBC_2.2.5", "pop"])
    assert releasing(["syscall", "__GI___lll_lock_wake", "__pthread_mutex_unlock_usercnt"])
    assert not releasing(["fnv1a", "QueueStats::record", "MutexQueue::pop"])
    # a nested lock's wait is holding this one: not a release
    assert not releasing(["__lll_lock_wait", "pthread_mutex_lock", "inner", "outer"])
