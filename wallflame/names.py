"""One name per function, whichever collector saw it.

perf prints ``Queue::pop(int) const+0x1a``, gdb ``Queue::pop (this=0x..., n=3) at q.cc:12``
and eu-stack ``Queue::pop(int) const``; all three become ``Queue::pop``.  Templates,
``(anonymous namespace)``, ``operator()`` and lambda names are kept whole: only the final,
top-level parameter list is dropped, and suffixes that differ between builds and symbol tables
(``+0x`` offsets, ``@@GLIBC_2.2.5`` versions, ``[clone .constprop.0]``, ``.isra.0``, Rust
``::h<hash>``) are removed, and the symbols that share a code address get one name
(``canonical_name``: ``__vdso_clock_gettime``, ``__libc_malloc``, ``___pthread_cond_wait``
become ``clock_gettime``, ``malloc``, ``pthread_cond_wait``).  Mangled
names are demangled in batches with ``c++filt`` when it is installed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

UNKNOWN = "[unknown]"

_OFFSET = re.compile(r"\+0x[0-9a-fA-F]+$")
_VERSION = re.compile(r"@@?[A-Za-z_][A-Za-z0-9_.]*$")
_CLONE = re.compile(r"( \[clone [^\]]*\])+$")
_C_CLONE = re.compile(r"(\.(?:constprop|isra|part|cold|lto_priv|localalias)(?:\.\d+)?)+$")
_RUST_HASH = re.compile(r"::h[0-9a-f]{16}$")
_QUALIFIERS = (" const", " volatile", " &&", " &", " noexcept")

#: Where several symbols name one code address, every collector's name becomes the one this
#: rule picks, so a function is one frame whichever collector saw it.  The groups are in
#: ``aliases.txt`` next to this module: glibc's, libm's and libgcc's symbol tables (made by
#: ``scripts/aliases.py``), and pairs that debug information adds.  Two prefixes are aliases by
#: construction and need no table: glibc's hidden ``__GI_x`` is ``x``, and the vDSO exports
#: each ``__vdso_x`` as ``x`` too.
ALIAS_PREFIXES = ("__GI_", "__vdso_")


def canonical_name(names: Iterable[str]) -> str:
    """The one name of a code address that several symbols name: the one with the fewest
    leading underscores, then the shortest, then the first in alphabetical order
    (``__libc_malloc``, ``malloc`` -> ``malloc``; ``mmap``, ``mmap64`` -> ``mmap``)."""
    return min(names, key=lambda n: (len(n) - len(n.lstrip("_")), len(n), n))


def alias_groups(nm_text: str) -> list[list[str]]:
    """The names of each code address that several function symbols name, from ``nm -D
    --defined-only`` output.  ``@VERSION`` is dropped; an address that only old versions name
    (a compatibility implementation) is not a group of today's names and is left out."""
    names: dict[str, set[str]] = {}
    current: set[str] = set()
    for line in nm_text.splitlines():
        parts = line.split()
        if len(parts) != 3 or parts[1] not in ("T", "t", "W", "w", "i", "I"):
            continue
        addr, _, symbol = parts
        name, at, version = symbol.partition("@")
        names.setdefault(addr, set()).add(name)
        if not at or version.startswith("@"):
            current.add(addr)
    return [sorted(v) for a, v in sorted(names.items()) if len(v) > 1 and a in current]


def read_aliases(text: str) -> dict[str, str]:
    """Each alias -> its group's canonical name, from ``aliases.txt`` text: one group of names
    a line, ``#`` comments.  Groups that share a name are one group."""
    parent: dict[str, str] = {}

    def root(n: str) -> str:
        while parent.setdefault(n, n) != n:
            n = parent[n]
        return n

    for line in text.splitlines():
        group = line.split("#", 1)[0].split()
        for n in group[1:]:
            a, b = root(group[0]), root(n)
            if a != b:
                parent[b] = a
    members: dict[str, list[str]] = {}
    for n in parent:
        members.setdefault(root(n), []).append(n)
    aliases: dict[str, str] = {}
    for group in members.values():
        name = canonical_name(group)
        aliases.update((n, name) for n in group if n != name)
    return aliases


def _load_aliases() -> dict[str, str]:
    import os  # only here: the table is read once, at import

    path = os.path.join(os.path.dirname(__file__), "aliases.txt")
    with open(path, encoding="utf-8") as f:
        return read_aliases(f.read())


#: alias -> the canonical name of its code address (``canonical_name``).
ALIASES = _load_aliases()


def strip_params(name: str) -> str:
    """Drop the final top-level ``(...)`` parameter list, keeping ``operator()`` whole."""
    s = name
    stripped = True
    while stripped:  # trailing qualifiers, in any order: "() const noexcept"
        stripped = False
        for q in _QUALIFIERS:
            if s.endswith(q):
                s = s[: -len(q)]
                stripped = True
    if not s.endswith(")"):
        return name
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
    if "+0x" in s:
        s = _OFFSET.sub("", s)
    if "@" in s:
        s = _VERSION.sub("", s)
    if "[clone" in s:
        s = _CLONE.sub("", s)
    if "." in s:
        s = _C_CLONE.sub("", s)
    if s.endswith(")") or s.endswith(_QUALIFIERS):
        s = strip_params(s)
    if "::h" in s:
        s = _RUST_HASH.sub("", s)
    while s.startswith(ALIAS_PREFIXES):  # ``__GI___vdso_x`` too: normalize stays idempotent
        s = next(s[len(p) :] for p in ALIAS_PREFIXES if s.startswith(p))
    return ALIASES.get(s, s) or UNKNOWN


def unknown_in(module: str) -> str:
    """How a frame without a symbol is named: ``[libc.so.6]`` as stackcollapse-perf does."""
    base = module.rsplit("/", 1)[-1].strip()
    if not base or base == UNKNOWN:
        return UNKNOWN
    return f"[{base}]"


#: wallflame's frame for a blocked thread none of whose switches carried a stack: bracketed
#: like an unresolved frame, but it says what it stands for.
UNSAMPLED = "[unsampled]"


def is_unknown(frame: str) -> bool:
    """Whether ``frame`` is an address no symbol named: ``[unknown]``, or the mapping it lies
    in as ``unknown_in`` writes it (``[libc.so.6]``, ``[vdso]``, a stripped ``[app]``), a
    kernel frame's ``_[k]`` mark aside.  Bracketed names with a space (``[signal handler
    called]``, ``[off mutex]``) and ``[unsampled]`` are wallflame's own frames, not unknown.
    The one rule for the summary's unknown-frame share, perf's stack quality and the native
    ``frame_weights`` (``tests/unit/hub/test_speedups.py`` holds the C code to it)."""
    f = frame.removesuffix("_[k]")
    return (len(f) >= 3 and f[0] == "[" and f[-1] == "]" and " " not in f
            and f != UNSAMPLED)


def is_mangled(name: str) -> bool:
    return name.startswith("_Z") or name.startswith("_R")


def demangle_all(names: Iterable[str]) -> dict[str, str]:
    """Map each mangled name to its normalized demangled form (one ``c++filt`` run)."""
    import shutil  # only here: reading a profile with no mangled name never needs them
    import subprocess

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
