"""The optional compiled build (``APF_GATEWAY_COMPILE=1``, setup.py) runs the same admission
code: compile a copy of the tree with mypyc, check the modules really load as C extensions, and
run the flow-control, front-door and simulator tests against it."""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from gateway.compiled import COMPILED_MODULES, build_tree, module_names


def _can_compile() -> str:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return "no C compiler"
    if not Path(sysconfig.get_paths()["include"], "Python.h").exists():
        return "no Python headers (Python.h)"
    try:
        import mypyc  # noqa: F401, PLC0415 - optional mypyc
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
        # -O0: the same generated C as a release's -O3 build in half the compile time.
        tree = build_tree(tmp_path / "tree", sys.executable, opt_level="0")
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"mypyc build failed:\n{exc.stdout[-4000:]}\n{exc.stderr[-4000:]}")
    probe = "from gateway.compiled import compiled_modules; print(','.join(compiled_modules()))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], cwd=tree, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded.split(",") == module_names()
    # The front-door tests mostly wait on sockets (about a sixth of their wall time is CPU):
    # four workers cut this run from about 200 s to about 60 s on two cores.
    workers = ["-n", "4"] if importlib.util.find_spec("xdist") is not None else []
    # Every test runs compiled; the Hypothesis properties on a tenth of their examples, as the
    # interpreted suite has just searched the same logic in full (tests/support/examples.py).
    env = {**os.environ, "APF_EXAMPLES_SCALE": "0.1"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *workers,
         "tests/flowcontrol", "tests/frontdoor", "tests/simulate"],
        check=False, cwd=tree, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert " passed" in run.stdout


# What the compiled modules import from the gateway and deliberately leave interpreted: each is
# configuration, a slow path (queueing, rejection, reload) or cached per distinct request. A
# module whose objects are touched on every admitted request belongs in COMPILED_MODULES:
# compiled code reaches an interpreted class's attributes through generic look-ups (measured
# once: +55% on admission's cost when the state segments were left out).
INTERPRETED_IMPORTS = {
    "gateway.asgi.authn", "gateway.asgi.describe", "gateway.asgi.errorformat",
    "gateway.asgi.innerapp", "gateway.asgi.refusal", "gateway.asgi.reject",
    "gateway.asgi.requestinfo", "gateway.clock",
    "gateway.flowcontrol.borrowing", "gateway.flowcontrol.classify",
    "gateway.flowcontrol.objects", "gateway.flowcontrol.retry_after",
    "gateway.flowcontrol.workestimate", "gateway.flowcontrol.workestimate.adaptive",
    "gateway.flowcontrol.workestimate.rules", "gateway.http.types", "gateway.http.websocket",
    # the access log's redaction runs in its writer thread, once per logged line
    "gateway.accesslog.redact",
    "gateway.settings.model", "gateway.reconfigure",
    # queued requests only (read-ahead budget, body framing), after a burst (trim), one list
    # response per collection and interval (list counting)
    "gateway.asgi.readahead", "gateway.http.framing", "gateway.asgi.trim",
    "gateway.asgi.listcount",
    # Per request but light: a watch's initialization point, the deadline registry's two dict
    # operations, the list options' integer check (docs/performance.md, issue 24).
    "gateway.asgi.watchinit", "gateway.asgi.deadline", "gateway.flowcontrol.queryvalues",
    # once per process: the app's lifespan startup and shutdown (decision 0029)
    "gateway.asgi.lifespan",
}  # fmt: skip


def test_compiled_modules_import_only_compiled_or_known_interpreted_modules() -> None:
    root = Path(__file__).resolve().parent.parent
    compiled = set(module_names())
    imported: dict[str, set[str]] = {}
    for path in COMPILED_MODULES:
        for node in ast.walk(ast.parse((root / path).read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for name in names:
                if name.split(".")[0] == "gateway" and name not in compiled:
                    imported.setdefault(name, set()).add(path)
    unexpected = {name: sorted(paths) for name, paths in imported.items()
                  if name not in INTERPRETED_IMPORTS}  # fmt: skip
    assert not unexpected, f"compile these too, or list them as interpreted: {unexpected}"
    assert set(imported) >= INTERPRETED_IMPORTS, "stale entries in INTERPRETED_IMPORTS"
