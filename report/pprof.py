"""pprof's ``profile.proto`` (``perftools.profiles.Profile``), gzipped, encoded by hand.

Two sample types, ``on_cpu`` and ``off_cpu`` (nanoseconds, or ``count`` for folded input of
unknown unit); every sample carries the thread as labels (``thread`` and ``tid``), off-CPU
samples also ``wait`` and ``lock``.  Locations are listed leaf first, as pprof expects; an
off-CPU stack's leaf is its wait pseudo-frame.  One function and one location per name.
The encoding needs only varints and length-delimited fields, so no protobuf library is used.
"""

from __future__ import annotations

import gzip
from typing import IO

from wallflame.output import require_binary, write_bytes
from wallflame.profile import OFF, UNIT_NS, Profile
from wallflame.report.tree import visible, wait_label
from wallflame.waitclasses import FALLBACK


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64 two's complement, as protobuf encodes negative numbers
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _int(field: int, n: int) -> bytes:
    return _key(field, 0) + _varint(n) if n else b""


def _bytes(field: int, data: bytes) -> bytes:
    return _key(field, 2) + _varint(len(data)) + data


def _packed(field: int, values: list[int]) -> bytes:
    return _bytes(field, b"".join(map(_varint, values))) if values else b""


class _Strings:
    def __init__(self) -> None:
        self.table: list[str] = [""]
        self.index: dict[str, int] = {"": 0}

    def __call__(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.table)
            self.table.append(s)
        return i


def encode(profile: Profile) -> bytes:
    """The uncompressed ``Profile`` message."""
    strings = _Strings()
    unit = "nanoseconds" if profile.meta.unit == UNIT_NS else "count"
    out = bytearray()
    for kind in ("on_cpu", "off_cpu"):
        out += _bytes(1, _int(1, strings(kind)) + _int(2, strings(unit)))
    functions: dict[str, int] = {}

    def location(name: str) -> int:
        fid = functions.get(name)
        if fid is None:
            fid = functions[name] = len(functions) + 1
        return fid  # location id == function id: one location per function

    for key, w in sorted(profile.stacks.items()):
        if w <= 0:
            continue
        frames = list(key.frames)
        if key.state == OFF:
            frames.append(wait_label(key))
        locs = [location(f) for f in reversed(frames)]
        thread = profile.meta.threads.get(key.tid, key.thread) if key.tid else key.thread
        labels = [_int(1, strings("thread")) + _int(2, strings(visible(thread or "?")))]
        if key.tid:
            labels.append(_int(1, strings("tid")) + _int(3, key.tid))
        if key.state == OFF:
            labels.append(_int(1, strings("wait")) + _int(2, strings(key.wait or FALLBACK)))
            if key.lock:
                labels.append(_int(1, strings("lock")) + _int(2, strings(visible(key.lock))))
        values = [0, w] if key.state == OFF else [w, 0]
        body = _packed(1, locs) + _packed(2, values) + b"".join(_bytes(3, lb) for lb in labels)
        out += _bytes(2, body)
    for fid in functions.values():
        line = _bytes(4, _int(1, fid))
        out += _bytes(4, _int(1, fid) + line)
    for name, fid in functions.items():
        s = strings(visible(name))
        out += _bytes(5, _int(1, fid) + _int(2, s) + _int(3, s))
    if profile.meta.window_ns:
        out += _int(10, profile.meta.window_ns)
    hz = profile.meta.rates.get("perf_hz")
    out += _bytes(11, _int(1, strings("cpu")) + _int(2, strings(unit)))
    if hz and unit == "nanoseconds":
        out += _int(12, round(1e9 / hz))
    out += _int(14, strings("on_cpu"))  # pprof shows on-CPU first; -sample_index=off_cpu
    table = b"".join(_bytes(6, s.encode("utf-8", "replace")) for s in strings.table)
    return bytes(out) + table


def pprof_bytes(profile: Profile) -> bytes:
    return gzip.compress(encode(profile), mtime=0)


def write(profile: Profile, out: IO[str], title: str | None) -> None:
    """The ``pprof`` format's writer (``report/writers.py``): gzipped protobuf."""
    require_binary(out, "pprof output", "pass -o FILE.pb.gz")
    write_bytes(out, pprof_bytes(profile))
