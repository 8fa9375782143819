"""The optional native module (``wallflame._speedups``): when no C compiler is at hand the
build goes on without it and wallflame uses its pure-Python equivalents."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("wallflame._speedups", ["wallflame/_speedups.c"],
                             extra_compile_args=["-O2"], optional=True)])
