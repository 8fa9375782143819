"""The example CI gate in examples/ci: pinned actions, the thresholds file, the baseline."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from wallflame.report.check import PASS, Thresholds, judge, load_thresholds
from wallflame.report.diff import compare
from wallflame.rundir import is_run_dir, load_inputs

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ci"
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
    upload = text.index("actions/upload-artifact@")
    assert collect < check < upload
    assert "if: always()" in text[check:upload]
    assert "wallflame-diff.html" in text[upload:] and "--html wallflame-diff.html" in text
    assert "permissions:\n  contents: read" in text
    assert "\t" not in text


def test_example_thresholds_file_spells_out_the_defaults() -> None:
    t = load_thresholds(str(EXAMPLE / ".wallflame-check.toml"), [])
    assert dataclasses.asdict(t) == dataclasses.asdict(Thresholds())


def test_baseline_is_a_run_directory_that_passes_against_itself() -> None:
    base = EXAMPLE / "baseline"
    assert is_run_dir(base)
    assert not (base / "raw").exists()  # kept small: only what check reads
    profile = load_inputs([str(base)])
    v = judge(compare(profile, load_inputs([str(base)])), Thresholds())
    assert v.status == PASS, [(r.name, r.message) for r in v.results]
    assert {"mix-1", "mix-2", "mix-3"} <= set(profile.meta.threads.values())
    assert any("extra_work" not in k.frames and "worker_loop" in k.frames
               for k in profile.stacks)
