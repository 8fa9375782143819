"""A report written to its output: the run directories' own facts added, the file opened
(mode 0600), the format's writer called (``report/writers.py``)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from wallflame.output import open_output
from wallflame.profile import Profile
from wallflame.report.writers import write
from wallflame.rundir import META, is_run_dir, read_json

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


def write_report(profile: Profile, fmt: str, output: str, title: str | None = None) -> None:
    """Write ``profile`` as ``fmt`` to ``output`` (``-``: stdout), mode 0600."""
    with open_output(output, mode=0o600) as out:
        write(profile, fmt, out, title)
