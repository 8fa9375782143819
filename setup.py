"""The native module (``wallflame._speedups``, one C file per concern in
``wallflame/_speedups_src/``), built with the package: without a C compiler or Python's headers
the install stops with the one line that says what to install."""

from glob import glob

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, ExecError, PlatformError

FIX = ("wallflame: its native module (wallflame._speedups) could not be compiled: install a C "
       "compiler and Python's headers (apt-get install gcc python3-dev, as scripts/setup.sh "
       "does), then install wallflame again")


class BuildNative(build_ext):
    """``build_ext`` whose failure to compile is that one line."""

    def run(self) -> None:
        try:
            super().run()
        except (CCompilerError, ExecError, PlatformError) as e:
            raise SystemExit(f"{FIX} ({e})") from None


setup(ext_modules=[Extension("wallflame._speedups", sorted(glob("wallflame/_speedups_src/*.c")),
                             depends=["wallflame/_speedups_src/speedups.h"],
                             extra_compile_args=["-O2", "-fvisibility=hidden"])],
      cmdclass={"build_ext": BuildNative})
