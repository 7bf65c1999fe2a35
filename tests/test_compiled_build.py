"""The optional compiled build (``APF_GATEWAY_COMPILE=1``, setup.py) runs the same admission
code: compile a copy of the tree with mypyc, check the modules really load as C extensions, and
run the flow-control, front-door and simulator tests against it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from gateway.compiled import build_tree, module_names


def _can_compile() -> str:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return "no C compiler"
    if not Path(sysconfig.get_paths()["include"], "Python.h").exists():
        return "no Python headers (Python.h)"
    try:
        import mypyc  # noqa: F401
    except ImportError:
        return "mypy (mypyc) is not installed"
    return ""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_compiled_build_passes_the_admission_tests(tmp_path: Path) -> None:
    missing = _can_compile()
    if missing:
        pytest.skip(f"cannot build the compiled hot path here: {missing}")
    try:
        tree = build_tree(tmp_path / "tree", sys.executable)
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"mypyc build failed:\n{exc.stdout[-4000:]}\n{exc.stderr[-4000:]}")
    probe = "from gateway.compiled import compiled_modules; print(','.join(compiled_modules()))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], cwd=tree, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded.split(",") == module_names()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
         "tests/flowcontrol", "tests/frontdoor", "tests/simulate"],
        check=False, cwd=tree, capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert " passed" in run.stdout
