"""Wait classification: which kind of wait an off-CPU stack is, and which rule said so.

The rules live in one table (``rules.tsv`` next to this module) that a user extends with a
file of the same format (``--rules FILE``; its rules are tried first).  A stack is scanned from
the leaf towards the root, at most ``SCAN_DEPTH`` frames.  The nearest *outer* rule met decides
(a server's own wait function, such as PostgreSQL's ``ProcSleep``, whatever it waits in);
otherwise the nearest *strong* one; otherwise the nearest *weak* one; otherwise the kernel state
the capture recorded (``D`` is I/O); otherwise ``other``.

A rule may carry a *label* (the sub-label the report shows: ``lock: ProcSleep``) and an *under*
pattern: it then holds only when one of the next ``UNDER_DEPTH`` callers of the frame matches
(frames without a symbol skipped: ``LWLockAcquire`` under ``XLogFlush`` is the ``WALWrite``
tranche).  A stack's label is that of the deciding rule, or when it has none, of the nearest
labelled rule of the same class further towards the root (``epoll_wait`` decides ``poll``,
``secure_read`` above it says ``client read``).

Rows of the class ``idle`` are not wait classes: they name where a thread waits for work (a pool
worker waiting for a task, a server's manager or timer thread between its rounds).  A blocked
stack with such a frame among its scanned frames is idle, whatever its wait class
(``idle_label``); the report leaves idle threads out of its findings and top stacks.  An idle
row may instead match a stack's root (``root``: a regex on its first ``ROOT_FRAMES`` frames
joined by ``;``): a thread whose own functions have no symbol is known by its stack's shape;
or a thread's name (``thread``: ``idle_thread``), for threads with no stack of their own.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from wallflame.errors import InputError
from wallflame.names import normalize
from wallflame.profile import BLOCKED_CLASSES
from wallflame.waitclasses import FALLBACK

#: How many frames from the leaf are looked at: the blocking call is always near the leaf.
SCAN_DEPTH = 48
#: How many named callers of a frame a rule's ``under`` pattern is tried on (frames without a
#: symbol are looked past).
UNDER_DEPTH = 4

WEAK, STRONG, OUTER = 0, 1, 2
#: The rows that name a wait for work rather than a wait class.
IDLE = "idle"
#: How many frames from the root an idle row matched on the stack's root (``root``) reads.
ROOT_FRAMES = 8
_STRENGTHS = {"weak": WEAK, "strong": STRONG, "outer": OUTER}

_SUFFIX = re.compile(r"_\[[kijw]\]$")
#: How many frame names a rule set remembers the rules of.
_SEEN_MAX = 1 << 17
#: What a label may hold: it is shown in reports and written into folded pseudo-frames.
_LABEL = re.compile(r"[A-Za-z0-9_.:<>()/+ -]{1,40}")


@dataclass(frozen=True)
class Rule:
    """One line of a rules file."""

    cls: str
    strength: int
    label: str = ""
    under: re.Pattern[str] | _Lazy | None = None
    order: int = 0  # the line's place: earlier lines (user rules first) win ties


class _Lazy:
    """A pattern of the built-in table (``regex`` rules, ``under`` columns), compiled when it
    is first tried alone: the joined expression screens names first, so most reports never
    need one, and compiling the table's 20 would cost a millisecond a report.  (A user's
    rules are compiled as they are read, so that a bad one is reported; the built-in ones
    are checked by tests/unit/hub/test_classify.py.)"""

    __slots__ = ("_rx", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._rx: re.Pattern[str] | None = None

    def match(self, name: str) -> re.Match[str] | None:
        if self._rx is None:
            self._rx = re.compile(self.pattern)
        return self._rx.match(name)


class _Prefix(str):
    """A ``prefix`` rule's pattern, matched by ``str.startswith``: compiling the built-in
    table's 35 prefixes as expressions would cost a millisecond a report."""

    def match(self, name: str) -> bool:
        return name.startswith(self)

    @property
    def pattern(self) -> str:
        return re.escape(self)


