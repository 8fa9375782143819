"""wallflame check: settings, config, verdicts and exit codes, series, Markdown, JUnit and JSON
output.  The profiles here have no per-slice figures: their noise is sampling error alone
(binomial shares), so the figures asserted are exact."""

from __future__ import annotations

import copy
import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from wallflame.cli import cli
from wallflame.errors import EXIT_INCONCLUSIVE, EXIT_INPUT, EXIT_OK, EXIT_REGRESSION, InputError
from wallflame.profile import OFF, Profile, StackKey
from wallflame.report.gate.check import FAIL, INCONCLUSIVE, PASS, SKIPPED, Verdict, judge_profiles
from wallflame.report.gate.output import junit, markdown, to_json
from wallflame.report.gate.thresholds import Thresholds, load_thresholds

MS = 1_000_000
FIX = FIXTURES / "diff"


def run(extra_ms: int = 0, hold_wait_ms: int = 100, perf: int = 5000, window_s: float = 5.0,
        snapshots: int = 100, lock: str = "0x55d0 <shared_lock>") -> Profile:
    """A profile shaped like the mix sample: spin 6, hold 2 (+ extra) ms per cycle, 3 threads."""
    p = Profile()
    p.meta.window_ns = int(window_s * 1e9)
    p.meta.rates = {"perf_hz": 999.0}
    p.meta.samples = {"perf": perf, "snapshots": snapshots}
    cycles = 250
    for tid in (1, 2, 3):
        name = f"mix-{tid}"
        p.add(StackKey(("worker_loop", "spin_work", "mix_hash"), tid, name), 6 * MS * cycles)
        p.add(StackKey(("worker_loop", "critical_section", "spin_work"), tid, name),
              2 * MS * cycles)
        if extra_ms:
            p.add(StackKey(("worker_loop", "extra_work"), tid, name), extra_ms * MS * cycles)
        p.add(StackKey(("worker_loop", "pthread_mutex_lock"), tid, name, 0, OFF, "mutex", lock),
              hold_wait_ms * MS * 5)
        p.add(StackKey(("worker_loop", "nap", "nanosleep"), tid, name, 0, OFF, "sleep"),
              4 * MS * cycles)
    return p


def statuses(v: Verdict) -> dict[str, str]:
    return {r.name: r.status for r in v.results}


def result(v: Verdict, name: str):  # type: ignore[no-untyped-def]
    return next(r for r in v.results if r.name == name)


def check(a: Profile | list[Profile], b: Profile | list[Profile], **settings: object) -> Verdict:
    t = Thresholds()
    for k, val in settings.items():
        t.set(k, val, "test")
    return judge_profiles(a, b, t)


def test_identical_runs_pass_and_say_what_they_could_have_seen() -> None:
    v = check(run(), run())
    assert v.status == PASS and v.exit_code == EXIT_OK
    s = statuses(v)
    assert s["frames"] == PASS and s["wait_mutex"] == PASS and s["cpu_per_work"] == SKIPPED
    assert s["sensitivity"] == PASS
    # critical_section: 25% of 5,000 samples each side, binomial SE 0.61 points per side;
    # 3 quantities tested (mix_hash, critical_section, mutex wait: worker_loop is all of the
    # on-CPU time, rwlock and io waits are zero), so the strictest level is 0.01 / 3:
    # (z(1 - 0.0033) + z(0.8)) * 0.866 = 3.08 points with the slices' noise alone, times
    # sqrt(3) with single runs' default frame_run_excess (3): 5.33 points
    r = result(v, "sensitivity")
    assert "critical_section" in r.message and "+5.33 points" in r.message, r.message
    r = result(check(run(), run(), frame_run_excess=1), "sensitivity")
    assert "+3.08 points" in r.message, r.message
    assert "on 3 quantities" in v.method
    text = markdown(v)
    assert "What changed, and what these runs could have seen" in text
    # 1.96 * 0.866 * sqrt(3) = 2.94 points
    assert "critical\\_section | 25.00% | 25.00% | +0.00 points (95% CI -2.94 points" in text


