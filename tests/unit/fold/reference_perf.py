"""``perf script`` text folded with the Python loop alone (``reader._python`` for every
batch of records): the reference the tests hold the native fast path
(``_speedups.PerfFolder``, ``reader._native``) to.  The product uses ``_python`` only while
scheduler intervals are open."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from wallflame.fold.perf import reader
from wallflame.fold.perf.state import PerfState


def _fold_into(st: PerfState, f: Any) -> int:
    """``reader._fold_into`` with each batch's records split here and folded by ``_python``."""
    carry = b""
    line_no = 1
    crlf: bool | None = None
    while True:
        data = f.read(reader.CHUNK)
        eof = not data
        buf = carry + data if carry else data
        if crlf is None and buf:
            crlf = b"\r\n" in buf[:reader.CHUNK]
        if crlf and buf:
            if not eof and buf.endswith(b"\r"):
                buf, data = buf[:-1], b"\r"
            else:
                data = b""
            buf = buf.replace(b"\r\n", b"\n")
        else:
            data = b""
        if eof:
            if buf:
                line_no = reader._last(st, buf, line_no)
            break
        recs = buf.split(b"\n\n")
        if len(recs) == 1:
            if len(buf) <= reader.CHUNK:
                carry = buf + data
                continue
            cut = buf.rfind(b"\n")
            if cut < 0:
                carry = buf + data
                continue
            st.slow_lines(buf[:cut], line_no, end=False)
            line_no += buf.count(b"\n", 0, cut) + 1
            carry = buf[cut + 1:] + data
            continue
        carry = recs.pop() + data
        line_no = reader._batch(st, recs, line_no)
    return line_no


def _fast(st: PerfState, recs: list[bytes], ln: int) -> int:
    ln, first, last = reader._python(st, recs, ln)
    reader._note(st, first, last)
    return ln


@contextmanager
def python_only() -> Iterator[None]:
    """Within it, ``reader`` folds with the Python loop alone."""
    saved = reader._fold_into, reader._fast
    reader._fold_into, reader._fast = _fold_into, _fast  # type: ignore[assignment]
    try:
        yield
    finally:
        reader._fold_into, reader._fast = saved


__all__ = ["python_only"]
