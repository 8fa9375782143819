"""The optional native module (``wallflame._speedups``, one C file per concern in
``wallflame/_speedups_src/``): when no C compiler is at hand the build goes on without it and
wallflame uses its pure-Python equivalents."""

from glob import glob

from setuptools import Extension, setup

setup(ext_modules=[Extension("wallflame._speedups", sorted(glob("wallflame/_speedups_src/*.c")),
                             depends=["wallflame/_speedups_src/speedups.h"],
                             extra_compile_args=["-O2", "-fvisibility=hidden"], optional=True)])