def test_extra_cpu_in_one_function_fails_and_names_it_with_its_interval() -> None:
    v = check(run(), run(extra_ms=2))
    assert v.status == FAIL and v.exit_code == EXIT_REGRESSION
    r = result(v, "frames")
    assert r.status == FAIL and r.changes[0].name == "extra_work"
    assert r.changes[0].b == pytest.approx(0.2)  # 2 of 10 ms of CPU per cycle
    assert "extra_work 0.00% -> 20.00%, +20.00 points (95% CI +18.08 points" in r.message
    text = markdown(v, "diff.html")
    assert "extra\\_work" in text and "+20.00 points" in text and "`diff.html`" in text
    assert "**regression**" in text


def test_a_small_change_is_not_a_regression_below_the_minimum_effect() -> None:
    a, b = run(perf=500_000), run(perf=500_000, extra_ms=0)
    b.add(StackKey(("worker_loop", "tiny"), 1, "mix-1"), 60 * MS)  # under 1 point of 6,060 ms
    v = check(a, b)
    tiny = next(j for j in v.judged if j.name == "tiny")
    assert tiny.cmp.p < 1e-6 and not tiny.regression and v.status == PASS
    assert check(a, b, min_effect_pp=0.1).status == FAIL


def test_mutex_contention_fails_and_names_the_lock() -> None:
    v = check(run(), run(hold_wait_ms=600, lock="0x77aa <shared_lock>"))
    s = statuses(v)
    assert v.status == FAIL and s["wait_mutex"] == FAIL
    r = result(v, "wait_mutex")
    assert "most grown lock: shared_lock" in r.message and r.changes[1].name == "shared_lock"
    assert r.changes[0].a == pytest.approx(0.3) and r.changes[0].b == pytest.approx(1.8)
    assert "+1.500 s/s" in markdown(v)


def started(profiles: list[Profile], *starts_s: float) -> list[Profile]:
    """``profiles`` collected at these times (seconds): ``interleaved`` reads them."""
    for p, t in zip(profiles, starts_s, strict=True):
        p.meta.extra["window_start_ns"] = int((1_800_000_000 + t) * 1e9)
    return profiles


def test_frame_run_excess_widens_single_run_frames_only() -> None:
    """One run per side cannot measure how much more its frames move between runs than
    within one: ``frame_run_excess`` is the prior (default 3)."""
    a, b = run(), run(extra_ms=2)
    plain = next(j for j in check(a, b, frame_run_excess=1).judged if j.name == "extra_work")
    wide_v = check(a, b, frame_run_excess=4.0)
    wide = next(j for j in wide_v.judged if j.name == "extra_work")
    assert wide.cmp.se == pytest.approx(2 * plain.cmp.se)  # variance x4
    assert "4x what the slices of each run show: frame_run_excess" in wide_v.method
    default = next(j for j in check(a, b).judged if j.name == "extra_work")
    assert default.cmp.se == pytest.approx(math.sqrt(3) * plain.cmp.se)
    below = check(a, a, frame_run_excess=0.5)  # never below what the slices show
    assert next(j for j in below.judged if j.name == "mix_hash").cmp.se == pytest.approx(
        next(j for j in check(a, a, frame_run_excess=1).judged if j.name == "mix_hash").cmp.se)


def test_series_collected_apart_keep_the_prior_and_in_turns_measure_it() -> None:
    """A series measures how much its runs differ, but only for what moves while it is
    collected: sides collected at different times (a stored baseline, or BASELINE's runs
    all before CURRENT's) also differ by what moved in between, so the priors stay floors;
    sides collected in turns measure all of it."""
    def sides(*starts: float) -> tuple[list[Profile], list[Profile]]:
        a, b = [run(), run()], [run(extra_ms=2), run(extra_ms=2)]
        started([*a, *b], *starts)
        return a, b

    apart = check(*sides(0, 10, 20, 30), frame_run_excess=4.0)
    assert "not collected in turns" in apart.method and "4x what the slices" in apart.method
    assert "never below 4% for CPU per unit of work (run_cv)" in apart.method
    turns = check(*sides(0, 20, 10, 30), frame_run_excess=4.0)
    assert "frame_run_excess" not in turns.method  # measured in the series instead
    se = {name: next(j for j in v.judged if j.name == "extra_work").cmp.se
          for name, v in (("apart", apart), ("turns", turns))}
    assert se["apart"] == pytest.approx(2 * se["turns"])  # the series' runs are identical
    unknown = check([run(), run()], [run(), run()])  # no start times: taken as apart
    assert "not collected in turns" in unknown.method
    # the sides' runs collected at the same times: not in turns either
    assert "not collected in turns" in check(*sides(0, 10, 10, 20)).method


