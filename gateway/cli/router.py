"""``apf-gateway router``: run one ContainerRouter (the OpenWhisk action API)."""

from __future__ import annotations

import argparse
import os
import socket
import sys

from gateway.cli.flags import add_bytes, add_seconds
from gateway.cli.logs import add_log_level, configure_logging

DESCRIPTION = """\
Run one ContainerRouter: the OpenWhisk action API (actions, invocations, activation records)
behind the front door, which authenticates callers and forwards their identity. The router
asks the container manager for containers, keeps them warm, runs activations in them and
writes activation records to the store. Several routers share one store and one manager.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "router",
        help="a ContainerRouter (OpenWhisk action API)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--listen",
        default="127.0.0.1:7080",
        metavar="HOST:PORT",
        help="private address for the manager and peer routers; port 0 picks a free port, "
        "printed as 'LISTENING URL' on stdout (default 127.0.0.1:7080)",
    )
    parser.add_argument(
        "--shared-listen",
        default=None,
        metavar="HOST:PORT",
        help="also serve the API on this port, shared with other routers (SO_REUSEPORT) "
        "(default: none)",
    )
    parser.add_argument(
        "--manager",
        default="http://127.0.0.1:7071",
        metavar="URL",
        help="container manager URL (default http://127.0.0.1:7071)",
    )
    parser.add_argument(
        "--store",
        default="sqlite:///.apf-gateway/platform.db",
        metavar="URL",
        help="actions and activation records: sqlite:///PATH or postgresql://... "
        "(default sqlite:///.apf-gateway/platform.db)",
    )
    parser.add_argument(
        "--id",
        default=None,
        help="router id, unique among live routers; a router started again under the id of "
        "one that died records that one's unfinished activations (default: HOST-PID)",
    )
    parser.add_argument(
        "--internal-token-file",
        default=".apf-gateway/internal-token",
        metavar="PATH",
        help="the manager's internal token (0600; APF_INTERNAL_TOKEN wins if set; "
        "default .apf-gateway/internal-token)",
    )
    parser.add_argument(
        "--allow-pod-template-field",
        action="append",
        default=[],
        metavar="FIELD",
        help="a pod template field actions may set, e.g. spec.tolerations or "
        "metadata.annotations.KEY (repeatable, or comma-separated; default none: "
        "docs/platform.md, 'Isolation and trust')",
    )
    # Gone: identity is believed only with the internal token, never for a source address.
    parser.add_argument("--trusted-network", action=_Removed, help=argparse.SUPPRESS)
    for flag, default, text in (
        ("--buffer-seconds", 10.0, "how long an invocation waits for a free container before 429"),
        ("--pause-grace", 10.0, "idle time before a warm container is paused"),
        ("--idle-timeout", 600.0, "idle time before a container is given back to the manager"),
        ("--action-cache-seconds", 1.0, "how long an action read from the store is reused"),
    ):
        add_seconds(parser, flag, default, text, zero=True)
    add_action_cache(parser)
    add_seconds(
        parser,
        "--store-timeout",
        5.0,
        "a store call taking longer counts as a store outage (cached actions are served, "
        "other requests answered 503)",
    )
    parser.add_argument(
        "--activation-buffer",
        type=_positive,
        default=10_000,
        metavar="N",
        help="activation records kept in memory while the store is unreachable; beyond it the "
        "oldest are dropped and counted (default 10000)",
    )
    add_blocking_wait(parser, "a front door's proxy read timeout must be longer")
    add_body_limits(parser)
    add_log_level(parser)
    parser.set_defaults(func=_run)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


class _Removed(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        parser.error(
            "--trusted-network was removed: routers believe X-Remote-* identity headers only "
            "on requests carrying the internal token (the front door's "
            "upstreams[].bearerTokenFile), never because of a source address"
        )


def add_blocking_wait(parser: argparse.ArgumentParser, note: str) -> None:
    """``--max-blocking-wait``, shared with ``up`` (which passes it to its routers)."""
    add_seconds(
        parser,
        "--max-blocking-wait",
        60.0,
        f"how long a blocking invoke waits before answering 202 with the activation id; {note}",
        default_note="60, as OpenWhisk",
    )


#: the router's defaults (gateway.router.app), repeated here: the CLI imports no router module
#: before a command runs
ACTION_CACHE_BYTES = 64 * 1024 * 1024
ACTION_CACHE_ENTRIES = 4096


def add_action_cache(parser: argparse.ArgumentParser) -> None:
    """The action cache's bounds, shared with ``up`` (which passes them to its routers)."""
    add_bytes(
        parser,
        "--action-cache-bytes",
        ACTION_CACHE_BYTES,
        "action documents kept in memory (warm invokes, store outages), by encoded size; the "
        "least recently invoked go first and are read from the store again (a document larger "
        "than this is never kept)",
    )
    parser.add_argument(
        "--action-cache-entries",
        type=_positive,
        default=ACTION_CACHE_ENTRIES,
        metavar="N",
        help="action documents kept in memory, and actions with per-action metric series; "
        f"the least recently invoked go first (default {ACTION_CACHE_ENTRIES})",
    )


