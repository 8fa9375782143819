"""pt-pmp's aggregated output -> Profile.

The fixture ``mix-aggregated.txt`` is what ``pt-pmp --save-samples gdb/mix-ptpmp-raw.txt``
printed for the raw log beside it, so the two must tell the same story.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from wallflame.errors import InputError
from wallflame.fold import foreign_folded as folded
from wallflame.fold import gdb, ptpmp
from wallflame.fold.options import FoldOptions
from wallflame.folded import write_folded
from wallflame.profile import OFF, ON, UNIT_SAMPLES, Profile

FIX = FIXTURES
AGG = FIX / "pmp" / "mix-aggregated.txt"


def fold(path: Path | str) -> Profile:
    p = Profile()
    ptpmp.fold(str(path), FoldOptions(), p)
    return p


def test_golden(golden: Callable[[Path, str], None]) -> None:
    out = io.StringIO()
    write_folded(fold(AGG), out, annotate=True)
    golden(FIX / "pmp" / "golden" / "mix-aggregated.txt.folded", out.getvalue())


def test_detected_as_pmp_only() -> None:
    head = AGG.read_text()
    assert ptpmp.detect(head)
    assert not gdb.detect(head) and not folded.detect(head)
    plain = (FIX / "folded" / "plain-tid.folded").read_text()
    assert not ptpmp.detect(plain)


def test_counts_match_our_fold_of_the_same_raw_log(tmp_path: Path) -> None:
    """pt-pmp aggregated the raw log; folding that log ourselves (each snapshot weighing 1)
    gives the same stacks with the same counts, name for name."""
    raw = (FIX / "gdb" / "mix-ptpmp-raw.txt").read_text()
    untimed = tmp_path / "raw.txt"
    untimed.write_text("\n".join(ln for ln in raw.splitlines() if not ln.startswith("TS ")))
    mine = Profile()
    gdb.fold(str(untimed), FoldOptions(snapshot_interval_ns=1), mine)
    ours: dict[tuple[str, ...], int] = {}
    for k, w in mine.stacks.items():
        ours[k.frames] = ours.get(k.frames, 0) + w
    theirs = {k.frames: w for k, w in fold(AGG).stacks.items()}
    assert ours == theirs
    assert sum(theirs.values()) == 18  # 3 snapshots x 6 threads


def test_states_units_and_classes() -> None:
    p = fold(AGG)
    assert p.meta.unit == UNIT_SAMPLES
    assert p.meta.samples == {"thread_stacks": 18}
    classes = p.per_class()
    assert classes["mutex"] == 2 and classes["sleep"] == 7 and classes["condvar"] == 4
    assert classes[ON] == 5  # mix_hash x4 and the unlock wake
    assert all(k.tid == 0 and k.thread == "" for k in p.stacks)


def test_unknown_frames_and_file_suffixes(tmp_path: Path) -> None:
    path = tmp_path / "agg.txt"
    path.write_text("     12 libc::??,poll(poll.c),main(m.c)\n"
                    "      3 std::map<int,int>::find,run\n"
                    "      1 ??\n")
    p = fold(path)
    frames = sorted(k.frames for k in p.stacks)
    assert frames == [("[unknown]",), ("main", "poll", "[libc]"),
                      ("run", "std::map<int,int>::find")]
    assert next(k for k in p.stacks if k.frames[-1] == "[libc]").state == OFF


def test_malformed_lines_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "agg.txt"
    path.write_bytes(b"Sun Nov 22 06:07:55 UTC 2026\r\n      2 a,b\r\nnot a count\n\xff\xfe\n")
    p = fold(path)
    assert p.stacks and p.meta.losses["malformed pt-pmp line"].count == 2


def test_nothing_usable_is_one_clean_error(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_text("this is not\npt-pmp output\n")
    with pytest.raises(InputError, match="no pt-pmp"):
        fold(path)


def test_deep_stack(tmp_path: Path) -> None:
    path = tmp_path / "deep.txt"
    path.write_text("      1 " + ",".join(f"f{i}" for i in range(10_000)) + "\n")
    (key,) = fold(path).stacks
    assert len(key.frames) == 10_000 and key.frames[0] == "f9999"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=1500))
def test_any_bytes(data: bytes) -> None:
    with tempfile.NamedTemporaryFile() as f:
        f.write(data)
        f.flush()
        try:
            p = fold(f.name)
        except InputError:
            return
    assert all(w >= 0 for w in p.stacks.values())


@pytest.mark.parametrize("text", ["", "\n\n", "      0 a,b\n"])
def test_empty_profiles(tmp_path: Path, text: str) -> None:
    path = tmp_path / "e.txt"
    path.write_text(text)
    assert fold(path).total() == 0


def test_registry_detects_every_snapshot_and_folded_fixture() -> None:
    from wallflame.fold import detect_format
    from wallflame.textio import head

    expected = {"pmp/mix-aggregated.txt": "pmp", "folded/plain-tid.folded": "folded",
                "folded/bcc-offcputime.folded": "folded", "folded/pyspy-raw.txt": "folded",
                "folded/diff.folded": "folded", "gdb/mix-bt.txt": "gdb",
                "gdb/mix-ptpmp-raw.txt": "gdb", "gdb/mix-collect-gdb.log": "gdb",
                "eustack/mix-plain.txt": "eu-stack", "eustack/mix-collect-eustack.log": "eu-stack"}
    for name, fmt in expected.items():
        path = str(FIX / name)
        assert detect_format(head(path), path) == fmt, name
