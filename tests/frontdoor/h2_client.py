"""A raw HTTP/2 client for the front-door tests: the ``h2`` library over a blocking socket, so
a test can send exactly the frames an attacker would (resets, CONTINUATION floods, PINGs)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import ConnectionTerminated, Event
from h2.exceptions import ProtocolError

BOUND = 5.0


class H2Client:
    def __init__(self, port: int, *, sock: socket.socket | None = None) -> None:
        self.sock = sock or socket.create_connection(("127.0.0.1", port), timeout=BOUND)
        self.conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        self.conn.initiate_connection()
        self.events: list[Event] = []
        self.closed = False
        self.after_goaway: bytes | None = None  # raw bytes that h2 refused after a GOAWAY
        self.flush()

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(
        self, path: str, *, method: str = "GET", end: bool = True, extra: list[Any] | None = None
    ) -> int:
        sid = self.conn.get_next_available_stream_id()
        headers = [(":method", method), (":path", path), (":scheme", "http"),
                   (":authority", "gw.test"), *(extra or [])]  # fmt: skip
        self.conn.send_headers(sid, headers, end_stream=end)
        self.flush()
        return sid

    def read(self, within: float = 0.5) -> list[Event]:
        """Events from what arrives within ``within`` seconds (one read)."""
        self.sock.settimeout(within)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return []
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return []
        if self.after_goaway is not None:
            self.after_goaway += data
            return []
        try:
            events = self.conn.receive_data(data)
        except ProtocolError:
            # h2 takes no frame after a GOAWAY; a graceful one is followed by the responses
            # of the streams it let finish: kept raw.
            if not any(isinstance(e, ConnectionTerminated) for e in self.events):
                raise
            self.after_goaway = bytes(data)
            return []
        self.flush()
        self.events.extend(events)
        return list(events)

    def wait_for(self, match: Callable[[Event], bool], what: str, within: float = BOUND) -> Event:
        for event in self.events:
            if match(event):
                return event
        deadline = time.monotonic() + within
        while time.monotonic() < deadline and not self.closed:
            for event in self.read(min(0.5, deadline - time.monotonic())):
                if match(event):
                    return event
        raise AssertionError(f"no {what} within {within}s; got {self.events!r}")

    def goaway(self, within: float = BOUND) -> ConnectionTerminated:
        event = self.wait_for(lambda e: isinstance(e, ConnectionTerminated), "GOAWAY", within)
        assert isinstance(event, ConnectionTerminated)
        return event

    def wait_closed(self, within: float = BOUND) -> None:
        deadline = time.monotonic() + within
        while not self.closed:
            assert time.monotonic() < deadline, "connection still open"
            self.read(0.2)

    def close(self) -> None:
        self.sock.close()
