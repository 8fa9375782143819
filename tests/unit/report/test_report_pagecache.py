"""Report pages rendered from the compiled template code kept in the cache (on
``report/pageruntime.py``, without importing Jinja2 or MarkupSafe) are the pages Jinja2
renders."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT
from hypothesis import given
from hypothesis import strategies as st

from wallflame.profile import Profile, StackKey
from wallflame.report import html, pagecache, pagefilters, pageruntime


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
    """The page, and whether the process imported any of Jinja2 or MarkupSafe (``-X
    importtime`` names every module imported)."""
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "wallflame", "report", *args],
                       cwd=ROOT, env=env, capture_output=True, check=False)
    assert r.returncode == 0, r.stderr
    imported = {line.rsplit(b"|", 1)[-1].strip() for line in r.stderr.splitlines()
                if line.startswith(b"import time:")}
    return r.stdout, any(m.split(b".")[0] in (b"jinja2", b"markupsafe") for m in imported)


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


def test_runtime_filters_are_called_as_jinja2s() -> None:
    """The kept code calls each filter and test as Jinja2's is called (what it takes first):
    ``store`` keeps nothing when they differ."""
    env = html.environment()
    assert pagefilters.conventions(env.filters, env.tests)
    assert not pagefilters.conventions({**env.filters, "join": len}, env.tests)


_VALUES = st.one_of(st.text(), st.integers(), st.floats(allow_nan=False), st.none(),
                    st.booleans(), st.text().map(pageruntime.Markup))


@given(_VALUES)
def test_escape_is_markupsafes(value: object) -> None:
    import markupsafe

    mine, theirs = pageruntime.escape(value), markupsafe.escape(value)
    assert str(mine) == str(theirs)
    assert str(pageruntime.escape(markupsafe.Markup(value))) == str(
        markupsafe.escape(markupsafe.Markup(value)))


@given(st.text(), st.lists(_VALUES, max_size=4))
def test_markup_operations_are_markupsafes(text: str, values: list[object]) -> None:
    import markupsafe

    mine, theirs = pageruntime.Markup(text), markupsafe.Markup(text)
    assert str(mine.join(values)) == str(theirs.join(values))
    for v in values:
        if isinstance(v, str):
            assert str(mine + v) == str(theirs + v)
            assert str(v + mine) == str(v + theirs)
    assert str(pageruntime.Markup("%s|%r") % (text, text)) == str(
        markupsafe.Markup("%s|%r") % (text, text))


@given(st.dictionaries(st.text(max_size=3), st.integers()), st.lists(st.text(max_size=4)),
       st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=5))
def test_runtime_filters_give_what_jinja2s_give(d: dict[str, int], words: list[str],
                                                 covs: list[float]) -> None:
    """The filters the page uses, through both runtimes, on one template."""
    source = ("{{ '%.0f%%'|format(100 * x) }}|{{ words|join(' ') }}|"
              "{% for k, v in d|dictsort %}{{ k }}={{ v }},{% endfor %}|"
              "{{ rows|selectattr('cov', 'gt', 0.5)|list|length }}|{{ words|length }}|"
              "{% for w in words %}{{ loop.index }}{{ w }}{% if not loop.last %}, {% endif %}"
              "{% endfor %}|{{ 's' if words|length != 1 }}|{{ d is mapping }}{{ x is none }}"
              "{{ rows is defined }}")
    env = html.environment()
    context = {"x": 0.25, "words": words, "d": d, "rows": [{"cov": c} for c in covs]}
    expected = env.from_string(source).render(**context)
    code = compile(env.compile(source, "t.html", "t.html", raw=True), "t.html", "exec")
    page = pagecache._Environment(html._filters(), html._globals(), {"t.html": code}
                                  ).get_template("t.html").render(context)
    assert page == expected


def test_what_the_runtime_lacks_is_rendered_by_jinja2(tmp_path: Path) -> None:
    """Kept code using what ``pageruntime`` has not got fails there (its caller then renders
    with Jinja2), rather than giving another page."""
    env = html.environment()
    for source in ("{% set ns = namespace(a=1) %}{{ ns.a }}", "{{ title|upper }}",
                   "{{ missing_name }}",
                   "{% for x in [[1]] recursive %}{{ loop(x) }}{% endfor %}"):
        code = compile(env.compile(source, "t.html", "t.html", raw=True), "t.html", "exec")
        template = pagecache._Environment(html._filters(), html._globals(), {"t.html": code}
                                          ).get_template("t.html")
        with pytest.raises(Exception):  # noqa: B017
            template.render({"title": "x"})
