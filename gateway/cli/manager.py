"""``apf-gateway manager``: run the container manager, or ask a running one to drain/evict."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

DEFAULT_MANAGER = "http://127.0.0.1:7071"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("manager", help="the container manager (singleton)")
    sub = parser.add_subparsers(dest="manager_command", metavar="ACTION", required=True)

    serve = sub.add_parser("serve", help="run the manager")
    serve.add_argument("--listen", default="127.0.0.1:7071", help="HOST:PORT (port 0: any)")
    serve.add_argument("--state-dir", default=".apf-gateway", help="containers' state and logs")
    serve.add_argument("--backend", default="local", help="container backend: local, kubernetes")
    serve.add_argument(
        "--backend-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="kubernetes backend option (as its APF_K8S_NAME variable; the flag wins), "
        "e.g. namespace=actions, images=python:3.11=openwhisk/action-python-v3.11",
    )
    serve.add_argument("--lease-seconds", type=float, default=10.0, help="router lease length")
    serve.add_argument("--quota", type=int, default=100, help="containers per namespace")
    serve.add_argument(
        "--namespace-quota", action="append", default=[], metavar="NS=N", help="per-namespace"
    )
    serve.add_argument("--grace-seconds", type=float, default=5.0, help="SIGTERM -> SIGKILL")
    serve.add_argument(
        "--eviction-retry-seconds",
        type=float,
        default=5.0,
        help="retry a refused eviction (a disruption budget) after this long",
    )
    serve.add_argument(
        "--router-wait-seconds",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="on SIGTERM, wait up to this long for routers to deregister before removing "
        "containers (default 0: do not wait; 'apf-gateway up' sets 35)",
    )
    serve.add_argument(
        "--unassigned-idle-seconds", type=float, default=600.0, help="remove unowned containers"
    )
    serve.add_argument(
        "--prewarm", action="append", default=[], metavar="KIND=N", help="stem cells per kind"
    )
    serve.add_argument(
        "--keep-containers",
        action="store_true",
        help="leave containers running on exit (manager restart/upgrade)",
    )
    serve.set_defaults(func=_serve)

    for name, help_ in (("drain", "upgrade-style drain"), ("containers", "list containers")):
        cmd = sub.add_parser(name, help=help_)
        cmd.add_argument("--manager", default=DEFAULT_MANAGER, help="manager URL")
        if name == "drain":
            cmd.add_argument("--namespace", help="only this namespace")
            cmd.add_argument("--action", help="only this action (NS/NAME or NAME)")
        cmd.set_defaults(func=_drain if name == "drain" else _list)

    evict = sub.add_parser("evict", help="evict one container, if its eviction.safe allows")
    evict.add_argument("container")
    evict.add_argument("--reason", default="upgrade", choices=["upgrade", "space", "scale-down"])
    evict.add_argument("--manager", default=DEFAULT_MANAGER, help="manager URL")
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
