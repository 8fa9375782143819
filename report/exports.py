"""A report written to its output: the run directories' own facts added, the file opened
(mode 0600), the format's writer called (``report/writers.py``)."""

from __future__ import annotations

from collections.abc import Iterable

from wallflame.output import open_output
from wallflame.profile import Profile
from wallflame.report.writers import write
from wallflame.runfiles import is_run_dir


def add_run_facts(profile: Profile, paths: Iterable[str]) -> None:
    """Give the report the run directories' own ``meta.json`` facts (the first input's win):
    ``load_run_dir`` keeps only the profile's metadata."""
    for path in paths:
        if is_run_dir(path):
            from wallflame.metaextra import add_missing
            from wallflame.rundir import read_meta  # its records: only for a run directory

            add_missing(profile.meta.extra, read_meta(path).facts())


def write_report(profile: Profile, fmt: str, output: str, title: str | None = None) -> None:
    """Write ``profile`` as ``fmt`` to ``output`` (``-``: stdout), mode 0600."""
    with open_output(output, mode=0o600) as out:
        write(profile, fmt, out, title)