@dataclass
class Rules:
    names: dict[str, list[Rule]] = field(default_factory=dict)
    patterns: list[tuple[re.Pattern[str] | _Lazy | _Prefix, Rule]] = field(
        default_factory=list)
    _seen: dict[str, tuple[Rule, ...]] = field(default_factory=dict, repr=False)
    # the prefixes and every expression in one, tried first (most names match none); the
    # expression made when first needed
    _prefixes: tuple[str, ...] = field(default=(), repr=False)
    _any: re.Pattern[str] | None = field(default=None, repr=False)
    _joined_ok: bool = field(default=True, repr=False)
    _size: int = field(default=0, repr=False)  # rules added
    #: the ``idle`` rows, in a table of their own (classed ``other`` there: they classify
    #: nothing, ``idle_label`` reads them)
    idle: Rules | None = field(default=None, repr=False)
    #: the idle rows matched on a stack's root (``root``): (pattern, label)
    roots: list[tuple[re.Pattern[str] | _Lazy, str]] = field(default_factory=list, repr=False)
    #: the idle rows matched on a thread's name (``thread``): (pattern, label)
    threads: list[tuple[re.Pattern[str] | _Lazy, str]] = field(default_factory=list,
                                                                repr=False)

    def add_line(self, line: str, where: str, builtin: bool = False) -> None:
        """One line of a rules file; ``builtin``: of the built-in table, whose expressions
        are compiled when first needed (``_Lazy``)."""
        parts = line.split("\t")
        if not 4 <= len(parts) <= 6:
            raise InputError(f"{where}: expected 4 to 6 tab-separated columns: class strength "
                             "match pattern [label [under]]", "see the comment at the top of "
                             "rules.tsv")
        cls, strength, match, pattern = parts[:4]
        label = parts[4].strip() if len(parts) > 4 else ""
        under = parts[5] if len(parts) > 5 else ""
        if cls == IDLE:
            if strength != "outer":
                raise InputError(f"{where}: an idle row holds wherever it is met: its strength "
                                 f"is outer, not {strength!r}")
            if self.idle is None:
                self.idle = Rules()
            if match in ("root", "thread"):
                if label and label != "-" and not _LABEL.fullmatch(label):
                    raise InputError(f"{where}: bad label {label!r}",
                                     "up to 40 letters, digits, spaces and _.:<>()/+-")
                rx = _Lazy(pattern) if builtin else _regex(pattern, where)
                rows = self.idle.roots if match == "root" else self.idle.threads
                rows.append((rx, "" if label == "-" else label))
                return
            self.idle.add_line("\t".join(("other", *parts[1:])), where, builtin)
            return
        if cls not in BLOCKED_CLASSES:
            raise InputError(f"{where}: unknown wait class {cls!r}",
                             f"use one of {', '.join(BLOCKED_CLASSES)} (or idle)")
        if strength not in _STRENGTHS:
            raise InputError(f"{where}: strength must be outer, strong or weak, not {strength!r}")
        if label == "-":
            label = ""
        if label and not _LABEL.fullmatch(label):
            raise InputError(f"{where}: bad label {label!r}",
                             "up to 40 letters, digits, spaces and _.:<>()/+-")
        regex = _Lazy if builtin else (lambda p: _regex(p, where))
        rule = Rule(cls, _STRENGTHS[strength], label, regex(under) if under else None,
                    self._size)
        self._seen.clear()
        if match == "name":  # under the name every collector gives it (``pread64``: ``pread``)
            self.names.setdefault(normalize(pattern), []).append(rule)
        elif match == "prefix":
            self.patterns.append((_Prefix(pattern), rule))
            self._prefixes += (pattern,)
        elif match == "regex":
            self.patterns.append((regex(pattern), rule))
            self._any, self._joined_ok = None, True
        else:
            raise InputError(f"{where}: match must be name, prefix or regex, not {match!r}")
        self._size += 1

    def add_text(self, text: str, origin: str, builtin: bool = False) -> None:
        for no, line in enumerate(text.splitlines(), 1):
            line = line.rstrip("\r")
            if line.strip() and not line.startswith("#"):
                self.add_line(line, f"{origin}:{no}", builtin)

    def frame_rules(self, frame: str) -> tuple[Rule, ...]:
        """The rules that name this frame, in the order they are tried: the strongest first,
        then exact names before patterns, then file order."""
        hits = self._seen.get(frame)
        if hits is None:
            if len(self._seen) >= _SEEN_MAX:
                self._seen.clear()
            hits = self._seen[frame] = self._frame_rules(frame)
        return hits

    def _frame_rules(self, frame: str) -> tuple[Rule, ...]:
        name = _SUFFIX.sub("", frame) if frame.endswith("]") else frame
        hits = self._name_rules(name)
        if not hits:
            # Raw names from folded files (``__GI___clock_nanosleep``, ``read@@GLIBC_2.2.5``)
            # get a second chance under their collector-independent name.
            canonical = normalize(name)
            if canonical != name:
                hits = self._name_rules(canonical)
        return hits

    def named(self, names: Iterable[str]) -> set[str]:
        """The names among ``names`` that some rule names (those ``frame_rules`` has rules
        for), found in bulk: the exact names by one set operation, the patterns by the joined
        expression, and each name's collector-independent form only for the names left."""
        joined = self._joined()
        if joined is None:
            return {n for n in names if self.frame_rules(n)}
        left = set(names)
        # a kernel or inline mark to strip first (``futex_wait_[k]``): one by one
        marked = {n for n in left if n.endswith("]")}
        hit = {n for n in marked if self.frame_rules(n)}
        left -= marked
        exact, prefixes = self.names, self._prefixes
        hit |= left & exact.keys()
        left -= hit
        hit.update(filter(joined.match, left))
        left -= hit
        hit.update(n for n in left if n.startswith(prefixes))
        left -= hit
        hit.update(n for n, c in zip(left, map(normalize, left), strict=True)
                   if c != n and (c in exact or c.startswith(prefixes) or joined.match(c)))
        return hit

    def _name_rules(self, name: str) -> tuple[Rule, ...]:
        exact = self.names.get(name, [])
        joined = self._joined()
        if joined is not None and not exact and not name.startswith(self._prefixes) \
                and not joined.match(name):
            return ()  # most names: no rule at all
        matched = [r for rx, r in self.patterns if rx.match(name)]
        ranked = [(-r.strength, 0, r.order, r) for r in exact]
        ranked += [(-r.strength, 1, r.order, r) for r in matched]
        ranked.sort(key=lambda t: t[:3])
        return tuple(t[3] for t in ranked)

    def _joined(self) -> re.Pattern[str] | None:
        """One expression matching where any ``regex`` pattern matches (None: they cannot be
        joined, each pattern is tried); the prefixes are tried by ``str.startswith``."""
        if self._any is None and self._joined_ok:
            try:
                self._any = re.compile("|".join(f"(?:{rx.pattern})" for rx, _ in self.patterns
                                                if not isinstance(rx, _Prefix)) or "(?!)")
            except re.error:  # group names or numbers that clash once joined
                self._joined_ok = False
        return self._any

    def frame_class(self, frame: str) -> tuple[str, bool] | None:
        """The class the first rule naming this frame gives (context aside), and whether that
        rule is strong (or outer)."""
        hits = self.frame_rules(frame)
        return (hits[0].cls, hits[0].strength > WEAK) if hits else None

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


