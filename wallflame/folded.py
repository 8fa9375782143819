"""Folded stacks (``root;...;leaf N``) out of and into the data model.

Two flavours are written:

* **plain**: what FlameGraph, inferno and speedscope read.  The thread becomes the root frame
  as chosen by ``ThreadRoot`` (``comm``, ``comm-pid``, ``comm-pid/tid``, or none).
* **annotated** (``# wallflame-folded 1`` on the first line): plain lines whose off-CPU stacks
  end in one pseudo-frame ``[off CLASS lock=ID holder=TID]``, plus ``#meta`` and ``#holder``
  comment lines, so a profile round-trips without loss.  Other tools show the pseudo-frame
  as a leaf box, which is what a reader of an off-CPU graph wants to see anyway.

Escaping: one symbol is always one frame.  Inside a frame ``\\`` is written ``\\\\``, ``;`` is
written ``\\x3b`` and CR/LF ``\\x0d``/``\\x0a``; a frame ending in a space and a number
(``thread 123``) has that space written ``\\x20``, so that no line looks like a two-column
differential one.  The escape is reversible (``unescape``).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, cast

from wallflame.profile import OFF, ON, HolderKey, Loss, Meta, Profile, StackKey
from wallflame.speedups import frame_splitter
from wallflame.waitclasses import FALLBACK

if TYPE_CHECKING:
    from wallflame.metaextra import Extra

MAGIC = "# wallflame-folded 1"
#: The root frame's name for a thread whose name is not known.
UNKNOWN_THREAD = "[unknown]"

_NEEDS_ESCAPE = re.compile(r"[\\;\r\n]")
_ESCAPES = {"\\": "\\\\", ";": "\\x3b", "\r": "\\x0d", "\n": "\\x0a"}
_TRAILING_NUMBER = re.compile(r" (\d+(?:\.\d*)?)$")
_UNESCAPE = re.compile(r"\\(\\|x[0-9a-fA-F]{2})")
_ANNOTATION = re.compile(r"^\[off (\w+)(?: lock=(.*?))?(?: holder=(\d+))?\]$")
_THREAD_ROOT = re.compile(r"^(.*)-(\d+|\?)/(\d+|\?)$", re.DOTALL)


class ThreadRoot(enum.StrEnum):
    """How the thread appears as the root frame of a plain folded line."""

    NONE = "none"
    COMM = "comm"
    PID = "pid"
    TID = "tid"


def escape(name: str) -> str:
    if _NEEDS_ESCAPE.search(name) is not None:
        name = _NEEDS_ESCAPE.sub(lambda m: _ESCAPES[m.group(0)], name)
    if name[-1:].isdigit() and " " in name:
        # ``thread 123`` as a leaf would read as a count column (``stack before after``)
        name = _TRAILING_NUMBER.sub(r"\\x20\1", name)
    return name


def unescape(frame: str) -> str:
    if "\\" not in frame:
        return frame

    def repl(m: re.Match[str]) -> str:
        g = m.group(1)
        return "\\" if g == "\\" else chr(int(g[1:], 16))

    return _UNESCAPE.sub(repl, frame)


def thread_frame(key: StackKey, root: ThreadRoot) -> str:
    comm = (key.thread or UNKNOWN_THREAD).replace(" ", "_")
    if root is ThreadRoot.COMM:
        return comm
    if root is ThreadRoot.PID:
        return f"{comm}-{key.pid or '?'}"
    if root is ThreadRoot.TID:
        return f"{comm}-{key.pid or '?'}/{key.tid or '?'}"
    return ""


def annotation(key: StackKey) -> str:
    if key.state != OFF:
        return ""
    parts = [f"[off {key.wait or FALLBACK}"]
    if key.lock:
        parts.append(f" lock={key.lock}")
    if key.holder:
        parts.append(f" holder={key.holder}")
    return "".join(parts) + "]"


def _escape_annotated(name: str) -> str:
    """Escape a frame for the annotated flavour: a real frame that looks like the off-CPU
    pseudo-frame gets its ``[`` escaped, so that reading it back cannot mistake it."""
    text = escape(name)
    return "\\x5b" + text[1:] if _ANNOTATION.match(text) else text


class _Escaped(dict[str, str]):
    """Frame names escaped once each (a profile repeats a few thousand names in every
    stack)."""

    def __init__(self, escape: Callable[[str], str]) -> None:
        super().__init__()
        self.escape = escape

    def __missing__(self, name: str) -> str:
        text = self[name] = self.escape(name)
        return text


def stack_text(key: StackKey, root: ThreadRoot, annotate: bool,
               escaped: dict[str, str] | None = None) -> str:
    """``escaped``: a cache of escaped names (``_Escaped``) for the flavour asked for."""
    if annotate:
        # lossless: the thread name as it is (escaped), unknown ids as 0
        frames = ([escaped[f] for f in key.frames] if escaped is not None
                  else [_escape_annotated(f) for f in key.frames])
        root_frame = escape(f"{key.thread or UNKNOWN_THREAD}-{key.pid}/{key.tid}")
        if root_frame.startswith("#"):  # a data line never looks like a comment
            root_frame = "\\x23" + root_frame[1:]
        frames.insert(0, root_frame)
        if key.state == OFF:
            frames.append(escape(annotation(key)))
        return ";".join(frames)
    frames = ([escaped[f] for f in key.frames] if escaped is not None
              else [escape(f) for f in key.frames])
    head = thread_frame(key, root)
    if head:
        frames.insert(0, escape(head))
    if annotate and key.state == OFF:
        frames.append(escape(annotation(key)))
    return ";".join(frames)


def folded_lines(
    profile: Profile, root: ThreadRoot = ThreadRoot.COMM, annotate: bool = False
) -> list[str]:
    """Folded lines, sorted bytewise like stackcollapse output, equal stacks summed."""
    acc: dict[str, int] = {}
    escaped = _Escaped(_escape_annotated if annotate else escape)
    for key, w in profile.stacks.items():
        text = stack_text(key, root, annotate, escaped)
        acc[text] = acc.get(text, 0) + w
    return [f"{s} {w}" for s, w in sorted(acc.items()) if s]


def write_folded(
    profile: Profile, out: IO[str], root: ThreadRoot = ThreadRoot.COMM, annotate: bool = False
) -> None:
    if annotate:
        out.write(MAGIC + "\n")
        out.write("#meta " + json.dumps(profile.meta.to_json(), sort_keys=True) + "\n")
        for h, w in sorted(profile.holders.items()):
            fields = [h.lock, str(h.tid), h.thread, str(w), ";".join(escape(f) for f in h.frames)]
            out.write("#holder " + json.dumps(fields) + "\n")
        root = ThreadRoot.TID
    lines = folded_lines(profile, root, annotate)
    for i in range(0, len(lines), 512):  # a few writes, each encoded at once
        out.write("\n".join(lines[i:i + 512]) + "\n")


def write(profile: Profile, out: IO[str], title: str | None) -> None:
    """The report's ``folded`` format (``report/writers.py``): plain lines that FlameGraph and
    inferno read, off-CPU stacks ending in their ``[off CLASS lock=...]`` pseudo-frame so the
    state is not lost."""
    for line in folded_lines(profile, ThreadRoot.COMM, annotate=True):
        out.write(line.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")


def meta_from_json(d: Mapping[str, Any]) -> Meta:
    m = Meta()
    m.unit = str(d.get("unit", m.unit))
    m.sources = list(d.get("sources", []))
    m.window_ns = int(d.get("window_ns", 0))
    m.rates = {str(k): float(v) for k, v in dict(d.get("rates", {})).items()}
    m.samples = {str(k): int(v) for k, v in dict(d.get("samples", {})).items()}
    m.losses = {str(k): Loss(**v) for k, v in dict(d.get("losses", {})).items()}
    m.warnings = [str(w) for w in d.get("warnings", [])]
    m.threads = {int(k): str(v) for k, v in dict(d.get("threads", {})).items()}
    m.extra = cast("Extra", dict(d.get("extra", {})))  # the keys as written: readers test them
    return m


def _split(text: str) -> list[str]:
    return text.split(";")


def parse_annotated_line(text: str,
                         split: Callable[[str], Sequence[str]] = _split) -> StackKey:
    """Turn ``comm-pid/tid;f;...;[off ...]`` back into a key (inverse of ``stack_text``).
    ``split`` is ``str.split(";")`` or an equivalent that shares frame names."""
    raw = split(text)
    state, wait, lock, holder = ON, "", "", 0
    end = len(raw)
    if raw:
        m = _ANNOTATION.match(raw[-1])  # matched escaped: an escaped "[" is a real frame
        if m:
            end -= 1
            state, wait = OFF, m.group(1)
            lock, holder = unescape(m.group(2) or ""), int(m.group(3) or 0)
    frames = tuple(raw[:end]) if "\\" not in text else tuple(unescape(f) for f in raw[:end])
    comm, pid, tid = "", 0, 0
    if frames:
        t = _THREAD_ROOT.match(frames[0])
        if t:
            frames = frames[1:]
            comm = t.group(1) if t.group(1) != UNKNOWN_THREAD else ""
            pid = int(t.group(2)) if t.group(2) != "?" else 0
            tid = int(t.group(3)) if t.group(3) != "?" else 0
    return StackKey(frames, tid, comm, pid, state, wait, lock, holder)


def read_annotated(lines: Iterable[tuple[int, str]], profile: Profile) -> None:
    """Read wallflame's annotated folded lines (``(line_no, text)``) into ``profile``."""
    split = frame_splitter()
    for no, line in lines:
        if not line or line == MAGIC:
            continue
        if line.startswith("#meta "):
            try:
                meta = meta_from_json(json.loads(line[6:]))
                if not profile.stacks and not profile.meta.sources:
                    profile.meta.unit = meta.unit  # a fresh profile takes the file's unit
                profile.meta.merge(meta)
            except (ValueError, TypeError, KeyError):
                profile.meta.lose("bad metadata line", no)
            continue
        if line.startswith("#holder "):
            try:
                lock, tid, thread, w, stack = json.loads(line[8:])
                frames = tuple(unescape(f) for f in str(stack).split(";") if f)
                profile.add_holder(HolderKey(str(lock), int(tid), str(thread), frames), int(w))
            except (ValueError, TypeError):
                profile.meta.lose("bad holder line", no)
            continue
        if line.startswith("#"):
            continue
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            profile.meta.lose("malformed folded line", no)
            continue
        profile.add(parse_annotated_line(stack, split), int(count))
