"""``apf-gateway loadtest SCENARIO``: run a Locust scenario against a local gateway.

The scenarios, locustfiles and report live in the source tree's ``loadtests/`` (they are not
part of the installed package); this command finds that folder next to the ``gateway``
package and needs the ``loadtest`` extra (locust, matplotlib).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _loadtests_cli() -> Any:
    if not (REPO / "loadtests" / "cli.py").exists():
        raise SystemExit(
            f"apf-gateway loadtest: no loadtests/ folder next to {REPO / 'gateway'}; "
            "run from a source checkout"
        )
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module("loadtests.cli")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "loadtest",
        help="run a load-test scenario (Locust) and write a fairness report",
        description="Start a slow upstream and the gateway on 127.0.0.1 with the scenario's "
        "FlowSchemas, levels and tokens, run Locust headless for a bounded time, and write "
        "Locust's CSV/HTML plus a fairness report (goodput vs max-min share, Jain's index, "
        "rejections by reason, waits, plots). See docs/loadtesting.md.",
    )
    if (REPO / "loadtests" / "cli.py").exists():
        _loadtests_cli().add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return int(_loadtests_cli().main(args))
