"""Optional compiled build: ``APF_GATEWAY_COMPILE=1`` compiles the admission hot path with mypyc.

The sources stay plain, type-checked Python; that is what development, the editable install and
most tests run. A compiled install runs the same modules as C extensions (as black and mypy ship
theirs), which is what puts APF's per-request cost within a few microseconds of the proxy's own.
See docs/decisions/0006-compiled-hot-path.md. Needs a C compiler, the Python headers and mypy in
the build environment:

    pip install setuptools wheel mypy==2.4.1
    APF_GATEWAY_COMPILE=1 pip install --no-build-isolation .
"""

from __future__ import annotations

import os
import sys

from setuptools import setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gateway.compiled import COMPILED_MODULES

# All compiled modules share one C file and one shared library. By default every function in
# it may be interposed at load time, so gcc calls even its own functions through the PLT and
# never inlines across them. These flags let it call and inline directly, as CPython's own
# build does for libpython (measured: admission -20% in estimated cycles, bench_instructions).
# The modules' init functions are exported explicitly (PyMODINIT_FUNC), so hiding the rest is
# safe.
UNIX_CFLAGS = ["-fno-semantic-interposition", "-fvisibility=hidden"]


def ext_modules() -> list[object]:
    if os.environ.get("APF_GATEWAY_COMPILE", "").lower() not in ("1", "true", "yes"):
        return []
    from mypyc.build import mypycify  # noqa: PLC0415 - optional mypyc

    # APF_GATEWAY_COMPILE_OPT lowers the C optimisation level (the build test uses 0, as mypyc's
    # own run tests do: the same generated C in half the compile time); releases use 3.
    opt_level = os.environ.get("APF_GATEWAY_COMPILE_OPT", "3")
    extensions = list(mypycify(list(COMPILED_MODULES), opt_level=opt_level, debug_level="0"))
    if sys.platform != "win32":
        for extension in extensions:
            extension.extra_compile_args = [*extension.extra_compile_args, *UNIX_CFLAGS]
    return extensions


setup(ext_modules=ext_modules())
