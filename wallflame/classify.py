"""Wait classification: which kind of wait an off-CPU stack is.

The rules live in one table (``rules.tsv`` next to this module) that a user extends with a
file of the same format (``--rules FILE``; its rules are tried first).  A stack is scanned from
the leaf towards the root: the first *strong* rule met decides; otherwise the first *weak*
one; otherwise the kernel state the capture recorded (``D`` is I/O); otherwise ``other``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import lru_cache

from wallflame.errors import InputError
from wallflame.names import normalize
from wallflame.profile import WAIT_CLASSES

#: How many frames from the leaf are looked at: the blocking call is always near the leaf.
SCAN_DEPTH = 48

_SUFFIX = re.compile(r"_\[[kijw]\]$")


@dataclass
class Rules:
    strong_names: dict[str, str] = field(default_factory=dict)
    weak_names: dict[str, str] = field(default_factory=dict)
    strong_patterns: list[tuple[re.Pattern[str], str]] = field(default_factory=list)
    weak_patterns: list[tuple[re.Pattern[str], str]] = field(default_factory=list)

    def add_line(self, line: str, where: str) -> None:
        parts = line.split("\t")
        if len(parts) != 4:
            raise InputError(f"{where}: expected 4 tab-separated columns: class strength match "
                             "pattern", "see the comment at the top of rules.tsv")
        cls, strength, match, pattern = parts
        if cls not in WAIT_CLASSES:
            raise InputError(f"{where}: unknown wait class {cls!r}",
                             f"use one of {', '.join(WAIT_CLASSES)}")
        if strength not in ("strong", "weak"):
            raise InputError(f"{where}: strength must be strong or weak, not {strength!r}")
        strong = strength == "strong"
        if match == "name":
            names = self.strong_names if strong else self.weak_names
            names.setdefault(pattern, cls)
            return
        if match == "prefix":
            rx = re.compile(re.escape(pattern))
        elif match == "regex":
            try:
                rx = re.compile(pattern)
            except re.error as e:
                raise InputError(f"{where}: bad regex {pattern!r}: {e}") from None
        else:
            raise InputError(f"{where}: match must be name, prefix or regex, not {match!r}")
        (self.strong_patterns if strong else self.weak_patterns).append((rx, cls))

    def add_text(self, text: str, origin: str) -> None:
        for no, line in enumerate(text.splitlines(), 1):
            line = line.rstrip("\r")
            if line.strip() and not line.startswith("#"):
                self.add_line(line, f"{origin}:{no}")

    @lru_cache(maxsize=1 << 16)  # noqa: B019 - rules live as long as the process
    def frame_class(self, frame: str) -> tuple[str, bool] | None:
        name = _SUFFIX.sub("", frame)
        hit = self._name_class(name)
        if hit is None:
            # Raw names from folded files (``__GI___clock_nanosleep``, ``read@@GLIBC_2.2.5``)
            # get a second chance under their collector-independent name.
            canonical = normalize(name)
            if canonical != name:
                hit = self._name_class(canonical)
        return hit

    def _name_class(self, name: str) -> tuple[str, bool] | None:
        cls = self.strong_names.get(name)
        if cls:
            return cls, True
        for rx, cls in self.strong_patterns:
            if rx.match(name):
                return cls, True
        cls = self.weak_names.get(name)
        if cls:
            return cls, False
        for rx, cls in self.weak_patterns:
            if rx.match(name):
                return cls, False
        return None

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


def load_rules(extra: str | None = None) -> Rules:
    rules = Rules()
    if extra:
        try:
            with open(extra, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as e:
            raise InputError(f"{extra}: cannot read rules: {e.strerror}") from None
        rules.add_text(text, extra)
    with open(os.path.join(os.path.dirname(__file__), "rules.tsv"), encoding="utf-8") as f:
        builtin = f.read()
    rules.add_text(builtin, "rules.tsv")
    return rules


_DEFAULT: Rules | None = None


def default_rules() -> Rules:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = load_rules()
    return _DEFAULT


def find_wait(frames: tuple[str, ...] | list[str], rules: Rules | None = None) -> str | None:
    """The wait class the rules give this stack (frames root first), or ``None`` when no rule
    matches any of the frames near the leaf (a thread that is probably running)."""
    r = rules or default_rules()
    weak: str | None = None
    stop = max(len(frames) - SCAN_DEPTH, 0)
    for i in range(len(frames) - 1, stop - 1, -1):
        hit = r.frame_class(frames[i])
        if hit is None:
            continue
        cls, strong = hit
        if strong:
            return cls
        weak = weak or cls
    return weak


def classify(frames: tuple[str, ...] | list[str], kstate: str = "",
             rules: Rules | None = None) -> str:
    """The wait class of an off-CPU stack (frames root first)."""
    cls = find_wait(frames, rules) or ""
    if kstate == "D" and cls in ("", "other"):
        return "io"
    return cls or "other"
