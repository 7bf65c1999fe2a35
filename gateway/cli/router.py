"""``apf-gateway router``: run one ContainerRouter (the OpenWhisk action API)."""

from __future__ import annotations

import argparse
import os
import socket
import sys


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("router", help="a ContainerRouter (OpenWhisk action API)")
    parser.add_argument("--listen", default="127.0.0.1:7080", help="HOST:PORT (port 0: any)")
    parser.add_argument(
        "--shared-listen",
        default=None,
        metavar="HOST:PORT",
        help="also serve the API on this port, shared with other routers (SO_REUSEPORT)",
    )
    parser.add_argument("--manager", default="http://127.0.0.1:7071", help="manager URL")
    parser.add_argument(
        "--store", default="sqlite:///.apf-gateway/platform.db", help="store URL (sqlite/postgres)"
    )
    parser.add_argument("--id", default=None, help="router id (default: host-pid)")
    parser.add_argument(
        "--internal-token-file",
        default=".apf-gateway/internal-token",
        metavar="PATH",
        help="the manager's internal token (0600; APF_INTERNAL_TOKEN wins if set)",
    )
    parser.add_argument(
        "--trusted-network",
        action="append",
        default=None,
        metavar="CIDR",
        help="front door / peer addresses whose X-Remote-* headers are believed "
        "(default 127.0.0.1/32 and ::1/128)",
    )
    parser.add_argument("--buffer-seconds", type=float, default=10.0, help="wait for a slot")
    parser.add_argument("--pause-grace", type=float, default=10.0, help="idle before pause")
    parser.add_argument("--idle-timeout", type=float, default=600.0, help="idle before give back")
    parser.add_argument("--action-cache-seconds", type=float, default=1.0)
    add_blocking_wait(parser, "a front door's proxy read timeout must be longer")
    parser.set_defaults(func=_run)


def add_blocking_wait(parser: argparse.ArgumentParser, note: str) -> None:
    """``--max-blocking-wait``, shared with ``up`` (which passes it to its routers)."""
    parser.add_argument(
        "--max-blocking-wait",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long a blocking invoke waits before answering 202 with the activation id "
        f"(default 60, as OpenWhisk); {note}",
    )


def _run(args: argparse.Namespace) -> int:
    from gateway.platform.internal_token import resolve
    from gateway.platform.serving import (
        bind,
        parse_listen,
        run_async,
        serve_until_signal,
        url_of,
    )
    from gateway.router.api import build_app
    from gateway.router.app import Router, RouterSettings
    from gateway.router.identity import DEFAULT_TRUSTED

    try:
        if not args.max_blocking_wait > 0:
            raise ValueError(f"--max-blocking-wait must be positive, got {args.max_blocking_wait}")
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
                trusted=tuple(args.trusted_network or DEFAULT_TRUSTED),
                buffer_seconds=args.buffer_seconds,
                pause_grace=args.pause_grace,
                idle_timeout=args.idle_timeout,
                action_cache_seconds=args.action_cache_seconds,
                max_blocking_wait=args.max_blocking_wait,
                internal_token=token,
            )
        )
    except (ValueError, OSError) as exc:
        print(f"apf-gateway router: {exc}", file=sys.stderr)
        return 2
    run_async(serve_until_signal(build_app(router, url_of(sock)), sock, *shared))
    return 0
