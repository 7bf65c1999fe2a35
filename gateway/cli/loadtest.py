"""``apf-gateway loadtest SCENARIO``: run a Locust scenario against a local gateway.

The scenarios, locustfiles and report live in the source tree's ``loadtests/`` (they are not
part of the installed package) and need the ``loadtest`` extra. The arguments are defined here,
with the standard library only, so that ``apf-gateway --help`` and ``loadtest --help`` work on a
plain install; running a scenario first checks the checkout and the extra and says in one line
what is missing (exit 2) instead of a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

#: What ``loadtests/`` imports beyond ``[project.dependencies]``: the ``loadtest`` extra
#: (tests/test_plain_install.py checks this against pyproject.toml).
EXTRA_MODULES = ("locust", "matplotlib", "psutil")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``apf-gateway loadtest`` and ``python -m loadtests``."""
    parser.add_argument(
        "scenario",
        metavar="SCENARIO",
        nargs="?",
        help="a name from loadtests/scenarios/ or a scenario YAML file",
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument(
        "--duration", metavar="DURATION", help="run time, e.g. 30s (default: the scenario's)"
    )
    parser.add_argument(
        "--out", metavar="DIR", help="output folder (default out/loadtest/SCENARIO-TIMESTAMP)"
    )
    parser.add_argument(
        "--users", metavar="FACTOR", type=float, help="scale every tenant's user count by FACTOR"
    )
    parser.add_argument(
        "--processes",
        metavar="N",
        type=int,
        default=1,
        help="Locust worker processes (2+ when one Locust process is CPU-bound; 1 = no workers)",
    )
    parser.add_argument("--quiet", action="store_true", help="print only errors")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "loadtest",
        help="run a load-test scenario (Locust) and write a fairness report",
        description="Start a slow upstream and the gateway on 127.0.0.1 with the scenario's "
        "FlowSchemas, levels and tokens, run Locust headless for a bounded time, and write "
        "Locust's CSV/HTML plus a fairness report (goodput vs max-min share, Jain's index, "
        "rejections by reason, waits, plots). Needs a source checkout and the 'loadtest' "
        "extra (pip install -e '.[loadtest]'). See docs/loadtesting.md.",
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def missing() -> str | None:
    """Why a scenario cannot run here (one line), or None."""
    if not (REPO / "loadtests" / "cli.py").exists():
        return (
            f"needs a source checkout: the scenarios (loadtests/) are not installed with the "
            f"package ({REPO / 'gateway'}); clone the repository and "
            f"pip install -e '.[loadtest]' there"
        )
    absent = [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if absent:
        return (
            f"needs the 'loadtest' extra (missing: {', '.join(absent)}): "
            f"pip install -e '.[loadtest]'"
        )
    return None


def run(args: argparse.Namespace) -> int:
    why = missing()
    if why is not None:
        print(f"apf-gateway loadtest: {why}", file=sys.stderr)
        return 2
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return int(importlib.import_module("loadtests.cli").main(args))
