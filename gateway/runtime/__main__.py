"""``python -m gateway.runtime --host H --port N [--concurrency C] [--secret-fd FD]
[--listen-fd FD]``.

The container's secret (required on every request, see ``http``) is read from the inherited
file descriptor ``--secret-fd`` (the local backend) or taken out of the environment variable
``APF_CONTAINER_SECRET`` (Kubernetes); without either the runtime serves anyone (direct use,
tests, benches). ``--listen-fd`` serves on an inherited listening socket instead of binding
(the sandbox binds before it leaves the host's network namespace).

Prints ``LISTENING <port>`` as the first stdout line (port 0 picks a free one), then serves
until SIGTERM: it stops accepting, lets the runs in flight finish, then exits 0 (whoever sent
SIGTERM sends SIGKILL after its grace period). stdout/stderr are line-buffered so log lines
reach the router as they happen.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import socket

USAGE = (
    "usage: python -m gateway.runtime [--host H] [--port N] [--concurrency C] "
    "[--secret-fd FD] [--listen-fd FD]"
)
SECRET_ENV = "APF_CONTAINER_SECRET"


def _parse(argv: list[str]) -> tuple[str, int, int | None, dict[str, str]]:
    """Hand-rolled: ``argparse`` costs a few ms of every cold start."""
    options = {
        "--host": "127.0.0.1",
        "--port": "8080",
        "--concurrency": "",
        "--secret-fd": "",
        "--listen-fd": "",
    }
    args = list(argv)
    while args:
        flag = args.pop(0)
        name, eq, inline = flag.partition("=")
        if name in ("-h", "--help"):
            print(__doc__)
            raise SystemExit(0)
        if name not in options or (not eq and not args):
            sys.stderr.write(f"gateway.runtime: bad argument {flag!r}\n{USAGE}\n")
            raise SystemExit(2)
        options[name] = inline if eq else args.pop(0)
    try:
        port = int(options["--port"])
        concurrency = int(options["--concurrency"]) if options["--concurrency"] else None
        for name in ("--secret-fd", "--listen-fd"):
            if options[name]:
                int(options[name])
    except ValueError as exc:
        raise SystemExit(f"gateway.runtime: {exc}") from None
    if concurrency is not None and concurrency < 1:
        raise SystemExit("gateway.runtime: --concurrency must be >= 1")
    return options["--host"], port, concurrency, options


def read_secret(fd: str) -> bytes | None:
    """The secret from an inherited descriptor (closed after), else from the environment
    (removed from it, so ``os.environ`` of the action does not show it)."""
    if fd:
        chunks = []
        with open(int(fd), "rb") as f:
            while chunk := f.read(4096):
                chunks.append(chunk)
        secret = b"".join(chunks).strip()
        if not secret:
            raise SystemExit("gateway.runtime: --secret-fd gave an empty secret")
        return secret
    value = os.environ.pop(SECRET_ENV, "")
    return value.encode() if value else None


def main(
    argv: list[str], *, secret: bytes | None = None, sock: socket.socket | None = None
) -> None:
    """``secret`` and ``sock`` given: called in-process by ``gateway.runtime.sandbox``."""
    host, port, concurrency, options = _parse(argv)
    if secret is None:
        secret = read_secret(options["--secret-fd"])
    from gateway.runtime.app import Runtime  # noqa: PLC0415 - cold start
    from gateway.runtime.http import Stopping, listen, serve_forever  # noqa: PLC0415 - cold start

    def stop(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the drain must not be interrupted
        raise Stopping

    signal.signal(signal.SIGTERM, stop)

    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    if sock is None and options["--listen-fd"]:
        import socket  # noqa: PLC0415 - cold start

        sock = socket.socket(fileno=int(options["--listen-fd"]))
    elif sock is None:
        sock = listen(host, port)
    sys.stdout.write(f"LISTENING {sock.getsockname()[1]}\n")
    sys.stdout.flush()
    with contextlib.suppress(KeyboardInterrupt, Stopping):
        serve_forever(sock, Runtime(concurrency), secret)


if __name__ == "__main__":
    main(sys.argv[1:])
