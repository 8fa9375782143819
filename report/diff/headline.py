"""What changed between two runs, in words: the diff's first lines, on the page, in the text
and the JSON.

* First the findings that appeared, vanished or changed: the on-CPU time of a call of
  ``report.findingrules.CALLS`` (the allocator, Go's collector, an idle poll, ICU) whose change
  is beyond the noise floor, when it reaches its finding's threshold of the on-CPU time on one
  side only, or on both and changed by at least ``MIN_CLASS``; and the memory kept in glibc's
  malloc arenas when a side retains it (``report.findingrules.retained``) and the other holds
  at most half as much.
* Then statements in three parts, each largest change first: the wait classes and on-CPU time
  whose change is beyond the noise floor and at least ``MIN_CLASS`` (at most ``CLASSES``);
  the locks whose wait changed so (at most ``LOCKS``); the user functions whose on-CPU time
  changed most (the kernel's frames, the runtime's root frames and pseudo-frames left out), at
  least ``MIN_FUNCTION`` (at most ``FUNCTIONS``).
* Thresholds are in the diff's normalisation: seconds of thread time per second of window
  (``rate``), or points of each side's total (``share``).
"""

from __future__ import annotations

from collections import Counter

from wallflame.locks.lockshare import lock_name
from wallflame.profile import ON, RUNNABLE
from wallflame.report.diff.compare import Diff
from wallflame.report.diff.normalise import RATE, Change
from wallflame.report.findingrules import (
    CALL,
    CALLS,
    arenas_kb,
    call_names,
    retained,
    top,
    which_call,
)
from wallflame.report.findings import RULE
from wallflame.report.summary import KERNEL_ENTRY, RUNTIME_ROOT
from wallflame.waitclasses import BY_NAME

#: At most this many classes, locks and functions are named.
CLASSES, LOCKS, FUNCTIONS = 3, 2, 3
#: The smallest change of a class or a lock stated: in s per s of window, and in share.
MIN_CLASS = {RATE: 0.05, "share": 0.01}
#: The smallest change of a function's on-CPU time stated.
MIN_FUNCTION = {RATE: 0.02, "share": 0.01}


def _amount(diff: Diff, v: float) -> str:
    return f"{v:.2f} s/s" if diff.norm.mode == RATE else f"{100 * v:.1f}%"


def _how(diff: Diff, c: Change) -> str:
    before, after = _amount(diff, c.a), _amount(diff, c.b)
    if c.b == 0:
        return f"vanished ({before} before)"
    if c.a == 0:
        return f"appeared ({after} after)"
    verb = "grew" if c.delta > 0 else "shrank"
    return f"{verb} {abs(c.delta) / c.a:.0%} ({before} → {after})"


def kernel_names(diff: Diff) -> set[int]:
    """The name ids that appear only at or after a kernel entry frame in both sides'
    stacks."""
    kernel: set[int] = set()
    user: set[int] = set()
    for path in diff.stacks:
        inside = False
        for f in path:
            name = diff.names[f]
            inside = inside or name.startswith(KERNEL_ENTRY) or name.endswith("_[k]")
            (kernel if inside else user).add(f)
    return kernel - user


def _is_user_function(name: str) -> bool:
    return not (name.startswith("[") or name in RUNTIME_ROOT)


def _class_name(name: str) -> str:
    if name == ON:
        return "on-CPU time"
    return "waiting for a CPU" if name == RUNNABLE else f"{BY_NAME[name].label} wait"


def _call_changes(diff: Diff, mode: str) -> tuple[list[str], set[str]]:
    """The calls whose on-CPU time is a finding on one side and changed; and the names of
    the functions whose on-CPU time is mostly inside the calls stated (it is the call's)."""
    hits = call_names(diff.names)
    ids = {i for i, n in enumerate(diff.names) if n in hits}
    weights = {c.kind: [0, 0] for c in CALLS}
    entries: dict[str, Counter[str]] = {c.kind: Counter() for c in CALLS}
    inside: dict[str, Counter[int]] = {c.kind: Counter() for c in CALLS}
    for path, v in diff.stacks.items():
        if not (v[0] or v[2]) or ids.isdisjoint(path):
            continue
        hit = which_call(tuple(diff.names[f] for f in path[1:]))
        if hit is not None:
            kind, at, w = hit[0].kind, hit[1] + 1, v[0] + v[2]
            weights[kind][0] += v[0]
            weights[kind][1] += v[2]
            entries[kind][diff.names[path[at]]] += w
            inside[kind].update(dict.fromkeys(path[at:], w))
    out, stated = [], Counter[int]()
    for kind, (a, b) in weights.items():
        found = (a >= RULE[kind].min_share * diff.before.total_on,
                 b >= RULE[kind].min_share * diff.after.total_on)
        c = diff.change(kind, (a, 0), (b, 0), ON)
        if c.significant and any(found) and (not all(found) or abs(c.delta) >= MIN_CLASS[mode]):
            out.append((abs(c.delta), f"on-CPU time in {CALL[kind].what} "
                        f"({', '.join(top(entries[kind]))}) {_how(diff, c)}"))
            stated |= inside[kind]
    return [text for _, text in sorted(out, key=lambda t: -t[0])], _mostly(diff, stated)


def _mostly(diff: Diff, inside: Counter[int]) -> set[str]:
    """The names of ``inside``'s functions whose on-CPU weight outside those calls is less."""
    if not inside:
        return set()
    total: Counter[int] = Counter()
    for path, v in diff.stacks.items():
        if (v[0] or v[2]) and not inside.keys().isdisjoint(path):
            total.update(dict.fromkeys((f for f in path if f in inside), v[0] + v[2]))
    return {diff.names[f] for f, w in inside.items() if 2 * w > total[f]}


def _memory_change(diff: Diff) -> list[str]:
    """Memory kept in malloc arenas on one side and not on the other."""
    if None in diff.memory or not any(retained(m) for m in diff.memory):
        return []
    a, b = (arenas_kb(m) for m in diff.memory)
    if min(a, b) > max(a, b) / 2:
        return []
    verb = "shrank" if b < a else "grew"
    return [f"memory resident in glibc's malloc arenas {verb} from {a / 1024:,.1f} MB to "
            f"{b / 1024:,.1f} MB"]


def headline(diff: Diff) -> list[str]:
    """The statements: findings, classes, locks, functions."""
    mode = diff.norm.mode if diff.norm.mode == RATE else "share"
    calls, within = _call_changes(diff, mode)
    found = [*_memory_change(diff), *calls]
    # a wait class that vanished or appeared leads (the change made), then the largest
    classes = sorted((c for c in diff.class_changes()
                      if c.significant and abs(c.delta) >= MIN_CLASS[mode]),
                     key=lambda c: (c.a != 0 and c.b != 0, -abs(c.delta)))
    out = [*found, *(f"{_class_name(c.name)} {_how(diff, c)}" for c in classes[:CLASSES])]
    locks = [c for c in diff.lock_changes() if c.significant and abs(c.delta) >= MIN_CLASS[mode]]
    out += [f"wait on lock {lock_name(c.name)} {_how(diff, c)}" for c in locks[:LOCKS]]
    kernel = {diff.names[i] for i in kernel_names(diff)}
    functions = [c for c in diff.functions(ON, inclusive=False)
                 if c.significant and abs(c.delta) >= MIN_FUNCTION[mode]
                 and c.name not in kernel and _is_user_function(c.name)
                 and c.name not in within]
    out += [f"on-CPU time in {c.name} {_how(diff, c)}" for c in functions[:FUNCTIONS]]
    return out
