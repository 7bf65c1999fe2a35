"""A real OIDC issuer for tests: HTTPS on 127.0.0.1 with a test CA made here, serving discovery
and a JWKS whose keys a test rotates, and an outage switch (every request gets 503)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from gateway.http.types import Receive, Scope, Send
from tests.support.serving import started_port

CA_USAGE = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
LOOPBACK = x509.IPAddress(ipaddress.ip_address("127.0.0.1"))


@dataclass
class TestCA:
    cert_pem: str
    server_cert: Path
    server_key: Path


def make_ca(directory: Path) -> TestCA:
    """A CA and a server certificate for 127.0.0.1 it signs (EC P-256: fast to make)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "apf-gateway test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(CA_USAGE, critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([LOOPBACK]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    server_cert = directory / "issuer.crt"
    server_key = directory / "issuer.key"
    server_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    server_key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return TestCA(ca.public_bytes(serialization.Encoding.PEM).decode(), server_cert, server_key)


@dataclass
class SigningKey:
    kid: str
    alg: str
    private: Any

    @classmethod
    def new(cls, kid: str, alg: str = "RS256") -> SigningKey:
        if alg.startswith("ES"):
            curve = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}
            return cls(kid, alg, ec.generate_private_key(curve[alg]))
        return cls(kid, alg, rsa.generate_private_key(public_exponent=65537, key_size=2048))

    def jwk(self) -> dict[str, Any]:
        algorithm = jwt.get_algorithm_by_name(self.alg)
        doc: dict[str, Any] = json.loads(algorithm.to_jwk(self.private.public_key()))
        return {**doc, "kid": self.kid, "use": "sig", "alg": self.alg}


@dataclass
class IssuerApp:
    url: str = ""
    keys: list[SigningKey] = field(default_factory=list)
    outage: bool = False
    requests: list[str] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        self.requests.append(path)
        if self.outage:
            status, body = 503, {"error": "outage"}
        elif path == "/.well-known/openid-configuration":
            status, body = 200, {"issuer": self.url, "jwks_uri": self.url + "/keys"}
        elif path == "/keys":
            status, body = 200, {"keys": [k.jwk() for k in self.keys]}
        else:
            status, body = 404, {}
        data = json.dumps(body).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    def fetches(self, path: str = "/keys") -> int:
        return self.requests.count(path)


class HTTPSServer:
    """An ASGI app served over HTTPS (the test CA's certificate) in a thread with its own loop."""

    def __init__(self, ca: TestCA, app: Any) -> None:
        self.ca = ca
        self.app = app
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._server: uvicorn.Server | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=0, loop="none", http="httptools", lifespan="off",
            log_level="warning", access_log=False, ssl_certfile=str(self.ca.server_cert),
            ssl_keyfile=str(self.ca.server_key),
        )  # fmt: skip
        self._server = uvicorn.Server(config)
        self.loop.run_until_complete(self._serve())
        self.loop.close()

    async def _serve(self) -> None:
        assert self._server is not None
        task = asyncio.ensure_future(self._server.serve())
        self.port = await started_port(self._server, task)
        self._ready.set()
        await task

    def start(self) -> HTTPSServer:
        self.thread.start()
        assert self._ready.wait(10), "HTTPS server did not start"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        self.thread.join(10)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"


class Issuer(HTTPSServer):
    """The issuer: discovery and JWKS over HTTPS."""

    app: IssuerApp

    def __init__(self, ca: TestCA, keys: list[SigningKey]) -> None:
        super().__init__(ca, IssuerApp(keys=keys))

    def start(self) -> Issuer:
        super().start()
        self.app.url = self.url
        return self

    def token(self, key: SigningKey | None = None, **claims: Any) -> str:
        key = key or self.app.keys[0]
        now = int(time.time())
        body = {"iss": self.url, "aud": "apf", "iat": now, "exp": now + 300, **claims}
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, key.private, algorithm=key.alg, headers={"kid": key.kid})


def running_issuer(directory: Path, keys: list[SigningKey]) -> Iterator[Issuer]:
    issuer = Issuer(make_ca(directory), keys).start()
    try:
        yield issuer
    finally:
        issuer.stop()


def authentication_configuration(
    issuer: Issuer,
    *,
    prefix: str = "oidc:",
    groups: dict[str, str] | None = None,
    **fields: object,
) -> dict[str, object]:
    """kube's ``AuthenticationConfiguration`` with one JWT authenticator for ``issuer``
    (audience ``apf``, the test CA): the username from ``preferred_username`` with ``prefix``,
    the uid from ``sub``, the groups from ``groups`` (default: the ``groups`` claim, prefixed
    ``oidc:``). ``fields`` replace the authenticator's own (``claimMappings``,
    ``claimValidationRules``, ...)."""
    return {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AuthenticationConfiguration",
        "jwt": [
            {
                "issuer": {
                    "url": issuer.url,
                    "audiences": ["apf"],
                    "certificateAuthority": issuer.ca.cert_pem,
                },
                "claimMappings": {
                    "username": {"claim": "preferred_username", "prefix": prefix},
                    "groups": groups or {"claim": "groups", "prefix": "oidc:"},
                    "uid": {"claim": "sub"},
                },
                **fields,
            }
        ],
    }


# Keycloak's shape: realm roles as groups.
REALM_ROLES = {"expression": "claims.realm_access.roles.map(r, 'oidc:' + r)"}
