"""Writing results: regular files are replaced whole; devices and FIFOs are written in place."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from wallflame.errors import InputError
from wallflame.output import open_output


def test_regular_file_replaced_whole_with_its_mode(tmp_path: Path) -> None:
    out = tmp_path / "r.txt"
    out.write_text("old\n")
    with open_output(str(out), mode=0o600) as f:
        f.write("new\n")
    assert out.read_text() == "new\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["r.txt"]  # no temporary file left


def test_failed_write_leaves_the_old_file(tmp_path: Path) -> None:
    out = tmp_path / "r.txt"
    out.write_text("old\n")
    with pytest.raises(RuntimeError), open_output(str(out)) as f:
        f.write("half")
        raise RuntimeError("stop")
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.txt"]


def test_dev_null_is_written_not_replaced() -> None:
    before = os.stat("/dev/null")
    with open_output("/dev/null", mode=0o600) as f:
        f.write("x" * 1000)
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode)
    assert (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


def test_fifo_is_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    with open_output(str(fifo)) as f:
        f.write("through the pipe\n")
    reader.join(10)
    assert got == [b"through the pipe\n"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_unwritable_directory_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(InputError), open_output(str(tmp_path / "missing" / "r.txt")) as f:
        f.write("x")
