"""The target's memory and the symbols of its data, read without stopping anything.

``MemReader`` reads through ``/proc/PID/mem`` (the lock a futex waiter waits on, its stack).
``Symbols`` names a global lock by the symbol that contains its address, from the ELF mapped
there (``nm -C``: demangled, so call sites compare equal to the folded stacks' names), and the
functions of return addresses found on a stack (a waiter's call site).  Which thread owns a
lock is read by ``collect.locks.locklayout``.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import json
import os
import shutil
import struct
import subprocess
import threading
import time
from dataclasses import dataclass

from wallflame.cachedir import cache_folder, write_private
from wallflame.collect.safety import tool_env


class MemReader:
    """Reads the target's memory through /proc/PID/mem (ptrace-read access, no stop)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fd: int | None = None
        try:
            self.fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
        except OSError:
            self.fd = None

    def read(self, addr: int, size: int) -> bytes | None:
        if self.fd is None or addr <= 0:
            return None
        try:
            data = os.pread(self.fd, size, addr)
        except (OSError, OverflowError):
            return None
        return data if len(data) == size else None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str
    offset: int
    inode: int
    path: str


def parse_maps(text: str) -> list[Mapping]:
    out = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5:
            continue
        try:
            lo, hi = (int(x, 16) for x in parts[0].split("-", 1))
            out.append(Mapping(lo, hi, parts[1], int(parts[2], 16), int(parts[4]),
                               parts[5] if len(parts) > 5 else ""))
        except ValueError:
            continue
    return out


#: Stack words whose function is kept (``Symbols.return_sites``); past it the cache starts over.
WORDS_KEPT = 1 << 16
#: Whole stacks whose return sites are kept (1 KiB each); past it the cache starts over.
STACKS_KEPT = 4096
#: The shortest and the longest wait between two reads of the maps for a code lookup that
#: found no code (``Symbols.function``), in seconds.
REREAD_FIRST_S = 0.05
REREAD_LAST_S = 30.0


