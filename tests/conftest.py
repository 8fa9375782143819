"""Shared test plumbing: golden files with ``--bless``, sample binaries, live-test gating."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests judge results, not speed: a shared or busy machine must not fail one by its
# clock (Hypothesis's default deadline is 200 ms an example).
settings.register_profile("wallflame", deadline=None)
settings.load_profile("wallflame")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SAMPLES = ROOT / "samples"
SAMPLE_BIN = SAMPLES / "bin"


#: The folders of the tiers (docs/layout.md): unit tests read files and run no profiler, live
#: tests run perf, gdb or a server against real processes, browser tests drive chromium.
TIERS = ("unit", "live", "browser")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--bless", action="store_true",
                     help="rewrite golden files from the current output instead of comparing")


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[Path, str], None]:
    """Compare ``text`` with the golden file at ``path`` (or rewrite it under --bless)."""
    bless = bool(request.config.getoption("--bless"))

    def check(path: Path, text: str) -> None:
        if bless:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            return
        assert path.exists(), f"missing golden file {path}; run pytest --bless"
        expected = path.read_text(encoding="utf-8")
        assert text == expected, f"output differs from {path}; inspect, then pytest --bless"

    return check


def _can_perf() -> bool:
    if shutil.which("perf") is None:
        return False
    try:
        r = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-o", "/dev/null",
                            "--", "true"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


@pytest.fixture(scope="session")
def sample_bin() -> Path:
    """Build the samples once per test session and return their bin/ folder."""
    r = subprocess.run(["make", "-s", "-C", str(SAMPLES)], capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, f"building samples failed:\n{r.stderr}"
    return SAMPLE_BIN


@pytest.fixture(scope="session")
def live() -> None:
    """Live tests need perf and ptrace; on a machine without them they are skipped loudly
    (the test script sets WALLFLAME_REQUIRE_LIVE=1: then they always run, and fail if the
    machine cannot profile)."""
    if os.environ.get("WALLFLAME_REQUIRE_LIVE") == "1":
        # Required: no probe that could skip under load; a real problem fails the test itself.
        return
    if not (_can_perf() and shutil.which("gdb") is not None):
        pytest.skip("perf/gdb not usable on this machine")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's markers agree with its folder, so that ``-m "not live and not browser"``
    selects exactly ``tests/unit``: the ``live`` marker on a test exactly when it uses the
    ``live`` fixture (every test under ``tests/live`` does), ``browser`` exactly on the tests
    under ``tests/browser``."""
    wrong = []
    for item in items:
        if item.path.is_relative_to(ROOT / "benchmarks" / "tests"):
            continue  # the benchmarks' own calculations: unit tests of their own
        parts = item.path.relative_to(ROOT / "tests").parts
        tier = parts[0] if len(parts) > 1 else ""
        live = item.get_closest_marker("live") is not None
        browser = item.get_closest_marker("browser") is not None
        uses_live = "live" in getattr(item, "fixturenames", ())
        if tier not in TIERS:
            wrong.append(f"{item.nodeid}: not under tests/unit, tests/live or tests/browser")
        elif live != uses_live or (tier == "live" and not live) or (tier == "unit" and live):
            wrong.append(f"{item.nodeid}: the live marker and the live fixture go together, "
                         "every test under tests/live has them and none under tests/unit")
        elif browser != (tier == "browser"):
            wrong.append(f"{item.nodeid}: the browser marker is for the tests under "
                         "tests/browser, and all of them")
    if wrong:
        raise pytest.UsageError("tests in the wrong tier:\n" + "\n".join(wrong))
