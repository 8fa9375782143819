"""eu-stack's thread dump lines: ``TID N:`` thread headers and ``#N  0xADDR NAME[ - MODULE]``
frames (``#N  0xADDR - MODULE`` or a bare ``#N  0xADDR`` when there is no symbol: ``[MODULE]``
or ``[unknown]``).  The eu-stack and gdb folders read them (a snapshot log may hold either
backend's dumps), and so does the lock folder (the owner sampler writes its frames so).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from wallflame.names import UNKNOWN, normalize, unknown_in

_HEADER = re.compile(r"^TID (\d+):$")
_FRAME = re.compile(r"^#(\d+)\s+(0x[0-9a-fA-F]+)(?:\s+(.*))?$")


class Frame(NamedTuple):
    addr: int | None
    raw: str
    module: str
    name: str


def parse_frame(line: str) -> Frame:
    m = _FRAME.match(line)
    if m is None:
        return Frame(None, "", "", UNKNOWN)
    addr = int(m.group(2), 16)
    rest = (m.group(3) or "").strip()
    raw, module = rest, ""
    if rest == "-" or rest.startswith("- "):
        raw, module = "", rest[1:].strip()
    else:
        head, sep, tail = rest.rpartition(" - ")
        if sep and tail.startswith(("/", "[")):
            raw, module = head.strip(), tail.strip()
    if not raw:
        return Frame(addr, raw, module, unknown_in(module) if module else UNKNOWN)
    return Frame(addr, raw, module, normalize(raw))


def frame(line: str) -> tuple[str, str]:
    return parse_frame(line).name, ""


def parse_header(line: str) -> tuple[int, str, str] | None:
    if not line.startswith("TID "):
        return None
    m = _HEADER.match(line)
    return (int(m.group(1)), "", "eu-stack") if m else None
