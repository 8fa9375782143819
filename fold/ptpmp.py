"""pt-pmp's aggregated output: ``%7d leaf,...,root`` lines (``sort | uniq -c | sort -rn``).

Each line is a count of snapshots in which some thread had that stack; pt-pmp drops thread
names, tids and timestamps, so the weight is that count and the unit is ``samples`` (pass the
raw log, ``--save-samples``, to get time).  Frames are leaf first; ``lib::??`` (an unknown
frame in ``lib.so``) becomes ``[lib]``; a ``(file.c)`` suffix and arguments are dropped by the
usual name normalization.  A stack is off-CPU when a wait rule matches it (then classified),
on-CPU otherwise.  A leading ``date`` line, as pt-pmp prints it, is ignored.  ``meta.samples``
holds ``thread_stacks`` (the sum of the counts), not ``snapshots``: pt-pmp does not say how
many dumps it aggregated.
"""

from __future__ import annotations

from wallflame.classify import classify, find_wait
from wallflame.errors import InputError
from wallflame.fold import heads
from wallflame.fold.options import FoldOptions
from wallflame.names import normalize, unknown_in
from wallflame.profile import OFF, ON, UNIT_SAMPLES, Profile, StackKey
from wallflame.textio import iter_lines

NAME = "pmp"
detect = heads.pmp

_LINE = heads.PMP_LINE
_DATE = heads.PMP_DATE


def split_frames(text: str) -> list[str]:
    """Split at commas outside ``<>``/``()`` (a template argument list keeps its commas)."""
    out: list[str] = []
    depth = 0
    start = 0
    for i, c in enumerate(text):
        if c in "<(":
            depth += 1
        elif c in ">)" and depth:
            depth -= 1
        elif c == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out


def frame_name(raw: str) -> str:
    raw = raw.strip()
    if raw.endswith("::??"):
        return unknown_in(raw[:-4])
    if raw == "??":
        return unknown_in("")
    return normalize(raw)


def fold(path: str, options: FoldOptions, profile: Profile) -> None:
    meta = profile.meta
    meta.unit = UNIT_SAMPLES
    rules = options.get_rules()
    n = good = 0
    for no, line in iter_lines(path):
        if not line.strip():
            continue
        m = _LINE.match(line)
        if m is None:
            if not (no <= 2 and _DATE.match(line)):
                meta.lose("malformed pt-pmp line", no)
            continue
        count = int(m.group(1))
        frames = tuple(frame_name(f) for f in reversed(split_frames(m.group(2))))
        if find_wait(frames, rules) is None:
            profile.add(StackKey(frames, state=ON), count)
        else:
            profile.add(StackKey(frames, state=OFF, wait=classify(frames, "", rules)), count)
        n += count
        good += 1
    bad = meta.losses.get("malformed pt-pmp line")
    if not good and bad is not None:
        raise InputError(f"{path}: no pt-pmp 'count leaf,...,root' line found",
                         "give pt-pmp's aggregated output, or name the format with --format")
    meta.count("thread_stacks", n)  # thread stacks over all dumps: the dumps are not known
