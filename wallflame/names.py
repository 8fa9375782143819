"""One name per function, whichever collector saw it.

perf prints ``Queue::pop(int) const+0x1a``, gdb ``Queue::pop (this=0x..., n=3) at q.cc:12``
and eu-stack ``Queue::pop(int) const``; all three become ``Queue::pop``.  Templates,
``(anonymous namespace)``, ``operator()`` and lambda names are kept whole: only the final,
top-level parameter list is dropped, and suffixes that differ between builds and symbol tables
(``+0x`` offsets, ``@@GLIBC_2.2.5`` versions, ``[clone .constprop.0]``, ``.isra.0``, Rust
``::h<hash>``, glibc's ``__GI_`` aliases) are removed.  Mangled names are demangled in batches
with ``c++filt`` when it is installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from functools import lru_cache

UNKNOWN = "[unknown]"

_OFFSET = re.compile(r"\+0x[0-9a-fA-F]+$")
_VERSION = re.compile(r"@@?[A-Za-z_][A-Za-z0-9_.]*$")
_CLONE = re.compile(r"( \[clone [^\]]*\])+$")
_C_CLONE = re.compile(r"(\.(?:constprop|isra|part|cold|lto_priv|localalias)(?:\.\d+)?)+$")
_RUST_HASH = re.compile(r"::h[0-9a-f]{16}$")
_QUALIFIERS = (" const", " volatile", " &&", " &", " noexcept")


def strip_params(name: str) -> str:
    """Drop the final top-level ``(...)`` parameter list, keeping ``operator()`` whole."""
    s = name
    changed = True
    while changed:
        changed = False
        for q in _QUALIFIERS:
            if s.endswith(q) and s.endswith(")" + q):
                s = s[: -len(q)]
                changed = True
    if not s.endswith(")"):
        return name if s is name else s
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        c = s[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                head = s[:i].rstrip()
                if not head or head.endswith("operator") or head.endswith("anonymous namespace"):
                    return s
                if head.endswith("(anonymous namespace"):
                    return s
                return head
    return s  # unbalanced: keep it whole rather than guess


@lru_cache(maxsize=1 << 16)
def normalize(raw: str) -> str:
    """The collector-independent name of one frame (cached: names repeat a lot)."""
    s = raw.strip()
    if not s:
        return UNKNOWN
    s = _OFFSET.sub("", s)
    if "@" in s:
        s = _VERSION.sub("", s)
    if "[clone" in s:
        s = _CLONE.sub("", s)
    if "." in s:
        s = _C_CLONE.sub("", s)
    if s.endswith(")"):
        s = strip_params(s)
    if "::h" in s:
        s = _RUST_HASH.sub("", s)
    if s.startswith("__GI_"):
        s = s[5:]
    return s or UNKNOWN


def unknown_in(module: str) -> str:
    """How a frame without a symbol is named: ``[libc.so.6]`` as stackcollapse-perf does."""
    base = module.rsplit("/", 1)[-1].strip()
    if not base or base == UNKNOWN:
        return UNKNOWN
    return f"[{base}]"


def is_mangled(name: str) -> bool:
    return name.startswith("_Z") or name.startswith("_R")


def demangle_all(names: Iterable[str]) -> dict[str, str]:
    """Map each mangled name to its normalized demangled form (one ``c++filt`` run)."""
    todo = sorted({n for n in names if is_mangled(n) and "\n" not in n})
    if not todo:
        return {}
    tool = shutil.which("c++filt")
    if tool is None:
        return {}
    try:
        out = subprocess.run(
            [tool], input="\n".join(todo) + "\n", capture_output=True, text=True,
            timeout=60, check=False,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    if len(out) != len(todo):
        return {}
    return {m: normalize(d) for m, d in zip(todo, out, strict=True) if d != m}
