"""The wait classes: one table, from which every list, label, colour and lock test is taken.

Python takes its lists from here (``WAIT_CLASSES``, ``LOCK_CLASSES``), the text report its
column heads (``short``), the HTML page, its legend, tables and tooltips its labels and
colours (``page_table()`` goes into the page's embedded data, and the legend's CSS is made
from it), the SVG writer its colours, ``wallflame check --help`` its list of classes.
``tests/unit/hub/test_waitclasses.py`` reads every output back and fails if one disagrees.

Adding a wait class is one line in ``WAIT_TABLE`` (at the place it should be shown, since
the table's order is the display order), plus, for it to receive any time, a rule that
assigns it (``wallflame/rules.tsv``) or a collector that does.

A colour is given per channel (red, green, blue) as ``(base, spread, seed)``: the channel is
``base + spread * h`` where ``h`` in [0, 1) is the frame name's hash (seed 0) or a second hash
of it (seed 1, on-CPU green only), so frames of one class vary a little and stay
recognisable.  The legend's swatch is the colour at ``h = 0.5``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Channel = tuple[int, int, int]
Colour = tuple[Channel, Channel, Channel]


@dataclass(frozen=True)
class WaitClass:
    """One class of thread time.

    label: its name for a reader (legends, column heads, tooltips);
    short: its column head in the text report (8 characters at most);
    lock: its waits are on a lock (the locks panel, lock and holder attribution).
    """

    name: str
    label: str
    short: str
    colour: Colour
    lock: bool = False


#: Time on a CPU: not a wait class, but drawn, labelled and coloured beside them.
ON_CPU = WaitClass("on", "on-CPU", "on-CPU", ((205, 50, 0), (0, 230, 1), (0, 55, 0)))

#: The wait classes of off-CPU time, in display order.  ``poll`` means an idle event loop;
#: ``lock`` a database's row, table or metadata lock (``rwlock`` also holds latches).
WAIT_TABLE = (
    # name       label        short     colour (r, g, b)                              lock
    WaitClass("mutex", "mutex", "mutex", ((225, 30, 0), (20, 30, 0), (185, 40, 0)), True),
    WaitClass("rwlock", "rwlock", "rwlock", ((190, 30, 0), (0, 30, 0), (235, 0, 0)), True),
    WaitClass("lock", "lock", "lock", ((135, 30, 0), (20, 30, 0), (150, 30, 0))),
    WaitClass("condvar", "condvar", "condv", ((70, 40, 0), (150, 40, 0), (205, 30, 0))),
    WaitClass("io", "I/O", "io", ((60, 40, 0), (105, 40, 0), (225, 25, 0))),
    WaitClass("poll", "idle poll", "poll", ((196, 24, 0), (196, 24, 0), (196, 24, 0))),
    WaitClass("sleep", "sleep", "sleep", ((135, 40, 0), (195, 30, 0), (235, 0, 0))),
    WaitClass("other", "other", "other", ((120, 30, 0), (130, 30, 0), (185, 30, 0))),
    # Waiting for a CPU (preempted, or woken and not yet running): not blocked, a state of its
    # own; its stacks are where the thread was preempted or had blocked.  Teal.
    WaitClass("runnable", "runnable", "runnable", ((20, 30, 0), (150, 30, 0), (150, 30, 0))),
)

#: Names of the wait classes, in display order.
WAIT_CLASSES = tuple(c.name for c in WAIT_TABLE)
#: Waiting for a CPU: the one class of off-CPU time that is not blocked.
RUNNABLE = "runnable"
#: The classes of blocked time (what a classification rule may assign).
BLOCKED_CLASSES = tuple(c for c in WAIT_CLASSES if c != RUNNABLE)
#: Wait classes whose waits are on a lock (attributed to a lock and its holders).
LOCK_CLASSES = tuple(c.name for c in WAIT_TABLE if c.lock)
#: The class that time of an unknown class is counted and drawn under.
FALLBACK = "other"
#: Every class by name, on-CPU first.
BY_NAME = {c.name: c for c in (ON_CPU, *WAIT_TABLE)}


def of(name: str) -> WaitClass:
    """The class ``name``, or the fallback class for a name not in the table."""
    return BY_NAME.get(name) or BY_NAME[FALLBACK]


def page_table() -> dict[str, dict[str, Any]]:
    """What the page's scripts read of each class (in its embedded data): label, colour and
    whether its time is blocked time."""
    return {c.name: {"label": c.label, "colour": [list(ch) for ch in c.colour],
                     "blocked": c.name in BLOCKED_CLASSES}
            for c in BY_NAME.values()}
