"""``scripts/smoke_quickstart.py`` reads the README's install and the quickstart's action from
the documents themselves; CI runs it (about 1.5 min, most of it pip). Here, fast: what it reads
is there and is what a user types, so a document edit that the smoke cannot follow fails a
test before CI."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from gateway.cli.up import DEFAULT_API_KEY

ROOT = Path(__file__).resolve().parent.parent


def smoke() -> ModuleType:
    spec = importlib.util.spec_from_file_location("smoke", ROOT / "scripts/smoke_quickstart.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_smoke_runs_the_readme_install_without_extras() -> None:
    install, up = smoke().readme_command()
    assert install == "python3 -m venv .venv && .venv/bin/pip install -e ."
    assert up == ".venv/bin/apf-gateway up"


def test_the_smoke_uses_the_quickstart_key_and_action() -> None:
    key, action = smoke().quickstart()
    assert key == DEFAULT_API_KEY
    assert action["exec"]["kind"] == "python:3" and 'print("called")' in action["exec"]["code"]


def test_ci_runs_the_smoke_before_the_tests() -> None:
    lines = (ROOT / ".ci/run").read_text().splitlines()
    smoke_at = lines.index("python3 scripts/smoke_quickstart.py")
    assert smoke_at < next(i for i, line in enumerate(lines) if "pytest" in line)
    assert "set -euo pipefail" in lines
