"""The machine's load over a window (``collect.machine``) and the check's ``same_load``.

The meter's figures are checked against the kernel's own counters of a process whose CPU
time is known: a child that spins for a set time, read from its ``/proc/PID/stat``."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wallflame.collect.machine import (
    STEAL_NOTE_ABOVE,
    TICK_S,
    LoadMeter,
    identity,
    load_figures,
    machine_ticks,
    parse_stat,
    steal_note,
)
from wallflame.profile import Profile, StackKey
from wallflame.report.gate.check import INCONCLUSIVE, PASS, SKIPPED, judge_profiles
from wallflame.report.gate.comparable import others_share
from wallflame.report.gate.thresholds import Thresholds

MS = 1_000_000


def test_machine_ticks_reads_busy_and_steal(tmp_path: Path) -> None:
    f = tmp_path / "stat"
    f.write_text("cpu  100 5 20 9000 30 2 3 7 0 0\ncpu0 50 2 10 4500 15 1 1 3 0 0\n")
    assert machine_ticks(str(f)) == (100 + 5 + 20 + 2 + 3, 7)
    for bad in ("", "cpu 1 2 3\n", "intr 1 2 3 4 5 6 7 8 9\n", "cpu a b c d e f g h i j\n",
                "\xff\xfe\n"):
        f.write_text(bad, encoding="utf-8", errors="surrogateescape")
        assert machine_ticks(str(f)) is None, bad
    assert machine_ticks(str(tmp_path / "missing")) is None
    assert machine_ticks() is not None  # this machine's


def test_parse_stat_takes_the_fields_after_the_last_parenthesis() -> None:
    fields = " ".join(str(i) for i in range(3, 53))  # field 3 (state) onwards
    # ppid is field 4, utime 14, stime 15
    assert parse_stat(f"42 (a) (b c) d) {fields}") == (4, 14 + 15)
    assert parse_stat("42 (x) R 1") is None
    assert parse_stat("") is None
    assert parse_stat(f"1 (x) {fields.replace('14', 'x')}") is None


@given(st.text(max_size=200))
def test_parse_stat_never_raises(text: str) -> None:
    parse_stat(text)


def test_load_figures_subtract_the_target_and_the_collect() -> None:
    hz = 1 / TICK_S
    # process 4 had run for 100 s before the window and joined the target during it: only
    # what it used within the window counts; 3 and 6 started within it
    a = {"t": 10.0, "busy": 0, "steal": 0, "own": 0.0,
         "ticks": {1: 10 * hz, 2: 0, 4: 100 * hz, 5: 0, 9: 7 * hz}, "target": [1, 2], "ours": [5]}
    b = {"t": 12.0, "busy": 3 * hz, "steal": 0.2 * hz, "own": 0.1 * hz,
         "ticks": {1: 10.5 * hz, 2: 0.5 * hz, 3: 0.5 * hz, 4: 100.5 * hz, 5: 0.1 * hz,
                   6: 0.2 * hz, 9: 8 * hz},
         "target": [1, 2, 3, 4], "ours": [5, 6]}
    m = load_figures(a, b, 2)
    assert m is not None
    # 3 CPU-seconds busy over 2 s; the target 2 of them; the collect 0.4; the rest 0.6
    assert m["busy_cpus"] == 1.5 and m["target_cpus"] == 1.0 and m["collect_cpus"] == 0.2
    assert m["other_cpus"] == 0.3 and m["steal_cpus"] == 0.1 and m["cpus"] == 2
    assert load_figures(a, {**b, "t": 10.0}, 2) is None
    assert "target_exited" not in m
    # process 2 of the target ended within the window: said so
    ended = load_figures(a, {**b, "ticks": {k: v for k, v in b["ticks"].items() if k != 2}}, 2)
    assert ended is not None and ended["target_exited"] == 1
    busy_less = load_figures(a, {**b, "busy": 0}, 2)
    assert busy_less is not None and busy_less["other_cpus"] == 0.0  # never below zero


SPIN = ("import time\nend = time.process_time() + {s}\n"
        "while time.process_time() < end: pass\n")


def _spin_elsewhere(seconds: float) -> int:
    """A process spinning for ``seconds`` of CPU that is not this process's descendant
    (started through a shell that exits at once): another process on the machine."""
    out = subprocess.run(["sh", "-c", '"$0" -c "$1" >/dev/null 2>&1 & echo $!',
                          sys.executable, SPIN.format(s=seconds)],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        s = parse_stat(f.read())
    assert s is not None
    return s[1] * TICK_S


def test_meter_counts_a_spinning_process_as_the_target_or_as_others() -> None:
    """A process spinning through the window, counted as the target, then as another process
    (not the collect's: not a descendant of this one): the meter's figure against the
    process's own CPU time from the kernel, read at the window's ends.  Ticks are 10 ms:
    0.03 CPUs over a window of about a second is three ticks.  Others can only be more than
    the spinner (the rest of the machine is in them too); a child of this process counts
    as the collect's."""
    for as_target in (True, False):
        pid = _spin_elsewhere(30)
        meter = LoadMeter(lambda p=pid, t=as_target: [p] if t else [])
        time.sleep(0.05)
        t0 = time.monotonic()
        before = _cpu_s(pid)
        meter.start()
        t1 = time.monotonic()
        time.sleep(0.9)
        t2 = time.monotonic()
        m = meter.stop()
        after = _cpu_s(pid)
        t3 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        assert m is not None and m["cpus"] == os.cpu_count()
        spent = (after - before) / m["seconds"]
        # the test's reads bracket the meter's: between them the spinner can have used at
        # most one CPU (a loaded machine may stretch those gaps), and each read is to a tick
        slack = 0.03 + ((t1 - t0) + (t3 - t2)) / m["seconds"]
        assert spent > 0.2  # it did spin through the window
        if as_target:
            assert abs(m["target_cpus"] - spent) <= slack, (m, spent, slack)
        else:
            assert m["other_cpus"] >= spent - slack and m["target_cpus"] == 0.0, (m, spent)
    child = subprocess.Popen([sys.executable, "-c", SPIN.format(s=0.5)])
    meter = LoadMeter(list)
    meter.start()
    child.wait()
    m = meter.stop()
    # a child (waited for): the collect's own, its 0.5 s of CPU to a tick or two
    assert m is not None and m["collect_cpus"] * m["seconds"] >= 0.45, m


def profile_under(load: float | None, **machine: object) -> Profile:
    p = Profile()
    p.meta.window_ns = 5 * 10**9
    p.meta.rates = {"perf_hz": 999.0}
    p.meta.samples = {"perf": 5000}
    for tid in (1, 2):
        p.add(StackKey(("main", "work", "leaf"), tid, "w"), 2000 * MS)
        p.add(StackKey(("main", "other"), tid, "w"), 500 * MS)
    if load is not None:
        p.meta.extra["machine"] = {"cpus": 2, "other_cpus": load * 2, "steal_cpus": 0.0,
                                   **machine}
    return p


def test_same_load_compares_what_the_rest_of_the_machine_took() -> None:
    v = judge_profiles(profile_under(0.05), profile_under(0.50))
    r = next(r for r in v.results if r.name == "same_load")
    assert r.status == INCONCLUSIVE and v.status == INCONCLUSIVE
    assert "5% of the machine's CPUs during the baseline, 50% during the current" in r.message
    assert "current's could differ" in r.message
    r = next(r for r in judge_profiles(profile_under(0.5), profile_under(0.05)).results
             if r.name == "same_load")
    assert r.status == INCONCLUSIVE and "baseline's could differ" in r.message
    same = judge_profiles(profile_under(0.05), profile_under(0.20))
    assert next(r for r in same.results if r.name == "same_load").status == PASS
    t = Thresholds()
    t.set("max_load_difference", 0.1, "test")
    assert judge_profiles(profile_under(0.05), profile_under(0.20), t).status == INCONCLUSIVE
    # steal counts with the other processes
    stolen = judge_profiles(profile_under(0.05), profile_under(0.05, steal_cpus=0.8))
    assert next(r for r in stolen.results if r.name == "same_load").status == INCONCLUSIVE
    # a series: the sides' means
    series = judge_profiles([profile_under(0.0), profile_under(0.4)],
                            [profile_under(0.2), profile_under(0.2)])
    assert next(r for r in series.results if r.name == "same_load").status == PASS
    unknown = judge_profiles(profile_under(None), profile_under(0.9))
    assert next(r for r in unknown.results if r.name == "same_load").status == SKIPPED


def test_others_share_of_hostile_records() -> None:
    assert others_share({"cpus": 4, "other_cpus": 1.0, "steal_cpus": 1.0}) == 0.5
    for bad in (None, [], "x", {}, {"cpus": 0, "other_cpus": 1}, {"cpus": "a", "other_cpus": 1},
                {"cpus": 2, "other_cpus": None}, {"cpus": 2, "other_cpus": float("nan")},
                {"cpus": 2, "other_cpus": float("inf")}, {"cpus": -1, "other_cpus": 1}):
        assert others_share(bad) is None, bad
    assert not math.isnan(others_share({"cpus": 2, "other_cpus": 0}) or 0.0)


def test_the_report_shows_the_load_and_trusts_only_numbers() -> None:
    from wallflame.report.html import render_html
    from wallflame.report.summary import machine_load

    p = profile_under(0.3)
    p.meta.extra["machine"].update(target_cpus=1.25, collect_cpus=0.05, steal_cpus=0.2)
    html = render_html(p)
    assert "other processes used 0.60 of the machine's 2 CPUs and the hypervisor " \
           "took 0.20 more (steal); the target 1.25, the collect 0.05" in html
    hostile = {"cpus": 2, "other_cpus": "<script>alert(1)</script>", "target_cpus": float("nan"),
               "collect_cpus": True, "steal_cpus": -1, "busy_cpus": 1.5, "x": "<b>"}
    assert machine_load(hostile) == {"cpus": 2.0, "busy_cpus": 1.5}
    for bad in (None, [], "x", {"cpus": 0}, {"cpus": "2"}, {"other_cpus": 1}):
        assert machine_load(bad) == {}
    p.meta.extra["machine"] = hostile
    html = render_html(p)
    assert "<script>alert(1)</script>" not in html and "other processes used 0.00" in html
    p.meta.extra.pop("machine")
    assert "Machine load" not in render_html(p)


@pytest.mark.parametrize(("machine", "share"), [
    ({"cpus": 2, "steal_cpus": 0.383}, "19%"),  # seen beside a full run of the tests
    ({"cpus": 2, "steal_cpus": 0.06}, "3%"),
    ({"cpus": 2, "steal_cpus": 0.04}, None),  # exactly 2%: not over it
    ({"cpus": 2, "steal_cpus": 0.0}, None),
    ({"cpus": 2}, None),  # an older run directory: no steal recorded
    ({}, None),  # the counters could not be read
    ({"cpus": 0, "steal_cpus": 1.0}, None),
    ({"cpus": "2", "steal_cpus": "x"}, None),
])
def test_steal_note(machine: dict[str, object], share: str | None) -> None:
    note = steal_note(machine)
    if share is None:
        assert note is None
    else:
        assert note is not None and f"took {share} of the machine's CPUs" in note
    assert STEAL_NOTE_ABOVE == 0.02


HOST = {"cpu_model": "AMD EPYC 7B13", "cpus": 2, "kernel": "6.1.0", "governor": "none",
        "vm": True}


@pytest.mark.parametrize(("a", "b", "across", "status", "said"), [
    (HOST, HOST, False, PASS, "same machine"),
    (HOST, {**HOST, "cpu_model": "Intel Xeon"}, False, INCONCLUSIVE,
     "cpu_model 'AMD EPYC 7B13' vs 'Intel Xeon'"),
    (HOST, {**HOST, "cpus": 4, "vm": False}, False, INCONCLUSIVE, "cpus 2 vs 4"),
    (HOST, {**HOST, "governor": "performance"}, False, INCONCLUSIVE, "governor"),
    (HOST, {**HOST, "kernel": "6.8.0"}, True, PASS, "judged as alike as asked"),
    (HOST, None, False, SKIPPED, "not recorded"),
])
def test_same_machine_compares_each_runs_machine(
        a: dict[str, object], b: dict[str, object] | None, across: bool, status: str,
        said: str) -> None:
    t = Thresholds()
    if across:
        t.set("across_machines", "true", "test")
    before = profile_under(0.05, identity=a)
    after = profile_under(0.05, **({"identity": b} if b is not None else {}))
    v = judge_profiles(before, after, t)
    r = next(r for r in v.results if r.name == "same_machine")
    assert r.status == status and said in r.message, r.message
    if status == INCONCLUSIVE:
        assert v.status == INCONCLUSIVE and "--across-machines" in r.message


def test_identity_reads_the_model_the_hypervisor_flag_and_the_governor(tmp_path: Path) -> None:
    proc, cpu = tmp_path / "proc", tmp_path / "cpu"
    proc.mkdir()
    (cpu / "cpu0" / "cpufreq").mkdir(parents=True)
    (proc / "cpuinfo").write_text("processor\t: 0\nmodel name\t: AMD  EPYC 7B13\n"
                                  "flags\t\t: fpu vme hypervisor lahf_lm\n\n"
                                  "processor\t: 1\nmodel name\t: AMD EPYC 7B13\n")
    (cpu / "cpu0" / "cpufreq" / "scaling_governor").write_text("schedutil\n")
    got = identity(str(proc), str(cpu))
    assert got["cpu_model"] == "AMD EPYC 7B13" and got["vm"] is True
    assert got["governor"] == "schedutil" and got["kernel"] == os.uname().release
    bare = identity(str(tmp_path / "none"), str(tmp_path / "none"))
    assert bare["cpu_model"] == "unknown" and bare["governor"] == "none" and bare["vm"] is False


def test_a_bad_across_machines_value_is_a_clear_error() -> None:
    from wallflame.errors import InputError

    with pytest.raises(InputError, match="across_machines"):
        Thresholds().set("across_machines", "maybe", "test")
