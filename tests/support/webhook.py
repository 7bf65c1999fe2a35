"""A real TokenReview webhook for tests (served over HTTPS by ``tests.support.issuer``'s
``HTTPSServer``) and the kubeconfig that names it, as
``--authentication-token-webhook-config-file`` reads it."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gateway.http.types import Receive, Scope, Send
from tests.support.issuer import HTTPSServer


@dataclass
class ReviewApp:
    """``good-<name>``: authenticated as <name>; ``hold-*``: held until released; anything
    else: not authenticated. ``failing``: every review gets 500."""

    failing: bool = False
    reviews: list[str] = field(default_factory=list)
    bearer: list[str] = field(default_factory=list)
    held: int = 0
    max_held: int = 0
    release: asyncio.Event | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        review = json.loads(body)
        token = review["spec"]["token"]
        self.reviews.append(token)
        self.bearer += [v.decode() for k, v in scope["headers"] if k == b"authorization"]
        status: dict[str, object] = {"authenticated": False}
        if token.startswith("hold-"):
            self.release = self.release or asyncio.Event()
            self.held += 1
            self.max_held = max(self.max_held, self.held)
            # held until released or until the client goes (its timeout): then it is not held
            waits = [asyncio.ensure_future(self.release.wait()), asyncio.ensure_future(receive())]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()
            self.held -= 1
        if token.startswith("good-"):
            name = token.removeprefix("good-")
            status = {"authenticated": True, "user": {"username": name, "uid": "u-" + name,
                      "groups": ["webhook-users"], "extra": {"team": ["a"]}}}  # fmt: skip
        code = 500 if self.failing else 200
        out = json.dumps({**review, "status": status}).encode()
        await send({"type": "http.response.start", "status": code,
                    "headers": [(b"content-type", b"application/json")]})  # fmt: skip
        await send({"type": "http.response.body", "body": out})


def kubeconfig(tmp_path: Path, server: HTTPSServer) -> Path:
    (tmp_path / "ca.crt").write_text(server.ca.cert_pem)
    doc = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "authn", "cluster": {"server": server.url + "/authenticate",
                                                   "certificate-authority": "ca.crt"}}],
        "users": [{"name": "apf-gateway", "user": {"token": "gateway-to-webhook-secret"}}],
        "contexts": [{"name": "c", "context": {"cluster": "authn", "user": "apf-gateway"}}],
        "current-context": "c",
    }  # fmt: skip
    path = tmp_path / "webhook.kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path
