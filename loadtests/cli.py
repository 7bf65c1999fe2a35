"""What ``apf-gateway loadtest`` and ``python -m loadtests`` run (their arguments are defined in
``gateway.cli.loadtest``, which a plain install can import)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from gateway.cli.loadtest import add_arguments
from loadtests import runner, scenario

__all__ = ["add_arguments", "main"]


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
