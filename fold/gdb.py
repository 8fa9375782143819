"""gdb ``thread apply all bt`` output: one dump, concatenated dumps, pt-pmp raw logs
(``TS`` lines) and wallflame snapshot logs with the gdb backend.

Thread headers: ``Thread 42 (Thread 0x7f.. (LWP 3772082) "name"):`` (the name may hold
quotes, ``;``, spaces and ``)``: it runs to the final ``"):``), also ``Thread 1 (process N):``
and ``Thread 2 (LWP N):``.  Frames: ``#5  0x... in NAME (ARGS) at FILE:LINE`` or, for frame 0
and inlined frames, ``#0  NAME (ARGS) at ...``; ``?? () from LIB`` becomes ``[LIB]``
(``[unknown]`` without a library); ``<signal handler called>`` becomes
``[signal handler called]``.  Arguments are dropped from names, but a lock argument
(``mutex=``, ``m=``, ``__mutex=``, ``lock=``, possibly ``mutex=mutex@entry=0x.. <sym>``) nearest
the leaf becomes the stack's lock id, ``0xADDR <sym>`` or ``0xADDR``.  Weighting: see
``wallflame.fold.snapshots``.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from wallflame.fold import heads
from wallflame.fold.options import FoldOptions
from wallflame.names import UNKNOWN, normalize, unknown_in
from wallflame.profile import Profile

NAME = "gdb"
detect = heads.gdb

_HEADER = re.compile(
    r"^Thread (\d+(?:\.\d+)?) "  # gdb's number ("1.2" with several inferiors)
    r"\((?:Thread 0x[0-9a-fA-F]+ \((?:LWP|process) (\d+)\)|(?:LWP|process) (\d+))"
    r'(?: "(.*)")?\):$'
)
_FRAME = re.compile(r"^#(\d+)\s+(?:(0x[0-9a-fA-F]+) in )?(.*)$")
_LOCK = re.compile(
    r"(?:^|[(,] ?)(?:mutex|m|__mutex|lock)=(?:[\w.]+@entry=)?(0x[0-9a-fA-F]+)(?: <([^>]*)>)?"
)
_OPERATOR = re.compile(r"operator(?:\(\)|\[\]|<<=|>>=|->\*|->|<<|>>|<=>|<=|>=|[<>])")
_TAIL = re.compile(r"\)((?: at | from )[^()]*)?$")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
SIGNAL = "[signal handler called]"


class Frame(NamedTuple):
    """One parsed gdb frame line."""

    addr: int | None
    raw: str  # the function name as gdb printed it
    args: str  # the text inside the argument list
    module: str  # the library of a ``from LIB`` suffix
    name: str  # the normalized frame name


def _args_start(s: str) -> int:
    """Index of the `` (`` that opens the argument list: at depth 0 of ``()`` and ``<>``
    (``operator<`` and friends skipped), not the ``(anonymous namespace)`` of a name."""
    k = s.find(" (")
    if k > 0:
        head = s[:k]
        if "<" not in head and "(" not in head and "operator" not in head \
                and not s.startswith("(anonymous namespace)", k + 1):
            return k + 1  # a plain C name: the common case
    depth = 0
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "o" and s.startswith("operator", i):
            m = _OPERATOR.match(s, i)
            if m is not None:
                i = m.end()
                continue
        if c in "(<":
            if c == "(" and depth == 0 and i > 0 and s[i - 1] == " " \
                    and not s.startswith("(anonymous namespace)", i):
                return i
            depth += 1
        elif c in ")>" and depth > 0:
            depth -= 1
        i += 1
    return -1


def _args_end(s: str, start: int) -> int:
    """Index just past the ``)`` closing the argument list opened at ``start`` (quotes in
    string and char arguments respected); ``len(s)`` when it is not closed."""
    if '"' not in s and "'" not in s:
        m = _TAIL.search(s, start)
        if m is not None and s.count("(", start, m.start()) == s.count(")", start, m.start()) + 1:
            return m.start() + 1  # no strings: the ")" before " at FILE:LINE" / " from LIB"
    depth = 0
    quote = ""
    i, n = start, len(s)
    while i < n:
        c = s[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


def parse_frame(line: str) -> Frame:
    """Read ``#N  [0xADDR in ]NAME (ARGS)[ at FILE:LINE][ from LIB]``."""
    m = _FRAME.match(line)
    if m is None:
        return Frame(None, "", "", "", UNKNOWN)
    addr = int(m.group(2), 16) if m.group(2) else None
    rest = m.group(3)
    if rest.startswith("<signal handler called>"):
        return Frame(addr, rest, "", "", SIGNAL)
    start = _args_start(rest)
    if start < 0:
        raw, args, tail = rest, "", ""
        for sep in (" at ", " from "):
            k = raw.find(sep)
            if k > 0:
                raw, tail = raw[:k], raw[k:]
                break
    else:
        end = _args_end(rest, start)
        raw, args, tail = rest[:start].rstrip(), rest[start + 1 : end - 1], rest[end:]
    module = ""
    k = tail.rfind(" from ")
    if k >= 0:
        module = tail[k + 6 :].strip()
    raw = raw.strip()
    unknown = not raw or raw == "??"
    name = (unknown_in(module) if module else UNKNOWN) if unknown else normalize(raw)
    return Frame(addr, raw, args, module, name)


def lock_of(args: str) -> str:
    """The lock id in an argument list: ``0xADDR <sym>`` or ``0xADDR``, or ``""``."""
    if "=" not in args:
        return ""
    if '"' in args:
        args = _STRING.sub('""', args)  # a lock= inside a string argument is not a lock
    m = _LOCK.search(args)
    if m is None:
        return ""
    return f"{m.group(1)} <{m.group(2)}>" if m.group(2) else m.group(1)


def frame(line: str) -> tuple[str, str]:
    f = parse_frame(line)
    return f.name, lock_of(f.args)


def parse_header(line: str) -> tuple[int, str, str] | None:
    if not line.startswith("Thread "):
        return None
    m = _HEADER.match(line)
    if m is None:
        return None
    tid = int(m.group(2) or m.group(3))
    return tid, m.group(4) or "", "gdb"


def fold(path: str, options: FoldOptions, profile: Profile) -> None:
    from wallflame.fold import eustackframes, snapshotlog

    snapshotlog.fold_log(path, options, profile, [parse_header, eustackframes.parse_header],
                         {"gdb": frame, "eu-stack": eustackframes.frame})
