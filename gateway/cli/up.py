"""``apf-gateway up``: front door + N routers + manager (local processes) on this machine.

Layout: the front door (``apf-gateway serve``) authenticates OpenWhisk API keys and forwards
identity to one upstream port that all routers share (SO_REUSEPORT: the kernel spreads
connections over them, no extra hop); each router also has a private port for the manager and
its peers. ``gateway.supervision`` runs the children: in their own sessions, so that Ctrl-C
reaches only this process, which stops them in order (front door, routers, manager, then a
sweep of runtime processes still recorded); restarted with back-off when they die. If this
process dies, its children get SIGTERM (``PR_SET_PDEATHSIG``) and stop in the same order by
themselves: routers finish their activations, the manager waits for them
(``--router-wait-seconds``) before removing containers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gateway.cli.flags import add_seconds
from gateway.cli.router import add_action_cache, add_blocking_wait
from gateway.cli.scrape_targets import FILE_NAME, TargetsFile
from gateway.serving.listen import reason as _reason
from gateway.supervision import Spec, StartError, Supervisor

#: The well-known local key of OpenWhisk's standalone mode (namespace ``guest``).
DEFAULT_API_KEY = (
    "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:"
    "123zO3xZCLrMN6v2BKK1dXYFpXlPkccOFqm12CdAsMgRU4VrNZ9lyGVCGuMDGIwP"
)
#: Where ``up`` takes the API key from when no flag gives it (the process environment is its
#: owner's only, unlike its command line).
API_KEY_ENV = "APF_GATEWAY_API_KEY"
CMDLINE_WARNING = (
    "warning: --api-key leaves the key in this process's command line, which every local user "
    f"can read (ps); use --api-key-file PATH or ${API_KEY_ENV}"
)
#: How much longer than the blocking wait the front door waits for a router's answer.
BLOCKING_MARGIN = 10.0

#: How long a stopping router may take to finish its activations (aiohttp's shutdown timeout).
ROUTER_DRAIN_SECONDS = 30.0

DESCRIPTION = """\
Run the whole platform on this machine: the front door (authentication, API Priority and
Fairness) on --listen, N routers (the OpenWhisk action API) behind it and the container
manager, each a child process logging to STATE-DIR/logs.

Failures: a child that exits while starting stops 'up' at once with its last log line. Once
up, a child that exits is restarted (back-off 0.5 s doubling to 30 s, reset after 60 s of
healthy running); an activation whose router died is recorded as a 'whisk internal error'.
Ctrl-C or SIGTERM stops the front door, then the routers (they finish what they run), then
the manager (it removes the containers). If 'up' itself is killed, its children stop in the
same order on their own.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "up",
        help="run front door + routers + manager locally",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--listen",
        default="127.0.0.1:3233",
        metavar="HOST:PORT",
        help="front door address; port 0 picks a free port, printed when up "
        "(default 127.0.0.1:3233)",
    )
    parser.add_argument(
        "--routers", type=int, default=2, metavar="N", help="number of routers (default 2)"
    )
    parser.add_argument(
        "--state-dir",
        default=".apf-gateway",
        metavar="DIR",
        help="store, keys, containers and logs (default .apf-gateway)",
    )
    key = parser.add_mutually_exclusive_group()
    key.add_argument(
        "--api-key-file",
        metavar="PATH",
        help=f"file holding the API key of namespace guest, UUID:KEY (0600) (default: "
        f"${API_KEY_ENV}, else the well-known OpenWhisk standalone key)",
    )
    key.add_argument(
        "--api-key",
        metavar="UUID:KEY",
        help="the API key on the command line, where every local user can read it (a warning "
        "says so): prefer --api-key-file or $" + API_KEY_ENV,
    )
    parser.add_argument(
        "--prewarm",
        default="python:3=1",
        metavar="KIND=N",
        help="stem cells kept ready per runtime kind, '' for none (default python:3=1)",
    )
    parser.add_argument(
        "--quota",
        type=int,
        default=100,
        metavar="N",
        help="containers per namespace (default 100)",
    )
    parser.add_argument(
        "--config",
        action="extend",
        nargs="+",
        default=[],
        metavar="PATH",
        help="front-door configuration (FlowSchemas, PriorityLevelConfigurations, a "
        "GatewayConfiguration), passed to 'apf-gateway serve --config'; reloaded on change "
        "(default: none, Kubernetes' built-in objects)",
    )
    parser.add_argument(
        "--tls-cert-file",
        metavar="FILE",
        help="serve the platform over HTTPS with this PEM certificate (reloaded on change)",
    )
    parser.add_argument(
        "--tls-private-key-file", metavar="FILE", help="the PEM private key of --tls-cert-file"
    )
    add_blocking_wait(parser, "passed to the routers")
    add_action_cache(parser)
    add_seconds(
        parser,
        "--upstream-read-timeout",
        None,
        "the front door's proxy.readTimeout; must exceed --max-blocking-wait",
        default_note=f"--max-blocking-wait + {BLOCKING_MARGIN:g}",
    )
    parser.set_defaults(func=_up)