def test_a_grown_wait_class_names_the_rule_when_no_lock_is_identified() -> None:
    """A database's row-lock waits (class ``lock``, judged by default) name their rule: no
    glibc lock is identified for them."""
    row = ("start_thread", "mysql_execute_command", "handler::ha_update_row", "lock_wait",
           "pthread_cond_timedwait", "__futex_abstimed_wait_common")
    a, b = run(), run()
    for tid in (1, 2, 3):
        a.add(StackKey(row, tid, f"mix-{tid}", 0, OFF, "lock"), 50 * MS)
        b.add(StackKey(row, tid, f"mix-{tid}", 0, OFF, "lock"), 1_500 * MS)
    v = check(a, b)
    r = result(v, "wait_lock")
    assert v.status == FAIL and r.status == FAIL
    assert "most grown wait: lock: InnoDB row lock (0.030 -> 0.900 s/s)" in r.message
    assert statuses(check(a, a))["wait_lock"] == PASS


def test_a_wait_that_took_time_from_the_others_is_not_a_regression() -> None:
    """A server that no longer waits for its disk waits for its latches instead (MariaDB with
    ``innodb_flush_log_at_trx_commit=0``): the latch wait grew, the judged waits together
    fell, and the check says so instead of failing."""
    disk = ("start_thread", "log_write_up_to", "fdatasync")
    a, b = run(hold_wait_ms=100, snapshots=1000), run(hold_wait_ms=600, snapshots=1000)
    for tid in range(10, 19):  # nine log writers, 4 s of the 5 s window each, then 10 ms
        a.add(StackKey(disk, tid, "log-writer", 0, OFF, "io"), 4_000 * MS)
        b.add(StackKey(disk, tid, "log-writer", 0, OFF, "io"), 10 * MS)
    v = check(a, b)
    r = result(v, "wait_mutex")
    assert v.status == PASS and r.status == PASS, r.message
    assert "0.300 s/s -> 1.800 s/s" in r.message
    assert "grew while the judged waits together fell, 7.500 s/s -> 1.818 s/s" in r.message
    assert "most of it io (-7.182 s/s)" in r.message
    together = next(j for j in v.rows() if j.name == "judged classes together")
    assert not together.tested and not together.regression
    # the same growth with the disk wait unchanged is a regression
    c = run(hold_wait_ms=600, snapshots=1000)
    for tid in range(10, 19):
        c.add(StackKey(disk, tid, "log-writer", 0, OFF, "io"), 4_000 * MS)
    assert result(check(a, c), "wait_mutex").status == FAIL
    # and with only one class judged there is nothing for it to have taken time from
    assert result(check(a, b, wait_classes="mutex"), "wait_mutex").status == FAIL


def test_collected_differently_is_inconclusive_with_reason() -> None:
    v = check(run(), run(snapshots=0))
    assert v.status == INCONCLUSIVE and v.exit_code == EXIT_INCONCLUSIVE
    r = result(v, "same_collectors")
    assert r.status == INCONCLUSIVE and "evidence perf,snapshots vs perf" in r.message


def test_too_few_samples_is_inconclusive_and_says_what_would_go_unseen() -> None:
    v = check(run(), run(perf=300))
    r = result(v, "sensitivity")
    assert v.status == INCONCLUSIVE and r.status == INCONCLUSIVE
    assert "would go unseen" in r.message and "collect longer or add runs" in r.message
    assert check(run(perf=300), run()).status == INCONCLUSIVE  # either side
    # the same few samples on both sides of a large regression: still a regression
    assert check(run(perf=300), run(perf=300, extra_ms=6)).status == FAIL


