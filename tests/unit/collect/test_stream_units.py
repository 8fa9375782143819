"""Which reader each chunk gets (``collect.stream.Folded.process``): a scheduler chunk's switch
records are read from its perf.data, during the window as after it; the other chunks are read
from perf script's text alone."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

from wallflame.collect.stream import Folded


class Folder:
    def __init__(self) -> None:
        self.asked: list[str] = []
        self.fed: list[tuple[str, Any]] = []

    def read_switches(self, chunk: Path) -> Any:
        self.asked.append(chunk.name)
        return None  # the text, then

    def feed(self, stem: str, stream: IO[bytes], switches: Any = None) -> None:
        stream.read()
        self.fed.append((stem, switches))

    def expect_wakes(self) -> None:
        pass

    def set_window(self, start: int, end: int | None = None, at_start: Any = None) -> None:
        pass


def test_switch_records_from_the_file_for_scheduler_chunks_only(tmp_path: Path) -> None:
    folder = Folder()
    folded = Folded(tmp_path, folder)
    for name in ("sched.data.1", "sched.data.2", "wake.data.1", "perf.data.1"):
        (tmp_path / name).write_bytes(b"not perf data")
        folded.process(name.split(".")[0], tmp_path / name)
    folded.close()
    assert folder.asked == ["sched.data.1", "sched.data.2"]
    # every chunk was still processed (perf cannot read these: counted as bad chunks)
    assert folded.done == {"perf": ["perf.data.1"], "sched": ["sched.data.1", "sched.data.2"],
                           "wake": ["wake.data.1"]}