def read_timeout_for(max_blocking_wait: float, given: float | None) -> float:
    """The front door's upstream read timeout: longer than any blocking invoke may stay
    silent, so that the router's 202 arrives before the proxy gives up with 504 (both are
    positive: their flags' type)."""
    if given is None:
        return max_blocking_wait + BLOCKING_MARGIN
    if given <= max_blocking_wait:
        raise ValueError(
            f"--upstream-read-timeout ({given:g}s) must be longer than --max-blocking-wait "
            f"({max_blocking_wait:g}s), or the front door cuts blocking invokes with 504"
        )
    return given


def _free_port(host: str, port: int) -> int:
    """Check that ``host:port`` can be bound (as the front door will bind it) and return the
    port; port 0 picks a free one. ``OSError`` says why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        return int(sock.getsockname()[1])


def _probe(host: str, port: int) -> Callable[[], bool]:
    target = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host

    def accepts() -> bool:
        try:
            with socket.create_connection((target, port), 0.2):
                return True
        except OSError:
            return False

    return accepts


def _sweep(state: Path) -> None:
    """Kill any runtime process group still recorded (the manager normally removed them)."""
    for record in (state / "containers").glob("*/container.json"):
        with contextlib.suppress(OSError, ValueError):
            os.killpg(int(json.loads(record.read_text())["pid"]), signal.SIGKILL)


def _internal_token(root: Path) -> Path:
    """A fresh internal token for this run (manager, routers and the front door authenticate
    to each other with it); the state dir and the file are this user's only (0700 / 0600)."""
    from gateway.platform.internal_token import write  # noqa: PLC0415 - per-command import

    root.chmod(0o700)
    path = root / "internal-token"
    write(path)
    return path


