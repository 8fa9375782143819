"""Which writer a report format uses, and the format an output name implies.

Each writer is imported only when its format is asked for: ``wallflame report -o x.html``
does not pay for the SVG, pprof or speedscope writers (start-up is most of a small report's
time)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import IO

from wallflame.errors import InputError
from wallflame.output import open_output
from wallflame.profile import Profile
from wallflame.rundir import META, is_run_dir, read_json

FORMATS = ("html", "svg", "txt", "json", "speedscope", "pprof", "folded", "perfetto")
#: Suffixes, longest first so ``.speedscope.json`` wins over ``.json``.
SUFFIXES = (
    (".speedscope.json", "speedscope"), (".pb.gz", "pprof"), (".pprof", "pprof"),
    (".pb", "pprof"), (".html", "html"), (".htm", "html"), (".svg", "svg"), (".txt", "txt"),
    (".json", "json"), (".folded", "folded"), (".collapsed", "folded"),
    (".pftrace", "perfetto"), (".perfetto-trace", "perfetto"),
)
EXTENSION = {"html": ".html", "svg": ".svg", "txt": ".txt", "json": ".json",
             "speedscope": ".speedscope.json", "pprof": ".pb.gz", "folded": ".folded",
             "perfetto": ".pftrace"}


#: Run-level facts of ``meta.json`` the report shows (target, exact commands, tool versions).
RUN_FACTS = ("target", "commands", "tools", "options", "launched", "ended_by")


def add_run_facts(profile: Profile, paths: Iterable[str]) -> None:
    """Give the report the run directories' own ``meta.json`` facts (the first input's win):
    ``load_run_dir`` keeps only the profile's metadata."""
    for path in paths:
        if is_run_dir(path):
            top = read_json(os.path.join(path, META))
            if isinstance(top, dict):
                for key in RUN_FACTS:
                    if key in top:
                        profile.meta.extra.setdefault(key, top[key])


def format_for(output: str, fmt: str | None) -> str:
    if fmt:
        return fmt
    if output == "-":
        return "txt"
    for suffix, name in SUFFIXES:
        if output.lower().endswith(suffix):
            return name
    raise InputError(f"{output}: cannot tell the report format from the name",
                     f"pass --format ({', '.join(FORMATS)})")


def write_report(profile: Profile, fmt: str, output: str, title: str | None = None) -> None:
    """Write ``profile`` as ``fmt`` to ``output`` (``-``: stdout), mode 0600."""
    with open_output(output, mode=0o600) as out:
        _write(profile, fmt, out, title)


def _write_bytes(out: IO[str], data: bytes) -> None:
    """``data`` to the binary stream under ``out`` (UTF-8 text to one without)."""
    out.flush()
    binary = getattr(out, "buffer", None)
    if binary is None:
        out.write(data.decode("utf-8"))
        return
    binary.write(data)
    binary.flush()


def _write(profile: Profile, fmt: str, out: IO[str], title: str | None) -> None:
    if fmt == "html":
        from wallflame.report.html import html_bytes

        _write_bytes(out, html_bytes(profile, title))
    elif fmt == "svg":
        from wallflame.report.svg import write_svg

        write_svg(profile, out, title or "Flame Graph")
    elif fmt == "txt":
        from wallflame.report.text import write_text

        write_text(profile, out)
    elif fmt == "json":
        import json

        from wallflame.report.summary import build_summary

        json.dump(build_summary(profile), out, indent=2, sort_keys=True)
        out.write("\n")
    elif fmt == "speedscope":
        from wallflame.report.speedscope import write_speedscope

        write_speedscope(profile, out, title or "wallflame")
    elif fmt == "folded":
        from wallflame.folded import ThreadRoot, folded_lines

        # Plain lines that FlameGraph and inferno read, off-CPU stacks ending in their
        # ``[off CLASS lock=...]`` pseudo-frame so the state is not lost.
        for line in folded_lines(profile, ThreadRoot.COMM, annotate=True):
            out.write(line.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")
    elif fmt == "pprof":
        from wallflame.report.pprof import pprof_bytes

        if getattr(out, "buffer", None) is None:
            raise InputError("pprof output needs a file or a pipe", "pass -o FILE.pb.gz")
        _write_bytes(out, pprof_bytes(profile))
    elif fmt == "perfetto":
        from wallflame.report.perfetto import trace_bytes
        from wallflame.report.timerange import timeline_of

        if getattr(out, "buffer", None) is None:
            raise InputError("a Perfetto trace needs a file or a pipe", "pass -o FILE.pftrace")
        tl, rng = timeline_of(profile)
        _write_bytes(out, trace_bytes(tl, rng, title or _process_name(profile)))
    else:
        raise InputError(f"unknown report format {fmt!r}", f"use one of: {', '.join(FORMATS)}")


def _process_name(profile: Profile) -> str:
    """The target's name for a trace's process track (its command, else its pid)."""
    target = profile.meta.extra.get("target")
    if isinstance(target, dict):
        for key in ("comm", "name", "exe"):
            if isinstance(target.get(key), str) and target[key]:
                return str(target[key])
    return ""
