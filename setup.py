"""The optional native module (``wallflame._speedups``): when no C compiler is at hand the
build goes on without it and wallflame uses its pure-Python equivalents.  With libzstd's
header (Debian's ``libzstd-dev``) it also reads perf.data files that ``perf record -z``
compressed; without it such a file's text is read from ``perf script`` instead."""

import os

from setuptools import Extension, setup

ZSTD = os.path.exists("/usr/include/zstd.h")

setup(ext_modules=[Extension("wallflame._speedups", ["wallflame/_speedups.c"],
                             extra_compile_args=["-O2"], optional=True,
                             define_macros=[("WALLFLAME_ZSTD", "1")] if ZSTD else [],
                             libraries=["zstd"] if ZSTD else [])])
