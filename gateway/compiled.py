"""Which modules the optional mypyc build compiles, and whether this process runs them.

Only modules on the per-request admission path are listed: compiling them removes most of
APF's interpreter overhead, while everything else (configuration, CLI, platform) stays
interpreted. The list is shared by ``setup.py``, the build test and the front-door benchmark.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
from pathlib import Path

COMPILED_MODULES = (
    "gateway/flowcontrol/digest.py",
    "gateway/flowcontrol/seats.py",
    "gateway/flowcontrol/stats.py",
    "gateway/flowcontrol/segments.py",
    "gateway/flowcontrol/shufflesharding.py",
    "gateway/flowcontrol/watermark.py",
    "gateway/flowcontrol/kinds.py",
    "gateway/flowcontrol/queueset.py",
    "gateway/flowcontrol/level.py",
    "gateway/flowcontrol/controller.py",
    "gateway/flowcontrol/hold.py",
    "gateway/flowcontrol/workestimate/kube.py",
    "gateway/flowcontrol/workestimate/estimator.py",
    "gateway/http/running.py",
    "gateway/asgi/context.py",
    "gateway/asgi/workestimate.py",
    "gateway/asgi/flowcontrol.py",
    "gateway/accesslog/requestid.py",
    "gateway/accesslog/fields.py",
    "gateway/accesslog/middleware.py",
    "gateway/accesslog/writer.py",
)


def module_names() -> list[str]:
    return [p.removesuffix(".py").replace("/", ".") for p in COMPILED_MODULES]


def compiled_modules() -> list[str]:
    """The listed modules this process loaded from C extensions (empty: pure Python)."""
    found = []
    for name in module_names():
        module = importlib.import_module(name)
        if Path(module.__file__ or "").suffix in (".so", ".pyd"):
            found.append(name)
    return found


def build_tree(dest: Path, python: str, opt_level: str = "3") -> Path:
    """Copy this source tree to ``dest`` and compile it in place there (for the build test and
    the benchmark: they run the compiled modules without touching the editable install).
    ``opt_level`` is the C compiler's (setup.py): the benchmark measures the release's 3, the
    build test checks behaviour at 0. Returns ``dest``; raises
    ``subprocess.CalledProcessError`` with the compiler's output."""

    root = Path(__file__).resolve().parent.parent
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", "build", "*.egg-info")
    shutil.copytree(root / "gateway", dest / "gateway", ignore=ignore)
    for tree in ("tests", "config", "examples"):  # examples: the sidecar examples' tests
        shutil.copytree(root / tree, dest / tree, ignore=ignore)
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy2(root / name, dest / name)
    env = {**os.environ, "APF_GATEWAY_COMPILE": "1", "APF_GATEWAY_COMPILE_OPT": opt_level}
    subprocess.run(
        [python, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=dest, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return dest
