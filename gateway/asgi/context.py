"""What the front door worked out about a request, for the apps behind it: one typed object
under one scope key, instead of loose scope keys and attributes looked up by name.

Set by admission (``FlowControlMiddleware``, or ``MaxInFlightMiddleware`` with APF off) once
the request is described; read by work estimation's learning (``LearningApp``), the proxy and
the gateway's own endpoints. Absent for requests that never went through admission.
"""

from __future__ import annotations

from typing import Final

from gateway.flowcontrol.controller import Classification
from gateway.flowcontrol.digest import UNIT_WORK, RequestDigest, WorkEstimate
from gateway.http.types import Scope

CONTEXT_KEY: Final = "gateway.request"

Headers = list[tuple[bytes, bytes]]


class RequestContext:
    """``digest.long_running`` is Kubernetes' meaning (watches included: the proxy gives them
    their own connection pool); ``digest.bypasses_flow_control`` is the non-watch part."""

    __slots__ = (
        "apf", "apf_reason", "classification", "deadline_passed", "digest", "queue_wait",
        "response_headers", "response_started", "upstream_seconds", "work",
    )  # fmt: skip

    def __init__(self, digest: RequestDigest) -> None:
        self.digest = digest
        # Headers the app must add to its response itself (the PF headers); set only for apps
        # that declare ``adds_response_headers`` (others get them through a wrapped ``send``).
        self.response_headers: Headers | None = None
        # Whether the response has been started (``added_headers`` or admission's wrapped
        # ``send`` note it), and whether the request's deadline cancelled it
        # (``gateway.asgi.deadline``): at the deadline, a 504 or a closed connection.
        self.response_started = False
        self.deadline_passed = False
        # What admission decided, for the access log (read once the response is done).
        # apf: "executed", "queued" (then executed), "rejected" (apf_reason says why),
        # "bypassed" (long-running, not flow controlled), "" (no admission decision).
        self.apf = ""
        self.apf_reason = ""
        self.classification: Classification | None = None
        self.work: WorkEstimate = UNIT_WORK
        self.queue_wait = 0.0
        # Seconds from sending upstream to the response headers (or the failure); -1: none.
        self.upstream_seconds = -1.0


def request_context(scope: Scope) -> RequestContext | None:
    found = scope.get(CONTEXT_KEY)
    return found if isinstance(found, RequestContext) else None


def added_headers(scope: Scope) -> Headers | None:
    """The headers an app that adds them itself must send (None: none). Such an app calls this
    as it starts its response, so it also notes that the response has started."""
    found = scope.get(CONTEXT_KEY)
    if not isinstance(found, RequestContext):
        return None
    found.response_started = True
    return found.response_headers
