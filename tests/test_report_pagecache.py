"""Report pages rendered from the compiled template code kept in the cache (without
importing Jinja2's compiler) are the pages Jinja2 renders."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

from wallflame.profile import Profile, StackKey
from wallflame.report import html, pagecache


def _profile(seed: int) -> Profile:
    rng = random.Random(seed)
    p = Profile()
    p.meta.threads = {2: "renamed <b>"}
    for _ in range(300):
        frames = tuple(rng.choice(["a", "b<", "c&d", "é", "x;y"])
                       for _ in range(rng.randint(0, 6)))
        state = rng.choice(["on", "on", "off"])
        wait = rng.choice(["mutex", "sleep", "io", "bogus"]) if state == "off" else ""
        lock = rng.choice(["", "0x10 <m>"]) if wait == "mutex" else ""
        p.add(StackKey(frames, rng.choice([0, 1, 2]), rng.choice(["t", "u", ""]), 1, state,
                       wait, lock), rng.randint(0, 50))
    return p


def _report(args: list[str], env: dict[str, str]) -> tuple[bytes, bool]:
    """The page, and whether the process imported Jinja2's environment (``-X importtime``
    names every module imported)."""
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "wallflame", "report", *args],
                       cwd=ROOT, env=env, capture_output=True, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout, b" jinja2.environment\n" in r.stderr


@pytest.mark.parametrize("source", [FIXTURES / "perf" / "mix-sched.txt",
                                    FIXTURES / "perf" / "deep-fp.txt"])
def test_kept_code_renders_the_page_jinja2_renders(source: Path, tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("WALLFLAME_NO_CACHE", None)
    args = [str(source), "-o", "-", "--format", "html"]
    first, full_first = _report(args, env)  # rendered by Jinja2, code kept
    second, full_second = _report(args, env)  # rendered from the kept code
    assert full_first and not full_second
    uncached, _ = _report(args, {**env, "WALLFLAME_NO_CACHE": "1"})
    assert first == second == uncached
    kept = tmp_path / "cache" / "wallflame" / "templates"
    assert sorted(p.name.split("-", 1)[1] for p in kept.glob("*" + pagecache.SUFFIX)) == sorted(
        n + pagecache.SUFFIX for n in pagecache.NAMES)


def test_stale_or_damaged_code_is_not_used(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("WALLFLAME_NO_CACHE", raising=False)
    p = _profile(1)
    html.environment.cache_clear()
    expected = html.render_html(p)
    folder = html.cache_folder()
    assert folder is not None
    key = pagecache.cache_key(html.templates_dir(), html._filters())
    assert key is not None
    context = html._context(p, html.MAX_NODES, None)
    page = pagecache.render("report.html", context, html._filters(), html._globals(), folder,
                            key)
    assert page == expected
    assert pagecache.render("report.html", context, html._filters(), html._globals(), folder,
                            "other key") is None
    entry = Path(pagecache._entry(folder, key, "report.html"))
    entry.write_bytes(key.encode() + b"\nnot marshalled code")
    assert pagecache.render("report.html", context, html._filters(), html._globals(), folder,
                            key) is None
    assert html.render_html(p) == expected  # rendered by Jinja2 again, and kept again
    assert pagecache.render("report.html", context, html._filters(), html._globals(), folder,
                            key) == expected


def test_key_follows_the_filters_calling_convention() -> None:
    from jinja2 import pass_eval_context

    plain = html._filters()

    @pass_eval_context
    def old(ctx: object, value: object) -> object:
        return value

    assert pagecache.cache_key(html.templates_dir(), plain) != pagecache.cache_key(
        html.templates_dir(), {**plain, "tojson": old})


def test_jinja2_completed_after_the_runtime_alone() -> None:
    """A process that rendered from kept code can still build the Jinja2 environment (the
    diff page, a template to compile)."""
    code = ("import sys; from wallflame.report import pagecache; pagecache._runtime(); "
            "assert 'jinja2.environment' not in sys.modules; "
            "from wallflame.report import html; env = html.environment(); "
            "import jinja2; print(jinja2.Environment is type(env))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"