def test_losses_widen_the_intervals_and_too_many_make_it_inconclusive() -> None:
    after = run(extra_ms=2)
    clean = next(j for j in check(run(), after, frame_run_excess=1).judged
                 if j.name == "extra_work")
    after.meta.lose("lost perf events", 0, 300, "perf lost 300 events")  # 5.6% of 5,400
    v = check(run(), after, frame_run_excess=1)
    lossy = next(j for j in v.judged if j.name == "extra_work")
    assert v.status == FAIL  # a few percent lost: still judged ...
    # ... with a wider interval: the lost 5.6% may have held up to 5.6% of the 20% share
    # more or less (uniform: variance (0.056 * 0.2)^2 / 3 added)
    lost = 300 / 5400
    assert lossy.cmp.b.var - clean.cmp.b.var == pytest.approx((lost * 0.2) ** 2 / 3)
    assert lossy.high - lossy.low > 1.4 * (clean.high - clean.low)
    r = result(v, "complete_data")
    assert r.status == PASS and "current: 300 lost perf events (5.6%)" in r.message
    after.meta.lose("lost perf events", 0, 3000)  # 3,300 of 8,400: 39%
    v = check(run(), after)
    assert v.status == INCONCLUSIVE and "39.3% of the evidence lost" in \
        result(v, "complete_data").message
    assert check(run(), after, allowed_losses="lost perf events",
                 frame_run_excess=1).status == FAIL


def test_truncated_data_is_inconclusive_however_little() -> None:
    cut = run()
    cut.meta.lose("malformed folded line", 4000, 1)  # a file cut short
    r = result(check(run(), cut), "complete_data")
    assert r.status == INCONCLUSIVE and "malformed folded line" in r.message


def test_rate_mismatch_is_inconclusive() -> None:
    after = run()
    after.meta.rates = {"perf_hz": 99.0}
    r = result(check(run(), after), "same_collectors")
    assert r.status == INCONCLUSIVE and "perf_hz 999.0 vs 99.0" in r.message
    adaptive = run()
    adaptive.meta.rates = {"perf_hz": 999.0, "pmp_hz": 5.0}  # halved under a pause budget
    base = run()
    base.meta.rates = {"perf_hz": 999.0, "pmp_hz": 10.0}
    assert check(base, adaptive).status == PASS


def even_slices(p: Profile, work: float, k: int = 10) -> dict[str, object]:
    """Per-slice figures of a run that did the same in each of its ``k`` slices (their
    spread is then below sampling error, which the check takes instead)."""
    on = sum(w for key, w in p.stacks.items() if key.state == "on")
    return {"version": 1, "k": k, "t0_ns": 0, "t1_ns": 10**10, "on": [on / k] * k,
            "samples": [p.meta.samples.get("perf", 0) / k] * k, "functions": {},
            "work": [work / k] * k}


def check_work(a: Profile, b: Profile, work_a: float, work_b: float,
               units: tuple[str, str] = ("messages", "messages")) -> Verdict:
    """Two runs that report work (per slice, as progress lines give it)."""
    from wallflame.report.diff.compare import _meta_digest, compare
    from wallflame.report.gate.check import judge
    from wallflame.report.gate.quantities import make_run

    t = Thresholds()
    runs = [make_run(label, p, _meta_digest(p), even_slices(p, w), {"work": w, "unit": u})
            for label, p, w, u in (("a", a, work_a, units[0]), ("b", b, work_b, units[1]))]
    return judge([runs[0]], [runs[1]], compare(a, b), t)


def test_cpu_per_work() -> None:
    r = result(check_work(run(), run(extra_ms=2), 10000, 10000), "cpu_per_work")
    assert r.status == FAIL and "+25.0%" in r.message and "ns/messages" in r.message
    # more work for the CPU: fine, and frames are then judged per unit of work (their
    # shares grew only because the rest shrank)
    v = check_work(run(extra_ms=2), run(), 10000, 10000)
    assert result(v, "cpu_per_work").status == PASS and v.status == PASS
    assert "frames judged as on-CPU time per unit of work" in v.method
    v = check_work(run(), run(), 10000, 12500, ("messages", "requests"))
    assert result(v, "cpu_per_work").status == SKIPPED
    # a total without progress lines: how much CPU per unit of work moves is unknown
    a, b = run(), run(extra_ms=2)
    for p in (a, b):
        p.meta.extra["work"] = {"unit": "messages", "count": 10000}
    assert result(check(a, b), "cpu_per_work").status == SKIPPED