class Symbols:
    """Address -> ``symbol`` for global data of the ELF files mapped in the target."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.maps: list[Mapping] = []
        self.starts: list[int] = []
        self.tables: dict[str, tuple[list[int], list[tuple[int, str]]]] = {}
        self.functions: dict[str, tuple[list[int], list[tuple[int, str]]]] = {}
        # per mapped path, its load bias (None: no mapping at offset 0), until the maps are
        # read again: a server's thousands of mappings would make each lookup a scan of them
        # all and a read of the file's ELF header
        self._bias: dict[str, int | None] = {}
        self._dyn: dict[str, bool] = {}
        # stack word -> ``function(word)`` until the maps are read again: a waiter's return
        # addresses are the same round after round (128 words a waiter, each looked up, would
        # be most of the owner sampler's round)
        self._words: dict[int, str] = {}
        # stack contents -> their return sites, until the maps are read again
        self._stacks: dict[tuple[bytes, int], tuple[str, ...]] = {}
        self.nm = shutil.which("nm")
        # a code lookup that found no code reads the maps again, at most this often, the
        # wait doubling each time that read named nothing new (a stack holds plenty of words
        # that are no address): maps read while the dynamic loader was still mapping a
        # library (before its code was mapped executable) had kept every return address into
        # it unnamed, and a lock waited on from there unidentified, for the whole collect
        self._reread_s = REREAD_FIRST_S
        self._read_at = 0.0
        self._exec_paths: set[str] = set()
        self.refresh()

    def refresh(self) -> None:
        try:
            with open(f"/proc/{self.pid}/maps", encoding="utf-8", errors="replace") as f:
                self.maps = parse_maps(f.read())
        except OSError:
            self.maps = []
        self.starts = [m.start for m in self.maps]
        self._exec_paths = {m.path for m in self.maps if "x" in m.perms}
        self._read_at = time.monotonic()
        self._bias = {}
        self._words.clear()
        self._stacks.clear()

    def _find(self, addr: int) -> int:
        i = bisect.bisect_right(self.starts, addr) - 1
        return i if i >= 0 and addr < self.maps[i].end else -1

    def _elf_for(self, addr: int) -> tuple[str, int] | None:
        """(path, load bias) of the ELF whose image covers ``addr`` (its .bss included)."""
        i = self._find(addr)
        if i < 0:
            self.refresh()
            i = self._find(addr)
            if i < 0:
                return None
        m = self.maps[i]
        if not m.path.startswith("/"):
            # .bss continues in an anonymous mapping right after the file's last mapping.
            if i == 0 or self.maps[i - 1].end != m.start or not self.maps[i - 1].path \
                    .startswith("/"):
                return None
            m = self.maps[i - 1]
        path = m.path
        if path in self._bias:
            bias = self._bias[path]
        else:
            first = min((x for x in self.maps if x.path == path and x.offset == 0),
                        key=lambda x: x.start, default=None)
            bias = self._bias[path] = None if first is None else \
                first.start if self._is_dyn(path) else 0
        return None if bias is None else (path, bias)

    def _is_dyn(self, path: str) -> bool:
        dyn = self._dyn.get(path)
        if dyn is None:
            try:
                with open(self._file(path), "rb") as f:
                    head = f.read(18)
            except OSError:
                return True  # not kept: the file may be readable at the next look
            dyn = self._dyn[path] = len(head) == 18 and head[:4] == b"\x7fELF" and \
                head[16] == 3
        return dyn

    def _file(self, path: str) -> str:
        inside = f"/proc/{self.pid}/root{path}"
        return inside if os.path.exists(inside) else path

    def _table(self, path: str, code: bool = False) -> tuple[list[int], list[tuple[int, str]]]:
        cache = self.functions if code else self.tables
        table = cache.get(path)
        if table is not None:
            return table
        rows: list[tuple[int, int, str]] = []
        if self.nm is not None:
            for extra in ([], ["-D"]):
                rows = _nm(self.nm, self._file(path), extra, _CODE if code else _DATA)
                if rows:
                    break
        rows.sort()
        table = ([r[0] for r in rows], [(r[1], r[2]) for r in rows])
        cache[path] = table
        return table

    def _maybe_stale(self, i: int) -> bool:
        """Whether map ``i`` (-1: none) holds no named code perhaps only because the maps
        were read too early: no mapping there, or a file none of whose mappings is
        executable yet (a library being loaded)."""
        return i < 0 or ("x" not in self.maps[i].perms and self.maps[i].path.startswith("/")
                         and self.maps[i].path not in self._exec_paths)

    def _code(self, i: int) -> bool:
        return i >= 0 and "x" in self.maps[i].perms and self.maps[i].path.startswith("/")

    def function(self, addr: int) -> str:
        """The function whose (sized) symbol contains code address ``addr``, or ``""``."""
        i = self._find(addr)
        if self._maybe_stale(i) and time.monotonic() - self._read_at >= self._reread_s:
            self.refresh()
            i = self._find(addr)
            self._reread_s = REREAD_FIRST_S if self._code(i) else \
                min(self._reread_s * 2, REREAD_LAST_S)
        if not self._code(i):
            return ""
        found = self._elf_for(addr)
        if found is None:
            return ""
        path, bias = found
        values, info = self._table(path, code=True)
        vaddr = addr - bias
        j = bisect.bisect_right(values, vaddr) - 1
        if j < 0 or vaddr - values[j] >= info[j][0]:
            return ""
        return info[j][1]

    def return_sites(self, mem: MemReader, sp: int, words: int = 128, limit: int = 8) -> list[
            str]:
        """Functions of the return addresses found on the stack above ``sp`` (a stack scan:
        each 8-byte word that points into a function's code), innermost first.  This tells
        which call site a futex waiter is blocked at without stopping it."""
        data = mem.read(sp, words * 8) if sp else None
        if data is None:
            return []
        # a thread blocked since the last round has the same stack: the same answer
        done = self._stacks.get((data, limit))
        if done is not None:
            return list(done)
        values = struct.unpack(f"<{len(data) // 8}Q", data)
        known = self._words
        get = known.get
        # every word's name, taken aside before any lookup: a lookup that reads the maps
        # again empties ``known``
        here = {v: get(v) for v in set(values) if v >= 4096}
        for v in [v for v, name in here.items() if name is None]:
            if len(known) >= WORDS_KEPT:
                known.clear()
            here[v] = known[v] = self.function(v)
        # innermost first, each function once
        out = list(dict.fromkeys(n for v in values if (n := here.get(v))))[:limit]
        if len(self._stacks) >= STACKS_KEPT:
            self._stacks.clear()
        self._stacks[(data, limit)] = tuple(out)
        return out

    def name(self, addr: int) -> str:
        """``0xADDR <symbol>`` (``<symbol+0xN>`` inside it) or ``0xADDR``."""
        found = self._elf_for(addr)
        if found is None:
            return hex(addr)
        path, bias = found
        values, info = self._table(path)
        vaddr = addr - bias
        i = bisect.bisect_right(values, vaddr) - 1
        if i < 0:
            return hex(addr)
        size, sym = info[i]
        off = vaddr - values[i]
        if off >= max(size, 1):
            return hex(addr)
        return f"{hex(addr)} <{sym}{f'+{hex(off)}' if off else ''}>"


_DATA = "BbDdRrVvGgSs"
_CODE = "TtWwi"


#: ``nm``'s symbols of each file read, by the file's identity (device, inode, size, change
#: time), for every ``Symbols`` of the collect: the owner sampler and the snapshots' /proc
#: records each read the same libraries, for code and for data, and ``nm`` runs once a file.
_NM_ROWS: dict[tuple[tuple[int, int, int, int], str], list[tuple[int, int, str, str]]] = {}
_NM_LOCK = threading.Lock()


def _nm(nm: str, path: str, extra: list[str], types: str) -> list[tuple[int, int, str]]:
    """The defined symbols of ``path`` whose type is one of ``types``: (value, size, name)."""
    try:
        st = os.stat(path)
        key: tuple[tuple[int, int, int, int], str] | None = (
            (st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns), " ".join(extra))
    except OSError:
        key = None
    with _NM_LOCK:
        rows = _NM_ROWS.get(key) if key is not None else None
        if rows is None and key is not None:
            rows = _kept_rows(key)
        if rows is None:
            got = _nm_rows(nm, path, extra)
            rows = got or []
            if key is not None and got is not None:
                _keep_rows(key, rows)
        if key is not None:
            _NM_ROWS[key] = rows
    return [(v, size, name) for v, size, kind, name in rows if kind in types]


#: Bumped when what ``_nm_rows`` reads from ``nm`` changes: a kept table of another version
#: is not read.
_KEPT_VERSION = 1
#: Tables kept at most; the least recently written go first.
_KEPT_MOST = 64

_Key = tuple[tuple[int, int, int, int], str]
_Row = tuple[int, int, str, str]


def _kept_path(key: _Key) -> str | None:
    folder = cache_folder("symbols")
    if folder is None:
        return None
    digest = hashlib.sha256(repr((_KEPT_VERSION, key)).encode()).hexdigest()[:32]
    return os.path.join(folder, f"{digest}.json")


def _kept_rows(key: _Key) -> list[_Row] | None:
    """``nm``'s rows for this file, kept by an earlier collect (``_keep_rows``), or ``None``.
    The first reading of a server's threads runs ``nm`` on each module its futex waiters'
    stacks point into, twice (without ``-D``, then with it), in the second before the window
    opens, where its CPU is taken from the target; with the rows kept, most of that cost is
    gone (measured by benchmarks/lab/start_dips.py).  A file changed since (another inode, size or
    change time) has another key."""
    path = _kept_path(key)
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if doc.get("key") != repr(key):
            return None
        return [(int(v), int(size), str(kind), str(name)) for v, size, kind, name in doc["rows"]]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _keep_rows(key: _Key, rows: list[_Row]) -> None:
    path = _kept_path(key)
    if path is None:
        return
    write_private(path, json.dumps({"key": repr(key), "rows": rows},
                                   separators=(",", ":")).encode())
    folder = os.path.dirname(path)
    with contextlib.suppress(OSError):
        kept = [e for e in os.scandir(folder) if e.name.endswith(".json")]
        if len(kept) > _KEPT_MOST:
            kept.sort(key=lambda e: e.stat().st_mtime)
            for e in kept[:len(kept) - _KEPT_MOST]:
                os.unlink(e.path)


def _nm_rows(nm: str, path: str, extra: list[str]) -> list[tuple[int, int, str, str]] | None:
    """``nm``'s defined symbols of ``path``: (value, size, type, demangled name); ``None``
    when ``nm`` could not be run or failed (nothing is kept then)."""
    try:
        r = subprocess.run([nm, "--defined-only", "-S", "-C", *extra, path], capture_output=True,
                           timeout=30, env=tool_env(), check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None
    rows = []
    for raw in r.stdout.decode("utf-8", "replace").splitlines():
        parts = raw.split(None, 3)
        if len(parts) != 4 or len(parts[2]) != 1:
            continue
        try:
            rows.append((int(parts[0], 16), int(parts[1], 16), parts[2], parts[3]))
        except ValueError:
            continue
    return rows
