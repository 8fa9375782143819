"""wallflame check: thresholds, config, verdicts and exit codes, Markdown and JUnit output."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from wallflame.cli import cli
from wallflame.errors import EXIT_INCONCLUSIVE, EXIT_INPUT, EXIT_OK, EXIT_REGRESSION, InputError
from wallflame.profile import OFF, Profile, StackKey
from wallflame.report.check import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    SKIPPED,
    Thresholds,
    judge,
    load_thresholds,
)
from wallflame.report.check_output import junit, markdown
from wallflame.report.diff import compare

MS = 1_000_000
FIX = Path(__file__).parent / "fixtures" / "diff"


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


def statuses(v):  # type: ignore[no-untyped-def]
    return {r.name: r.status for r in v.results}


def test_identical_runs_pass() -> None:
    v = judge(compare(run(), run()), Thresholds())
    assert v.status == PASS and v.exit_code == EXIT_OK
    s = statuses(v)
    assert s["frame_share"] == PASS and s["wait_mutex"] == PASS and s["mutex_share"] == PASS
    assert s["cpu_per_work"] == SKIPPED


def test_extra_cpu_in_one_function_fails_and_names_it() -> None:
    v = judge(compare(run(), run(extra_ms=2)), Thresholds())
    assert v.status == FAIL and v.exit_code == EXIT_REGRESSION
    r = next(r for r in v.results if r.name == "frame_share")
    assert r.status == FAIL and r.changes[0].name == "extra_work"
    assert r.changes[0].b == pytest.approx(0.2)  # 2 of 10 ms of CPU per cycle
    text = markdown(v, "diff.html")
    assert "extra\\_work" in text and "+20.00 points" in text and "`diff.html`" in text


def test_mutex_contention_fails_and_names_the_lock() -> None:
    v = judge(compare(run(), run(hold_wait_ms=600, lock="0x77aa <shared_lock>")), Thresholds())
    s = statuses(v)
    assert v.status == FAIL and s["wait_mutex"] == FAIL and s["mutex_share"] == FAIL
    r = next(r for r in v.results if r.name == "wait_mutex")
    assert "shared_lock" in r.message and r.changes[1].name == "shared_lock"
    assert r.changes[0].a == pytest.approx(0.3) and r.changes[0].b == pytest.approx(1.8)
    assert "+1.500 s/s" in markdown(v)


@pytest.mark.parametrize(("before", "after", "test", "reason"), [
    (run(perf=5000), run(perf=300), "min_samples", "300 on-CPU samples"),
    (run(), run(snapshots=0), "same_collectors", "evidence perf,snapshots vs perf"),
])
def test_inconclusive_with_reason(before: Profile, after: Profile, test: str,
                                  reason: str) -> None:
    v = judge(compare(before, after), Thresholds())
    assert v.status == INCONCLUSIVE and v.exit_code == EXIT_INCONCLUSIVE
    r = next(r for r in v.results if r.name == test)
    assert r.status == INCONCLUSIVE and reason in r.message


def test_lost_events_make_it_inconclusive_even_with_a_regression() -> None:
    after = run(extra_ms=2)
    after.meta.lose("lost perf events", 0, 300, "perf lost 300 chunks")
    v = judge(compare(run(), after), Thresholds())
    assert v.status == INCONCLUSIVE  # never a verdict on partial data, not even "fail"
    assert statuses(v)["frame_share"] == FAIL  # ... though what it saw is reported
    r = next(r for r in v.results if r.name == "complete_data")
    assert "after: 300 lost perf events" in r.message and "(5.6%" in r.message
    assert "after: 300 lost perf events" in markdown(v)
    v = judge(compare(run(), after), Thresholds(allowed_losses=["lost perf events"]))
    assert v.status == FAIL
    assert judge(compare(after, run()), Thresholds()).status == INCONCLUSIVE  # either side


def test_a_few_losses_are_tolerated_and_reported() -> None:
    after = run()
    after.meta.lose("thread without frames", 7, 1)  # 1 of 5,100 samples and snapshots
    v = judge(compare(run(), after), Thresholds())
    r = next(r for r in v.results if r.name == "complete_data")
    assert v.status == PASS and r.status == PASS and "1 thread without frames" in r.message
    strict = judge(compare(run(), after), Thresholds(max_loss_share=0))
    assert strict.status == INCONCLUSIVE
    cut = run()
    cut.meta.lose("malformed folded line", 4000, 1)  # a file cut short: however little shows
    r = next(r for r in judge(compare(run(), cut), Thresholds()).results
             if r.name == "complete_data")
    assert r.status == INCONCLUSIVE and "malformed folded line" in r.message


def test_rate_mismatch_is_inconclusive() -> None:
    after = run()
    after.meta.rates = {"perf_hz": 99.0}
    r = next(r for r in judge(compare(run(), after), Thresholds()).results
             if r.name == "same_collectors")
    assert r.status == INCONCLUSIVE and "perf_hz 999.0 vs 99.0" in r.message
    adaptive = run()
    adaptive.meta.rates = {"perf_hz": 999.0, "pmp_hz": 5.0}  # halved under a pause budget
    base = run()
    base.meta.rates = {"perf_hz": 999.0, "pmp_hz": 10.0}
    assert judge(compare(base, adaptive), Thresholds()).status == PASS


def test_cpu_per_work() -> None:
    a, b = run(), run(extra_ms=2)
    a.meta.extra["work"] = {"unit": "messages", "count": 10000}
    b.meta.extra["work"] = {"unit": "messages", "count": 10000}
    r = next(r for r in judge(compare(a, b), Thresholds()).results if r.name == "cpu_per_work")
    assert r.status == FAIL and "+25.0%" in r.message
    b.meta.extra["work"] = {"unit": "messages", "count": 12500}  # more work for the CPU: fine
    r = next(r for r in judge(compare(a, b), Thresholds()).results if r.name == "cpu_per_work")
    assert r.status == PASS
    b.meta.extra["work"] = {"unit": "requests", "count": 12500}
    r = next(r for r in judge(compare(a, b), Thresholds()).results if r.name == "cpu_per_work")
    assert r.status == INCONCLUSIVE


def test_thresholds_config_then_command_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[thresholds]\nframe_share_pp = 25\nmin_samples = 100\n'
                   'wait_classes = ["mutex"]\n')
    t = load_thresholds(str(cfg), ["min_samples=50"])
    assert (t.frame_share_pp, t.min_samples, t.wait_classes) == (25.0, 50, ["mutex"])
    assert judge(compare(run(), run(extra_ms=2)), t).status == PASS  # 20 points < 25
    for bad in (["nope=1"], ["min_samples=x"], ["frame_share_pp"], ["wait_classes=spin"]):
        with pytest.raises(InputError):
            load_thresholds(str(cfg), bad)
    cfg.write_text("[thresholds\n")
    with pytest.raises(InputError):
        load_thresholds(str(cfg), [])


def test_preemption_frames_are_not_judged() -> None:
    a, b = run(), run()
    b.add(StackKey(("worker_loop", "asm_sysvec_apic_timer_interrupt"), 1, "mix-1"), 800 * MS)
    assert judge(compare(a, b), Thresholds()).status == PASS
    v = judge(compare(a, b), Thresholds(ignore_frames=[]))
    assert v.status == FAIL and "asm_sysvec_apic_timer_interrupt" in v.results[3].message
    with pytest.raises(InputError):
        load_thresholds(None, ["ignore_frames=(unclosed"])


def test_markdown_escapes_hostile_names() -> None:
    evil = "<img src=x onerror=alert(1)>|[link](javascript:x)`*https://e.example www.e.example"
    a, b = run(), run()
    b.add(StackKey(("worker_loop", evil), 1, "mix-1"), 2000 * MS)
    text = markdown(judge(compare(a, b), Thresholds()), "d`x.html")
    assert "<img" not in text and "`*" not in text
    assert not re.search(r"(?<!\\)[\[\]]", text.split("### ")[1])  # every bracket escaped
    assert ("&lt;img src=x onerror=alert(1)&gt;\\|\\[link\\](javascript:x)\\`\\*"
            "https:/&#8203;/e.example www&#8203;.e.example") in text
    assert "://" not in text
    assert "`d'x.html`" in text


def test_junit_one_case_per_threshold() -> None:
    after = run(extra_ms=2)
    after.add(StackKey(("bad\x00name\x1b",), 1, "mix-1"), MS)
    v = judge(compare(run(), after), Thresholds())
    root = ET.fromstring(junit(v))
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == [r.name for r in v.results]
    assert len(cases) == 3 + 1 + len(Thresholds().wait_classes) + 2
    frame = next(c for c in cases if c.get("name") == "frame_share")
    assert frame.find("failure") is not None
    assert root.find("./testsuite").get("failures") == "1"  # type: ignore[union-attr]
    assert next(c for c in cases if c.get("name") == "cpu_per_work").find("skipped") is not None


def write_folded(path: Path, p: Profile) -> None:
    from wallflame.folded import write_folded as wf

    with open(path, "w", encoding="utf-8") as f:
        wf(p, f, annotate=True)


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
    assert "wallflame check: pass" in r.output and (tmp_path / "wallflame-diff.html").exists()
    r = runner.invoke(cli, ["check", str(base), str(worse), "--junit", "j.xml",
                            "--markdown", "m.md", "--html", "d.html"])
    assert r.exit_code == EXIT_REGRESSION, r.output
    assert "extra_work" in r.output and (tmp_path / "d.html").exists()
    assert ET.parse(tmp_path / "j.xml").getroot().tag == "testsuites"
    assert "`d.html`" in (tmp_path / "m.md").read_text()
    r = runner.invoke(cli, ["check", str(base), str(few)])
    assert r.exit_code == EXIT_INCONCLUSIVE and "100 on-CPU samples" in r.output
    text = summary.read_text()
    assert text.count("## wallflame check:") == 3 and "REGRESSION" in text
    (tmp_path / ".wallflame-check.toml").write_text("[thresholds]\nframe_share_pp = 30\n")
    assert runner.invoke(cli, ["check", str(base), str(worse)]).exit_code == EXIT_OK
    r = runner.invoke(cli, ["check", str(base), str(worse), "-t", "frame_share_pp=1"])
    assert r.exit_code == EXIT_REGRESSION
    r = runner.invoke(cli, ["check", str(base), str(worse), "-t", "bogus=1"])
    assert r.exit_code == EXIT_INPUT and "unknown threshold" in r.output


def test_plain_folded_counts_are_judged_as_shares(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("main;work 900\nmain;other 100\n")
    b.write_text("main;work 600\nmain;other 100\nmain;new_hot 300\n")
    v = judge(compare(_load(a), _load(b)), Thresholds())
    assert v.status == FAIL
    assert statuses(v)["wait_mutex"] == SKIPPED  # no off-CPU data in plain folded files


def _load(path: Path) -> Profile:
    from wallflame.rundir import load_inputs

    return load_inputs([str(path)])
