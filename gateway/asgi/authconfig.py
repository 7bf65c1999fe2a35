"""kube-apiserver's structured authentication configuration (``--authentication-config``).

``AuthenticationConfiguration`` of ``apiserver.config.k8s.io/v1`` (or ``v1beta1``): the ``jwt``
list, read and validated here with kube's field paths and messages (kube's
``apiserver/pkg/apis/apiserver/validation/validation.go``). Pure: CEL expressions are checked by
the ``compile`` function the caller passes (``asgi.jwtauth``, which needs the ``jwt`` extra).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

API_VERSIONS = ("apiserver.config.k8s.io/v1", "apiserver.config.k8s.io/v1beta1")
KIND = "AuthenticationConfiguration"
MAX_JWT = 64  # kube: "must have at most 64 items"
MATCH_ANY = "MatchAny"
_EXTRA_KEY = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/\S+$")


class AuthenticationConfigError(ValueError):
    """Every problem of one file, each line ``FILE: field.path: Kind: detail`` as kube says it."""

    def __init__(self, source: str, errors: list[str]) -> None:
        super().__init__(f"{source}: " + f"\n{source}: ".join(errors))
        self.errors = errors


@dataclass(frozen=True, slots=True)
class ClaimOrExpression:
    """``claim`` (+ ``prefix``) or a CEL ``expression``: one of a mapping's two forms."""

    claim: str = ""
    prefix: str | None = None
    expression: str = ""


@dataclass(frozen=True, slots=True)
class ClaimValidationRule:
    claim: str = ""
    required_value: str = ""
    expression: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class ExtraMapping:
    key: str
    value_expression: str


@dataclass(frozen=True, slots=True)
class UserValidationRule:
    expression: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class Issuer:
    url: str
    audiences: tuple[str, ...]
    discovery_url: str = ""
    certificate_authority: str = ""
    audience_match_policy: str = ""


@dataclass(frozen=True, slots=True)
class JWTAuthenticatorConfig:
    issuer: Issuer
    username: ClaimOrExpression
    groups: ClaimOrExpression | None = None
    uid: ClaimOrExpression | None = None
    extra: tuple[ExtraMapping, ...] = ()
    claim_validation_rules: tuple[ClaimValidationRule, ...] = ()
    user_validation_rules: tuple[UserValidationRule, ...] = ()


Compile = Callable[[str], None]  # raises ValueError("compilation failed: ...")