def _regex(pattern: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise InputError(f"{where}: bad regex {pattern!r}: {e}") from None


@lru_cache(maxsize=1 << 16)
def _under_hit(rx: re.Pattern[str] | _Lazy, frame: str) -> bool:
    name = _SUFFIX.sub("", frame)
    return rx.match(name) is not None or rx.match(normalize(name)) is not None


def _unnamed(frame: str) -> bool:
    """A frame without a symbol (``[unknown]``, ``[postgres]``, ``??``): it names nothing, so
    a rule's ``under`` looks past it."""
    return frame == "??" or (frame.startswith("[") and frame.endswith("]"))


def _callers(frames: tuple[str, ...] | list[str], i: int) -> list[str]:
    """The next ``UNDER_DEPTH`` named callers of frame ``i`` (at most 4x as many frames)."""
    out: list[str] = []
    for j in range(i - 1, max(i - 4 * UNDER_DEPTH, 0) - 1, -1):
        if not _unnamed(frames[j]):
            out.append(frames[j])
            if len(out) == UNDER_DEPTH:
                break
    return out


def _rule_at(frames: tuple[str, ...] | list[str], i: int, r: Rules) -> Rule | None:
    callers: list[str] | None = None
    for rule in r.frame_rules(frames[i]):
        if rule.under is None:
            return rule
        if callers is None:
            callers = _callers(frames, i)
        rx = rule.under
        if any(_under_hit(rx, f) for f in callers):
            return rule
    return None


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
    rules.add_text(builtin, "rules.tsv", builtin=True)
    return rules


_DEFAULT: Rules | None = None


def default_rules() -> Rules:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = load_rules()
    return _DEFAULT


def find_rule(frames: tuple[str, ...] | list[str],
              rules: Rules | None = None) -> tuple[str, str] | None:
    """``(class, label)`` the rules give this stack (frames root first; the label may be
    empty), or ``None`` when no rule matches any of the frames near the leaf (a thread that is
    probably running)."""
    r = rules or default_rules()
    rules_of = r.frame_rules
    found: list[tuple[int, Rule]] = []  # (position, rule), leaf first
    best: tuple[int, Rule] | None = None
    stop = max(len(frames) - SCAN_DEPTH, 0)
    for i in range(len(frames) - 1, stop - 1, -1):
        if not rules_of(frames[i]):
            continue
        rule = _rule_at(frames, i, r)
        if rule is None:
            continue
        found.append((i, rule))
        if best is None or rule.strength > best[1].strength:
            best = (i, rule)
    if best is None:
        return None
    pos, rule = best
    if rule.label:
        return rule.cls, rule.label
    for i, other in found:
        if i < pos and other.cls == rule.cls and other.label:
            return rule.cls, other.label
    return rule.cls, ""


def find_wait(frames: tuple[str, ...] | list[str], rules: Rules | None = None) -> str | None:
    """The wait class the rules give this stack (frames root first), or ``None`` when no rule
    matches any of the frames near the leaf (a thread that is probably running)."""
    hit = find_rule(frames, rules)
    return hit[0] if hit else None


def idle_label(frames: tuple[str, ...] | list[str], rules: Rules | None = None) -> str | None:
    """Whether a blocked stack (frames root first) waits for work: the label of the nearest
    ``idle`` row met among its scanned frames (empty when that row has none), or ``None``."""
    if rules is None and _LABEL_RULES is not None:
        rules = _LABEL_RULES
    r = rules or default_rules()
    if r.idle is None:
        return None
    if rules is None:
        return _default_idle(tuple(frames))
    return _idle_in(frames, r.idle)


@lru_cache(maxsize=1 << 16)
def _default_idle(frames: tuple[str, ...]) -> str | None:
    idle = default_rules().idle
    return _idle_in(frames, idle) if idle is not None else None


def _idle_in(frames: tuple[str, ...] | list[str], idle: Rules) -> str | None:
    for i in range(len(frames) - 1, max(len(frames) - SCAN_DEPTH, 0) - 1, -1):
        if idle.frame_rules(frames[i]):
            rule = _rule_at(frames, i, idle)
            if rule is not None:
                return rule.label
    if idle.roots:
        root = ";".join(frames[:ROOT_FRAMES])
        for rx, label in idle.roots:
            if rx.match(root):
                return label
    return None


def idle_thread(name: str, rules: Rules | None = None) -> str | None:
    """Whether a thread of this name waits for work whenever it is blocked (an idle row on a
    thread's name, ``thread``: the kernel's io_uring workers): that row's label, or ``None``."""
    r = rules or label_rules()
    for rx, label in r.idle.threads if r.idle is not None else ():
        if rx.match(name):
            return label
    return None


def classify_label(frames: tuple[str, ...] | list[str], kstate: str = "",
                   rules: Rules | None = None) -> tuple[str, str]:
    """``(class, label)`` of an off-CPU stack (frames root first)."""
    cls, label = find_rule(frames, rules) or ("", "")
    if kstate == "D" and cls in ("", FALLBACK):
        return "io", ""
    return cls or FALLBACK, label


def classify(frames: tuple[str, ...] | list[str], kstate: str = "",
             rules: Rules | None = None) -> str:
    """The wait class of an off-CPU stack (frames root first)."""
    return classify_label(frames, kstate, rules)[0]


@lru_cache(maxsize=1 << 16)
def _label_of(frames: tuple[str, ...], wait: str) -> str:
    hit = find_rule(frames)
    return hit[1] if hit and hit[0] == wait else ""


def wait_label(frames: tuple[str, ...], wait: str) -> str:
    """The sub-label of an off-CPU stack already classified ``wait``: the label of the built-in
    or ``set_label_rules`` rule that gives it that class (empty when none does)."""
    if _LABEL_RULES is not None:
        hit = find_rule(frames, _LABEL_RULES)
        return hit[1] if hit and hit[0] == wait else ""
    return _label_of(frames, wait)


_LABEL_RULES: Rules | None = None


def label_rules() -> Rules:
    """The rules stacks are labelled with (``set_label_rules``'s, else the built-in table)."""
    return _LABEL_RULES or default_rules()


def set_label_rules(rules: Rules | None) -> None:
    """Label stacks with these rules (a user's ``--rules`` file and the built-in table) rather
    than the built-in table alone."""
    global _LABEL_RULES
    _LABEL_RULES = rules
