"""A check's outcomes: each quantity judged (its comparison, interval and verdict), the status
of each test and of the whole check, its exit code, and one test's result (a JUnit test case
and a row of the summary)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from wallflame.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION
from wallflame.report.gate.quantities import PER_WORK, SHARE
from wallflame.report.gate.stats import Comparison

PASS = "pass"
FAIL = "regression"
INCONCLUSIVE = "inconclusive"
SKIPPED = "skipped"
EXIT_CODES = {PASS: EXIT_OK, FAIL: EXIT_REGRESSION, INCONCLUSIVE: EXIT_INCONCLUSIVE}


@dataclass
class Result:
    """One test: a JUnit test case and a row of the summary."""

    name: str
    status: str
    message: str
    changes: list[Judged] = field(default_factory=list)


#: Wait classes are compared as ``log(s/s + WAIT_EPS)``: a class that is empty on one side
#: still has a logarithm, and changes far below the minimum effect stay small.
WAIT_EPS = 0.01


@dataclass
class Judged:
    """One quantity compared: what it is, the comparison and whether it is a regression."""

    key: str
    kind: str
    unit: str
    cmp: Comparison
    min_effect: float
    regression: bool = False
    group: str = ""  # a lock's wait class
    tested: bool = False  # part of Holm's family (see ``_judge_quantities``)
    #: compared as ``log(x + log_eps)`` (multiplicative run-to-run noise), or linearly (None)
    log_eps: float | None = None

    @property
    def name(self) -> str:
        return self.key.split(":", 1)[1] if ":" in self.key else self.key.replace("_", " ")

    def _lin(self, x: float) -> float:
        if self.log_eps is None:
            return x
        v = math.exp(x) - self.log_eps
        return 0.0 if abs(v) < 1e-9 * max(1.0, self.log_eps) else v

    def _change(self, x: float) -> float:
        """A change on the test's scale as a change of the quantity."""
        if self.log_eps is None:
            return x
        return (self.a + self.log_eps) * (math.exp(x) - 1) if math.isfinite(x) else x

    @property
    def a(self) -> float:
        return self._lin(self.cmp.a.value)

    @property
    def b(self) -> float:
        return self._lin(self.cmp.b.value)

    @property
    def delta(self) -> float:
        return self.b - self.a

    @property
    def low(self) -> float:
        return self._change(self.cmp.low)

    @property
    def high(self) -> float:
        return self._change(self.cmp.high)

    @property
    def detectable(self) -> float:
        return self._change(self.cmp.detectable)

    def fmt(self, x: float, signed: bool = False) -> str:
        """A value (or, ``signed``, a change) in the quantity's own unit."""
        if not math.isfinite(x):
            return "unknown"
        sign = "+" if signed else ""
        if self.kind == SHARE:
            return f"{100 * x:{sign}.2f} points" if signed else f"{100 * x:.2f}%"
        if self.kind in (PER_WORK, "cpu_per_work"):
            return f"{x:{sign},.1f} ns/{self.unit}"
        return f"{x:{sign}.3f} s/s"

    def relative(self, x: float) -> str:
        if self.a:
            return f"{100 * x / self.a:+.1f}%"
        return "new" if self.b else "none on either side"

    def interval(self) -> str:
        return (f"{self.fmt(self.delta, True)} (95% CI {self.fmt(self.low, True)} to "
                f"{self.fmt(self.high, True)}; {self.relative(self.delta)})")

    def to_json(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return x if math.isfinite(x) else None

        c = self.cmp
        return {"name": self.name, "quantity": self.key, "kind": self.kind, "unit": self.unit,
                "before": num(self.a), "after": num(self.b), "delta": num(self.delta),
                "scale": "log" if self.log_eps is not None else "linear",
                "se": num(c.se), "df": num(c.df), "p": c.p,
                "ci95": [num(self.low), num(self.high)],
                "detectable": num(self.detectable), "regression": self.regression,
                "delta_text": self.fmt(self.delta, True), "low_text": self.fmt(self.low, True),
                "high_text": self.fmt(self.high, True),
                "detectable_text": self.fmt(self.detectable, True)}
