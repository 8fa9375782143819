"""What changed between two runs, in words: the diff's first lines, on the page, in the text
and the JSON.

* Statements in three parts, each largest change first: the wait classes and on-CPU time
  whose change is beyond the noise floor and at least ``MIN_CLASS`` (at most ``CLASSES``);
  the locks whose wait changed so (at most ``LOCKS``); the user functions whose on-CPU time
  changed most (the kernel's frames, the runtime's root frames and pseudo-frames left out), at
  least ``MIN_FUNCTION`` (at most ``FUNCTIONS``).
* Thresholds are in the diff's normalisation: seconds of thread time per second of window
  (``rate``), or points of each side's total (``share``).
"""

from __future__ import annotations

from wallflame.locks.lockshare import lock_name
from wallflame.profile import ON, RUNNABLE
from wallflame.report.diff.compare import Diff
from wallflame.report.diff.normalise import RATE, Change
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


def headline(diff: Diff) -> list[str]:
    """The statements: classes, locks, functions."""
    mode = diff.norm.mode if diff.norm.mode == RATE else "share"
    classes = sorted((c for c in diff.class_changes()
                      if c.significant and abs(c.delta) >= MIN_CLASS[mode]),
                     key=lambda c: -abs(c.delta))
    out = [f"{_class_name(c.name)} {_how(diff, c)}" for c in classes[:CLASSES]]
    locks = [c for c in diff.lock_changes() if c.significant and abs(c.delta) >= MIN_CLASS[mode]]
    out += [f"wait on lock {lock_name(c.name)} {_how(diff, c)}" for c in locks[:LOCKS]]
    kernel = {diff.names[i] for i in kernel_names(diff)}
    functions = [c for c in diff.functions(ON, inclusive=False)
                 if c.significant and abs(c.delta) >= MIN_FUNCTION[mode]
                 and c.name not in kernel and _is_user_function(c.name)]
    out += [f"on-CPU time in {c.name} {_how(diff, c)}" for c in functions[:FUNCTIONS]]
    return out
