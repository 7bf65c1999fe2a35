"""Arguments shared by ``apf-gateway loadtest`` and ``python -m loadtests``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from loadtests import runner, scenario


def add_arguments(parser: argparse.ArgumentParser) -> None:
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


def main(args: argparse.Namespace) -> int:
    if args.list or not args.scenario:
        for name in scenario.available():
            doc = scenario.load(name).doc
            print(f"{name:22s} {doc.get('description', '')}")
        return 0 if args.list else 2

    try:
        duration = scenario.seconds(args.duration, "--duration") if args.duration else None
        if args.processes < 1:
            raise scenario.ScenarioError("--processes must be at least 1")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name = Path(args.scenario).stem
        out = Path(args.out) if args.out else Path("out") / "loadtest" / f"{name}-{stamp}"
        runner.run(
            runner.Options(
                args.scenario, out.resolve(), duration, args.processes, args.users, args.quiet
            )
        )
    except scenario.ScenarioError as exc:
        print(f"apf-gateway loadtest: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"apf-gateway loadtest: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the runner has stopped Locust, the gateway and the upstream
        print("apf-gateway loadtest: interrupted", file=sys.stderr)
        return 130
    return 0
