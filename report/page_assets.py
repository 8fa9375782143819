"""The scripts and styles a page inlines and the Content-Security-Policy that allows exactly
them: one builder for the report and the diff page.

A page is one self-contained file (no network), so every script and style is inlined and the
CSP names each by its SHA-256: nothing else may run or style the page, even text a profiled
process managed to get into it.  No script may close its own tag.
"""

from __future__ import annotations

import binascii
import os
from functools import cache
from typing import Any

from wallflame import templates
from wallflame.report.pagecache import sha256
from wallflame.report.pageruntime import Markup


def csp_hash(text: str) -> str:
    """The CSP source that allows an inline script or style of exactly ``text``."""
    digest = sha256(text.encode()).digest()
    return "'sha256-" + binascii.b2a_base64(digest, newline=False).decode() + "'"


def templates_dir() -> str:
    """The folder of the page templates and their scripts and styles (package data)."""
    return os.path.dirname(templates.__file__)


def asset(name: str) -> str:
    """The text of one of the pages' scripts or styles."""
    with open(os.path.join(templates_dir(), name), encoding="utf-8") as f:
        return f.read()


@cache
def page_assets(scripts: tuple[str, ...], styles: tuple[str, ...],
                made_styles: tuple[str, ...] = ()) -> dict[str, Any]:
    """The template context ``base.html`` inlines: the ``scripts`` and ``styles`` (files of
    ``templates/``), then ``made_styles`` (style text made by the caller), and the CSP that
    allows exactly them."""
    script_texts = [asset(n) for n in scripts]
    style_texts = [*(asset(n) for n in styles), *made_styles]
    for text in script_texts:
        assert "</script" not in text.lower(), "an inline script must not close its own tag"
    csp = ("default-src 'none'; script-src " + " ".join(map(csp_hash, script_texts))
           + "; style-src " + " ".join(map(csp_hash, style_texts))
           + "; img-src 'none'; base-uri 'none'; form-action 'none'")
    return {"scripts": [Markup(t) for t in script_texts],
            "styles": [Markup(t) for t in style_texts], "csp": Markup(csp)}
