"""The holder probe's checks, made while the owner is stopped: the lock must still name it, and
it must not be waiting on that same lock; a stack inside the unlock is not kept."""

from __future__ import annotations

import struct

import pytest

from wallflame.collect import holders
from wallflame.collect.holders import HolderProbe, releasing
from wallflame.collect.locklayout import LockRead

BASE = 0x1000


class FakeMem:
    """The target's memory: one mutex at ``BASE`` owned by ``owner``."""

    def __init__(self, owner: int) -> None:
        self.owner = owner

    def read(self, addr: int, size: int) -> bytes | None:
        if addr != BASE:
            return None
        lock = 2 if self.owner else 0
        data = struct.pack("<iIiIihhQQ", lock, 0, self.owner, 1 if self.owner else 0, 0, 0, 0,
                           0, 0)
        return data[:size]


def _probe(owner: int) -> HolderProbe:
    return HolderProbe(4242, 1, False, FakeMem(owner))  # type: ignore[arg-type]


LOCK = LockRead("mutex:normal", BASE, 7)


def test_owner_still_holding_is_confirmed(monkeypatch: pytest.MonkeyPatch) -> None:
    # the owner is stopped inside another lock's wait: a nested holder, kept
    monkeypatch.setattr(holders, "read_text",
                        lambda path: "202 0x2000 0x80 0x2 0x0 0x0 0x0 0x7ffd 0x7f")
    moved: list[int] = []
    assert _probe(7)._check(LOCK, 7, moved) == "" and moved == []


def test_lock_passed_on_or_released(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(holders, "read_text", lambda path: "running")
    moved: list[int] = []
    assert _probe(8)._check(LOCK, 7, moved) == "moved" and moved == [8]
    moved = []
    assert _probe(0)._check(LOCK, 7, moved) == "released" and moved == [0]


def test_owner_waiting_on_the_same_lock_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(holders, "read_text",
                        lambda path: f"202 {hex(BASE)} 0x80 0x2 0x0 0x0 0x0 0x7ffd 0x7f")
    assert _probe(7)._check(LOCK, 7, []) == "owner waits on the same lock"


def test_check_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(path: str) -> str:
        raise PermissionError(path)

    monkeypatch.setattr(holders, "read_text", boom)
    assert _probe(7)._check(LOCK, 7, []) == "check failed: PermissionError"


def test_a_stack_inside_the_unlock_is_not_a_holding_stack() -> None:
    assert releasing(["__lll_lock_wake", "pthread_mutex_unlock@@GLIBC_2.2.5", "pop"])
    assert releasing(["syscall", "__GI___lll_lock_wake", "__pthread_mutex_unlock_usercnt"])
    assert not releasing(["fnv1a", "QueueStats::record", "MutexQueue::pop"])
    # a nested lock's wait is holding this one: not a release
    assert not releasing(["__lll_lock_wait", "pthread_mutex_lock", "inner", "outer"])
