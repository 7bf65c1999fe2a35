"""The Kubernetes client is imported only when the kubernetes backend is selected."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
from gateway.manager.backends import load_backend
load_backend("local", state_dir=sys.argv[1])
import gateway.manager.service, gateway.manager.api, gateway.cli.main
assert not [m for m in sys.modules if m.startswith(("lightkube", "httpx2"))], "imported"
load_backend("kubernetes", server="http://127.0.0.1:1", namespace="x")
assert "lightkube" in sys.modules
"""


def test_lightkube_is_imported_only_for_the_kubernetes_backend(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
