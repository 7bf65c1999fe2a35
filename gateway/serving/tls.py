"""The HTTPS listener: certificates chosen by SNI and swapped on reload (kube-apiserver's
``--tls-cert-file``, ``--tls-private-key-file``, ``--tls-sni-cert-key``, ``--tls-min-version``).

The listening context never changes (the socket holds it); its SNI callback, which OpenSSL
runs for every ClientHello, with or without a server name, hands each new connection the
context of the certificates current at that moment. A reload builds a whole new set off the
event loop and swaps it in at once, so new connections get the new certificate, open ones
keep theirs, and a set that does not load is refused before anything changed.

Contexts start from the standard library's server defaults
(``ssl.create_default_context(Purpose.CLIENT_AUTH)``) with TLS 1.2 as the minimum. ALPN
offers ``h2`` and ``http/1.1`` (``gateway.serving.h2_limits.ALPN_PROTOCOLS``); the listener's
protocol class hands a connection that chose ``h2`` to HTTP/2 (``gateway.serving.h2_select``).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

from gateway.reconfigure import Swap, assign
from gateway.serving.h2_limits import ALPN_PROTOCOLS
from gateway.serving.peercert import PeerCertUnsupported, request_client_certificates
from gateway.settings.load import CredentialFileError, read_credential_file
from gateway.settings.model import TLSSettings

TLS_VERSIONS = {"VersionTLS12": ssl.TLSVersion.TLSv1_2, "VersionTLS13": ssl.TLSVersion.TLSv1_3}
# A certificate chain or key file larger than this is not one (a bound on what a reload reads).
MAX_PEM_BYTES = 1 << 20


def read_pem(path: str, what: str) -> bytes:
    return read_credential_file(path, what, MAX_PEM_BYTES)


@dataclass(frozen=True, slots=True)
class Certificates:
    """One consistent set: the default context and the contexts by SNI name (lower case;
    ``*.example.com`` entries match one leftmost label, as Go's crypto/tls does)."""

    default: ssl.SSLContext
    by_name: dict[str, ssl.SSLContext]

    def select(self, server_name: str | None) -> ssl.SSLContext:
        if not server_name or not self.by_name:
            return self.default
        name = server_name.lower().rstrip(".")
        found = self.by_name.get(name)
        if found is None:
            _, dot, parent = name.partition(".")
            found = self.by_name.get("*." + parent) if dot else None
        return found or self.default


def _context(
    cert_file: str, key_file: str, what: str, settings: TLSSettings, client_certs: bool
) -> tuple[ssl.SSLContext, x509.Certificate]:
    pem = read_pem(cert_file, f"{what} certificate")
    read_pem(key_file, f"{what} key")
    try:
        leaf = x509.load_pem_x509_certificates(pem)[0]
    except ValueError as exc:
        raise CredentialFileError(f"{what} certificate {cert_file}: not a PEM certificate") from exc
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = TLS_VERSIONS[settings.min_version]
    ctx.set_alpn_protocols(list(ALPN_PROTOCOLS))
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as exc:
        reason = (
            "the private key does not match the certificate"
            if "KEY_VALUES_MISMATCH" in str(exc)
            else f"not a usable PEM certificate and key ({exc.reason or exc})"
        )
        raise CredentialFileError(f"{what} {cert_file}, {key_file}: {reason}") from exc
    if client_certs:
        try:
            request_client_certificates(ctx)
        except PeerCertUnsupported as exc:
            raise CredentialFileError(str(exc)) from exc
    return ctx, leaf


def certificate_names(cert: x509.Certificate) -> list[str]:
    """kube-apiserver's names for an SNI certificate given without names: the CN when it is
    a DNS name (not an IP), then the DNS SANs (SNI never carries an IP)."""
    names: list[str] = []
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    cn = str(cns[0].value) if cns else ""
    if cn and _dns_like(cn):
        names.append(cn)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names += san.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        pass
    return names


def _dns_like(name: str) -> bool:
    labels = name.removeprefix("*.").split(".")
    if all(label.isdigit() for label in labels) or ":" in name:
        return False  # an IP address
    return name == "*" or all(
        label and len(label) <= 63 and label.replace("-", "").isalnum() for label in labels
    )


def load_certificates(settings: TLSSettings, *, client_certs: bool) -> Certificates:
    """Blocking (reads files); raises ``CredentialFileError`` naming the bad file."""
    default, _ = _context(
        settings.cert_file, settings.private_key_file, "tls.certFile/privateKeyFile",
        settings, client_certs,
    )  # fmt: skip
    by_name: dict[str, ssl.SSLContext] = {}
    explicit: set[str] = set()
    for i, pair in enumerate(settings.sni_cert_keys):
        ctx, leaf = _context(
            pair.cert_file, pair.key_file, f"tls.sniCertKeys[{i}]", settings, client_certs
        )
        # kube: explicit names beat names read from certificates; the first pair listed wins.
        if pair.names:
            for name in (n.lower() for n in pair.names):
                if name not in explicit:
                    explicit.add(name)
                    by_name[name] = ctx
        else:
            for name in (n.lower() for n in certificate_names(leaf)):
                by_name.setdefault(name, ctx)
    return Certificates(default, by_name)


class ServerTLS:
    """The listener's context and the swappable certificate set behind it."""

    def __init__(self, settings: TLSSettings, *, client_certs: bool) -> None:
        self.settings = settings
        self.client_certs = client_certs
        self.current = load_certificates(settings, client_certs=client_certs)
        self.context = self.current.default
        self.context.sni_callback = self._select

    def _select(self, ssl_object: Any, server_name: str | None, _ctx: ssl.SSLContext) -> None:
        chosen = self.current.select(server_name)
        if chosen is not self.context:
            ssl_object.context = chosen

    def prepare(self) -> Swap:
        """Load the files again (the paths are the running ones: changing them needs a
        restart); a pair that does not load raises and nothing changes."""
        new = load_certificates(self.settings, client_certs=self.client_certs)
        return assign(self, current=new)


def bound_handshakes(loop: asyncio.AbstractEventLoop, timeout: float) -> None:
    """Make ``loop.create_server`` cut TLS handshakes that take longer than ``timeout``
    (client.headerTimeout): uvicorn does not pass ``ssl_handshake_timeout``, and the event
    loop's default is 60 s."""
    create_server: Callable[..., Awaitable[Any]] = loop.create_server

    async def create(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("ssl") is not None:
            kwargs.setdefault("ssl_handshake_timeout", timeout)
        return await create_server(*args, **kwargs)

    loop.create_server = create  # type: ignore[method-assign]
