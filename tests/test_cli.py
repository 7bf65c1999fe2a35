from __future__ import annotations

import subprocess
import sys

import pytest

from gateway.cli.main import main


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert "apf-gateway 0.1.0" in capsys.readouterr().out


def test_no_command_prints_help_and_fails() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gateway"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2
    assert "usage: apf-gateway" in proc.stdout
