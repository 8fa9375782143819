"""Folded stacks from other tools: plain (FlameGraph, inferno, speedscope exports), bcc
``offcputime -f`` / ``offwaketime -f``, py-spy ``--format raw``, and two-column differential
folded (``difffolded.pl``).

* **plain** ``root;...;leaf N``: frames are kept verbatim (they were named by the tool that
  wrote them) apart from wallflame's reversible escape (``\\x3b`` is ``;``).  The root frame is
  the thread, as stackcollapse writes it (``comm``; ``comm-PID/TID`` is split into name, pid
  and tid), so writing the profile back with the default ``comm`` root gives the same lines.
  Stacks are on-CPU; the unit is ``options.folded_unit`` (``samples`` by default; ``ns``, or
  ``us`` converted to ns).  A fractional count is truncated, with a counted warning (inferno
  does the same; flamegraph.pl keeps decimals).
* **bcc** (a ``-`` frame between user and kernel stacks, ``--`` between a blocked stack and its
  waker's): off-CPU, classified from the blocked part, microseconds (unless ``--unit ns``).
  ``-`` and ``--`` are kept as frames (flamegraph.pl draws them as separators); the waker's
  frames after ``--`` get the ``_[w]`` suffix that flamegraph.pl's chain palette reads.
* **py-spy raw**: ``process 123:"cmd";thread (0x7f..);func (file.py:12);... N``; the process
  root gives the pid, the thread frame the thread (``0x7f..``, or a tid when decimal).
* **differential** ``stack BEFORE AFTER`` (when every data line of the file's head has two
  counts): the profile holds the AFTER column; the BEFORE column is kept in
  ``meta.extra["diff_before"]`` as ``{folded stack: count}`` so a diff can be redrawn.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from wallflame.classify import classify
from wallflame.errors import InputError
from wallflame.fold.options import FoldOptions
from wallflame.folded import unescape
from wallflame.profile import OFF, ON, UNIT_NS, UNIT_SAMPLES, Profile, StackKey
from wallflame.speedups import frame_splitter, native
from wallflame.textio import head as read_head
from wallflame.textio import iter_lines, line_buffers, open_binary

NAME = "folded"

_COUNT = re.compile(r"^\d+(?:\.\d*)?$")
_LINE = re.compile(r"^\S.* \d+(?:\.\d*)?$")
_TWO = re.compile(r"^\S.* \d+(?:\.\d*)? \d+(?:\.\d*)?$")
_TID_ROOT = re.compile(r"^(.*)-(\d+)/(\d+)$", re.DOTALL)
_PYSPY_PROCESS = re.compile(r'^process (\d+):"(.*)"$')
_PYSPY_THREAD = re.compile(r"^thread \((0x[0-9a-fA-F]+|\d+)\)$")
_UNIT_SCALE = {"samples": 1, "ns": 1, "us": 1000}
_BCC_MARK = re.compile(r";--?;|;--?(?= \d)")


def _data_lines(text: str, limit: int = 200) -> list[str]:
    lines = [ln.rstrip("\r") for ln in text.split("\n")[:limit]]
    if len(lines) > 1:
        lines = lines[:-1]  # the last line of a head may be cut
    return [ln for ln in lines if ln.strip() and not _is_comment(ln)]


def _is_comment(line: str) -> bool:
    """``#`` lines without a count are comments; ``#;main 5`` is a thread named ``#``."""
    return line.startswith("#") and _LINE.match(line) is None


def detect(head: str) -> bool:
    data = _data_lines(head, 50)
    return bool(data) and all(_LINE.match(ln) for ln in data)


class _Mode:
    """What the file is, decided once from its head (or its first data line for stdin)."""

    def __init__(self, options: FoldOptions, lines: list[str]) -> None:
        self.diff = bool(lines) and all(_TWO.match(ln) for ln in lines)
        self.bcc = any(_BCC_MARK.search(ln) for ln in lines)
        unit = options.folded_unit if options.folded_unit in _UNIT_SCALE else "samples"
        if self.bcc and unit == "samples":
            unit = "us"
        self.scale = _UNIT_SCALE[unit]
        self.unit = UNIT_SAMPLES if unit == "samples" else UNIT_NS


def _count(text: str, no: int, profile: Profile) -> int | None:
    if text.isascii() and text.isdigit():
        return int(text)
    if not _COUNT.match(text):
        return None
    if "." in text:
        whole, _, frac = text.partition(".")
        if frac.strip("0"):
            profile.meta.lose("fractional count truncated", no)
        return int(whole)
    return int(text)


