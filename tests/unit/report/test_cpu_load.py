"""The CPU-saturation finding says who used the machine's CPUs over the window: the target, the
other processes or the collect (``summary.json``'s ``quality.machine``, the kernel's counters)."""

from __future__ import annotations

from typing import Any

import pytest

from wallflame.profile import Meta, Profile
from wallflame.report.findings import findings
from wallflame.report.summary import load_words


def machine(busy: float, target: float, other: float, collect: float = 0.1) -> dict[str, float]:
    return {"cpus": 2.0, "busy_cpus": busy, "target_cpus": target, "other_cpus": other,
            "collect_cpus": collect, "steal_cpus": 0.0}


@pytest.mark.parametrize(("load", "words"), [
    # the target filled the CPUs
    (machine(2.0, 1.9, 0.0), "the machine's 2 CPUs were busy (2.00 in use over the window, by "
     "the kernel's CPU time: the target 1.90, other processes 0.00, the collect 0.10)"),
    # its neighbours did
    (machine(2.0, 0.7, 1.2), "the machine's 2 CPUs were busy (2.00 in use over the window, by "
     "the kernel's CPU time: the target 0.70, other processes 1.20, the collect 0.10); other "
     "processes used more than the target"),
    # the CPUs were not full: something else held the target
    (machine(1.0, 0.9, 0.0), "the machine's 2 CPUs were not all busy (1.00 in use over the "
     "window, by the kernel's CPU time: the target 0.90, other processes 0.00, the collect "
     "0.10): a CPU limit (quota, affinity) may hold the target"),
    # no record of the machine (a folded file, an older run)
    ({}, "the machine's CPUs were busy"),
])
def test_load_words(load: dict[str, float], words: str) -> None:
    assert load_words(load) == words


def test_the_cpu_finding_says_who_used_the_cpus() -> None:
    row: dict[str, Any] = {"tid": 1, "name": "w-1", "on_cpu_s": 4.0, "runnable_s": 6.0,
                           "off_cpu_s": 0.0, "wait": {"runnable": 6.0}}
    s = {"threads": [row], "locks": [], "quality": {"machine": machine(2.0, 1.9, 0.0)}}
    found = findings(s, Profile(meta=Meta(unit="ns")))
    assert [f.kind for f in found] == ["cpu"]
    assert found[0].text.endswith("the target 1.90, other processes 0.00, the collect 0.10)")
