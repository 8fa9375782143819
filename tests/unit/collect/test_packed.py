"""perf's chunks kept compressed once read (``collect.packed``): the round trip gives back
the file perf wrote byte for byte, a chunk is never listed twice or dropped whatever a crash
left behind, a chunk perf could not read is left as it was, and a compressed chunk is read
under perf's own name (what ``perf script`` is asked for depends on it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wallflame.collect import packed
from wallflame.collect.perf import data_chunks, script_command
from wallflame.collect.stream import Folded


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200_000))
def test_round_trip_is_byte_for_byte(tmp_path_factory: pytest.TempPathFactory,
                                     data: bytes) -> None:
    raw = tmp_path_factory.mktemp("raw")
    chunk = raw / "sched.data.2026112702215655"
    chunk.write_bytes(data)
    if not data:
        return
    cost = packed.PackCost()
    out = packed.pack(chunk, cost)
    assert out.name == chunk.name + ".zst" and not chunk.exists()
    assert cost.bytes_in == len(data) and cost.bytes_out == out.stat().st_size
    assert packed.size_unpacked(out) == len(data)
    with packed.unpacked(out) as readable:
        assert readable.name == chunk.name and readable.parent == raw
        assert readable.read_bytes() == data
    assert sorted(p.name for p in raw.iterdir()) == [out.name]  # nothing left behind


def test_a_real_chunk_shrinks(tmp_path: Path) -> None:
    """Switch records repeat their layout: 96 bytes a switch compressed several times over
    (6.7x on MariaDB's chunks, benchmarks/lab/RECORD.md)."""
    rec = bytearray()
    for i in range(20_000):
        rec += (0x0E).to_bytes(4, "little") + (0x2000).to_bytes(2, "little") + \
            (48).to_bytes(2, "little") + (1000 + i % 50).to_bytes(4, "little") * 2 + \
            (10**12 + i * 13_711).to_bytes(8, "little") + (i % 2).to_bytes(8, "little") + \
            bytes(16)
    chunk = tmp_path / "sched.data.1"
    chunk.write_bytes(bytes(rec))
    out = packed.pack(chunk)
    assert out.stat().st_size * 3 < len(rec)


def test_listing_prefers_the_complete_compressed_copy(tmp_path: Path) -> None:
    for name in ("sched.data.2026112306400391.zst", "sched.data.2026112306400391",  # both
                 "sched.data.2026112306400252", "sched.data.zst", "wake.data.1.zst",
                 ".unpacked-sched.data.2026112306400500.part"):
        (tmp_path / name).write_bytes(b"x")
    assert [p.name for p in data_chunks(tmp_path, "sched")] == [
        "sched.data.2026112306400252", "sched.data.2026112306400391.zst", "sched.data.zst"]


def test_a_compressed_wake_chunk_is_read_as_one(tmp_path: Path) -> None:
    (tmp_path / "wake.data.7").write_bytes(b"perf")
    plain = script_command(tmp_path / "wake.data.7", False)
    with packed.unpacked(packed.pack(tmp_path / "wake.data.7")) as readable:
        assert script_command(readable, False) == plain


def test_a_disk_that_refuses_keeps_the_chunk(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    chunk = tmp_path / "sched.data.1"
    chunk.write_bytes(b"perf data" * 1000)

    def full(*_a: Any, **_k: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    assert packed.pack(chunk) == chunk
    assert chunk.read_bytes() == b"perf data" * 1000
    assert [p.name for p in tmp_path.iterdir()] == [chunk.name]


class _Folder:
    def read_switches(self, chunk: Path) -> Any:
        return None

    def feed(self, stem: str, stream: IO[bytes], switches: Any = None) -> None:
        stream.read()

    def expect_wakes(self) -> None:
        pass

    def set_window(self, start: int, end: int | None = None, at_start: Any = None) -> None:
        pass


def test_only_chunks_perf_read_are_compressed(tmp_path: Path) -> None:
    """perf script fails on these: they stay as perf wrote them, counted as bad."""
    (tmp_path / "sched.data.1").write_bytes(b"not perf data")
    folded = Folded(tmp_path, _Folder())
    folded.process("sched", tmp_path / "sched.data.1")
    folded.close()
    assert (tmp_path / "sched.data.1").exists() and folded.bad
    assert folded.packed.chunks == 0


@pytest.mark.parametrize("damage", ["cut", "garbage", "empty frame"])
def test_a_damaged_compressed_chunk_is_counted_not_fatal(tmp_path: Path, damage: str) -> None:
    chunk = tmp_path / "sched.data.1"
    chunk.write_bytes(os.urandom(50_000))
    out = packed.pack(chunk)
    data = out.read_bytes()
    out.write_bytes({"cut": data[: len(data) // 2], "garbage": b"\x28\xb5\x2f\xfd" + b"x" * 99,
                     "empty frame": data[:4]}[damage])
    folded = Folded(tmp_path, _Folder())
    folded.process("sched", out)
    folded.close()
    assert folded.bad == [(out.name, -2)] and folded.done["sched"] == ["sched.data.1"]
    assert out.exists() and not chunk.exists()  # kept as it is, nothing left unpacked
    assert sorted(p.name for p in tmp_path.iterdir() if "data" in p.name) == [out.name]
