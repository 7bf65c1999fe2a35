"""A running request's hold on its seats (its own module so the compiled build covers it:
every admitted request creates and releases one)."""

from __future__ import annotations

from gateway.flowcontrol.controller import Classification, FlowController
from gateway.flowcontrol.queueset import Request


class Admission:
    """A running request's hold on its seats."""

    __slots__ = ("_released", "classification", "controller", "read_only", "request", "watch")

    def __init__(
        self,
        controller: FlowController,
        classification: Classification,
        request: Request,
        *,
        read_only: bool,
        watch: bool,
    ) -> None:
        self.controller = controller
        self.classification = classification
        self.request = request
        self.read_only = read_only
        self.watch = watch
        self._released = False

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Give the seats back now (a watch after its initial events); idempotent."""
        if self._released:
            return
        self._released = True
        controller = self.controller
        req = self.request
        stats = self.classification.flow_stats
        now = controller.now()
        (stats.exec_watch if self.watch else stats.exec_regular).observe(now - req.start_time)
        controller.kinds.add("executing", self.read_only, -1, now)
        controller.finish(self.classification, req, now)
