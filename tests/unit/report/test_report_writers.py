"""The writers registry (``report/writers.py``): one line per report format, which the command
line, the output-name rule and the writing all follow."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import click
import pytest

from unit.report.test_report_fixtures import demo_profile
from wallflame.errors import InputError
from wallflame.report import writers
from wallflame.report.exports import write_report


def test_every_writer_takes_profile_out_title() -> None:
    for f in writers.FORMATS:
        module, function = f.writer.split(":")
        fn = getattr(__import__(module, fromlist=[function]), function)
        assert list(inspect.signature(fn).parameters) == ["profile", "out", "title"], f.name


@pytest.mark.parametrize("fmt", [f.name for f in writers.FORMATS if f.name != "perfetto"])
def test_every_format_writes_the_demo(fmt: str, tmp_path: Path) -> None:
    out = tmp_path / f"r{writers.extension(fmt)}"
    write_report(demo_profile(), fmt, str(out), "demo")
    assert out.stat().st_size > 100
    assert writers.format_for(str(out), None) == fmt


def test_perfetto_without_a_timeline_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        write_report(demo_profile(), "perfetto", str(tmp_path / "r.pftrace"))


def test_suffixes_pick_their_format() -> None:
    for f in writers.FORMATS:
        for s in f.suffixes:
            assert writers.format_for(f"x{s.upper()}", None) == f.name
    assert writers.format_for("-", None) == "txt"
    with pytest.raises(InputError):
        writers.format_for("report.unknown", None)
    with pytest.raises(InputError):
        writers.by_name("docx")


def test_the_command_offers_the_registry() -> None:
    from wallflame.commands.report import command

    opt = next(p for p in command.params if p.name == "fmt")
    assert isinstance(opt.type, click.Choice) and tuple(opt.type.choices) == writers.NAMES
    assert " ".join(writers.extension(n) for n in writers.NAMES) in (opt.help or "")


def test_the_registry_imports_no_writer() -> None:
    code = ("import sys, wallflame.report.writers, wallflame.commands.report; "
            "print(sorted(m for m in sys.modules if m.startswith('wallflame.report.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout
    for name in ("svg", "html", "pprof", "speedscope", "perfetto", "text", "summary"):
        assert f"'wallflame.report.{name}'" not in loaded, name