def _key(frames: Sequence[str], mode: _Mode, options: FoldOptions) -> StackKey:
    thread, pid, tid = "", 0, 0
    if frames:
        root = frames[0]
        m = _PYSPY_PROCESS.match(root) if root.startswith("process ") else None
        if m is not None:
            pid = int(m.group(1))
            frames = frames[1:]
            root = frames[0] if frames else ""
        t = _PYSPY_THREAD.match(root) if root.startswith("thread (") else None
        if t is not None:
            ident = t.group(1)
            thread = ident if ident.startswith("0x") else ""
            tid = 0 if ident.startswith("0x") else int(ident)
            frames = frames[1:]
        elif m is None:
            frames = frames[1:]
            r = _TID_ROOT.match(root) if "/" in root else None
            if r is not None:
                thread, pid, tid = r.group(1), int(r.group(2)), int(r.group(3))
            else:
                thread = root
    if not (mode.bcc and ("-" in frames or "--" in frames)):
        return StackKey(tuple(frames), tid, thread, pid, ON)
    blocked = frames
    if "--" in frames:
        cut = frames.index("--")
        blocked = frames[:cut]
        waker = [f if f.endswith("_[w]") or f in ("-", "--") else f + "_[w]"
                 for f in frames[cut + 1 :]]
        frames = [*blocked, "--", *waker]
    if options.kernel and "-" in blocked:
        k = blocked.index("-")
        marked = [f if f.endswith("_[k]") else f + "_[k]" for f in blocked[k + 1 :]]
        blocked = [*blocked[: k + 1], *marked]
        frames = [*blocked, *frames[len(blocked):]]
    real = tuple(f for f in blocked if f != "-")
    return StackKey(tuple(frames), tid, thread, pid, OFF, classify(real, "", options.get_rules()))


def fold(path: str, options: FoldOptions, profile: Profile) -> None:
    meta = profile.meta
    mode: _Mode | None = _Mode(options, _data_lines(read_head(path))) if path != "-" else None
    before: dict[str, int] = {}
    interner = native.Interner()
    split = frame_splitter(interner)
    stacks = profile.stacks

    def take(no: int, line: str) -> None:
        nonlocal mode
        if not line.strip() or (line[0] == "#" and _is_comment(line)):
            return
        if mode is None:
            mode = _Mode(options, [line])
        stack, _, last = line.rpartition(" ")
        after = int(last) if last.isascii() and last.isdigit() else _count(last, no, profile)
        old: int | None = None
        if after is not None and mode.diff:
            stack, _, first = stack.rpartition(" ")
            old = _count(first, no, profile)
            if old is None:
                after = None
        if after is None or not stack:
            meta.lose("malformed folded line", no)
            return
        frames: Sequence[str] = split(stack)
        root = frames[0]
        if "\\" in stack:
            frames = [unescape(f) for f in frames]
            key = _key(frames, mode, options)
        elif mode.bcc or "/" in root or root.startswith(("process ", "thread (")):
            key = _key(frames, mode, options)
        else:  # the common case, as _key would make it: the root frame names the thread
            key = StackKey(frames[1:], 0, root, 0, ON)  # type: ignore[arg-type]
        weight = after * mode.scale
        if weight:
            stacks[key] = stacks.get(key, 0) + weight
        if old is not None:
            before[stack] = before.get(stack, 0) + old * mode.scale

    if mode is not None and not mode.diff and not mode.bcc:
        _fold_plain(path, interner, mode.scale, stacks, take)
    else:
        for no, line in iter_lines(path):
            take(no, line)
    if not profile.stacks and not before and "malformed folded line" in meta.losses:
        raise InputError(f"{path}: no folded 'frame;...;frame COUNT' line found",
                         "give folded stacks, or name the format with --format")
    if mode is None:
        mode = _Mode(options, [])
    meta.unit = mode.unit
    if mode.diff:
        meta.extra["diff_before"] = dict(sorted(before.items()))
    source: dict[str, Any] = {"bcc": mode.bcc, "diff": mode.diff}
    meta.extra.setdefault("folded_sources", []).append(source)


def _fold_plain(path: str, interner: native.Interner, scale: int, stacks: dict[StackKey, int],
                take: Callable[[int, str], None]) -> None:
    """The lines of a plain folded file: plain lines (the common case of ``fold``'s ``take``)
    straight into ``stacks`` by ``_speedups.Interner.fold_plain``; every other line through
    ``take``, in file order."""
    with open_binary(path) as f:
        no = 0
        for block, end in line_buffers(f):
            pos = 0
            while pos <= end:
                pos, n = interner.fold_plain(block, pos, end, stacks, StackKey, ON, scale)
                no += n
                if pos > end:
                    break
                nl = block.find(b"\n", pos, end)
                stop = end if nl < 0 else nl
                if stop > pos and block[stop - 1] == 13:  # b"\r"
                    raw = block[pos : stop - 1]
                else:
                    raw = block[pos:stop]
                no += 1
                take(no, raw.decode("utf-8", "replace"))
                pos = stop + 1
