"""What makes ``wallflame report`` fast must not change what it draws: the tree built without
sorting already sorted stacks, the compiled-template cache, and the CLI's quick exit."""

from __future__ import annotations

import os
import random
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from wallflame.profile import Profile, StackKey
from wallflame.report import html
from wallflame.report.tree import build_tree


def _profile(seed: int) -> Profile:
    rng = random.Random(seed)
    p = Profile()
    p.meta.threads = {2: "renamed"}
    for _ in range(400):
        frames = tuple(rng.choice("abcde") for _ in range(rng.randint(0, 7)))
        tid = rng.choice([0, 1, 2, 3])
        state = rng.choice(["on", "on", "off"])
        wait = rng.choice(["mutex", "sleep", "io", "bogus"]) if state == "off" else ""
        lock = rng.choice(["", "0x10 <m>"]) if wait == "mutex" else ""
        p.add(StackKey(frames, tid, rng.choice(["t", "u", ""]), 1, state, wait, lock),
              rng.randint(0, 50))
    return p


@pytest.mark.parametrize("seed", range(6))
def test_tree_does_not_depend_on_the_order_of_stacks(seed: int) -> None:
    p = _profile(seed)
    items = list(p.stacks.items())
    ordered = Profile(stacks=dict(sorted(items)), meta=p.meta)
    random.Random(seed).shuffle(items)
    shuffled = Profile(stacks=dict(items), meta=p.meta)
    reverse = Profile(stacks=dict(reversed(sorted(items))), meta=p.meta)
    expected = build_tree(ordered).to_json()
    assert build_tree(shuffled).to_json() == expected
    assert build_tree(reverse).to_json() == expected
    assert build_tree(shuffled, 30).to_json() == build_tree(ordered, 30).to_json()


def test_template_cache_is_private_and_changes_nothing(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    p = _profile(1)
    monkeypatch.setenv("WALLFLAME_NO_CACHE", "1")
    assert html.bytecode_cache() is None
    html.environment.cache_clear()
    uncached = html.render_html(p)
    monkeypatch.delenv("WALLFLAME_NO_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    try:
        for _ in range(2):  # compiled and stored, then loaded
            html.environment.cache_clear()
            assert html.render_html(p) == uncached
        folder = tmp_path / "cache" / "wallflame" / "templates"
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert list(folder.glob("*.jinja")), "compiled templates are kept"
        os.chmod(folder, 0o770)  # another user could plant code: not used
        assert html.bytecode_cache() is None
        monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")
        assert html.bytecode_cache() is None
    finally:
        html.environment.cache_clear()


def test_template_cache_is_not_used_by_another_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A template compiled when ``tojson`` took the evaluation context calls it with two
    arguments: after an upgrade that changes a filter, the stored entry must not be used."""
    from jinja2 import pass_eval_context

    p = _profile(2)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    plain = html.tojson

    @pass_eval_context
    def old_tojson(ctx: object, value: object) -> object:
        return plain(value)

    try:
        monkeypatch.setattr(html, "tojson", old_tojson)
        html.environment.cache_clear()
        before = html.render_html(p)  # compiled and stored under the old filter
        monkeypatch.setattr(html, "tojson", plain)
        html.environment.cache_clear()
        assert html.render_html(p) == before  # compiled again, not loaded
    finally:
        html.environment.cache_clear()


def test_report_process_writes_everything_and_exits_zero(tmp_path: Path) -> None:
    src = tmp_path / "in.folded"
    src.write_text("".join(f"main;f{i % 7};g{i} {i + 1}\n" for i in range(300)))
    out = tmp_path / "r.html"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-m", "wallflame", "report", str(src), "-o", str(out)],
                       capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}" in r.stderr and "300 stacks, 1 threads" in r.stderr
    page = out.read_text(encoding="utf-8")
    assert page.rstrip().endswith("</html>") and "g299" in page
    r = subprocess.run([sys.executable, "-m", "wallflame", "report", str(src), "--format",
                        "txt", "-o", "-"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 0 and "main" in r.stdout


def test_command_list_is_the_commands_package() -> None:
    import pkgutil

    from wallflame import cli, commands

    assert sorted(cli.COMMANDS) == sorted(m.name for m in pkgutil.iter_modules(commands.__path__))
    for name in cli.COMMANDS:
        assert cli.cli.get_command(None, name) is not None  # type: ignore[arg-type]
    assert cli.cli.get_command(None, "nope") is None  # type: ignore[arg-type]


def test_page_templates_are_ascii() -> None:
    """Non-ASCII text in a template is written as an entity: the page then stays one byte per
    character in memory (unless a name needs more), which halves the cost of joining and
    encoding a megabyte page."""
    folder = ROOT / "templates"
    for path in [*folder.glob("*.html"), *folder.glob("*.js"), *folder.glob("*.css")]:
        text = path.read_text(encoding="utf-8")
        assert text.isascii(), (path.name, sorted({c for c in text if not c.isascii()}))


def test_version_option() -> None:
    from click.testing import CliRunner

    from wallflame import __version__
    from wallflame.cli import cli

    r = CliRunner().invoke(cli, ["--version"])
    assert r.exit_code == 0 and r.output == f"wallflame, version {__version__}\n"
