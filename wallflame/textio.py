"""Reading captures as text: bytes in, deterministic lines out.

CRLF reads as LF, invalid UTF-8 decodes to U+FFFD (as inferno does), and a file that cannot
be opened is a clean ``InputError``.  Lines are streamed: memory stays bounded.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO, cast

from wallflame.errors import InputError

CHUNK = 1 << 20


@contextmanager
def open_binary(path: str) -> Iterator[BinaryIO]:
    if path == "-":
        yield sys.stdin.buffer
        return
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory", "give a capture file") from None
    except FileNotFoundError:
        raise InputError(f"{path}: no such file", "check the path") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied", "run as a user who can read it") from None
    except OSError as e:
        raise InputError(f"{path}: cannot open: {e.strerror}") from None
    try:
        yield f
    finally:
        f.close()


def decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def iter_lines(path: str) -> Iterator[tuple[int, str]]:
    """``(line_number, text)`` for every line, 1-based, without the line ending.

    Read in blocks of whole lines, each decoded at once: a newline never sits inside a UTF-8
    sequence, so this decodes exactly as line by line would, with less work per line."""
    with open_binary(path) as f:
        no = 0
        for block in line_blocks(f):
            for line in block.decode("utf-8", "replace").split("\n"):
                no += 1
                yield no, line[:-1] if line.endswith("\r") else line


def json_objects(lines: Iterable[str], key: str) -> Iterator[dict[str, Any]]:
    """The JSON objects written one a line among ``lines`` (a program's output mixed with its
    other text) whose text holds ``"key"`` (the caller checks the key's value), in the order
    of the lines; other lines are passed over."""
    for line in lines:
        line = line.strip()
        if not (line.startswith("{") and f'"{key}"' in line):
            continue
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict):
            yield d


def line_blocks(f: BinaryIO) -> Iterator[bytes]:
    """The file in blocks of about ``CHUNK`` bytes that each end at a line end, the newline
    itself left out; the last block holds whatever follows the last newline (if anything)."""
    pending: list[bytes] = []
    while True:
        data = f.read(CHUNK)
        if not data:
            break
        cut = data.rfind(b"\n")
        if cut < 0:
            pending.append(data)  # one long line (a 10,000-frame stack) spans blocks
            continue
        pending.append(data[:cut])
        yield b"".join(pending)
        pending = [data[cut + 1 :]]
    rest = b"".join(pending)
    if rest:
        yield rest


def line_buffers(f: BinaryIO) -> Iterator[tuple[bytearray, int]]:
    """What ``line_blocks`` gives, as ``(buffer, end)`` with the block in ``buffer[:end]``,
    read into one buffer that is reused (an item is valid until the next one is asked for):
    no block is copied, and the memory is touched once, not again for every block."""
    buf = bytearray(CHUNK)
    have = 0  # bytes held: the unfinished line carried over from the previous block
    while True:
        if have == len(buf):  # one line longer than the buffer
            buf.extend(bytes(len(buf)))
        with memoryview(buf) as view, view[have:] as free:
            n = cast("io.BufferedIOBase", f).readinto(free)  # open_binary's streams have it
        if not n:
            break
        have += n
        cut = buf.rfind(b"\n", 0, have)
        if cut < 0:
            continue
        yield buf, cut
        rest = have - cut - 1
        buf[:rest] = buf[cut + 1 : have]
        have = rest
    if have:
        yield buf, have


def head(path: str, limit: int = 64 * 1024, max_line: int = 64 * 1024 * 1024) -> str:
    """The first bytes of a file as text, for format detection (stdin cannot be sniffed).

    At least one whole line is read (up to ``max_line`` bytes), so a folded file whose first
    stack is 10,000 frames deep is still recognised."""
    with open_binary(path) as f:
        data = f.read(limit)
        while b"\n" not in data and len(data) < max_line:
            more = f.read(limit)
            if not more:
                break
            data += more
            limit *= 2
        return decode(data).replace("\r\n", "\n")
