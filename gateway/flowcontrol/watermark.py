"""The maximum of a count over the last completed one-second window.

kube-apiserver reports ``apiserver_current_inflight_requests`` and
``apiserver_current_inqueue_requests`` this way: a scrape sees the peak of the second that just
ended, not a subsampled instant. Windows are whole seconds of the clock; the owner rolls them
(``roll``) before a change or a read, so a count pays no clock read of its own. Compiled with
the admission path (``gateway.compiled``): the request-kind tracker updates it per request.
"""

from __future__ import annotations


class Watermark:
    __slots__ = ("current", "reported", "window", "window_max")

    def __init__(self, second: int = 0) -> None:
        self.current = 0
        self.window = second  # the whole second the open window started
        self.window_max = 0
        self.reported = 0  # the maximum of the last closed window

    def roll(self, second: int) -> None:
        if second > self.window:
            # The window just closed reports its maximum; an idle gap reports the current value.
            self.reported = self.window_max if second == self.window + 1 else self.current
            self.window = second
            self.window_max = self.current

    def add(self, delta: int) -> None:
        """Change the count within the open window (``roll`` first when time may have passed)."""
        current = self.current + delta
        self.current = current
        self.window_max = max(self.window_max, current)
