"""``wallflame fold`` on perf script text against the reference, ``inferno-collapse-perf``.

For every on-CPU perf fixture and each pair of equivalent options (none, ``--pid``, ``--tid``,
``--kernel`` against inferno's ``--kernel`` and ``--all``) the two outputs must be
byte-identical once the documented deliberate differences are projected out of both sides:

* frame names: wallflame gives one name per function across collectors
  (``wallflame.names.normalize``: no ``@GLIBC_`` versions, clone suffixes, ``__GI_`` aliases,
  Rust hashes) and drops only the final parameter list (``Op::operator()`` stays whole where
  the reference cuts at the first ``(``); the projection applies both rules to both sides;
* ``;`` in a name: escaped ``\\x3b`` by wallflame, turned into ``:`` by the reference;
* frames whose symbol starts with ``(`` (``(anonymous namespace)::f``): dropped by the
  reference, kept by wallflame;
* inputs where the reference is wrong are compared on the input it handles: the truncated
  last record removed, ``PERF_RECORD_LOST`` lines removed, padded event names of a
  two-event file unpadded (the reference then reads their periods) and one event picked.

Scheduler captures are not compared: the reference counts ``sched_switch`` samples as
on-CPU samples of weight 1; wallflame turns them into off-CPU nanoseconds.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from wallflame.commands.fold import command as fold_command
from wallflame.names import normalize

FIX = FIXTURES / "perf"
INFERNO = shutil.which("inferno-collapse-perf") or shutil.which(
    os.path.expanduser("~/.cargo/bin/inferno-collapse-perf"))
#: FlameGraph's script, checked too when it is on PATH (never required).
PERL = shutil.which("stackcollapse-perf.pl")

#: (wallflame options, inferno options) that mean the same thing.
OPTIONS = [
    ([], []),
    (["--pid"], ["--pid"]),
    (["--tid"], ["--tid"]),
    (["--kernel"], ["--kernel"]),
    (["--kernel"], ["--all"]),
]


def _drop_last_record(text: bytes) -> bytes:
    return text[: text.rstrip(b"\n").rfind(b"\n\n") + 2]


def _drop_lost(text: bytes) -> bytes:
    return b"".join(line for line in text.splitlines(keepends=True)
                    if b"PERF_RECORD_LOST" not in line)


def _unpad_events(text: bytes) -> bytes:
    return re.sub(rb"(\d) +(cpu-clock|task-clock):", rb"\1 \2:", text)


#: fixture -> (extra wallflame options, extra inferno options, what the reference is given)
CASES: dict[str, tuple[list[str], list[str], Callable[[bytes], bytes]]] = {
    "mix-fp.txt": ([], [], bytes),
    "mix-fp-crlf.txt": ([], [], bytes),
    "mix-dwarf.txt": ([], [], bytes),
    "deep-fp.txt": ([], [], bytes),
    "mix-fp-truncated.txt": ([], [], _drop_last_record),
    "mix-lost.txt": ([], [], _drop_lost),
    "mix-two-events.txt": (["--event", "cpu-clock"], ["--event-filter", "cpu-clock"],
                           _unpad_events),
}


def _tidy(name: str) -> str:
    """The reference's rule: cut at the first ``(`` outside ``<>``, ``{}``, ``[]`` and
    ``()``, except Go receivers ``.(`` and ``(anonymous namespace)``."""
    depth = 0
    prev = ""
    for i, c in enumerate(name):
        if c in "<{[":
            depth += 1
        elif c in ">}])":
            depth -= 1
        elif c == "(":
            if depth == 0 and prev != "." and not name.startswith("(anonymous namespace)", i):
                return name[:i]
            depth += 1
        prev = c
    return name


def _canon_frame(frame: str) -> str:
    suffix = ""
    if frame.endswith("_[k]"):
        frame, suffix = frame[:-4], "_[k]"
    if frame.startswith("[") and frame.endswith("]"):
        return frame + suffix
    return _tidy(normalize(frame.replace("\\x3b", ":"))) + suffix


def project(folded: str, drop_paren_frames: bool) -> str:
    """Both sides with the deliberate differences taken out, re-summed and sorted."""
    acc: dict[str, int] = {}
    for line in folded.splitlines():
        stack, _, count = line.rpartition(" ")
        root, *frames = stack.split(";")
        if drop_paren_frames:
            frames = [f for f in frames if not f.startswith("(")]
        key = ";".join([root, *(_canon_frame(f) for f in frames)])
        acc[key] = acc.get(key, 0) + int(count)
    return "".join(f"{k} {v}\n" for k, v in sorted(acc.items()))


def _require_inferno() -> str:
    if INFERNO is None:
        if os.environ.get("WALLFLAME_REQUIRE_LIVE") == "1":
            pytest.fail("inferno-collapse-perf is not installed but WALLFLAME_REQUIRE_LIVE=1")
        pytest.skip("inferno-collapse-perf not installed (cargo install inferno)")
    return INFERNO


@pytest.mark.parametrize("ours,theirs", OPTIONS, ids=lambda o: " ".join(o) or "default")
@pytest.mark.parametrize("fixture", sorted(CASES))
def test_fold_matches_inferno(fixture: str, ours: list[str], theirs: list[str],
                              tmp_path: Path) -> None:
    inferno = _require_inferno()
    extra_ours, extra_theirs, prepare = CASES[fixture]
    ref_input = tmp_path / "input.txt"
    ref_input.write_bytes(prepare((FIX / fixture).read_bytes()))
    ref = subprocess.run([inferno, "--nthreads", "1", *theirs, *extra_theirs, str(ref_input)],
                         capture_output=True, text=True, check=True).stdout
    _check(fixture, [*ours, *extra_ours], ref)


@pytest.mark.skipif(PERL is None, reason="stackcollapse-perf.pl not on PATH")
@pytest.mark.parametrize("ours,theirs", OPTIONS, ids=lambda o: " ".join(o) or "default")
@pytest.mark.parametrize("fixture", sorted(CASES))
def test_fold_matches_stackcollapse_perf(fixture: str, ours: list[str], theirs: list[str],
                                         tmp_path: Path) -> None:
    """The same with FlameGraph's script, which also needs LF line endings (it folds nothing
    from a CRLF file) and spells the event option ``--event-filter=E``."""
    assert PERL is not None
    extra_ours, extra_theirs, prepare = CASES[fixture]
    ref_input = tmp_path / "input.txt"
    ref_input.write_bytes(prepare((FIX / fixture).read_bytes()).replace(b"\r\n", b"\n"))
    perl_extra = ["=".join(extra_theirs)] if extra_theirs else []
    ref = subprocess.run([PERL, *theirs, *perl_extra, str(ref_input)], capture_output=True,
                         text=True, check=True).stdout
    _check(fixture, [*ours, *extra_ours], ref)


def _check(fixture: str, options: list[str], ref: str) -> None:
    result = CliRunner().invoke(fold_command, [*options, str(FIX / fixture)])
    assert result.exit_code == 0, result.output
    mine = result.stdout
    assert mine.strip(), "wallflame folded nothing"
    assert project(mine, drop_paren_frames=True) == project(ref, drop_paren_frames=False)


def test_projection_only_touches_names() -> None:
    """The projection keeps roots, frame order and weights: it cannot hide a wrong stack."""
    a = "t;main;f 10\nt;main;g 5\n"
    assert project(a, False) == a
    assert project("t;main;f 10\n", False) != project("t;f;main 10\n", False)
    assert project("t;main;f 10\n", False) != project("t;main;f 11\n", False)
    assert project("t;main;f 10\n", False) != project("u;main;f 10\n", False)
    assert project("t;x;Op::operator() 1\n", True) == project("t;x;Op::operator 1\n", False)
    assert project("t;x;(anonymous namespace)::f 1\n", True) == project("t;x 1\n", False)


def test_deliberate_differences_are_real(tmp_path: Path) -> None:
    """Each difference listed above shows up on the raw outputs (so the list is not stale)."""
    inferno = _require_inferno()

    def both(path: Path, *opts: str) -> tuple[str, str]:
        ref = subprocess.run([inferno, "--nthreads", "1", str(path)], capture_output=True,
                             text=True, check=True).stdout
        mine = CliRunner().invoke(fold_command, [*opts, str(path)]).stdout
        return mine, ref

    mine, ref = both(FIX / "deep-fp.txt")
    assert "(anonymous namespace)::Spin::operator()" in mine
    assert "anonymous" not in ref
    mine, ref = both(FIX / "mix-fp.txt")
    assert "@GLIBC" in ref or ".isra" in ref or "__GI_" in ref
    assert "@GLIBC" not in mine and ".isra" not in mine and "__GI_" not in mine
    semi = tmp_path / "semi.txt"
    semi.write_text("app 7 1.000000: 1000 cpu-clock: \n"
                    "\t1 a;b+0x1 (/bin/app)\n\t2 main (/bin/app)\n\n")
    mine, ref = both(semi)
    assert mine == "app;main;a\\x3bb 1000\n"
    assert ref == "app;main;a:b 1000\n"
