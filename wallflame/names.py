"""One name per function, whichever collector saw it.

perf prints ``Queue::pop(int) const+0x1a``, gdb ``Queue::pop (this=0x..., n=3) at q.cc:12``
and eu-stack ``Queue::pop(int) const``; all three become ``Queue::pop``.  Templates,
``(anonymous namespace)``, ``operator()`` and lambda names are kept whole: only the final,
top-level parameter list is dropped, and suffixes that differ between builds and symbol tables
(``+0x`` offsets, ``@@GLIBC_2.2.5`` versions, ``[clone .constprop.0]``, ``.isra.0``, Rust
``::h<hash>``, glibc's ``__GI_`` aliases) are removed, and glibc's internal aliases of public
functions (``___pthread_cond_wait``, ``__clock_nanosleep``) become the public name.  Mangled
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

#: glibc exports one function under several symbols at the same address (``clock_nanosleep``,
#: ``__clock_nanosleep``, ``__GI___clock_nanosleep``); which one a collector prints depends on
#: whether it reads ``.dynsym`` (eu-stack without ``-i``) or DWARF (gdb, perf with debug info).
#: Each alias here was seen at one address from two collectors on the same process; the value
#: is the public name.  Extend it when a cross-collector test shows a new pair.
GLIBC_ALIASES = {
    "__clock_nanosleep": "clock_nanosleep",
    "__nanosleep": "nanosleep",
    "__libc_nanosleep": "nanosleep",
    "___pthread_cond_wait": "pthread_cond_wait",
    "__pthread_cond_wait": "pthread_cond_wait",
    "___pthread_cond_timedwait": "pthread_cond_timedwait",
    "__pthread_cond_timedwait": "pthread_cond_timedwait",
    "___pthread_cond_clockwait": "pthread_cond_clockwait",
    "___pthread_cond_broadcast": "pthread_cond_broadcast",  # eu-stack -i against perf, mix
    "___pthread_mutex_lock": "pthread_mutex_lock",
    "__pthread_mutex_lock": "pthread_mutex_lock",
    "___pthread_mutex_unlock": "pthread_mutex_unlock",
    "__pthread_mutex_unlock": "pthread_mutex_unlock",
    "___pthread_mutex_trylock": "pthread_mutex_trylock",
    "__pthread_mutex_trylock": "pthread_mutex_trylock",
    "___pthread_rwlock_rdlock": "pthread_rwlock_rdlock",
    "___pthread_rwlock_wrlock": "pthread_rwlock_wrlock",
    "___pthread_join": "pthread_join",
    "__pthread_join": "pthread_join",
    "__clone3": "clone3",
    "__clone": "clone",
    "__libc_start_main_impl": "__libc_start_main",
    "__libc_read": "read",
    "__read": "read",
    "__libc_write": "write",
    "__write": "write",
    "__libc_recv": "recv",
    "__recv": "recv",
    "__libc_send": "send",
    "__send": "send",
    "__libc_accept": "accept",
    "__poll": "poll",
    "__select": "select",
    "__epoll_wait": "epoll_wait",
    "__usleep": "usleep",
    "__sleep": "sleep",
    "__sched_yield": "sched_yield",
    "__clock_gettime": "clock_gettime",
    "__gettimeofday": "gettimeofday",
}


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
    if s.startswith("__GI_"):
        s = s[5:]
    if s.startswith("__"):
        s = GLIBC_ALIASES.get(s, s)
    return s or UNKNOWN


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
    ``frame_weights`` (``tests/test_speedups.py`` holds the C code to it)."""
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
