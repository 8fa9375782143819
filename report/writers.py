"""The report formats: one line each (name, the output names that imply it, the function that
writes it), as ``fold`` keeps one list of its folders.

A new format is one module with a ``write(profile, out, title)`` function and one line in
``FORMATS``: ``wallflame report --format`` offers it, an output name with one of its suffixes
picks it, and ``write`` calls it.  Each writer is imported only when its format is asked for:
``wallflame report -o x.html`` does not pay for the SVG, pprof or speedscope writers
(start-up is most of a small report's time), and this module imports none of them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import IO

from wallflame.errors import InputError
from wallflame.profile import Profile


@dataclass(frozen=True)
class Format:
    """A report format: its ``name`` (``--format``), the ``suffixes`` of output names that
    imply it (the first is the default one) and its ``writer``, ``"module:function"``, called as
    ``function(profile, out, title)`` with ``out`` a text stream (bytes go to its buffer)."""

    name: str
    suffixes: tuple[str, ...]
    writer: str


FORMATS = (
    Format("html", (".html", ".htm"), "wallflame.report.html:write"),
    Format("svg", (".svg",), "wallflame.report.svg:write"),
    Format("txt", (".txt",), "wallflame.report.text:write"),
    Format("json", (".json",), "wallflame.report.findings:write"),
    Format("speedscope", (".speedscope.json",), "wallflame.report.speedscope:write"),
    Format("pprof", (".pb.gz", ".pprof", ".pb"), "wallflame.report.pprof:write"),
    Format("folded", (".folded", ".collapsed"), "wallflame.folded:write"),
    Format("perfetto", (".pftrace", ".perfetto-trace"), "wallflame.report.perfetto:write"),
)
NAMES = tuple(f.name for f in FORMATS)
#: Output suffixes, longest first so ``.speedscope.json`` wins over ``.json``.
SUFFIXES = sorted(((s, f.name) for f in FORMATS for s in f.suffixes), key=lambda p: -len(p[0]))


def by_name(name: str) -> Format:
    for f in FORMATS:
        if f.name == name:
            return f
    raise InputError(f"unknown report format {name!r}", f"use one of: {', '.join(NAMES)}")


def extension(name: str) -> str:
    """The suffix of an output of format ``name`` when none is given (``report.pb.gz``)."""
    return by_name(name).suffixes[0]


def format_for(output: str, fmt: str | None) -> str:
    """The format asked for, else the one ``output``'s name implies (``-``: text)."""
    if fmt:
        return fmt
    if output == "-":
        return "txt"
    for suffix, name in SUFFIXES:
        if output.lower().endswith(suffix):
            return name
    raise InputError(f"{output}: cannot tell the report format from the name",
                     f"pass --format ({', '.join(NAMES)})")


def write(profile: Profile, fmt: str, out: IO[str], title: str | None) -> None:
    """``profile`` written to ``out`` as ``fmt`` by that format's writer."""
    module, function = by_name(fmt).writer.split(":")
    getattr(importlib.import_module(module), function)(profile, out, title)
