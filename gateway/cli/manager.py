"""``apf-gateway manager``: run the container manager, or ask a running one to drain/evict."""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from gateway.cli.flags import add_seconds
from gateway.cli.logs import add_log_level, configure_logging

DEFAULT_MANAGER = "http://127.0.0.1:7071"
DEFAULT_TOKEN_FILE = ".apf-gateway/internal-token"
TOKEN_HELP = "file holding the internal token (0600; APF_INTERNAL_TOKEN wins if set)"
TOKEN_DEFAULT_HELP = f"{TOKEN_HELP} (default {DEFAULT_TOKEN_FILE})"

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
        "e.g. namespace=actions, images=python:3.11=openwhisk/action-python-v3.11; "
        "local backend sandbox option, e.g. network=host, user=nobody (docs/platform.md) "
        "(default: none)",
    )
    serve.add_argument(
        "--internal-token-file",
        default=None,
        metavar="PATH",
        help=TOKEN_HELP + "; created if missing (default STATE_DIR/internal-token)",
    )
    add_seconds(
        serve,
        "--lease-seconds",
        10.0,
        "router lease: a router that does not renew within it loses its containers",
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
    add_seconds(
        serve,
        "--grace-seconds",
        5.0,
        "removing a container: SIGTERM, then SIGKILL after this long",
        zero=True,
    )
    add_seconds(
        serve,
        "--eviction-retry-seconds",
        5.0,
        "retry a refused eviction (a disruption budget) after this long",
    )
    add_seconds(
        serve,
        "--router-wait-seconds",
        0.0,
        "on SIGTERM (not SIGINT), wait up to this long for routers to deregister before "
        "removing containers",
        zero=True,
        default_note="0: do not wait; 'apf-gateway up' sets 35",
    )
    serve.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="the routers' store (sqlite:///PATH or postgresql://...): the activations a "
        "router whose lease expired left running are recorded there as whisk internal errors "
        "(default: none, only a router restarted under the same id records them)",
    )
    add_seconds(
        serve,
        "--unassigned-idle-seconds",
        600.0,
        "remove a warm container no router has used for this long",
        zero=True,
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
        cmd.add_argument(
            "--internal-token-file", default=DEFAULT_TOKEN_FILE, help=TOKEN_DEFAULT_HELP
        )
        if name == "drain":
            cmd.add_argument("--namespace", help="only this namespace (default: all)")
            cmd.add_argument("--action", help="only this action, NS/NAME or NAME (default: all)")
            add_seconds(
                cmd,
                "--wait",
                0.0,
                "drain again every second until nothing is waiting (busy Never containers), "
                "at most this long; exit 1 if some still are",
                zero=True,
                default_note="0: once",
            )
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
    evict.add_argument("--internal-token-file", default=DEFAULT_TOKEN_FILE, help=TOKEN_DEFAULT_HELP)
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
    from gateway.manager.api import build_app  # noqa: PLC0415 - per-command import
    from gateway.manager.backends import load_backend  # noqa: PLC0415 - per-command import
    from gateway.manager.core import ManagerSettings  # noqa: PLC0415 - per-command import
    from gateway.manager.service import ManagerService, ServiceSettings  # noqa: PLC0415 - per-command import
    from gateway.platform.internal_token import resolve  # noqa: PLC0415 - per-command import
    from gateway.platform.serving import run  # noqa: PLC0415 - per-command import

    configure_logging(args.log_level)
    options: dict[str, Any] = {}
    for item in args.backend_option:
        name, sep, value = item.partition("=")
        if not sep or not name:
            print(f"--backend-option expects NAME=VALUE, got {item!r}", file=sys.stderr)
            return 2
        options[name.strip().replace("-", "_")] = value
    if args.backend == "local":
        options["state_dir"] = Path(args.state_dir)
    try:
        backend = load_backend(args.backend, **options)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.store:
        from gateway.store import StoreError, open_store  # noqa: PLC0415 - per-command import

        try:
            open_store(args.store)  # the URL only; the service opens it
        except StoreError as exc:
            print(f"--store: {exc}", file=sys.stderr)
            return 2
    token_file = args.internal_token_file or Path(args.state_dir) / "internal-token"
    try:
        token = resolve(token_file, create=True)
    except ValueError as exc:
        print(f"apf-gateway manager: {exc}", file=sys.stderr)
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
        internal_token=token,
        router_wait_seconds=args.router_wait_seconds,
        store_url=args.store,
    )
    service = ManagerService(backend, settings)
    return run(build_app(service), args.listen, drain=service.wait_for_routers)


#: What a client subcommand adds to "no token" and "cannot reach": which flags point it at a
#: manager (``up`` runs its manager on a free port and writes the token in its state dir).
MANAGER_FLAG = (
    f"--manager URL (default {DEFAULT_MANAGER}; 'apf-gateway up' prints its manager's URL)"
)
WHERE = (
    f"point at the manager with {MANAGER_FLAG} and --internal-token-file PATH (default "
    f"{DEFAULT_TOKEN_FILE}: 'apf-gateway up' writes STATE-DIR/internal-token) or "
    "APF_INTERNAL_TOKEN"
)


def _fail(args: argparse.Namespace, message: str) -> None:
    print(f"apf-gateway manager {args.manager_command}: {message}", file=sys.stderr)


def _token(args: argparse.Namespace) -> str | None:
    """The internal token (file or environment); None after printing why there is none."""
    from gateway.platform.internal_token import resolve  # noqa: PLC0415 - per-command import

    try:
        return resolve(args.internal_token_file)
    except ValueError as exc:
        _fail(args, f"{exc}; is a manager running? {WHERE}")
        return None


def _call(
    args: argparse.Namespace, url: str, method: str, body: dict[str, Any] | None = None
) -> int:
    token = _token(args)
    if token is None:
        return 2
    code, _, answer = _request(args, token, url, method, body)
    if answer is not None:
        print(json.dumps(answer, indent=2))
    return code


def _request(
    args: argparse.Namespace, token: str, url: str, method: str, body: dict[str, Any] | None
) -> tuple[int, int, Any]:
    """(exit code, HTTP status, JSON answer or None); errors are printed to stderr."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=3600) as resp:
            return 0, resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        print(exc.read().decode(errors="replace"), file=sys.stderr)
        return 1, exc.code, None
    except urllib.error.URLError as exc:
        why = f"{exc.reason}; is it running? {MANAGER_FLAG}"
        _fail(args, f"cannot reach the manager at {url}: {why}")
        return 1, 0, None


def _drain(args: argparse.Namespace) -> int:
    """Drain; with ``--wait``, again every second while busy containers are waited for."""
    body = {"namespace": args.namespace, "action": args.action}
    token = _token(args)
    if token is None:
        return 2
    url = f"{args.manager}/v1/drain"
    deadline = time.monotonic() + max(0.0, args.wait)
    first: Any = None
    while True:
        code, status, answer = _request(args, token, url, "POST", body)
        first = first if first is not None else answer
        if code or status != 202 or time.monotonic() >= deadline:
            break
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    if answer is not None:  # what was drained first, and what is still waited for now
        print(json.dumps({**first, "kept": answer["kept"], "waiting": answer["waiting"]}, indent=2))
    if code:
        return code
    return 1 if args.wait > 0 and status == 202 else 0


def _list(args: argparse.Namespace) -> int:
    return _call(args, f"{args.manager}/v1/containers", "GET")


def _evict(args: argparse.Namespace) -> int:
    return _call(
        args,
        f"{args.manager}/v1/containers/{args.container}/evict",
        "POST",
        {"reason": args.reason},
    )
