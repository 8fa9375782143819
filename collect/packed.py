"""perf's chunks kept compressed once they have been read: ``STEM.data.<timestamp>.zst``.

A busy server's scheduler chunks are most of a run directory: every task's switch records on
every CPU and the target's wake-ups, about 15 MB a second at 100,000 switches a second.  None
of it is dropped: each chunk, once folded, is compressed with zstd (level 3, streamed from file
to file, so no chunk is held in memory) and the original removed only once the compressed copy
is complete.  zstd at level 3 packs the switch records about 7x, the wake-ups and the on-CPU
samples about 10x, at about 400 MB/s of one CPU, where zlib at level 1 takes three times the
CPU for a smaller ratio; perf's own ``-z`` cannot be read back chunk by chunk.

Reading a run again (``wallflame finish``) unpacks one chunk at a time next to it, as a hidden
file it removes once read.  By hand: ``zstd -d raw/sched.data.<timestamp>.zst`` gives back the
file perf wrote, byte for byte.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import zstandard

#: The compressed chunk's suffix.
SUFFIX = ".zst"
#: zstd's level: 3 (its default) compressed the chunks 6.7-11x at about 400 MB/s; level 1 was
#: 10% smaller ratio at 1.5x the speed, level 6 5% better ratio at a quarter of the speed.
LEVEL = 3
_UNPACKED = ".unpacked-"
#: What unpacking a damaged chunk raises (``unpacked``): the chunk is then unreadable, as one
#: perf script fails on.
UNREADABLE = (zstandard.ZstdError, OSError)


def chunk_name(path: Path) -> str:
    """The name perf gave the chunk (without ``SUFFIX``)."""
    name = path.name
    return name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name


@dataclass
class PackCost:
    bytes_in: int = 0
    bytes_out: int = 0
    cpu_s: float = 0.0
    chunks: int = 0

    def to_json(self) -> dict[str, float | int]:
        return {"chunks": self.chunks, "mb_in": round(self.bytes_in / 1e6, 3),
                "mb_out": round(self.bytes_out / 1e6, 3), "cpu_s": round(self.cpu_s, 3)}


def pack(path: Path, cost: PackCost | None = None) -> Path:
    """Compress ``path`` into ``path.zst`` and remove ``path``; returns the new path (or
    ``path`` itself, left as it was, if it could not be written: the disk is full, say)."""
    if path.name.endswith(SUFFIX):
        return path
    out = path.with_name(path.name + SUFFIX)
    part = path.with_name(_UNPACKED + path.name + SUFFIX + ".part")
    c0 = time.thread_time()
    try:
        with open(path, "rb") as src, open(part, "wb") as dst:
            read, wrote = zstandard.ZstdCompressor(level=LEVEL).copy_stream(
                src, dst, size=os.fstat(src.fileno()).st_size)
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(part, out)
    except OSError:
        with contextlib.suppress(OSError):
            part.unlink()
        return path
    with contextlib.suppress(OSError):
        os.chmod(out, os.stat(path).st_mode & 0o777)
    path.unlink()
    if cost is not None:
        cost.bytes_in += read
        cost.bytes_out += wrote
        cost.cpu_s += time.thread_time() - c0
        cost.chunks += 1
    return out


@contextlib.contextmanager
def unpacked(path: Path) -> Iterator[Path]:
    """The chunk as perf wrote it, for tools that read a file: ``path`` itself, or for a
    compressed chunk a copy unpacked next to it under perf's name (what is read from a chunk
    depends on its name and directory), removed afterwards.  A copy left behind by a crash is
    never read for the compressed one (``keep_packed``)."""
    if not path.name.endswith(SUFFIX):
        yield path
        return
    out = path.with_name(chunk_name(path))
    part = path.with_name(_UNPACKED + chunk_name(path) + ".part")
    try:
        with open(path, "rb") as src, open(part, "wb") as dst:
            _, wrote = zstandard.ZstdDecompressor().copy_stream(src, dst)
        if wrote != size_unpacked(path):  # a stream cut short ends without an error
            raise zstandard.ZstdError(f"{path.name}: cut short ({wrote} bytes unpacked)")
        os.replace(part, out)
        yield out
    finally:
        for p in (part, out):
            with contextlib.suppress(OSError):
                p.unlink()


def keep_packed(paths: list[Path]) -> list[Path]:
    """``paths`` with one file per chunk: where a chunk is there both as perf wrote it and
    compressed (a crash between compressing and removing it, or while it was unpacked to be
    read), the compressed one, which is complete."""
    packed_names = {chunk_name(p) for p in paths if p.name.endswith(SUFFIX)}
    return [p for p in paths if p.name.endswith(SUFFIX) or p.name not in packed_names]


def size_unpacked(path: Path) -> int:
    """The chunk's size as perf wrote it (from the zstd frame header, which records it; -1
    for a damaged header)."""
    if not path.name.endswith(SUFFIX):
        return path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(18)
    try:
        size = zstandard.frame_content_size(head)
    except zstandard.ZstdError:
        return -1
    return size if size >= 0 else -1
