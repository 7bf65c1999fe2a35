"""``apf-gateway manager``: run the container manager, or ask a running one to drain/evict."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from gateway.cli.logs import add_log_level, configure_logging

DEFAULT_MANAGER = "http://127.0.0.1:7071"
MANAGER_HELP = f"manager URL (default {DEFAULT_MANAGER})"


DESCRIPTION = """\
The container manager, a singleton: it creates action containers (local processes or
Kubernetes pods) when routers ask for them, assigns each to one router under a renewed lease,
keeps stem cells (prewarmed containers) ready, evicts and removes containers (an action's
eviction.safe decides when), and reassigns the containers of a router that stops renewing.
'serve' runs it; the other actions ask a running manager.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "manager",
        help="the container manager (singleton)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="manager_command", metavar="ACTION", required=True)

    serve = sub.add_parser(
        "serve",
        help="run the manager",
        description="Run the container manager; it prints 'LISTENING URL' on stdout once it "
        "serves and logs what it does (routers, containers created, evicted, removed) on stderr.",
    )
    serve.add_argument(
        "--listen",
        default="127.0.0.1:7071",
        metavar="HOST:PORT",
        help="address for routers and operators; port 0 picks a free port (default 127.0.0.1:7071)",
    )
    serve.add_argument(
        "--state-dir",
        default=".apf-gateway",
        metavar="DIR",
        help="local backend: containers' state and logs (default .apf-gateway)",
    )
    serve.add_argument(
        "--backend",
        default="local",
        metavar="NAME",
        help="container backend: local (processes) or kubernetes (pods) (default local)",
    )
    serve.add_argument(
        "--backend-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="kubernetes backend option (as its APF_K8S_NAME variable; the flag wins), "
        "e.g. namespace=actions, images=python:3.11=openwhisk/action-python-v3.11 "
        "(default: none)",
    )
    serve.add_argument(
        "--lease-seconds",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="router lease: a router that does not renew within it loses its containers "
        "(default 10)",
    )
    serve.add_argument(
        "--quota", type=int, default=100, metavar="N", help="containers per namespace (default 100)"
    )
    serve.add_argument(
        "--namespace-quota",
        action="append",
        default=[],
        metavar="NS=N",
        help="containers of one namespace, repeatable (default: --quota)",
    )
    serve.add_argument(
        "--grace-seconds",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="removing a container: SIGTERM, then SIGKILL after this long (default 5)",
    )
    serve.add_argument(
        "--eviction-retry-seconds",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="retry a refused eviction (a disruption budget) after this long (default 5)",
    )
    serve.add_argument(
        "--router-wait-seconds",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="on SIGTERM (not SIGINT), wait up to this long for routers to deregister before "
        "removing containers (default 0: do not wait; 'apf-gateway up' sets 35)",
    )
    serve.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="the routers' store (sqlite:///PATH or postgresql://...): the activations a "
        "router whose lease expired left running are recorded there as whisk internal errors "
        "(default: none, only a router restarted under the same id records them)",
    )
    serve.add_argument(
        "--unassigned-idle-seconds",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="remove a warm container no router has used for this long (default 600)",
    )
    serve.add_argument(
        "--prewarm",
        action="append",
        default=[],
        metavar="KIND=N",
        help="stem cells kept ready per runtime kind, repeatable (default: none)",
    )
    serve.add_argument(
        "--keep-containers",
        action="store_true",
        help="leave containers running on exit, for a manager restart or upgrade "
        "(default: remove them)",
    )
    add_log_level(serve)
    serve.set_defaults(func=_serve)

    for name, help_ in (("drain", "upgrade-style drain"), ("containers", "list containers")):
        cmd = sub.add_parser(name, help=help_)
        cmd.add_argument("--manager", default=DEFAULT_MANAGER, help=MANAGER_HELP)
        if name == "drain":
            cmd.add_argument("--namespace", help="only this namespace (default: all)")
            cmd.add_argument("--action", help="only this action, NS/NAME or NAME (default: all)")
        cmd.set_defaults(func=_drain if name == "drain" else _list)

    evict = sub.add_parser("evict", help="evict one container, if its eviction.safe allows")
    evict.add_argument("container", help="container id (see 'manager containers')")
    evict.add_argument(
        "--reason",
        default="upgrade",
        choices=["upgrade", "space", "scale-down"],
        help="what the eviction is for; the action's eviction.safe decides (default upgrade)",
    )
    evict.add_argument("--manager", default=DEFAULT_MANAGER, help=MANAGER_HELP)
    evict.set_defaults(func=_evict)


def _pairs(values: list[str], flag: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for value in values:
        key, sep, number = value.rpartition("=")
        if not sep or not key or not number.isdigit():
            raise SystemExit(f"{flag} expects KEY=N, got {value!r}")
        out[key] = int(number)
    return out


def _serve(args: argparse.Namespace) -> int:
    from gateway.manager.api import build_app
    from gateway.manager.backends import load_backend
    from gateway.manager.core import ManagerSettings
    from gateway.manager.service import ManagerService, ServiceSettings
    from gateway.platform.serving import run

    configure_logging(args.log_level)
    options: dict[str, Any] = {}
    for item in args.backend_option:
        name, sep, value = item.partition("=")
        if not sep or not name:
            print(f"--backend-option expects NAME=VALUE, got {item!r}", file=sys.stderr)
            return 2
        options[name.strip().replace("-", "_")] = value
    if args.backend == "local":
        if options:
            print("the local backend takes no --backend-option", file=sys.stderr)
            return 2
        options["state_dir"] = Path(args.state_dir)
    try:
        backend = load_backend(args.backend, **options)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.router_wait_seconds < 0:
        print("--router-wait-seconds must be >= 0", file=sys.stderr)
        return 2
    if args.store:
        from gateway.store import StoreError, open_store

        try:
            open_store(args.store)  # the URL only; the service opens it
        except StoreError as exc:
            print(f"--store: {exc}", file=sys.stderr)
            return 2
    settings = ServiceSettings(
        core=ManagerSettings(
            lease_seconds=args.lease_seconds,
            default_quota=args.quota,
            quota_overrides=_pairs(args.namespace_quota, "--namespace-quota"),
            unassigned_idle_seconds=args.unassigned_idle_seconds,
        ),
        grace_seconds=args.grace_seconds,
        prewarm=_pairs(args.prewarm, "--prewarm"),
        remove_on_exit=not args.keep_containers,
        eviction_retry_seconds=args.eviction_retry_seconds,
        router_wait_seconds=args.router_wait_seconds,
        store_url=args.store,
    )
    service = ManagerService(backend, settings)
    return run(build_app(service), args.listen, drain=service.wait_for_routers)


def _call(url: str, method: str, body: dict[str, Any] | None = None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=3600) as resp:
            print(json.dumps(json.load(resp), indent=2))
            return 0
    except urllib.error.HTTPError as exc:
        print(exc.read().decode(errors="replace"), file=sys.stderr)
        return 1
    except urllib.error.URLError as exc:
        print(f"cannot reach the manager at {url}: {exc.reason}", file=sys.stderr)
        return 1


def _drain(args: argparse.Namespace) -> int:
    body = {"namespace": args.namespace, "action": args.action}
    return _call(f"{args.manager}/v1/drain", "POST", body)


def _list(args: argparse.Namespace) -> int:
    return _call(f"{args.manager}/v1/containers", "GET")


def _evict(args: argparse.Namespace) -> int:
    return _call(
        f"{args.manager}/v1/containers/{args.container}/evict", "POST", {"reason": args.reason}
    )
