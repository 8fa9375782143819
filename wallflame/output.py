"""Writing results: files written whole or not at all, losses warned once per kind."""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import IO

from wallflame.amounts import column
from wallflame.errors import InputError, say
from wallflame.profile import WAIT_CLASSES, Meta, Profile


@contextmanager
def open_output(path: str, mode: int = 0o644) -> Iterator[IO[str]]:
    """A text stream to ``path`` (``-``: stdout), renamed into place only on success."""
    if path == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    if _special(path):
        # A device, FIFO or socket (``-o /dev/null``, a pipe): written in place.  Renaming a
        # file over it would replace the device node itself.
        try:
            f = open(path, "w", encoding="utf-8", newline="\n")  # noqa: SIM115
        except OSError as e:
            raise InputError(f"{path}: cannot write: {e.strerror}",
                             "check the path and its permissions") from None
        with f:
            yield f
        return
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = private_file(directory, ".wallflame-")
    except OSError as e:
        raise InputError(f"{path}: cannot write: {e.strerror}", "check the directory") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            yield f
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


#: ``os.open`` flags of a new private file: as ``tempfile.mkstemp`` opens one.
_NEW_FILE = (os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_CLOEXEC", 0))


def private_file(directory: str, prefix: str) -> tuple[int, str]:
    """A new, empty file in ``directory`` that only its owner may read and write, opened:
    its descriptor and path.  What ``tempfile.mkstemp`` makes, without importing that module
    (with the ``random`` and ``shutil`` it pulls in, a few milliseconds of every report)."""
    for _ in range(100):
        path = os.path.join(directory, prefix + os.urandom(6).hex())
        try:
            return os.open(path, _NEW_FILE, 0o600), path
        except FileExistsError:
            continue  # as mkstemp: another name
    raise FileExistsError(errno.EEXIST, "no unused name for a new file", directory)


def write_bytes(out: IO[str], data: bytes) -> None:
    """``data`` to the binary stream under ``out`` (UTF-8 text to one without)."""
    out.flush()
    binary = getattr(out, "buffer", None)
    if binary is None:
        out.write(data.decode("utf-8"))
        return
    binary.write(data)
    binary.flush()


def require_binary(out: IO[str], what: str, fix: str) -> None:
    """Refuse an ``out`` with no binary stream under it (a binary format cannot be text)."""
    if getattr(out, "buffer", None) is None:
        raise InputError(f"{what} needs a file or a pipe", fix)


def _special(path: str) -> bool:
    """Whether ``path`` exists and is not a regular file (a directory is left to fail)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode)


def print_losses(meta: Meta) -> None:
    """One warning per kind of loss, with its count and first line number."""
    for kind, loss in sorted(meta.losses.items()):
        where = f" (first at line {loss.first_line})" if loss.first_line else ""
        detail = f": {loss.detail}" if loss.detail else ""
        say(f"wallflame: warning: {loss.count} {kind}{where}{detail}")
    for w in meta.warnings:
        say(f"wallflame: warning: {w}")


def summary_table(profile: Profile, out: IO[str]) -> None:
    """Per-thread and per-class totals as a fixed-width table for terminals and CI logs."""
    unit = profile.meta.unit
    cols = ["on", *WAIT_CLASSES]
    header = f"{'thread':<28} {'tid':>8} " + " ".join(f"{c:>10}" for c in cols)
    out.write(header + "\n")
    rows = [*profile.per_thread(), profile.totals()]
    for t in rows:
        name = (t.name or "?")[:28]
        name = "".join(ch if ch.isprintable() else "?" for ch in name)
        tid = str(t.tid) if t.tid else "-"
        vals = [t.on, *(t.wait[c] for c in WAIT_CLASSES)]
        out.write(f"{name:<28} {tid:>8} " + " ".join(f"{column(v, unit, 's'):>10}" for v in vals)
                  + "\n")
    out.write(f"unit: {unit}\n")
