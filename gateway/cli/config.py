"""``apf-gateway config``: check FlowSchema/PriorityLevelConfiguration files, print the defaults.

``validate`` loads the files as the gateway would (strict decoding, Kubernetes defaulting and
validation), applies the ensurer to get the effective configuration, and reports dangling
references as warnings. Exit status: 0 valid, 1 invalid, 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gateway.flowcontrol import bootstrap
from gateway.flowcontrol.configset import ConfigErrors, ConfigSet
from gateway.flowcontrol.ensure import dangling, ensure
from gateway.flowcontrol.loader import load_paths
from gateway.flowcontrol.serialize import dump_yaml


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "config",
        help="validate FlowSchema/PriorityLevelConfiguration files, print the defaults",
        description="Kubernetes APF configuration objects (flowcontrol.apiserver.k8s.io).",
    )
    sub = parser.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    validate = sub.add_parser(
        "validate",
        help="check files and folders; list every error",
        description="Load YAML/JSON files and folders (*.yaml, *.yml, *.json) as the gateway "
        "would; print every error, or a summary and dangling-reference warnings.",
    )
    validate.add_argument("paths", nargs="+", metavar="PATH")
    validate.add_argument(
        "-v", "--verbose", action="store_true", help="also list what the ensurer changes"
    )
    validate.add_argument(
        "--effective",
        action="store_true",
        help="print the effective configuration (after the ensurer) as YAML",
    )
    validate.set_defaults(func=_validate)
    defaults = sub.add_parser(
        "defaults",
        help="print the mandatory and suggested objects as YAML",
        description="Print Kubernetes' mandatory and suggested APF objects (the bootstrap "
        "configuration) as a multi-document YAML stream.",
    )
    which = defaults.add_mutually_exclusive_group()
    which.add_argument("--mandatory", action="store_true", help="only the mandatory objects")
    which.add_argument("--suggested", action="store_true", help="only the suggested objects")
    defaults.set_defaults(func=_defaults)
    parser.set_defaults(func=lambda _args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _validate(args: argparse.Namespace) -> int:
    try:
        config = load_paths(args.paths)
    except ConfigErrors as exc:
        for err in exc.errors:
            print(err, file=sys.stderr)
        n = len(exc.errors)
        print(f"invalid: {n} error{'s' if n != 1 else ''}", file=sys.stderr)
        return 1
    result = ensure(config)
    out = sys.stderr if args.effective else sys.stdout  # keep stdout pure YAML then
    print(
        f"valid: {len(config.flow_schemas)} FlowSchemas, "
        f"{len(config.priority_levels)} PriorityLevelConfigurations",
        file=out,
    )
    print(
        f"effective (after the ensurer): {len(result.config.flow_schemas)} FlowSchemas, "
        f"{len(result.config.priority_levels)} PriorityLevelConfigurations, "
        f"{len(result.changes)} changes",
        file=out,
    )
    if args.verbose:
        for change in result.changes:
            print(f"  {change}", file=out)
    for fs_name, pl_name in dangling(result.config):
        print(
            f'warning: FlowSchema "{fs_name}" is dangling: PriorityLevelConfiguration '
            f'"{pl_name}" does not exist, so the schema is ignored for classification',
            file=sys.stderr,
        )
    if args.effective:
        print(dump_yaml(result.config), end="")
    return 0


def _defaults(args: argparse.Namespace) -> int:
    config: ConfigSet
    if args.mandatory:
        config = bootstrap.mandatory()
    elif args.suggested:
        config = bootstrap.suggested()
    else:
        config = bootstrap.defaults()
    print(dump_yaml(config), end="")
    return 0
