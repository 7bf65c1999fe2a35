"""The compact JWS form and signature keys: split and decode a token once, and which of an
issuer's keys may verify it (the ``jwt`` extra: PyJWT's algorithm objects on ``cryptography``).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

import jwt

from gateway.asgi.jwtkeys import VerifyKey

ALGORITHMS = frozenset(
    ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512")
)
_CURVES = {"ES256": "secp256r1", "ES384": "secp384r1", "ES512": "secp521r1"}
_COMPACT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
ALGORITHM = {name: jwt.get_algorithm_by_name(name) for name in ALGORITHMS}


@dataclass(frozen=True, slots=True)
class ParsedToken:
    """A compact JWS split and decoded once (PyJWT's own parser checks the base64 alphabet
    character by character in Python, 5x the cost of an RS256 signature check)."""

    header: dict[str, Any]
    claims: dict[str, Any]
    signing_input: bytes
    signature: bytes


def _b64(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def parse_token(token: str) -> ParsedToken | None:
    """None: not a compact JWS with JSON object header and claims (not a JWT: another
    authenticator may take it)."""
    if _COMPACT.fullmatch(token) is None:
        return None
    head, body, signature = token.split(".")
    try:
        header = json.loads(_b64(head))
        claims = json.loads(_b64(body))
        sig = _b64(signature)
    except (ValueError, binascii.Error):
        return None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        return None
    return ParsedToken(header, claims, f"{head}.{body}".encode(), sig)


def usable(key: VerifyKey, alg: str) -> bool:
    """The token's ``alg`` fits the key: the JWK's own ``alg`` if it names one, else its type
    (and curve)."""
    if key.alg is not None:
        return key.alg == alg
    if alg.startswith("ES"):
        return (
            key.jwk.key_type == "EC"
            and getattr(key.jwk.key, "curve", None) is not None
            and (key.jwk.key.curve.name == _CURVES[alg])
        )
    return key.jwk.key_type == "RSA"