def _log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _sandbox_warnings(manager_log: Path, start: int) -> list[str]:
    """What the manager's sandbox could not apply (logged, from ``start`` on: this run,
    before it listens), e.g. that limits bound each process rather than the container."""
    try:
        with open(manager_log, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [line.split("sandbox: ", 1)[1] for line in text.splitlines() if "sandbox: " in line]


def _fail(message: str) -> int:
    print(f"apf-gateway up: {message}", file=sys.stderr, flush=True)
    return 2


def _up(args: argparse.Namespace) -> int:
    from gateway.platform.serving import bind, parse_listen  # noqa: PLC0415 - per-command import

    try:
        api_key, source = api_key_of(args)
    except ValueError as exc:
        return _fail(str(exc))
    uuid, _, key = api_key.partition(":")
    if args.routers < 1:
        return _fail("--routers must be >= 1")
    if args.quota < 1:
        return _fail("--quota must be >= 1")
    for path in args.config:
        if not Path(path).exists():
            return _fail(f"--config {path}: no such file or directory")
    try:
        read_timeout = read_timeout_for(args.max_blocking_wait, args.upstream_read_timeout)
    except ValueError as exc:
        return _fail(str(exc))
    tls_args = _tls_args(args)
    if isinstance(tls_args, str):
        return _fail(tls_args)
    try:
        host, port = parse_listen(args.listen, 3233)
        port = _free_port(host, port)
    except (ValueError, OSError) as exc:
        return _fail(f"cannot listen on {args.listen}: {_reason(exc)}")
    if source == "--api-key":
        print(f"apf-gateway up: {CMDLINE_WARNING}", file=sys.stderr, flush=True)
    root = Path(args.state_dir).resolve()
    logs = root / "logs"
    keys = root / "openwhisk-keys"
    try:
        logs.mkdir(parents=True, exist_ok=True)
        token_file = _internal_token(root)
        token = ["--internal-token-file", str(token_file)]
        keys.write_text(f"{uuid}:{key},guest,guest\n")
        keys.chmod(0o600)
        manager_port = _free_port("127.0.0.1", 0)
    except OSError as exc:
        return _fail(f"cannot use --state-dir {args.state_dir}: {_reason(exc)}")
    stop = {"now": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    def report(message: str) -> None:
        print(f"apf-gateway up: {message}", file=sys.stderr, flush=True)

    supervisor = Supervisor(report=report)
    shared = bind("127.0.0.1", 0, reuse_port=True)  # holds the shared port until routers bind
    shared_port = shared.getsockname()[1]
    manager_url = f"http://127.0.0.1:{manager_port}"
    store_url = f"sqlite:///{root / 'platform.db'}"
    py = [sys.executable, "-m", "gateway"]
    return_code = 0
    try:
        manager_args = ["manager", "serve", "--listen", f"127.0.0.1:{manager_port}", *token]
        manager_args += ["--state-dir", str(root / "state"), "--quota", str(args.quota)]
        manager_args += ["--router-wait-seconds", str(ROUTER_DRAIN_SECONDS + 5)]
        manager_args += ["--store", store_url]
        if args.prewarm:
            manager_args += ["--prewarm", args.prewarm]
        # SIGINT: when we stop it the routers are gone already, nothing to wait for (SIGTERM,
        # from PR_SET_PDEATHSIG if we die, makes it wait for them: --router-wait-seconds)
        manager = Spec("manager", py + manager_args, logs / "manager.log")
        manager_log_start = _log_size(manager.log)
        manager.stop_signal = signal.SIGINT
        supervisor.add(manager)
        for i in range(1, args.routers + 1):
            router_args = ["router", "--listen", "127.0.0.1:0", "--id", f"router-{i}", *token]
            router_args += ["--shared-listen", f"127.0.0.1:{shared_port}"]
            router_args += ["--manager", manager_url]
            router_args += ["--store", store_url]
            router_args += ["--max-blocking-wait", str(args.max_blocking_wait)]
            router_args += ["--action-cache-bytes", str(args.action_cache_bytes)]
            router_args += ["--action-cache-entries", str(args.action_cache_entries)]
            spec = Spec(f"router-{i}", py + router_args, logs / f"router-{i}.log")
            supervisor.add(spec)
        front_args = ["serve", "--listen", f"{host}:{port}"]
        # Only the OpenWhisk API goes to the routers (not their /_platform/ endpoints), with
        # the internal token: routers believe the identity headers only on requests carrying
        # it. The front door answers errors there in OpenWhisk's shape.
        front_args += ["--upstream", f"/api/v1=http://127.0.0.1:{shared_port}"]
        front_args += ["--upstream-token-file", f"/api/v1={token_file}"]
        front_args += ["--upstream-error-format", "/api/v1=openwhisk"]
        front_args += ["--openwhisk-keys-file", str(keys), "--anonymous-auth", "false"]
        front_args += ["--upstream-read-timeout", str(read_timeout), *tls_args]
        if args.config:
            front_args += ["--config", *(str(Path(p).resolve()) for p in args.config)]
        front = Spec("front-door", py + front_args, logs / "front-door.log", announce=False)
        supervisor.add(front, probe=_probe(host, port))
        supervisor.wait_ready(cancelled=lambda: stop["now"])
        shared.close()
        shown = f"[{host}]" if ":" in host else host
        api = f"{'https' if tls_args else 'http'}://{shown}:{port}"
        routers = [c.url for c in supervisor.children() if c.spec.name.startswith("router-")]
        scrape = TargetsFile(root / FILE_NAME)  # before "up": whoever waits for it finds it
        scrape.update(_platform_urls(supervisor))
        print(f"apf-gateway is up: {api}", flush=True)
        if api_key == DEFAULT_API_KEY:
            print(f"  API key (namespace guest): {api_key}")
            print(f"  try: curl -u '{api_key}' {api}/api/v1/namespaces/_/actions")
        else:  # a secret of the user's: not echoed into terminals and logs
            print(f"  API key (namespace guest): {uuid}:... (from {source})")
            print(f"  try: curl -u {uuid}:KEY {api}/api/v1/namespaces/_/actions")
        print(f"  manager: {manager_url}   routers: {' '.join(routers)}")
        print(f"  Prometheus targets (manager, routers): {scrape.path}")
        for line in _sandbox_warnings(manager.log, manager_log_start):
            print(f"  warning: {line}")
        print(f"  logs: {logs}   (Ctrl-C stops everything)", flush=True)
        while not stop["now"]:
            supervisor.tick()
            scrape.update(_platform_urls(supervisor))
            time.sleep(0.1)
    except (StartError, OSError) as exc:
        report(str(exc))
        return_code = 1
    finally:
        shared.close()
        supervisor.stop()  # front door, routers, then the manager
        _sweep(root / "state")
    print("apf-gateway stopped", flush=True)
    return return_code


def api_key_of(args: argparse.Namespace) -> tuple[str, str]:
    """The API key of namespace guest and where it came from: ``--api-key``,
    ``--api-key-file`` (its owner's only, as ssh insists for keys), ``$APF_GATEWAY_API_KEY``,
    else the standalone key. ``ValueError`` says what is wrong, naming the source."""
    if args.api_key is not None:
        key, source = args.api_key, "--api-key"
    elif args.api_key_file is not None:
        source = f"--api-key-file {args.api_key_file}"
        path = Path(args.api_key_file)
        try:
            mode = path.stat().st_mode
            key = path.read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read {source}: {_reason(exc)}") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ValueError(
                f"{source} is readable by others (mode {stat.S_IMODE(mode):o}): chmod 600 it"
            )
    elif os.environ.get(API_KEY_ENV, "").strip():
        key, source = os.environ[API_KEY_ENV].strip(), f"${API_KEY_ENV}"
    else:
        return DEFAULT_API_KEY, "default"
    uuid, sep, secret = key.partition(":")
    if not sep or not uuid or not secret or any(c.isspace() or c == "," for c in key):
        raise ValueError(f"{source} must be UUID:KEY")
    return key, source


def _platform_urls(supervisor: Supervisor) -> list[tuple[str, str]]:
    """The manager's and the routers' URLs now ("" while one restarts)."""
    return [(c.spec.name, c.url) for c in supervisor.children() if c.spec.name != "front-door"]


def _tls_args(args: argparse.Namespace) -> list[str] | str:
    """The front door's TLS flags, or why the files do not make a certificate (checked here
    so that ``up`` fails at once, not after starting the manager and routers)."""
    if not args.tls_cert_file and not args.tls_private_key_file:
        return []
    if not (args.tls_cert_file and args.tls_private_key_file):
        return "--tls-cert-file and --tls-private-key-file go together"
    from gateway.serving.tls import load_certificates  # noqa: PLC0415 - per-command import
    from gateway.settings.model import TLSSettings  # noqa: PLC0415 - per-command import

    cert, key = (
        str(Path(args.tls_cert_file).resolve()),
        str(Path(args.tls_private_key_file).resolve()),
    )
    try:
        load_certificates(TLSSettings(cert, key), client_certs=False)
    except ValueError as exc:
        return str(exc)
    return ["--tls-cert-file", cert, "--tls-private-key-file", key]