def add_body_limits(parser: argparse.ArgumentParser) -> None:
    """The router's size bounds (OpenWhisk's defaults), shared with ``up``."""
    add_bytes(
        parser,
        "--max-payload-bytes",
        1024 * 1024,
        "largest invoke body (the parameters), as OpenWhisk's whisk.activation.payload.max; "
        "larger is refused with 413 while reading",
    )
    add_bytes(
        parser,
        "--max-action-bytes",
        50 * 1024 * 1024,
        "largest action create/update body (code at most 48 MiB), as OpenWhisk's "
        "max-content-length; larger is refused with 413 while reading",
    )
    add_bytes(
        parser,
        "--max-result-bytes",
        1024 * 1024,
        "largest action result (a container's answer), as OpenWhisk's payload limit; reading "
        "stops there and the activation is an application error naming the size",
    )


def _run(args: argparse.Namespace) -> int:
    from gateway.platform.internal_token import resolve  # noqa: PLC0415 - per-command import
    from gateway.platform.podtemplate import parse_allowed  # noqa: PLC0415 - per-command import
    from gateway.platform.serving import (  # noqa: PLC0415 - per-command import
        bind,
        parse_listen,
        run_async,
        serve_until_signal,
        url_of,
    )
    from gateway.router.api import build_app  # noqa: PLC0415 - per-command import
    from gateway.router.app import Router, RouterSettings  # noqa: PLC0415 - per-command import
    from gateway.store import StoreError, open_store  # noqa: PLC0415 - per-command import

    configure_logging(args.log_level)
    try:
        allowed = parse_allowed(args.allow_pod_template_field)
        open_store(args.store)  # the URL only; the router opens it when it starts
        token = resolve(args.internal_token_file)
        host, port = parse_listen(args.listen)
        sock = bind(host, port)
        shared = []
        if args.shared_listen:
            shared_host, shared_port = parse_listen(args.shared_listen)
            shared.append(bind(shared_host, shared_port, reuse_port=True))
        router = Router(
            RouterSettings(
                router_id=args.id or f"{socket.gethostname()}-{os.getpid()}",
                manager_url=args.manager,
                store_url=args.store,
                allowed_pod_template_fields=allowed,
                buffer_seconds=args.buffer_seconds,
                pause_grace=args.pause_grace,
                idle_timeout=args.idle_timeout,
                action_cache_seconds=args.action_cache_seconds,
                action_cache_bytes=args.action_cache_bytes,
                action_cache_entries=args.action_cache_entries,
                max_blocking_wait=args.max_blocking_wait,
                store_timeout=args.store_timeout,
                activation_buffer=args.activation_buffer,
                max_payload_bytes=args.max_payload_bytes,
                max_action_bytes=args.max_action_bytes,
                max_result_bytes=args.max_result_bytes,
                internal_token=token,
            )
        )
    except (ValueError, OSError, StoreError) as exc:
        print(f"apf-gateway router: {exc}", file=sys.stderr)
        return 2
    run_async(serve_until_signal(build_app(router, url_of(sock)), sock, *shared))
    return 0
