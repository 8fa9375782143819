"""Does an executable carry DWARF debug information, in itself or in a separate debug file?

perf resolves inlined frames (``perf script``'s default) by asking ``addr2line`` about every
distinct address of every call chain; where the object has no debug information each answer
is empty and the question still costs (Debian's perf 6.1 has no libbfd and runs addr2line as a
child). ``wallflame.collect.run`` turns inlined frames off for an attached target none of whose
executables has debug information (``has_debug_info``), where they could not be shown anyway.

The separate debug file is looked for where gdb and perf look: by build ID under
``/usr/lib/debug/.build-id/``, and by ``.gnu_debuglink`` beside the file, in its ``.debug/``
directory and under ``/usr/lib/debug/`` (the path of its directory appended).
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass
from typing import IO

#: Where separate debug files live (``debug-file-directory`` of gdb, perf's default).
DEBUG_DIR = "/usr/lib/debug"
_SHT_NOBITS = 8
_SHT_NOTE = 7
_NT_GNU_BUILD_ID = 3
#: Bounds on what is read: a section-name table or a note larger than this is not believed,
#: nor a section header table (entries of at most ``_MAX_ENTRY`` bytes) larger than
#: ``_MAX_HEADERS``.
_MAX_TABLE = 1 << 20
_MAX_SECTIONS = 1 << 16
_MAX_ENTRY = 256
_MAX_HEADERS = 16 << 20


@dataclass
class ElfDebug:
    """What an ELF file says about its debug information."""

    debug_info: bool = False  # a .debug_info (or .zdebug_info) section with data
    build_id: str = ""  # hex
    debuglink: str = ""  # the file name in .gnu_debuglink


def read_elf(f: IO[bytes]) -> ElfDebug | None:
    """The debug facts of the ELF file ``f``; ``None`` when it is not one (or is cut short)."""
    try:
        return _read_elf(f)
    except struct.error:
        return None


def _read_elf(f: IO[bytes]) -> ElfDebug | None:
    ident = f.read(64)
    if len(ident) < 52 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) \
            or ident[5] not in (1, 2):
        return None
    wide = ident[4] == 2
    if wide and len(ident) < 64:
        return None
    end = "<" if ident[5] == 1 else ">"
    if wide:
        shoff, = struct.unpack_from(end + "Q", ident, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", ident, 0x3A)
        fmt, need = end + "IIQQQQ", 40
    else:
        shoff, = struct.unpack_from(end + "I", ident, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", ident, 0x2E)
        fmt, need = end + "IIIIII", 24
    if not shoff or not need <= shentsize <= _MAX_ENTRY or not 0 < shnum < _MAX_SECTIONS \
            or shstrndx >= shnum or shentsize * shnum > _MAX_HEADERS:
        return None
    f.seek(shoff)
    table = f.read(shentsize * shnum)
    if len(table) < shentsize * shnum:
        return None
    # (name, type, offset, size) of each section
    sections = []
    for i in range(shnum):
        name, kind, _flags, _addr, offset, size = struct.unpack_from(fmt, table, i * shentsize)
        sections.append((name, kind, offset, size))
    _, _, str_off, str_size = sections[shstrndx]
    names = _read_at(f, str_off, str_size)
    if names is None:
        return None
    out = ElfDebug()
    for name_off, kind, offset, size in sections:
        name = names[name_off:names.find(b"\0", name_off)] if name_off < len(names) else b""
        if name in (b".debug_info", b".zdebug_info") and kind != _SHT_NOBITS and size > 0:
            out.debug_info = True
        elif name == b".gnu_debuglink" and kind != _SHT_NOBITS:
            data = _read_at(f, offset, size)
            if data:
                link = data.split(b"\0", 1)[0]
                if link and b"/" not in link:
                    out.debuglink = link.decode("utf-8", "surrogateescape")
        elif kind == _SHT_NOTE and name == b".note.gnu.build-id":
            data = _read_at(f, offset, size)
            if data and len(data) >= 12:
                namesz, descsz, note = struct.unpack_from(end + "III", data, 0)
                start = 12 + (namesz + 3) // 4 * 4
                if note == _NT_GNU_BUILD_ID and 0 < descsz <= 64 \
                        and start + descsz <= len(data):
                    out.build_id = data[start:start + descsz].hex()
    return out


def _read_at(f: IO[bytes], offset: int, size: int) -> bytes | None:
    if size > _MAX_TABLE or offset < 0:
        return None
    f.seek(offset)
    data = f.read(size)
    return data if len(data) == size else None


def debug_file_candidates(path: str, info: ElfDebug, root: str = DEBUG_DIR) -> list[str]:
    """Where a separate debug file for the ELF file at ``path`` would be, in the order gdb
    looks."""
    out = []
    if len(info.build_id) > 2:
        out.append(os.path.join(root, ".build-id", info.build_id[:2],
                                info.build_id[2:] + ".debug"))
    if info.debuglink:
        where = os.path.dirname(os.path.realpath(path))
        out += [os.path.join(where, info.debuglink),
                os.path.join(where, ".debug", info.debuglink),
                os.path.join(root, where.lstrip("/"), info.debuglink)]
    return out


def _read_file(path: str) -> ElfDebug | None:
    """``read_elf`` of a regular file (a FIFO or device named like a debug file, in a
    directory the target's owner may write, is neither waited on nor read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb") as f:
            fd = -1
            return read_elf(f)
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)


def has_debug_info(path: str, root: str = DEBUG_DIR) -> bool:
    """Whether the ELF file at ``path`` has DWARF debug information, in itself or in a
    separate debug file that has it (the path may be ``/proc/PID/exe``: the separate file's
    place by debug link is then taken from the link's target)."""
    info = _read_file(path)
    if info is None:
        return False
    if info.debug_info:
        return True
    try:
        real = os.readlink(path) if path.startswith("/proc/") else path
    except OSError:
        real = path
    for candidate in debug_file_candidates(real, info, root):
        if os.path.realpath(candidate) == os.path.realpath(real):
            continue  # the debug link naming the file itself
        separate = _read_file(candidate)
        if separate is not None and separate.debug_info:
            return True
    return False
