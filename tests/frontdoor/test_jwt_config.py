"""--authentication-config: kube's AuthenticationConfiguration, checked with its field paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.asgi import authn
from gateway.asgi.authconfig import (
    AuthenticationConfigError,
    load_authentication_config,
    parse_authentication_config,
)
from gateway.asgi.jwtauth import _check_cel
from gateway.settings.model import AuthenticationSettings

GOOD = """
apiVersion: apiserver.config.k8s.io/v1beta1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: https://issuer.example.com/realms/apf
    audiences: [apf, other]
    audienceMatchPolicy: MatchAny
  claimValidationRules:
  - claim: azp
    requiredValue: apf
  - expression: "claims.email_verified == true"
    message: email must be verified
  claimMappings:
    username: {claim: preferred_username, prefix: "oidc:"}
    groups: {expression: "claims.groups.map(g, 'oidc:' + g)"}
    uid: {claim: sub}
    extra:
    - key: example.com/tenant
      valueExpression: claims.tenant
  userValidationRules:
  - expression: "!user.username.startsWith('system:')"
    message: no system users
"""


def test_a_pasted_v1beta1_configuration_loads(tmp_path: Path) -> None:
    f = tmp_path / "authn.yaml"
    f.write_text(GOOD)
    (config,) = load_authentication_config(f, _check_cel)
    assert config.issuer.audiences == ("apf", "other")
    assert config.username.claim == "preferred_username" and config.username.prefix == "oidc:"
    assert config.groups is not None and config.groups.expression.startswith("claims.groups")
    assert [r.claim for r in config.claim_validation_rules] == ["azp", ""]
    assert config.extra[0].key == "example.com/tenant"


BAD = """
apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: http://issuer.example.com
    discoveryURL: https://issuer.example.com/x?y=1
    audiences: [a, b]
  claimValidationRules:
  - claim: hd
    expression: claims.hd == 'x'
  - expression: "claims.hd =="
  claimMappings:
    username: {claim: email}
    groups: {claim: groups, expression: claims.groups}
    extra:
    - key: Example.com/Tenant
      valueExpression: claims.tenant
- issuer:
    url: https://issuer.example.com
    audiences: []
  claimMappings:
    username: {expression: claims.sub, prefix: "x:"}
- issuer:
    url: https://issuer.example.com
    audiences: [a]
  claimMappings: {}
"""


def test_errors_name_every_field_as_kube_does(tmp_path: Path) -> None:
    f = tmp_path / "authn.yaml"
    f.write_text(BAD)
    with pytest.raises(AuthenticationConfigError) as info:
        load_authentication_config(f, _check_cel)
    errors = info.value.errors
    assert errors[4].startswith(
        'jwt[0].claimValidationRules[1].expression: Invalid value: "claims.hd ==": '
        "compilation failed: Failed to parse expression 'claims.hd ==': ERROR: <input>:1:13"
    )
    del errors[4]
    assert errors[:5] == [
        'jwt[0].issuer.url: Invalid value: "http://issuer.example.com": URL scheme must be https',
        'jwt[0].issuer.discoveryURL: Invalid value: "https://issuer.example.com/x?y=1": '
        "discoveryURL must not contain a query",
        'jwt[0].issuer.audienceMatchPolicy: Invalid value: "": '
        "audienceMatchPolicy must be MatchAny for multiple audiences",
        'jwt[0].claimValidationRules[0]: Invalid value: "": '
        "claim and expression can't both be set",
        "jwt[0].claimMappings.username.prefix: Required value: prefix is required when claim is "
        "set. It can be set to an empty string to disable prefixing",
    ]
    assert errors[5:] == [
        'jwt[0].claimMappings.groups: Invalid value: "": claim and expression can\'t both be set',
        'jwt[0].claimMappings.extra[0].key: Invalid value: "Example.com/Tenant": '
        "key must be lowercase",
        "jwt[1].issuer.audiences: Required value: at least one jwt[1].issuer.audiences is required",
        'jwt[1].claimMappings.username.prefix: Invalid value: "x:": '
        "prefix can't be set when expression is set",
        "jwt[2].claimMappings.username: Required value: claim or expression is required",
        'jwt[2].issuer.url: Duplicate value: "https://issuer.example.com"',
    ]
    # the message names the file on every line
    assert str(info.value).splitlines()[0].startswith(f"{f}: jwt[0].issuer.url")


def test_kind_and_version_are_checked() -> None:
    with pytest.raises(AuthenticationConfigError) as info:
        parse_authentication_config({"apiVersion": "v1", "kind": "Config", "jwt": "x"}, "f")
    assert info.value.errors == [
        'apiVersion: Invalid value: "v1": must be one of '
        "['apiserver.config.k8s.io/v1', 'apiserver.config.k8s.io/v1beta1']",
        'kind: Invalid value: "Config": must be AuthenticationConfiguration',
        'jwt: Invalid value: "x": must be a list',
    ]


def test_without_the_jwt_extra_the_setting_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "authn.yaml"
    f.write_text(GOOD)
    monkeypatch.setattr(authn, "JWT_MODULE", "gateway.asgi.not_installed")
    with pytest.raises(ValueError) as info:
        authn.authenticator_from_settings(AuthenticationSettings(authentication_config=str(f)))
    assert str(info.value).startswith(
        f"authentication.authenticationConfig ({f}) needs the jwt extra "
        "(pip install 'apf-gateway[jwt]')"
    )
    assert "\n" not in str(info.value)
