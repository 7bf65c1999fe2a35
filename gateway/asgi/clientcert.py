"""Client certificates verified against a CA bundle, as kube-apiserver's x509 authenticator
does (``--client-ca-file``, ``--requestheader-client-ca-file``): a full path validation
(signatures, validity period, CA constraints, extended key usage clientAuth) with
``cryptography``'s verifier, user = CN, groups = O.

The handshake accepted any certificate (``gateway.serving.peercert``); this decides. Each
connection verifies once per bundle (0.4 ms), and keeps the outcome until the chain expires;
a reloaded bundle is a new verifier, so open connections are verified again against it.
The connection's intermediates are not available on Python < 3.13 (``ssl`` gives the leaf
only), so the bundle must hold the certificate that issued the client's.
"""

from __future__ import annotations

import datetime
import time

from cryptography import x509
from cryptography.x509.oid import NameOID
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
    VerificationError,
)

from gateway.http.peer import PeerCertificates
from gateway.settings.load import CredentialFileError, read_credential_file

# Largest CA bundle read (a bound on what a reload reads).
MAX_BUNDLE_BYTES = 4 << 20
# A failed verification is retried after this (a certificate not valid yet may become so).
FAILURE_TTL = 10.0
# Client certificates (kube's) usually have no subjectAltName; the Web PKI policy wants one.
_EE_POLICY = ExtensionPolicy.webpki_defaults_ee().may_be_present(
    x509.SubjectAlternativeName, Criticality.AGNOSTIC, None
)


_CA_POLICY = ExtensionPolicy.webpki_defaults_ca()


class CertificateRejected(Exception):
    """The certificate does not verify against the bundle; the message says why."""


def read_bundle(path: str, setting: str) -> list[x509.Certificate]:
    data = read_credential_file(path, setting, MAX_BUNDLE_BYTES)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise CredentialFileError(f"{setting} {path}: no PEM certificates ({exc})") from exc
    return certs


class ClientCertVerifier:
    """One CA bundle (read at construction, blocking)."""

    def __init__(self, path: str, setting: str) -> None:
        self.path = path
        self.store = Store(read_bundle(path, setting))

    def verify(self, peer: PeerCertificates) -> x509.Certificate:
        """The verified leaf, or ``CertificateRejected``."""
        now = time.time()
        outcome = peer.cached(self, now)
        if outcome is None:
            outcome, until = self._verify(peer.chain, now)
            peer.remember(self, outcome, until)
        if isinstance(outcome, CertificateRejected):
            raise outcome
        assert isinstance(outcome, x509.Certificate)
        return outcome

    def _verify(
        self, chain: tuple[bytes, ...], now: float
    ) -> tuple[x509.Certificate | CertificateRejected, float]:
        try:
            certs = [x509.load_der_x509_certificate(der) for der in chain]
        except ValueError:
            return CertificateRejected("malformed client certificate"), now + FAILURE_TTL
        verifier = (
            PolicyBuilder()
            .store(self.store)
            .time(datetime.datetime.fromtimestamp(now, datetime.UTC))
            .extension_policies(
                ca_policy=ExtensionPolicy.webpki_defaults_ca(), ee_policy=_EE_POLICY
            )
            .build_client_verifier()
        )
        try:
            verified = verifier.verify(certs[0], certs[1:])
        except VerificationError as exc:
            reason = str(exc).split(" (encountered", 1)[0].removeprefix("validation failed: ")
            if reason.startswith("candidates exhausted"):
                reason = "signed by an unknown authority"
            return CertificateRejected(f"client certificate: {reason}"), now + FAILURE_TTL
        until = min(c.not_valid_after_utc.timestamp() for c in verified.chain)
        return certs[0], until


def common_name(cert: x509.Certificate) -> str:
    found = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(found[0].value) if found else ""


def organizations(cert: x509.Certificate) -> tuple[str, ...]:
    found = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    return tuple(str(a.value) for a in found)
