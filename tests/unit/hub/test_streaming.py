"""The folding process (``wallflame.assemble.streaming``) as its messages drive it: which chunks
it folds while perf records and once it has stopped, the processes it keeps, and how it ends
when its input is not what the collect writes."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wallflame.assemble import streaming
from wallflame.collect import stream
from wallflame.errors import EXIT_USAGE


@pytest.fixture
def processed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, list[int] | None]]:
    """Every chunk ``Folded.process`` is given (stem, name, the processes kept then), without
    running perf."""
    seen: list[tuple[str, str, list[int] | None]] = []

    def process(self: stream.Folded, stem: str, chunk: Path) -> None:
        who = self.pid() if callable(self.pid) else None
        seen.append((stem, chunk.name, who))
        self.done[stem].append(chunk.name)

    monkeypatch.setattr(stream.Folded, "process", process)
    monkeypatch.setattr(stream, "lower_priority", lambda: ["sched_idle"])
    return seen


def _spec(tmp_path: Path, **more: Any) -> dict[str, Any]:
    raw = tmp_path / "raw"
    raw.mkdir(exist_ok=True)
    return {"out": str(tmp_path), "raw": str(raw), "stems": ["perf", "wake", "sched"],
            "pids": [10], "inline": True, "wakes": True, **more}


def test_chunks_perf_is_still_writing_wait_for_the_final_message(
        tmp_path: Path, processed: list[tuple[str, str, list[int] | None]]) -> None:
    s = streaming.Streaming(_spec(tmp_path))
    for name in ("perf.data.2026112708000001", "sched.data.2026112708000002", "perf.data",
                 "sched.data", "wake.data.2026112708000001"):
        (s.raw / name).write_bytes(b"x")
    assert s.step()
    assert [n for _, n, _ in processed] == ["perf.data.2026112708000001",
                                             "wake.data.2026112708000001",
                                             "sched.data.2026112708000002"]
    assert not s.step()  # nothing new
    assert not s.handle({"pids": [10, 12]})
    assert not s.handle({"final": True})
    assert [(n, who) for _, n, who in processed[3:]] == [("perf.data", [10, 12]),
                                                         ("sched.data", [10, 12])]
    assert s.folding.folded.cost.during_window == 3  # no window end was sent: all before final


def test_chunks_folded_in_the_window_are_those_started_before_its_end(
        tmp_path: Path, processed: list[Any]) -> None:
    s = streaming.Streaming(_spec(tmp_path))
    s.folding.started = [100, 200, 300]
    s.handle({"window": [50, 250, None]})
    s.handle({"final": True})
    cost = s.folding.folded.cost
    assert cost.during_window == 2
    assert cost.after_window_s > 0
    assert cost.priority[-1] == "after the window: normal"
    assert s.handle({"finish": True})


def test_a_finish_without_the_final_message_folds_every_chunk_first(
        tmp_path: Path, processed: list[tuple[str, str, list[int] | None]]) -> None:
    s = streaming.Streaming(_spec(tmp_path))
    (s.raw / "sched.data").write_bytes(b"x")
    assert s.handle({"finish": True})
    assert [n for _, n, _ in processed] == ["sched.data"] and s.folding.final


def test_a_launched_command_keeps_every_process(
        tmp_path: Path, processed: list[tuple[str, str, list[int] | None]]) -> None:
    s = streaming.Streaming(_spec(tmp_path, pids=None, stems=["perf", "rm -rf /"]))
    assert s.folding.stems == ["perf"]  # only the recordings a collect makes
    (s.raw / "perf.data.2026112708000001").write_bytes(b"x")
    s.handle({"pids": [1, 2]})
    s.step()
    assert processed == [("perf", "perf.data.2026112708000001", None)]


def test_the_window_reaches_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       processed: list[Any]) -> None:
    s = streaming.Streaming(_spec(tmp_path))
    got: list[tuple[Any, ...]] = []
    monkeypatch.setattr(s.folding.folder, "set_window", lambda *a: got.append(a))
    s.handle({"window": [100, None, [1, 2]]})
    s.handle({"window": [100, 900, None]})
    assert got == [(100, None, [1, 2]), (100, 900, None)]


def test_input_that_ends_without_finish_writes_nothing(
        tmp_path: Path, processed: list[Any]) -> None:
    s = streaming.Streaming(_spec(tmp_path))
    msgs = b'{"window": [1, null, [5]]}\n{"final": true}\n'
    assert streaming.run(s, io.BytesIO(msgs)) == streaming.EXIT_NOT_FINISHED
    assert s.folding.final and sorted(p.name for p in tmp_path.iterdir()) == ["raw"]


@pytest.mark.parametrize("line", [b'{"window": "x"}\n', b'{"pids": [1, "<b>"]}\n',
                                  b"[1, 2]\n", b"not json\n"])
def test_a_message_it_cannot_read_ends_it_without_a_traceback(
        tmp_path: Path, processed: list[Any], line: bytes,
        capsys: pytest.CaptureFixture[str]) -> None:
    s = streaming.Streaming(_spec(tmp_path))
    assert streaming.run(s, io.BytesIO(line + b'{"finish": true}\n')) == \
        streaming.EXIT_NOT_FINISHED
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") <= 1, err


@pytest.mark.parametrize("args", [[], ["not json"], ["[1]"], ['{"raw": "/tmp"}'],
                                  [json.dumps({"out": "o", "raw": "r", "stems": "perf"})]])
def test_started_by_hand_without_its_specification(args: list[str]) -> None:
    r = subprocess.run([sys.executable, "-m", "wallflame.assemble.streaming", *args],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    assert r.returncode == EXIT_USAGE, r.stderr
    assert r.stderr.startswith("wallflame: error: ") and r.stderr.count("\n") == 1, r.stderr


def test_it_exits_cleanly_while_its_input_is_still_open(tmp_path: Path) -> None:
    """The process ends after ``finish`` (here with the error of a run directory that has no
    capture) while the collect still holds the pipe open: its reader thread is then blocked
    in a read.  Reading through ``sys.stdin``'s buffer, that aborted the interpreter at exit
    (status -6, "Fatal Python error: ... could not acquire lock for <stdin>"), every time."""
    from wallflame.errors import EXIT_INPUT

    proc = subprocess.Popen([sys.executable, "-m", "wallflame.assemble.streaming",
                             json.dumps(_spec(tmp_path))],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(b'{"finish": true}\n')
    proc.stdin.flush()
    try:
        code = proc.wait(60)  # the pipe stays open until it has ended
        err = proc.stderr.read().decode()
    finally:
        proc.stdin.close()
        proc.kill()
        proc.wait()
    assert code == EXIT_INPUT, err
    assert err.startswith("wallflame: error: ") and err.count("\n") == 1, err


def test_a_fault_of_its_own_is_one_line_and_its_traceback_a_file(
        tmp_path: Path, processed: list[Any], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Whatever fails inside the folding, the collect's stderr gets one line, not a
    traceback (the collect then folds every chunk itself); the traceback is kept in raw/."""
    s = streaming.Streaming(_spec(tmp_path))

    def fail() -> bool:
        raise FileNotFoundError("raw/perf.data.1 went away")

    monkeypatch.setattr(s, "step", fail)
    r, w = os.pipe()  # the collect's end stays open: the folding goes on until it fails
    os.write(w, b'{"window": [1, null, [5]]}\n')
    try:
        with open(r, "rb", buffering=0) as src:
            assert streaming.run_safely(s, src) == streaming.EXIT_NOT_FINISHED
    finally:
        os.close(w)
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "the folding process failed (FileNotFoundError: raw/perf.data.1 went away)" in err
    kept = (tmp_path / "raw" / streaming.TRACEBACK).read_text()
    assert kept.startswith("Traceback") and "went away" in kept
