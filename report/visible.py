"""What a reader may see of a name the target chose: one rule for every output.

Frame, thread and lock names come from the profiled program. Before any of them reaches a
page, an SVG, a terminal, a Markdown summary or JUnit XML, the characters a reader could not
see or that could change what the text around them means (control and format characters such
as bidi overrides and zero-width marks, unpaired surrogates, private-use and unassigned code
points, line and paragraph separators, and the no-break space, which looks like a space but
is not one) are written out as ``⟨U+XXXX⟩``, and the length is capped.
"""

from __future__ import annotations

import unicodedata

#: Names longer than this are cut (with the count of what was cut) even in the embedded data.
MAX_NAME = 2000

_HIDDEN_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))


def visible_char(ch: str) -> str:
    """``ch`` itself, or ``⟨U+XXXX⟩`` when a reader could not tell it apart."""
    if ch == "\u00a0" or unicodedata.category(ch) in _HIDDEN_CATEGORIES:
        return f"⟨U+{ord(ch):04X}⟩"
    return ch


def visible(name: str, cap: int = MAX_NAME) -> str:
    """``name`` with every hidden character written out (``visible_char``), cut to ``cap``
    characters with the count of what was cut."""
    if not (name.isascii() and name.isprintable()):  # not all of it in " " .. "~"
        name = "".join(map(visible_char, name))
    if len(name) > cap:
        name = f"{name[:cap]}…(+{len(name) - cap} chars)"
    return name
