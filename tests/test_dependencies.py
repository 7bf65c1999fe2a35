"""Dependencies match use (decision 0009): the runtime imports neither Starlette nor FastAPI, and
httpx only in the optional transports of the ``httpx`` extra."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL = ("httpx", "httpx_aiohttp", "starlette", "fastapi")
# The modules that may import them: the optional httpx transports.
NEEDS_EXTRA = {"gateway.proxy.httpx_transport"}

IMPORT_ALL = """
import importlib, json, pkgutil, sys
for name in {blocked!r}:
    sys.modules[name] = None  # import fails as if the package were not installed
import gateway
from gateway.proxy.transport import PoolLimits, Timeouts, create_transport
failed = {{}}
for info in pkgutil.walk_packages(gateway.__path__, "gateway."):
    if info.name.endswith(".__main__") or info.name in {skip!r}:
        continue
    try:
        importlib.import_module(info.name)
    except ImportError as exc:
        failed[info.name] = repr(exc)
errors = {{}}
for transport in ("h1", "aiohttp", "httpx", "httpx-aiohttp"):
    try:
        create_transport(transport, timeouts=Timeouts(), limits=PoolLimits())
    except ValueError as exc:
        errors[transport] = str(exc)
print(json.dumps({{"failed": failed, "errors": errors}}))
"""


def test_the_runtime_imports_without_the_optional_packages() -> None:
    code = IMPORT_ALL.format(blocked=OPTIONAL, skip=sorted(NEEDS_EXTRA))
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["failed"] == {}
    assert set(result["errors"]) == {"httpx", "httpx-aiohttp"}  # h1 and aiohttp need nothing
    for message in result["errors"].values():
        assert "needs the 'httpx' package" in message and "apf-gateway[httpx]" in message


def test_declared_dependencies_leave_the_optional_packages_to_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = " ".join(project["dependencies"])
    for name in ("httpx", "starlette", "fastapi"):
        assert name not in runtime
    assert any(d.startswith("httpx-aiohttp") for d in project["optional-dependencies"]["httpx"])