def test_more_work_waits_are_judged_per_unit_of_work() -> None:
    """A faster server (MariaDB without a log flush per commit: the same CPU, four times the
    transactions) waits more per second on its latches only because it does more; per unit
    of work (seconds per second at the baseline's rate) its waits did not grow."""
    v = check_work(run(hold_wait_ms=100), run(hold_wait_ms=400), 10000, 40000)
    mutex = result(v, "wait_mutex")
    assert "waits per unit of work" in v.method and v.status == PASS, mutex.message
    assert "0.300 s/s -> 0.300 s/s" in mutex.message
    # per second alone the same runs would fail on the mutex
    v = check_work(run(hold_wait_ms=100), run(hold_wait_ms=400), 10000, 10000)
    assert "waits per unit of work" not in v.method and result(v, "wait_mutex").status == FAIL
    # waits that grew per unit of work (8x: single runs carry wait_run_cv, 30%) fail
    v = check_work(run(hold_wait_ms=100), run(hold_wait_ms=3200), 10000, 40000)
    assert result(v, "wait_mutex").status == FAIL and "waits per unit of work" in v.method


def test_a_series_with_a_run_without_work_per_slice_skips_cpu_per_work() -> None:
    """One run of a series whose progress lines did not span its window has no CPU per unit
    of work: the series' mean must not count it as zero (a false 'regression' of +1760%
    was seen that way), so CPU per unit of work is not judged."""
    from wallflame.report.diff.compare import _meta_digest, compare
    from wallflame.report.gate.check import judge
    from wallflame.report.gate.quantities import make_run

    def mk(label: str, p: Profile, slices: bool) -> object:
        return make_run(label, p, _meta_digest(p), even_slices(p, 10000) if slices else None,
                        {"work": 10000, "unit": "requests"})

    a = [mk("a1", run(), True), mk("a2", run(), False)]
    b = [mk("b1", run(), True), mk("b2", run(), True)]
    v = judge(a, b, compare(run(), run()), Thresholds())  # type: ignore[arg-type]
    assert result(v, "cpu_per_work").status == SKIPPED and v.status != FAIL


def test_series_use_the_spread_between_their_runs() -> None:
    """Series collected in turns (their spread holds all of the between-run noise)."""
    def check(a: list[Profile], b: list[Profile]) -> Verdict:
        a = started([copy.deepcopy(p) for p in a], 0, 20, 40)
        b = started([copy.deepcopy(p) for p in b], 10, 30, 50)
        return judge_profiles(a, b, Thresholds())

    v = check([run(), run(), run()], [run(), run(), run()])
    assert v.status == PASS and v.runs == (3, 3)
    assert "between-run noise measured over" in v.method
    # runs that differ more than sampling explains widen every interval
    wobbly = [run(extra_ms=x) for x in (0, 1, 2)]
    v = check(wobbly, [run(extra_ms=1)] * 3)
    extra = next(j for j in v.judged if j.name == "extra_work")
    quiet = next(j for j in check([run(extra_ms=1)] * 3, [run(extra_ms=1)] * 3).judged
                 if j.name == "extra_work")
    assert not extra.regression and extra.cmp.se > 10 * quiet.cmp.se
    assert re.search(r"runs differ [0-9.]+x as much as their slices predict", v.method)
    assert check([run()] * 3, [run(extra_ms=2)] * 3).status == FAIL


def test_thresholds_config_then_command_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[thresholds]\nmin_effect_pp = 25\nalpha = 0.05\n'
                   'wait_classes = ["mutex"]\n')
    t = load_thresholds(str(cfg), ["alpha=0.001"])
    assert (t.min_effect_pp, t.alpha, t.wait_classes) == (25.0, 0.001, ["mutex"])
    assert judge_profiles(run(), run(extra_ms=2), t).status == PASS  # 20 points < 25
    for bad in (["nope=1"], ["alpha=x"], ["alpha"], ["wait_classes=spin"], ["alpha=1.5"],
                ["power=0"], ["top=-1"]):
        with pytest.raises(InputError):
            load_thresholds(str(cfg), bad)
    cfg.write_text("[thresholds\n")
    with pytest.raises(InputError):
        load_thresholds(str(cfg), [])


def test_preemption_frames_are_not_judged() -> None:
    a, b = run(), run()
    b.add(StackKey(("worker_loop", "asm_sysvec_apic_timer_interrupt"), 1, "mix-1"), 800 * MS)
    assert check(a, b).status == PASS
    v = check(a, b, ignore_frames=[])
    assert v.status == FAIL and "asm_sysvec_apic_timer_interrupt" in result(v, "frames").message
    with pytest.raises(InputError):
        load_thresholds(None, ["ignore_frames=(unclosed"])


