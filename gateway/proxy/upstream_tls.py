"""TLS to ``https://`` upstreams: one client context per upstream, built from its
``upstreams[].tls`` (or ``proxy.upstreamCAFile``, or the system's CAs).

Verification is on unless ``insecureSkipVerify: true`` is written out: the certificate must
chain to the CAs and name the upstream's host (or ``tls.serverName``, which is also sent as
SNI). ``certFile``/``keyFile`` are the client certificate the gateway presents, as
kube-apiserver's ``--proxy-client-cert-file`` does towards its aggregated API servers.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from gateway.settings.load import CredentialFileError
from gateway.settings.model import GatewaySettings, UpstreamTLSSettings


@dataclass(frozen=True, slots=True)
class TLSTarget:
    context: ssl.SSLContext
    server_hostname: str


def base_of(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a URL; the key upstream TLS settings are found by."""
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, (parts.hostname or "127.0.0.1").lower(), parts.port or default


def client_context(tls: UpstreamTLSSettings, default_ca: str, where: str) -> ssl.SSLContext:
    """Blocking (reads files); ``CredentialFileError`` names the setting and the file."""
    ca = tls.ca_file or default_ca
    setting = f"{where}.caFile" if tls.ca_file else "proxy.upstreamCAFile"
    try:
        ctx = ssl.create_default_context(cafile=ca or None)
    except (OSError, ssl.SSLError) as exc:
        raise CredentialFileError(f"{setting} {ca}: {_reason(exc)}") from exc
    if tls.insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["http/1.1"])
    if tls.cert_file:
        try:
            ctx.load_cert_chain(tls.cert_file, tls.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise CredentialFileError(
                f"{where}.certFile/keyFile {tls.cert_file}, {tls.key_file}: {_reason(exc)}"
            ) from exc
    return ctx


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        if "KEY_VALUES_MISMATCH" in str(exc):
            return "the private key does not match the certificate"
        return f"not usable PEM ({exc.reason or exc})"
    if isinstance(exc, OSError):
        return f"cannot read: {exc.strerror or exc}"
    return str(exc)


class UpstreamTLS:
    """The contexts of a configuration's ``https://`` upstreams, by (host, port). Routes to
    the same host and port share one context: the first route's settings."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.targets: dict[tuple[str, int], TLSTarget] = {}
        self._by_base: dict[str, TLSTarget | None] = {}
        default_ca = settings.proxy.upstream_ca_file
        for i, u in enumerate(settings.upstreams):
            scheme, host, port = base_of(u.url)
            if scheme != "https" or (host, port) in self.targets:
                continue
            ctx = client_context(u.tls, default_ca, f"upstreams[{i}].tls")
            self.targets[host, port] = TLSTarget(ctx, u.tls.server_name or host)
        self._default_ca = default_ca

    def target(self, host: str, port: int) -> TLSTarget:
        """The context for an ``https://`` upstream (one not configured: the defaults)."""
        key = (host.lower(), port)
        found = self.targets.get(key)
        if found is None:
            ctx = client_context(UpstreamTLSSettings(), self._default_ca, "proxy")
            found = self.targets[key] = TLSTarget(ctx, host)
        return found

    def for_url(self, url: str) -> TLSTarget | None:
        """The context for ``url``'s upstream, or None for ``http://`` (cached by base URL)."""
        end = url.find("/", url.find("//") + 2)
        base = url if end < 0 else url[:end]
        try:
            return self._by_base[base]
        except KeyError:
            pass
        scheme, host, port = base_of(base)
        found = self.target(host, port) if scheme == "https" else None
        if len(self._by_base) < 1024:
            self._by_base[base] = found
        return found
