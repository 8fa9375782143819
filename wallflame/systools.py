"""Where a system program is found, and which Debian package provides it.

A program is looked for on ``PATH``, then in the sbin directories Debian installs servers and
administration tools in (``sshd``, ``runuser``): ``su`` without ``-``, cron and many CI
images give root a ``PATH`` without them.  A program found nowhere is named with its package.
"""

from __future__ import annotations

import os
import shutil

from wallflame.errors import ToolError

SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")

#: program -> the Debian package that provides it.
PACKAGES = {
    "perf": "linux-perf",
    "gdb": "gdb",
    "eu-stack": "elfutils",
    "pt-pmp": "percona-toolkit",
    "nm": "binutils",
    "readelf": "binutils",
    "objdump": "binutils",
    "c++filt": "binutils",
    "make": "make",
    "ps": "procps",
    "runuser": "util-linux",
    "bpftrace": "bpftrace",
    "mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server",
    "mariadb": "mariadb-client",
    "sysbench": "sysbench",
    "redis-server": "redis-server",
    "redis-benchmark": "redis-tools",
    "redis-cli": "redis-tools",
    "chromium": "chromium",
}


def find_program(name: str) -> str | None:
    """The path of ``name``: on ``PATH``, else in ``SBIN_DIRS``; None when in neither."""
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(SBIN_DIRS))


def package_of(name: str) -> str:
    """The Debian package that provides program ``name`` (its own name when not known)."""
    return PACKAGES.get(name, name)


def missing_message(name: str) -> str:
    """One line for a program found nowhere: ``perf is not installed (apt-get install
    linux-perf)``."""
    return f"{name} is not installed (apt-get install {package_of(name)})"


def require_program(name: str) -> str:
    """The path of ``name``, or a ``ToolError`` (exit 6) that names its package."""
    path = find_program(name)
    if path is None:
        raise ToolError(f"{name} is not installed", f"apt-get install {package_of(name)}")
    return path
