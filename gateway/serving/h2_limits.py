"""The HTTP/2 parts with no I/O: which protocol a connection speaks, the rapid-reset budget,
and a frame buffer that bounds a header block by bytes (the CONTINUATION flood)."""

from __future__ import annotations

from collections.abc import Callable

from h2.exceptions import DenialOfServiceError
from h2.frame_buffer import FrameBuffer
from hyperframe.frame import ContinuationFrame, Frame, HeadersFrame

# RFC 9113 section 3.4: what a client speaking HTTP/2 with prior knowledge sends first.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# What the TLS listener offers by ALPN, best first.
ALPN_PROTOCOLS = ("h2", "http/1.1")


def speaks_http2(alpn: str | None) -> bool:
    """Whether a TLS connection whose negotiated ALPN protocol is ``alpn``
    (``ssl_object.selected_alpn_protocol()``) speaks HTTP/2; no ALPN means HTTP/1.1."""
    return alpn == "h2"


def preface_state(data: bytes) -> bool | None:
    """For the first bytes of a plain connection: True if they start the HTTP/2 preface,
    False if they cannot, None if too few bytes to tell."""
    if len(data) >= len(PREFACE):
        return data.startswith(PREFACE)
    return None if PREFACE.startswith(data) else False


class ResetBudget:
    """Streams a client may reset within a window (CVE-2023-44487, "rapid reset"): a reset
    stream costs the server a request's start-up while the client pays one frame, so past
    ``limit`` resets in ``window`` seconds the connection is told ENHANCE_YOUR_CALM, as Go's
    server and Envoy do. A fixed window: at most ``2 * limit`` in any ``window``."""

    __slots__ = ("count", "limit", "now", "start", "window")

    def __init__(self, limit: int, window: float, now: Callable[[], float]) -> None:
        self.limit = limit
        self.window = window
        self.now = now
        self.start = now()
        self.count = 0

    def spend(self) -> bool:
        """Count one reset; False once the budget is exceeded."""
        now = self.now()
        if now - self.start >= self.window:
            self.start = now
            self.count = 0
        self.count += 1
        return self.count <= self.limit


class BoundedFrameBuffer(FrameBuffer):
    """h2's frame buffer, with a header block (HEADERS plus CONTINUATIONs) bounded by bytes
    and the time its first frame arrived kept for the header timeout.

    h2 alone bounds a block at 64 CONTINUATION frames, up to 1 MiB at the default frame size;
    here a block is refused once its encoded bytes pass ``max_block`` (the decoded list is
    bounded by SETTINGS_MAX_HEADER_LIST_SIZE, which only the finished block can check)."""

    def __init__(self, max_block: int, now: Callable[[], float]) -> None:
        super().__init__(server=True)
        self.max_block = max_block
        self.now = now
        self.block_bytes = 0
        self.block_started: float | None = None

    def _update_header_buffer(self, f: Frame | None) -> Frame | None:
        if isinstance(f, (HeadersFrame, ContinuationFrame)):
            if self.block_started is None:
                self.block_started = self.now()
                self.block_bytes = 0
            self.block_bytes += len(f.data)
            if self.block_bytes > self.max_block:
                msg = f"header block larger than {self.max_block} bytes"
                raise DenialOfServiceError(msg)
        out = super()._update_header_buffer(f)
        if out is not None:
            self.block_started = None
        return out
