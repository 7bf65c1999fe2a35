"""Entry point of the ``apf-gateway`` console script.

Each command group lives in its own module under ``gateway.cli`` and exposes
``register(subparsers)``; the module registers its parser and sets ``func`` on it.
Groups are imported lazily so optional dependencies load only when used.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gateway import __version__

# Command-group modules, in the order ``--help`` lists them.
COMMAND_MODULES = ("serve", "up", "config", "simulate", "manager", "router", "loadtest")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="apf-gateway",
        description="Kubernetes API Priority and Fairness for any HTTP API.",
    )
    parser.add_argument("--version", action="version", version=f"apf-gateway {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"gateway.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"gateway.cli.{name}":
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        result = func(args)
    except KeyboardInterrupt:
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