def test_markdown_escapes_hostile_names() -> None:
    evil = "<img src=x onerror=alert(1)>|[link](javascript:x)`*https://e.example www.e.example"
    a, b = run(), run()
    b.add(StackKey(("worker_loop", evil), 1, "mix-1"), 2000 * MS)
    text = markdown(check(a, b), "d`x.html")
    assert "<img" not in text and "`*" not in text
    assert not re.search(r"(?<!\\)[\[\]]", text.split("### ")[1])  # every bracket escaped
    assert ("&lt;img src=x onerror=alert(1)&gt;\\|\\[link\\](javascript:x)\\`\\*"
            "https:/&#8203;/e.example www&#8203;.e.example") in text
    assert "://" not in text
    assert "`d'x.html`" in text


def test_junit_one_case_per_test_with_intervals() -> None:
    after = run(extra_ms=2)
    after.add(StackKey(("bad\x00name\x1b",), 1, "mix-1"), MS)
    v = check(run(), after)
    root = ET.fromstring(junit(v))
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == [r.name for r in v.results]
    (prop,) = root.findall("./testsuite/properties/property")
    assert prop.get("name") == "verdict" and (prop.get("value") or "").startswith("Regression: ")
    # complete_data, same_collectors, same_machine, same_load; frames, cpu_per_work; the
    # classes; sensitivity
    assert len(cases) == 4 + 2 + len(Thresholds().wait_classes) + 1
    frame = next(c for c in cases if c.get("name") == "frames")
    failure = frame.find("failure")
    assert failure is not None and "95% CI" in (failure.text or "")
    assert "unseen under" in (failure.text or "")
    assert root.find("./testsuite").get("failures") == "1"  # type: ignore[union-attr]
    assert next(c for c in cases if c.get("name") == "cpu_per_work").find("skipped") is not None


def test_json_carries_every_quantity_and_interval() -> None:
    data = to_json(check(run(), run(extra_ms=2)))
    assert data["status"] == FAIL and data["exit_code"] == EXIT_REGRESSION
    extra = next(q for q in data["quantities"] if q["name"] == "extra_work")
    assert extra["regression"] and extra["ci95"][0] > 0.18 and extra["detectable"] > 0
    assert extra["delta_text"] == "+20.00 points"


def write_folded(path: Path, p: Profile) -> None:
    from wallflame.folded import write_folded as wf

    with open(path, "w", encoding="utf-8") as f:
        wf(p, f, annotate=True)


def write_run(path: Path, p: Profile) -> Path:
    """A minimal run directory: the folded files and meta.json (no raw/, no slices)."""
    path.mkdir(parents=True)
    write_folded(path / "oncpu.folded", p.on_cpu())
    write_folded(path / "offcpu.folded", p.off_cpu())
    (path / "meta.json").write_text(json.dumps({"profile": p.meta.to_json()}))
    return path


