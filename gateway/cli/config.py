"""``apf-gateway config``: check FlowSchema/PriorityLevelConfiguration files, print the defaults.

``validate`` loads the files exactly as ``serve`` does (the same function, the same size
limits): the GatewayConfiguration document and the flow-control objects (strict decoding,
Kubernetes defaulting and validation); it applies the ensurer to get the effective
configuration, and reports dangling references as warnings. Exit status: 0 valid, 1 invalid,
2 usage error.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gateway.apfconfig import bootstrap
from gateway.apfconfig.configset import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ERRORS,
    DEFAULT_MAX_OBJECTS,
    ConfigLimits,
    ConfigSet,
    more_errors,
)
from gateway.apfconfig.ensure import dangling_warnings, ensure
from gateway.apfconfig.serialize import dump_yaml


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
    for flag, default, what in (
        ("--max-config-bytes", DEFAULT_MAX_BYTES, "bytes, YAML aliases expanded"),
        ("--max-config-objects", DEFAULT_MAX_OBJECTS, "documents and list items"),
        ("--max-config-errors", DEFAULT_MAX_ERRORS, "errors listed; the rest are counted"),
    ):
        validate.add_argument(
            flag, type=_positive, default=default, metavar="N", help=f"{what} (default {default})"
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


def _positive(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _validate(args: argparse.Namespace) -> int:
    from gateway.settings.load import COMMAND_LINE  # noqa: PLC0415 - per-command import
    from gateway.settings.sources import ConfigLoadError, load_config  # noqa: PLC0415 - per-command import

    limits = ConfigLimits(args.max_config_bytes, args.max_config_objects, args.max_config_errors)
    try:
        loaded = load_config(args.paths, limits=limits)
    except ConfigLoadError as exc:
        for line in exc.errors:
            print(line, file=sys.stderr)
        if exc.more:
            print(more_errors(exc.more), file=sys.stderr)
        n = len(exc.errors) + exc.more
        print(f"invalid: {n} error{'s' if n != 1 else ''}", file=sys.stderr)
        return 1
    config = loaded.flow or ConfigSet()
    exact = loaded.settings.flow_control_objects == "exact" and loaded.flow is not None
    changes = [] if exact else ensure(config).changes
    out = sys.stderr if args.effective else sys.stdout  # keep stdout pure YAML then
    gateway = f", GatewayConfiguration in {loaded.where}" if loaded.where != COMMAND_LINE else ""
    print(
        f"valid: {len(config.flow_schemas)} FlowSchemas, "
        f"{len(config.priority_levels)} PriorityLevelConfigurations{gateway}",
        file=out,
    )
    effective = loaded.effective
    how = "flowControlObjects: exact" if exact else "after the ensurer"
    print(
        f"effective ({how}): {len(effective.flow_schemas)} FlowSchemas, "
        f"{len(effective.priority_levels)} PriorityLevelConfigurations, "
        f"{len(changes)} changes",
        file=out,
    )
    if args.verbose:
        for change in changes:
            print(f"  {change}", file=out)
    for warning in dangling_warnings(effective):
        print(warning, file=sys.stderr)
    if args.effective:
        print(dump_yaml(effective), end="")
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
