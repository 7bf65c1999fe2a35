"""``python -m gateway.runtime --host H --port N [--concurrency C]``.

Prints ``LISTENING <port>`` as the first stdout line (port 0 picks a free one), then serves
until SIGTERM: it stops accepting, lets the runs in flight finish, then exits 0 (whoever sent
SIGTERM sends SIGKILL after its grace period). stdout/stderr are line-buffered so log lines
reach the router as they happen.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from types import FrameType

USAGE = "usage: python -m gateway.runtime [--host H] [--port N] [--concurrency C]"


def _parse(argv: list[str]) -> tuple[str, int, int | None]:
    """Hand-rolled: ``argparse`` costs a few ms of every cold start."""
    options = {"--host": "127.0.0.1", "--port": "8080", "--concurrency": ""}
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
    except ValueError as exc:
        raise SystemExit(f"gateway.runtime: {exc}") from None
    if concurrency is not None and concurrency < 1:
        raise SystemExit("gateway.runtime: --concurrency must be >= 1")
    return options["--host"], port, concurrency


def main(argv: list[str]) -> None:
    host, port, concurrency = _parse(argv)
    from gateway.runtime.app import Runtime
    from gateway.runtime.http import Stopping, listen, serve_forever

    def stop(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the drain must not be interrupted
        raise Stopping

    signal.signal(signal.SIGTERM, stop)

    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sock = listen(host, port)
    sys.stdout.write(f"LISTENING {sock.getsockname()[1]}\n")
    sys.stdout.flush()
    with contextlib.suppress(KeyboardInterrupt, Stopping):
        serve_forever(sock, Runtime(concurrency))


if __name__ == "__main__":
    main(sys.argv[1:])