def test_cli_exit_codes_summary_and_files(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    base, same, worse, few = (tmp_path / n for n in ("b.folded", "s.folded", "w.folded",
                                                     "f.folded"))
    write_folded(base, run())
    write_folded(same, run())
    write_folded(worse, run(extra_ms=2))
    write_folded(few, run(perf=100))
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    r = runner.invoke(cli, ["check", str(base), str(same)])
    assert r.exit_code == EXIT_OK, r.output
    assert "wallflame check: pass: No regression" in r.output
    assert (tmp_path / "wallflame-diff.html").exists()
    r = runner.invoke(cli, ["check", str(base), str(worse), "--junit", "j.xml",
                            "--markdown", "m.md", "--html", "d.html", "--json", "v.json"])
    assert r.exit_code == EXIT_REGRESSION, r.output
    assert "extra_work" in r.output and (tmp_path / "d.html").exists()
    assert "unseen under" in (tmp_path / "d.html").read_text()
    assert ET.parse(tmp_path / "j.xml").getroot().tag == "testsuites"
    assert "`d.html`" in (tmp_path / "m.md").read_text()
    assert json.loads((tmp_path / "v.json").read_text())["status"] == "regression"
    r = runner.invoke(cli, ["check", str(base), str(few)])
    assert r.exit_code == EXIT_INCONCLUSIVE and "would go unseen" in r.output
    text = summary.read_text()
    assert text.count("## wallflame check:") == 3 and "REGRESSION" in text
    (tmp_path / ".wallflame-check.toml").write_text("[thresholds]\nmin_effect_pp = 30\n")
    assert runner.invoke(cli, ["check", str(base), str(worse)]).exit_code == EXIT_OK
    r = runner.invoke(cli, ["check", str(base), str(worse), "-t", "min_effect_pp=1"])
    assert r.exit_code == EXIT_REGRESSION
    r = runner.invoke(cli, ["check", str(base), str(worse), "-t", "bogus=1"])
    assert r.exit_code == EXIT_INPUT and "unknown threshold" in r.output


def test_cli_series_of_run_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for i in range(3):
        write_run(tmp_path / "base" / f"run{i}", run())
        write_run(tmp_path / "cur" / f"run{i}", run(extra_ms=2))
    (tmp_path / "base" / "notes.txt").write_text("not a run")  # ignored
    runner = CliRunner()
    r = runner.invoke(cli, ["check", "base", "cur", "--html", "", "--markdown", "m.md"])
    assert r.exit_code == EXIT_REGRESSION, r.output
    assert "- baseline: 3 runs, " in (tmp_path / "m.md").read_text()
    r = runner.invoke(cli, ["check", "base", "base/run0", "--html", ""])
    assert r.exit_code == EXIT_OK, r.output
    (tmp_path / "empty").mkdir()
    r = runner.invoke(cli, ["check", "base", "empty", "--html", ""])
    assert r.exit_code == EXIT_INPUT
    assert "neither a run directory nor a directory of run directories" in r.output
    assert "Traceback" not in r.output


def test_cli_reads_a_work_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name, p in (("a", run()), ("b", run(extra_ms=2))):
        write_run(tmp_path / name, p)
        (tmp_path / name / "slices.json").write_text(json.dumps(even_slices(p, 10000)))
        (tmp_path / name / "work.json").write_text('{"work": 10000, "unit": "requests"}')
    r = CliRunner().invoke(cli, ["check", "a", "b", "--html", ""])
    assert r.exit_code == EXIT_REGRESSION and "per unit of work (requests)" in r.output, r.output
    (tmp_path / "b" / "work.json").write_text('{"unit": "requests"}')
    r = CliRunner().invoke(cli, ["check", "a", "b", "--html", ""])
    assert r.exit_code == EXIT_INPUT and 'no numeric "work"' in r.output


def test_plain_folded_counts_are_judged_as_shares(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("main;work 900\nmain;other 100\n")
    b.write_text("main;work 600\nmain;other 100\nmain;new_hot 300\n")
    v = check(_load(a), _load(b))
    assert v.status == FAIL
    assert statuses(v)["wait_mutex"] == SKIPPED  # no off-CPU data in plain folded files


def _load(path: Path) -> Profile:
    from wallflame.fold import load_inputs

    return load_inputs([str(path)])


def test_markdown_opens_with_the_verdict_in_one_sentence() -> None:
    """What the reader of a pull request wants first: what regressed and by how much (or why
    the runs cannot tell, or that nothing did), then the diff's largest changes in words."""
    slower = markdown(check(run(), run(extra_ms=2)))
    first = slower.split("\n")[2]
    assert first.startswith("Regression: ") and "95% CI" in first, first
    assert "The diff's largest changes" in slower
    same = markdown(check(run(), run())).split("\n")[2]
    assert same == "No regression beyond what these runs could see."
    a, b = run(), run(extra_ms=2)
    for p, model in ((a, "AMD EPYC"), (b, "Intel Xeon")):
        p.meta.extra["machine"] = {"identity": {"cpu_model": model, "cpus": 2, "kernel": "6.1",
                                                "governor": "none", "vm": True}}
    elsewhere = markdown(check(a, b)).split("\n")[2]
    assert elsewhere.startswith("Inconclusive: runs from different machines: ") and \
        "cpu\\_model 'AMD EPYC' vs 'Intel Xeon'" in elsewhere, elsewhere  # (Markdown-escaped)
