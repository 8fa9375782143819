"""The CI gate on real captures of samples/bin/mix (perf on-CPU + scheduler off-CPU).

Four runs of the unchanged sample are compared pairwise in both directions (12 checks) and as
two 2-run series; the gate's stated false-alarm rate is ``alpha`` = 1% per check.  Runs of mix
collected a minute apart under other jobs' load differ more than their slices predict (in
one CI run, spin_work at 11.5-12.5% of the on-CPU time in the first two runs and 15.5-16.8%
in the last two: 7 false alarms in 12 pairs with the between-run excess taken as 1), so the
gate takes single runs, and series not collected in turns, to differ 3x their slices'
variance (``frame_run_excess``), and does not judge runs collected under different load from
the rest of the machine (``same_load``).  The bound below is set outside what ten runs in a
row measured (MEASURED).  ``--extra-ms 2`` (about 20% more CPU, all of it in ``extra_work``)
and ``--hold-ms 20`` (longer critical sections under ``shared_lock``: mutex contention) must
fail, naming the frame or the lock, with intervals; a 0.3 s capture must be inconclusive,
saying what it could not have seen; truncated data must be inconclusive; a run collected
beside two spinning processes must not be judged against a quiet one.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from wallflame.profile import OFF
from wallflame.report.diff.compare import compare
from wallflame.report.gate.check import FAIL, INCONCLUSIVE, PASS, Verdict, ignored, judge
from wallflame.report.gate.output import markdown
from wallflame.report.gate.series import load_side
from wallflame.report.gate.thresholds import Thresholds
from wallflame.rundir import ONCPU, load_run_dir

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


DURATION_S = 10
SAME = [f"same{i}" for i in range(1, 5)]
VARIANTS = {**{name: [] for name in SAME}, "extra": ["--extra-ms", "2"],
            "hold": ["--hold-ms", "20"], "short": [], "loaded": []}
#: The unchanged program collected while this many other processes spin (not the target's,
#: not the collect's): the rest of the machine busy.
SPINNERS = 2
#: False alarms tolerated among the 12 unchanged pairs (see MEASURED: none in 120; before the
#: between-sitting floor 5 in 120 in ten runs and 7 in 12 in one CI run, all against runs
#: collected a minute apart under a different load).
MAX_FALSE_ALARMS = 4
#: What 10 runs of this file in a row measured on this 2-core machine (2026-11-26, 10 s runs;
#: runs 6-10 beside a process that spun half of each 0.1 s for 40 s then slept for 40 s, so
#: that the four unchanged runs saw different loads: the rest of the machine 0.02-0.13 CPUs
#: on a quiet machine, 0.25-0.47 beside it): false alarms 0 in 120 pairs (69 pass, 51
#: inconclusive: a 10 s run of mix just cannot show 10% more CPU in critical_section, 6.5-7.3
#: points detectable against 6.4-6.6 needed); the 2-run series passed 10/10; extra_work and
#: shared_lock caught and named 10/10; the 0.3 s capture inconclusive 20/20; the run beside
#: two spinners: the rest of the machine 1.19-1.25 CPUs, every pair with a quiet run
#: inconclusive on its load, 10/10.
MEASURED = "0 false alarms in 120 unchanged pairs (5 of the 10 runs under changing load); " \
    "caught 10/10"


def collect(out: Path, mix: Path, args: list[str], window_s: float, slack_s: float = 1
            ) -> None:
    cmd = [sys.executable, "-m", "wallflame", "collect", "-o", str(out), "--duration",
           str(window_s), "--", str(mix), "--duration", str(window_s + slack_s), *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stderr}"


@pytest.fixture(scope="module")
def runs(live: None, sample_bin: Path, tmp_path_factory: pytest.TempPathFactory
         ) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gate")
    out = {}
    for name, args in VARIANTS.items():
        out[name] = root / name
        spinners = [spin() for _ in range(SPINNERS)] if name == "loaded" else []
        # mix must outlive the window: the window opens only once every perf is ready,
        # which took seconds now and then (with 1 s of slack mix ended 4 s into one
        # window of a fresh clone's run, and inside the loaded run's once in ten)
        try:
            # "short": the same program, collected for 0.3 s only (a few hundred samples)
            collect(out[name], sample_bin / "mix", args, 0.3 if name == "short" else DURATION_S,
                    slack_s=8)
        finally:
            for pid in spinners:
                os.kill(pid, signal.SIGKILL)
    return out


def spin() -> int:
    """A process that spins for a minute, started through a shell that exits at once: not
    a descendant of this process, so neither the target's nor the collect's."""
    code = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: pass\n"
    r = subprocess.run(["sh", "-c", '"$0" -c "$1" >/dev/null 2>&1 & echo $!', sys.executable,
                        code], capture_output=True, text=True, check=True)
    return int(r.stdout.split()[0])


def check(a: Path, b: Path) -> Verdict:
    t = Thresholds()
    sides = [load_side(str(p), p.name, ignored(t)) for p in (a, b)]
    return judge(sides[0][0], sides[1][0], compare(sides[0][1], sides[1][1], (a.name, b.name)),
                 t)


def result(v: Verdict, name: str):  # type: ignore[no-untyped-def]
    return next(r for r in v.results if r.name == name)


def incomparable(v: Verdict) -> list[str]:
    """Why two captures cannot be compared (a machine so loaded that perf lost more than a
    quarter of the evidence, or other processes kept it busier during one side), if they
    cannot; the gate must then say "inconclusive"."""
    for name in ("complete_data", "same_load"):
        r = result(v, name)
        if r.status == INCONCLUSIVE:
            assert v.status == INCONCLUSIVE
            print(f"\nnot judged (inconclusive, as it must be): {r.message}")
            return [r.message]
    return []


def test_unchanged_runs_false_alarm_rate(runs: dict[str, Path]) -> None:
    # both directions: either run may be the older baseline
    verdicts = {(a, b): check(runs[a], runs[b]) for a, b in itertools.permutations(SAME, 2)}
    alarms = [p for p, v in verdicts.items() if v.status == FAIL]
    print(f"\nfalse alarms at alpha 0.01: {len(alarms)}/{len(verdicts)}")
    for (a, b), v in verdicts.items():
        notes = [f"{r.name}: {r.message}" for r in v.results if r.status not in (PASS, "skipped")]
        print(f"  {a} vs {b}: {v.status} {'; '.join(notes)}")
    assert len(alarms) <= MAX_FALSE_ALARMS, "unchanged runs judged a regression too often"
    judged = [v for v in verdicts.values() if not incomparable(v)]
    assert judged, "no pair could be compared"
    for v in judged:  # a pass, an (honest) inconclusive, or one of the tolerated alarms
        assert v.status in (PASS, FAIL) or result(v, "sensitivity").status == INCONCLUSIVE


def test_every_run_has_its_waits_per_slice(runs: dict[str, Path]) -> None:
    """``collect`` folds the scheduler's chunks while recording and keeps no text: the waits
    per slice come from ``raw/sched.bins.json``, so a wait class's within-run spread exists
    for every run.  The slices hold the class's time within the on-CPU samples' span (the
    scheduler's recorder runs a little longer on both ends)."""
    for name in [*SAME, "hold"]:
        data = json.loads((runs[name] / "slices.json").read_text())
        mutex = data["wait"]["mutex"]
        total = sum(w for k, w in load_run_dir(str(runs[name])).stacks.items()
                    if k.state == OFF and k.wait == "mutex")
        print(f"\n{name}: mutex per slice {[round(x / 1e6) for x in mutex]} ms, "
              f"{sum(mutex) / total:.3f} of the run's {total / 1e9:.3f} s")
        # the workers contend from their first cycles on; a slice without a mutex wait is
        # possible at the start (seen once in 47 runs: the first slice), so most, not all;
        # the slices held 0.787-0.998 of the run's mutex wait
        assert sum(x > 0 for x in mutex) >= 8 and 0.6 * total < sum(mutex) <= total * 1.001


def test_unchanged_series_pass(runs: dict[str, Path], tmp_path: Path) -> None:
    for side, names in (("base", SAME[:2]), ("cur", SAME[2:])):
        for n in names:
            (tmp_path / side).mkdir(exist_ok=True)
            (tmp_path / side / n).symlink_to(runs[n])
    v = check(tmp_path / "base", tmp_path / "cur")
    print(f"\nseries: {v.status}; {v.method}")
    if incomparable(v):
        return
    assert v.runs == (2, 2) and "between-run noise measured" in v.method
    assert v.status != FAIL, [r.message for r in v.results if r.status == FAIL]


def test_a_run_under_other_load_is_not_judged_against_a_quiet_one(
        runs: dict[str, Path]) -> None:
    """The unchanged program collected while two other processes spin: each run's
    ``machine`` record (the kernel's counters over the window) shows the rest of the machine
    busy, and the gate says the runs were collected under different load instead of
    judging them (a profile moves with its machine's load: critical_section's share of mix
    measured 28% on a quiet machine, 33% beside two spinning processes, unchanged code).
    Two spinners beside mix (about 1.1 CPUs) on 2 CPUs got 0.9-1.3 CPUs between them; a
    quiet run's rest of the machine measured 0.04-0.12 CPUs."""
    loaded = json.loads((runs["loaded"] / "meta.json").read_text())["machine"]
    print(f"\nloaded: {loaded}")
    assert loaded["other_cpus"] >= 0.6, loaded
    if not loaded.get("target_exited"):  # mix ended within the window: its CPU may count
        assert loaded["target_cpus"] > 0.5, loaded  # as the collect's (collect.machine)
    quiet = [json.loads((runs[n] / "meta.json").read_text())["machine"] for n in SAME]
    print("quiet: " + "; ".join(f"other {m['other_cpus']}, target {m['target_cpus']}"
                               for m in quiet))
    for name in SAME:
        for a, b in ((runs[name], runs["loaded"]), (runs["loaded"], runs[name])):
            v = check(a, b)
            load = result(v, "same_load")
            if load.status == PASS:  # the quiet run was not quiet: nothing to show here
                print(f"\n{a.name} vs {b.name}: same load: {load.message}")
                continue
            assert v.status == INCONCLUSIVE and load.status == INCONCLUSIVE, load.message
            assert "collected under different load" in load.message


@pytest.fixture(scope="module")
def base(runs: dict[str, Path]) -> Path:
    """The unchanged run with the least lost evidence and the most on-CPU samples."""
    def quality(name: str) -> tuple[bool, int]:
        v = check(runs[name], runs[name])
        return not incomparable(v), v.diff.before.n_on

    return runs[max(SAME, key=quality)]


def test_extra_cpu_fails_and_names_extra_work(runs: dict[str, Path], base: Path) -> None:
    v = check(base, runs["extra"])
    frames = result(v, "frames")
    print(f"\nextra_work: {frames.message}")
    if incomparable(v):
        return
    assert v.status == FAIL and frames.status == FAIL
    top = frames.changes[0]
    assert top.name == "extra_work" and top.a == 0
    # 2 ms more in a cycle of about 8 ms of CPU: about 20% of on-CPU time, honest margins
    assert 0.12 < top.b < 0.30 and top.low > 0.05
    text = markdown(v, "diff.html")
    assert "extra\\_work" in text and "95% CI" in text and "unseen under" in text


def test_mutex_contention_fails_and_names_the_lock(runs: dict[str, Path], base: Path) -> None:
    v = check(base, runs["hold"])
    mutex = result(v, "wait_mutex")
    print(f"\nhold: {mutex.message}")
    if incomparable(v):
        return
    assert v.status == FAIL and mutex.status == FAIL, mutex.message
    assert "shared_lock" in mutex.message and mutex.changes[0].delta > 0.5
    text = markdown(v)
    assert "shared\\_lock" in text and "s/s" in text


def test_a_short_capture_is_inconclusive_and_says_what_it_could_not_see(
        runs: dict[str, Path], base: Path) -> None:
    for a, b in ((base, runs["short"]), (runs["short"], base)):  # either side
        v = check(a, b)
        r = result(v, "sensitivity")
        print(f"\nshort: {v.status}: {r.message}")
        assert v.status == INCONCLUSIVE and r.status == INCONCLUSIVE
        assert "would go unseen" in r.message and "collect longer or add runs" in r.message


def test_truncated_capture_is_inconclusive(base: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut"
    shutil.copytree(base, cut)
    (cut / "slices.json").unlink(missing_ok=True)
    data = (cut / ONCPU).read_bytes()
    last = data.rindex(b"\n", 0, len(data) - 1) + 1
    (cut / ONCPU).write_bytes(data[:data.index(b";", last)])  # cut short inside its last line
    v = check(base, cut)
    r = result(v, "complete_data")
    assert v.status == INCONCLUSIVE and r.status == INCONCLUSIVE
    assert "cut:" in r.message and "malformed" in r.message


def test_cli_writes_summary_junit_json_and_diff(runs: dict[str, Path], base: Path,
                                                tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    cmd = [sys.executable, "-m", "wallflame", "check", str(base), str(runs["extra"]),
           "--html", str(tmp_path / "diff.html"), "--junit", str(tmp_path / "junit.xml"),
           "--json", str(tmp_path / "v.json")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False,
                       env={**os.environ, "GITHUB_STEP_SUMMARY": str(summary)})
    assert r.returncode in (1, 7), r.stderr
    verdict = "regression" if r.returncode == 1 else "inconclusive"
    last = r.stdout.splitlines()[-1]  # the verdict in words, and where the diff is
    assert last.startswith(f"wallflame check: {verdict}: {verdict.capitalize()}: ") and \
        last.endswith(f"(diff: {tmp_path / 'diff.html'})"), last
    text = summary.read_text()
    assert text.startswith("## wallflame check: ") and (tmp_path / "junit.xml").exists()
    data = json.loads((tmp_path / "v.json").read_text())
    assert data["status"] == verdict and data["quantities"]
    if r.returncode == 1:
        assert "extra_work" in r.stdout and "extra\\_work" in text
        assert "95% CI" in (tmp_path / "junit.xml").read_text()
    assert (tmp_path / "diff.html").stat().st_mode & 0o777 == 0o600
    assert "unseen under" in (tmp_path / "diff.html").read_text()
