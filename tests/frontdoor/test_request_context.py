"""The typed request context: one meaning of "long running" (Kubernetes': watches included),
with the non-watch part the only one that bypasses flow control; and the context readers."""

from __future__ import annotations

from typing import Any

from gateway.asgi.authn import RequestAuthenticator
from gateway.asgi.context import (
    CONTEXT_KEY,
    RequestContext,
    added_headers,
    request_context,
)
from gateway.asgi.describe import RequestDescriber
from gateway.asgi.innerapp import adds_response_headers
from gateway.asgi.requestinfo import RequestInfoParser


def scope(path: str, query: bytes = b"") -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": path, "query_string": query,
            "headers": [], "client": ("127.0.0.1", 1)}  # fmt: skip


def test_long_running_has_one_meaning() -> None:
    describer = RequestDescriber(RequestAuthenticator(), RequestInfoParser())
    watch = describer.describe(scope("/api/v1/namespaces/a/pods", b"watch=true"))
    logs = describer.describe(scope("/api/v1/namespaces/a/pods/p/log"))
    plain = describer.describe(scope("/api/v1/namespaces/a/pods"))
    assert (watch.info.verb, watch.long_running, watch.bypasses_flow_control) == (
        "watch", True, False,
    )  # fmt: skip
    assert (logs.long_running, logs.bypasses_flow_control) == (True, True)
    assert (plain.long_running, plain.bypasses_flow_control) == (False, False)


def test_context_readers() -> None:
    describer = RequestDescriber(RequestAuthenticator(), RequestInfoParser())
    s = scope("/api/v1/namespaces/a/pods")
    assert request_context(s) is None and added_headers(s) is None
    context = RequestContext(describer.describe(s))
    s[CONTEXT_KEY] = context
    assert request_context(s) is context and added_headers(s) is None
    context.response_headers = [(b"x", b"y")]
    assert added_headers(s) == [(b"x", b"y")]
    s[CONTEXT_KEY] = "not a context"
    assert request_context(s) is None


def test_adds_response_headers_is_declared() -> None:
    class Declares:
        adds_response_headers = True

    class Declines:
        adds_response_headers = False

    assert adds_response_headers(Declares())
    assert not adds_response_headers(Declines())
    assert not adds_response_headers(object())
