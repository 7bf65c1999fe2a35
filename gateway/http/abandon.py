"""A response left unfinished on purpose: the server then closes the client connection.

ASGI has no "abort" message; an app that returns after ``http.response.start`` without the
last body chunk makes uvicorn close the connection (kube-apiserver panics with
``http.ErrAbortHandler`` for the same effect). Whoever does that on purpose (the proxy when its
upstream fails mid-body, flow control at a request's deadline) sets ``ABANDONED`` in the
request's task, and the server's own "returned without completing response" line is dropped in
favour of theirs (``gateway.proxy.app`` installs the log filter).
"""

from __future__ import annotations

import contextvars

ABANDONED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "response_abandoned", default=False
)
