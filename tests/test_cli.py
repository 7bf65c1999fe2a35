from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from gateway.cli.main import build_parser, main


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


# Every SECONDS flag, with the smallest value it takes: 0 where zero turns something off or
# makes it immediate, else a positive number.
SECONDS_FLAGS = [
    (["manager", "serve"], "--lease-seconds", "positive"),
    (["manager", "serve"], "--grace-seconds", "zero"),
    (["manager", "serve"], "--eviction-retry-seconds", "positive"),
    (["manager", "serve"], "--router-wait-seconds", "zero"),
    (["manager", "serve"], "--unassigned-idle-seconds", "zero"),
    (["manager", "drain"], "--wait", "zero"),
    (["router"], "--buffer-seconds", "zero"),
    (["router"], "--pause-grace", "zero"),
    (["router"], "--idle-timeout", "zero"),
    (["router"], "--action-cache-seconds", "zero"),
    (["router"], "--max-blocking-wait", "positive"),
    (["router"], "--store-timeout", "positive"),
    (["up"], "--max-blocking-wait", "positive"),
    (["up"], "--upstream-read-timeout", "positive"),
]


@pytest.mark.parametrize(("command", "flag", "least"), SECONDS_FLAGS)
def test_seconds_flags_take_only_finite_durations(
    command: list[str], flag: str, least: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_parser()
    dest = flag.lstrip("-").replace("-", "_")
    assert getattr(parser.parse_args([*command, flag, "1.5"]), dest) == 1.5
    refused = ["-1", "nan", "inf", "soon"] + (["0"] if least == "positive" else [])
    if least == "zero":
        assert getattr(parser.parse_args([*command, flag, "0"]), dest) == 0
    for value in refused:
        with pytest.raises(SystemExit) as exc:
            parser.parse_args([*command, flag, value])
        assert exc.value.code == 2
        error = capsys.readouterr().err.splitlines()[-1]
        assert f"error: argument {flag}: expected " in error and repr(value) in error, error


def test_every_seconds_flag_is_listed_above() -> None:
    """A new ``SECONDS`` flag is tested above too."""
    listed = {(tuple(command), flag) for command, flag, _ in SECONDS_FLAGS}
    found = set()
    stack: list[tuple[tuple[str, ...], argparse.ArgumentParser]] = [((), build_parser())]
    while stack:
        path, parser = stack.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack += [((*path, name), sub) for name, sub in action.choices.items()]
            elif action.metavar == "SECONDS":
                found.add((path, action.option_strings[0]))
    assert found == listed
