"""wallflame's own cache folders: ``$XDG_CACHE_HOME/wallflame/NAME``
(``~/.cache/wallflame/NAME``), each a directory of ours that nobody else may write to, or none
when ``WALLFLAME_NO_CACHE`` is set or no such directory can be had.  What is kept there is
read back as trusted (compiled templates are code we run; symbol tables name what a report
shows), so a folder another user could write to is not used."""

from __future__ import annotations

import contextlib
import os
import stat


def private_dir(path: str) -> bool:
    """``path`` is (now) a real directory of ours that nobody else may write to."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def cache_folder(name: str) -> str | None:
    """The cache folder ``name``, made if need be, or ``None`` (no cache)."""
    if os.environ.get("WALLFLAME_NO_CACHE"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):
        return None
    folder = os.path.join(base, "wallflame", name)
    if not (private_dir(os.path.dirname(folder)) and private_dir(folder)):
        return None
    return folder


def write_private(path: str, data: bytes) -> bool:
    """``data`` written to ``path`` whole or not at all (a temporary file of ours, then
    renamed), readable by us alone."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
