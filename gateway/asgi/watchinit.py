"""When a watch's initialization is over, so it gives its seats back, as kube-apiserver's.

kube-apiserver (``priority-and-fairness.go``) holds a watch's seats until storage signals
``WatchInitialized``: once the watch is established and its initial events are out. A gateway
sees that from the stream it relays:

- a watch that gets no initial events (a ``resourceVersion`` other than ``0``, as informers
  re-watch, or ``sendInitialEvents=false``) is initialized when the upstream's response headers
  arrive;
- a watch-list (``sendInitialEvents`` true, KEP-3157) when the bookmark annotated
  ``k8s.io/initial-events-end`` has been relayed;
- a watch that gets initial events without that marker (no ``resourceVersion``, or ``0``) no
  later than the end of its first body chunk.

A compressed stream cannot be scanned for the marker, so a watch-list answered with a
``Content-Encoding`` falls back to the first body chunk.
"""

from __future__ import annotations

from typing import Final

from gateway.flowcontrol.digest import RequestInfo
from gateway.flowcontrol.queryvalues import first, query_bool

# Where a watch's initialization ends.
AT_HEADERS: Final = 0
AT_FIRST_CHUNK: Final = 1
AT_MARKER: Final = 2

# The annotation kube-apiserver puts on the bookmark that ends a watch-list's initial events.
INITIAL_EVENTS_END: Final = b"k8s.io/initial-events-end"


def initialized_at(info: RequestInfo) -> int:
    """``AT_HEADERS``, ``AT_FIRST_CHUNK`` or ``AT_MARKER`` for a watch."""
    send_initial = query_bool(info.query, "sendInitialEvents")
    if send_initial is not None:
        return AT_MARKER if send_initial else AT_HEADERS
    if (first(info.query, "resourceVersion") or "") in ("", "0"):
        return AT_FIRST_CHUNK
    return AT_HEADERS


class MarkerScanner:
    """Finds ``INITIAL_EVENTS_END`` in a stream relayed chunk by chunk (JSON, protobuf and CBOR
    all carry the annotation key verbatim), also when a chunk boundary splits it. Keeps only
    the last ``len(marker) - 1`` bytes between chunks."""

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, chunk: bytes) -> bool:
        marker = INITIAL_EVENTS_END
        keep = len(marker) - 1
        if self._tail and marker in self._tail + chunk[:keep]:
            return True
        if marker in chunk:
            return True
        self._tail = (self._tail + chunk)[-keep:] if len(chunk) < keep else chunk[-keep:]
        return False
