"""Format detection looks past leading noise: perf's own warnings before its samples
(``perf script > f 2>&1``), a capture cut in the middle of a record, malformed first lines of a
folded file.  The lines looked past are reported with their line numbers, the folder still
counts what it could not use, and a cut record's orphan frames never join the next sample.

Fixtures (tests/fixtures/noisy/): ``perf-stderr-first.txt`` is the text perf script wrote on
stderr for a capture that lost chunks (captured on this project's test machine), followed by
the first 30 records of ``perf/mix-fp.txt``; ``perf-starts-mid-record.txt`` is those records
without their first two lines; ``folded-bad-head.folded`` is ``folded/plain-tid.folded``
behind a report's header line and a cut line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

from wallflame.errors import EXIT_INPUT, InputError
from wallflame.fold import MAX_SKIPPED, recognise
from wallflame.textio import head

FIX = FIXTURES
NOISY = FIX / "noisy"
CASES = [  # (file, format, lines looked past, lines of the file that hold the clean data)
    ("perf-stderr-first.txt", "perf", 8, 9),
    ("perf-starts-mid-record.txt", "perf", 4, 5),
    ("folded-bad-head.folded", "folded", 2, 3),
]


def fold(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wallflame", "fold", str(path)],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(("name", "fmt", "skipped", "_data"), CASES)
def test_recognised_past_the_noise(name: str, fmt: str, skipped: int, _data: int) -> None:
    path = str(NOISY / name)
    assert recognise(head(path), path) == (fmt, skipped)


@pytest.mark.parametrize(("name", "fmt", "skipped", "data"), CASES)
def test_folded_like_the_clean_data_and_the_skipped_lines_reported(
        tmp_path: Path, name: str, fmt: str, skipped: int, data: int) -> None:
    noisy = NOISY / name
    clean = tmp_path / name
    clean.write_bytes(b"".join(noisy.read_bytes().splitlines(keepends=True)[data - 1:]))
    got, want = fold(noisy), fold(clean)
    assert got.returncode == 0 and want.returncode == 0, (got.stderr, want.stderr)
    # the same stacks: orphan frames were not attached to the next sample
    assert got.stdout == want.stdout and got.stdout.count("\n") > 2
    lines = "line 1" if skipped == 1 else f"lines 1-{skipped}"
    assert f"{noisy}: {lines} before the {fmt} data looked past" in got.stderr, got.stderr
    assert "looked past" not in want.stderr
    # and what the folder could not use is still counted, from line 1
    assert "(first at line 1)" in got.stderr, got.stderr


def test_orphan_frames_are_not_a_stack_of_their_own(tmp_path: Path) -> None:
    got = fold(NOISY / "perf-starts-mid-record.txt")
    assert got.returncode == 0
    # the cut record's frames (worker_loop under worker_main, no leaf) appear nowhere alone
    assert all(not ln.split(" ")[0].endswith(";worker_loop") for ln in got.stdout.splitlines())


@pytest.mark.parametrize("text", [
    # perf's warnings and nothing else (every sample lost)
    "Warning:\nProcessed 67 events and lost 8 chunks!\n\nCheck IO/CPU overload!\n\n",
    # more noise than data: two warnings, then one folded line
    "noise one\nnoise two\nnoise three\nmain;f 1\n",
    # noise beyond what detection looks past
    "".join(f"warning {i}: odd\n" for i in range(MAX_SKIPPED + 1))
    + (FIX / "folded" / "plain-tid.folded").read_text() * 60,
    "just some text\nthat is not a profile\nat all\n",
])
def test_what_is_not_a_capture_is_still_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "input.txt"
    path.write_text(text)
    with pytest.raises(InputError, match="format not recognised"):
        recognise(head(str(path)), str(path))
    r = fold(path)
    assert r.returncode == EXIT_INPUT and r.stderr.count("\n") == 1, r.stderr
    assert "format not recognised from its first lines" in r.stderr


def test_the_detectors_are_the_folders_in_their_order() -> None:
    """Detection tries ``heads.ORDER`` then folded stacks: the folders of ``_modules()``, in
    that order, each with its own ``detect``."""
    from wallflame.fold import _modules, folder, heads

    mods = _modules()
    assert [(m.NAME, m.detect) for m in mods[:-1]] == list(heads.ORDER)
    assert mods[-1].NAME == "folded"
    assert len({m.NAME for m in mods}) == len(mods)
    assert all(folder(m.NAME) is m for m in mods)


def test_recognising_folded_stacks_imports_no_other_folder(tmp_path: Path) -> None:
    """A folded input is recognised, and its folder found, without importing the folders it is
    not; perf's line parser only when a line could be a perf header (a word of digits in its
    first 64 characters)."""
    def folders(text: str) -> list[str]:
        path = tmp_path / "in.folded"
        path.write_text(text)
        code = ("import json, sys; from wallflame.fold import recognise; "
                "from wallflame.textio import head; "
                "from wallflame.fold import folder; "
                f"assert folder(recognise(head({str(path)!r}), 'x')[0]).NAME == 'folded'; "
                "print(json.dumps(sorted(m for m in sys.modules "
                "if m.startswith('wallflame.fold.'))))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout
        return list(json.loads(out))

    frames = ";".join(f"ns{i}::Class{i}::method{i}" for i in range(6))
    assert folders(f"main;start_thread;{frames} 12\nworker-1;{frames};x 3\n") == \
        ["wallflame.fold.foreign_folded", "wallflame.fold.heads", "wallflame.fold.options"]
    short = folders("main;work;spin 12\nmain;idle 3\n")
    assert not {"wallflame.fold.gdb", "wallflame.fold.eustack", "wallflame.fold.ptpmp",
                "wallflame.fold.annotated"} & set(short)
