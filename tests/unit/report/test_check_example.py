"""The example CI gate in examples/ci: pinned actions, the settings file, the baseline series."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from conftest import ROOT

from wallflame.report.diff.compare import compare
from wallflame.report.gate.check import PASS, ignored, judge
from wallflame.report.gate.series import load_side, run_paths
from wallflame.report.gate.thresholds import Thresholds, load_thresholds
from wallflame.rundir import is_run_dir

EXAMPLE = ROOT / "examples" / "ci"
WORKFLOW = EXAMPLE / "wallflame-gate.yml"


def test_workflow_pins_every_action_by_full_commit_sha() -> None:
    uses = re.findall(r"^\s*(?:-\s+)?uses:\s*(\S+)", WORKFLOW.read_text(), re.M)
    assert len(uses) == 3
    for ref in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), f"{ref} is not pinned"


def test_workflow_collects_checks_and_uploads_the_diff_always() -> None:
    text = WORKFLOW.read_text()
    collect = text.index("wallflame collect -o current")
    check = text.index("wallflame check examples/ci/baseline current")
    assert "--json wallflame-check.json" in text
    upload = text.index("actions/upload-artifact@")
    assert collect < check < upload
    assert "if: always()" in text[check:upload]
    assert "wallflame-diff.html" in text[upload:] and "--html wallflame-diff.html" in text
    assert "permissions:\n  contents: read" in text
    assert "\t" not in text


def test_example_thresholds_file_spells_out_the_defaults() -> None:
    t = load_thresholds(str(EXAMPLE / ".wallflame-check.toml"), [])
    assert dataclasses.asdict(t) == dataclasses.asdict(Thresholds())


def test_baseline_is_a_series_that_passes_against_its_own_runs() -> None:
    base = EXAMPLE / "baseline"
    runs = run_paths(str(base))
    assert len(runs) == 3 and all(is_run_dir(r) for r in runs)
    for r in runs:
        names = {p.name for p in Path(r).iterdir()}
        assert "raw" not in names  # kept small: only what check reads
        assert {"meta.json", "oncpu.folded", "offcpu.folded", "slices.json"} <= names
    t = Thresholds()
    series, merged = load_side(str(base), "baseline", ignored(t))
    threads = set(merged.meta.threads.values())
    assert {"worker-1", "worker-2", "worker-3", "worker-4"} <= threads
    assert all(r.work and r.slices and r.slices.get("work") for r in series)
    for r in runs:
        one, profile = load_side(r, "current", ignored(t))
        v = judge(series, one, compare(merged, profile), t)
        assert v.status == PASS, [(x.name, x.message) for x in v.results]
        assert "between-run noise measured" in v.method


AB_WORKFLOW = EXAMPLE / "wallflame-ab.yml"
AB_SCRIPT = EXAMPLE / "wallflame-ab.sh"


def test_ab_workflow_pins_its_actions_and_profiles_both_sides_in_one_job() -> None:
    text = AB_WORKFLOW.read_text()
    uses = re.findall(r"^\s*(?:-\s+)?uses:\s*(\S+)", text, re.M)
    assert len(uses) == 3
    for ref in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), f"{ref} is not pinned"
    build, ab = text.index("Build base and head"), text.index("-m wallflame ab")
    upload = text.index("actions/upload-artifact@")
    assert build < ab < upload and "if: always()" in text[ab:upload]
    assert "--base " in text[ab:upload] and "--head " in text[ab:upload]
    assert "permissions:\n  contents: read" in text and "\t" not in text


def test_ab_script_builds_both_sides_and_exits_with_the_verdict() -> None:
    text = AB_SCRIPT.read_text()
    assert text.startswith("#!/bin/sh") and "set -eu" in text
    assert text.index("git worktree add") < text.index("wallflame ab --base") < \
        text.index('exit "$status"')