def load_authentication_config(
    path: str | Path, compile_cel: Compile | None = None
) -> tuple[JWTAuthenticatorConfig, ...]:
    """Read and validate one file; raises ``AuthenticationConfigError`` naming every problem."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise AuthenticationConfigError(source, [f"cannot read: {exc.strerror or exc}"]) from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AuthenticationConfigError(source, [f"not YAML or JSON: {exc}"]) from None
    return parse_authentication_config(doc, source, compile_cel)


def parse_authentication_config(
    doc: object, source: str = "<config>", compile_cel: Compile | None = None
) -> tuple[JWTAuthenticatorConfig, ...]:
    v = _Validator(compile_cel)
    out = v.document(doc)
    if v.errors:
        raise AuthenticationConfigError(source, v.errors)
    return out


def _q(value: object) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(value)


class _Validator:
    def __init__(self, compile_cel: Compile | None) -> None:
        self.errors: list[str] = []
        self.compile_cel = compile_cel

    def required(self, path: str, detail: str) -> None:
        self.errors.append(f"{path}: Required value: {detail}")

    def invalid(self, path: str, value: object, detail: str) -> None:
        self.errors.append(f"{path}: Invalid value: {_q(value)}: {detail}")

    def duplicate(self, path: str, value: object) -> None:
        self.errors.append(f"{path}: Duplicate value: {_q(value)}")

    def unknown(self, path: str, doc: Mapping[str, Any], known: tuple[str, ...]) -> None:
        for key in doc:
            if key not in known:
                self.errors.append(f'{path}: unknown field "{key}"')

    def mapping(self, path: str, value: object) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.invalid(path, value, "must be an object")
            return {}
        return value

    def string(self, path: str, value: object) -> str:
        if value is None:
            return ""
        if not isinstance(value, str):
            self.invalid(path, value, "must be a string")
            return ""
        return value

    def items(self, path: str, value: object) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.invalid(path, value, "must be a list")
            return []
        return value

    def cel(self, path: str, expression: str) -> None:
        if self.compile_cel is None:
            return
        try:
            self.compile_cel(expression)
        except ValueError as exc:
            self.invalid(path, expression, f"compilation failed: {exc}")

    def document(self, doc: object) -> tuple[JWTAuthenticatorConfig, ...]:
        d = self.mapping("<document>", doc)
        if d.get("apiVersion") not in API_VERSIONS:
            self.invalid("apiVersion", d.get("apiVersion"), f"must be one of {list(API_VERSIONS)}")
        if d.get("kind") != KIND:
            self.invalid("kind", d.get("kind"), f"must be {KIND}")
        for key in ("anonymous", "authorizers"):
            if key in d:
                self.errors.append(
                    f"{key}: Forbidden: not supported by apf-gateway (use --anonymous-auth)"
                )
        self.unknown("<document>", d, ("apiVersion", "kind", "jwt", "anonymous", "authorizers"))
        items = self.items("jwt", d.get("jwt"))
        if len(items) > MAX_JWT:
            self.errors.append(f"jwt: Too many: {len(items)}: must have at most {MAX_JWT} items")
        out = []
        seen_urls: set[str] = set()
        seen_discovery: set[str] = set()
        for i, item in enumerate(items):
            parsed = self.jwt(f"jwt[{i}]", item)
            issuer = item.get("issuer") if isinstance(item, Mapping) else None
            for key, seen in (("url", seen_urls), ("discoveryURL", seen_discovery)):
                value = issuer.get(key) if isinstance(issuer, Mapping) else None
                if isinstance(value, str) and value:
                    if value in seen:
                        self.duplicate(f"jwt[{i}].issuer.{key}", value)
                    seen.add(value)
            if parsed is not None:
                out.append(parsed)
        return tuple(out)

    def jwt(self, path: str, item: object) -> JWTAuthenticatorConfig | None:
        d = self.mapping(path, item)
        self.unknown(
            path, d, ("issuer", "claimValidationRules", "claimMappings", "userValidationRules")
        )
        issuer = self.issuer(f"{path}.issuer", d.get("issuer"))
        rules = self.claim_rules(f"{path}.claimValidationRules", d.get("claimValidationRules"))
        cm = self.mapping(f"{path}.claimMappings", d.get("claimMappings"))
        self.unknown(f"{path}.claimMappings", cm, ("username", "groups", "uid", "extra"))
        cmp = f"{path}.claimMappings"
        username = self.claim_or_expression(f"{cmp}.username", cm.get("username"), prefix=True)
        if username is None:
            self.required(f"{cmp}.username", "claim or expression is required")
        groups = self.claim_or_expression(f"{cmp}.groups", cm.get("groups"), prefix=True)
        uid = self.claim_or_expression(f"{cmp}.uid", cm.get("uid"), prefix=False)
        extra = self.extra(f"{cmp}.extra", cm.get("extra"))
        user_rules = self.user_rules(f"{path}.userValidationRules", d.get("userValidationRules"))
        if issuer is None or username is None:
            return None
        return JWTAuthenticatorConfig(issuer, username, groups, uid, extra, rules, user_rules)

    def https_url(self, path: str, url: str, what: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "https":
            self.invalid(path, url, f"{what} scheme must be https")
        if parts.username or parts.password:
            self.invalid(path, url, f"{what} must not contain a username or password")
        if parts.query:
            self.invalid(path, url, f"{what} must not contain a query")
        if parts.fragment:
            self.invalid(path, url, f"{what} must not contain a fragment")

    def issuer(self, path: str, value: object) -> Issuer | None:
        d = self.mapping(path, value)
        self.unknown(
            path,
            d,
            ("url", "discoveryURL", "certificateAuthority", "audiences", "audienceMatchPolicy"),
        )
        url = self.string(f"{path}.url", d.get("url"))
        if not url:
            self.required(f"{path}.url", "URL is required")
        else:
            self.https_url(f"{path}.url", url, "URL")
        discovery = self.string(f"{path}.discoveryURL", d.get("discoveryURL"))
        if discovery:
            self.https_url(f"{path}.discoveryURL", discovery, "discoveryURL")
            if url and discovery.rstrip("/") == url.rstrip("/"):
                self.invalid(
                    f"{path}.discoveryURL", discovery, "discoveryURL must be different from URL"
                )
        ca = self.string(f"{path}.certificateAuthority", d.get("certificateAuthority"))
        if ca and "-----BEGIN CERTIFICATE-----" not in ca:
            self.invalid(f"{path}.certificateAuthority", "<omitted>",
                         "data does not contain any valid RSA or ECDSA certificates")  # fmt: skip
        audiences = [
            self.string(f"{path}.audiences[{i}]", a)
            for i, a in enumerate(self.items(f"{path}.audiences", d.get("audiences")))
        ]
        if not audiences:
            self.required(f"{path}.audiences", f"at least one {path}.audiences is required")
        seen: set[str] = set()
        for i, a in enumerate(audiences):
            if not a:
                self.required(f"{path}.audiences[{i}]", "audience can't be empty")
            elif a in seen:
                self.duplicate(f"{path}.audiences[{i}]", a)
            seen.add(a)
        policy = self.string(f"{path}.audienceMatchPolicy", d.get("audienceMatchPolicy"))
        if len(audiences) == 1 and policy not in ("", MATCH_ANY):
            single = "audienceMatchPolicy must be empty or MatchAny for single audience"
            self.invalid(f"{path}.audienceMatchPolicy", policy, single)
        if len(audiences) > 1 and policy != MATCH_ANY:
            self.invalid(f"{path}.audienceMatchPolicy", policy,
                         "audienceMatchPolicy must be MatchAny for multiple audiences")  # fmt: skip
        if not url or not audiences:
            return None
        return Issuer(url, tuple(audiences), discovery, ca, policy)

    def claim_rules(self, path: str, value: object) -> tuple[ClaimValidationRule, ...]:
        out = []
        seen: set[str] = set()
        for i, item in enumerate(self.items(path, value)):
            p = f"{path}[{i}]"
            d = self.mapping(p, item)
            self.unknown(p, d, ("claim", "requiredValue", "expression", "message"))
            claim = self.string(f"{p}.claim", d.get("claim"))
            required = self.string(f"{p}.requiredValue", d.get("requiredValue"))
            expression = self.string(f"{p}.expression", d.get("expression"))
            message = self.string(f"{p}.message", d.get("message"))
            if claim and expression:
                self.invalid(p, "", "claim and expression can't both be set")
            elif not claim and not expression:
                self.required(p, "claim or expression is required")
            elif claim:
                if message:
                    self.invalid(f"{p}.message", message, "message can't be set when claim is set")
                if claim in seen:
                    self.duplicate(f"{p}.claim", claim)
                seen.add(claim)
            else:
                if required:
                    self.invalid(f"{p}.requiredValue", required,
                                 "requiredValue can't be set when expression is set")  # fmt: skip
                self.cel(f"{p}.expression", expression)
            out.append(ClaimValidationRule(claim, required, expression, message))
        return tuple(out)

    def claim_or_expression(
        self, path: str, value: object, *, prefix: bool
    ) -> ClaimOrExpression | None:
        if value is None:
            return None
        d = self.mapping(path, value)
        self.unknown(
            path, d, ("claim", "prefix", "expression") if prefix else ("claim", "expression")
        )
        claim = self.string(f"{path}.claim", d.get("claim"))
        expression = self.string(f"{path}.expression", d.get("expression"))
        pre = self.string(f"{path}.prefix", d.get("prefix")) if "prefix" in d else None
        if claim and expression:
            self.invalid(path, "", "claim and expression can't both be set")
            return None
        if not claim and not expression:
            if d:
                self.required(path, "claim or expression is required")
            return None
        if expression:
            if pre:
                self.invalid(f"{path}.prefix", pre, "prefix can't be set when expression is set")
            self.cel(f"{path}.expression", expression)
            return ClaimOrExpression(expression=expression)
        if prefix and path.endswith(".username") and pre is None:
            self.required(f"{path}.prefix", "prefix is required when claim is set. "
                          "It can be set to an empty string to disable prefixing")  # fmt: skip
        return ClaimOrExpression(claim, pre or "")

    def extra(self, path: str, value: object) -> tuple[ExtraMapping, ...]:
        out = []
        seen: set[str] = set()
        for i, item in enumerate(self.items(path, value)):
            p = f"{path}[{i}]"
            d = self.mapping(p, item)
            self.unknown(p, d, ("key", "valueExpression"))
            key = self.string(f"{p}.key", d.get("key"))
            expression = self.string(f"{p}.valueExpression", d.get("valueExpression"))
            if not key:
                self.required(f"{p}.key", "")
            elif key != key.lower():
                self.invalid(f"{p}.key", key, "key must be lowercase")
            elif not _EXTRA_KEY.match(key):
                self.invalid(
                    f"{p}.key", key, 'key must be a domain-prefix path (such as "acme.io/foo")'
                )
            elif key in seen:
                self.duplicate(f"{p}.key", key)
            seen.add(key)
            if not expression:
                self.required(f"{p}.valueExpression", "valueExpression is required")
            else:
                self.cel(f"{p}.valueExpression", expression)
            out.append(ExtraMapping(key, expression))
        return tuple(out)

    def user_rules(self, path: str, value: object) -> tuple[UserValidationRule, ...]:
        out = []
        for i, item in enumerate(self.items(path, value)):
            p = f"{path}[{i}]"
            d = self.mapping(p, item)
            self.unknown(p, d, ("expression", "message"))
            expression = self.string(f"{p}.expression", d.get("expression"))
            if not expression:
                self.required(f"{p}.expression", "expression is required")
                continue
            self.cel(f"{p}.expression", expression)
            out.append(
                UserValidationRule(expression, self.string(f"{p}.message", d.get("message")))
            )
        return tuple(out)
