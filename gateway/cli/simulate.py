"""``apf-gateway simulate``: run traffic through the flow controller in virtual time.

``--config`` takes one or more paths; when no traffic file follows as a separate argument, the
last path given to ``--config`` is the traffic file (so ``--config a.yaml b.yaml traffic.yaml``
reads as the usage line suggests). Exit status: 0 done, 1 bad input, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from gateway.apfconfig import bootstrap
from gateway.apfconfig.configset import ConfigErrors, ConfigSet
from gateway.apfconfig.ensure import dangling_warnings, effective_config
from gateway.apfconfig.loader import load_paths


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="what-if: run a traffic file through flow control in virtual time",
        description="Run the traffic described in TRAFFIC.yaml through the real APF engine in "
        "virtual time and print, per client and per priority level, what was dispatched, "
        "rejected, how long requests waited and how many seats each client got compared with "
        "its max-min fair share. See docs/simulate.md for the traffic format.",
    )
    parser.add_argument("traffic", nargs="?", metavar="TRAFFIC.yaml", help="the traffic file")
    parser.add_argument(
        "--config",
        nargs="+",
        action="append",
        default=[],
        metavar="PATH",
        help="FlowSchema/PriorityLevelConfiguration files or folders (default: Kubernetes' "
        "mandatory and suggested objects)",
    )
    parser.add_argument(
        "--exact-config",
        action="store_true",
        help="use the --config objects as they are; by default they are completed as a cluster "
        "would (mandatory objects forced, missing suggested objects added)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--seed", type=int, help="override the traffic file's seed")
    parser.set_defaults(func=_run)


def _config(paths: list[str], exact: bool) -> ConfigSet:
    if not paths:
        return bootstrap.defaults()
    config = load_paths(paths)
    if exact:
        return config
    effective = effective_config(config)
    for warning in dangling_warnings(effective):
        print(warning, file=sys.stderr)
    return effective


def _run(args: argparse.Namespace) -> int:
    from gateway.simulate import SimulationError, TrafficError, load_traffic, simulate  # noqa: PLC0415 - per-command import
    from gateway.simulate.report import render_text, to_json  # noqa: PLC0415 - per-command import

    paths = [p for group in args.config for p in group]
    traffic_path = args.traffic
    if traffic_path is None:
        if not paths:
            print("apf-gateway simulate: error: a TRAFFIC.yaml file is required", file=sys.stderr)
            return 2
        traffic_path = paths.pop()
    try:
        traffic = load_traffic(traffic_path)
        config = _config(paths, args.exact_config)
        result = simulate(traffic, config, seed=args.seed)
    except TrafficError as exc:
        for line in exc.errors:
            print(line, file=sys.stderr)
        print(f"invalid traffic file: {len(exc.errors)} error(s)", file=sys.stderr)
        return 1
    except ConfigErrors as exc:
        for err in exc.errors:
            print(err, file=sys.stderr)
        print(f"invalid configuration: {len(exc.errors)} error(s)", file=sys.stderr)
        return 1
    except SimulationError as exc:
        print(f"{traffic_path}: {exc}", file=sys.stderr)
        return 1
    data = to_json(result)
    text = json.dumps(data, indent=2) + "\n" if args.json else render_text(data)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `... | head`: the reader has what it wanted
        # Point stdout at devnull so the interpreter's final flush does not fail again.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    return 0
