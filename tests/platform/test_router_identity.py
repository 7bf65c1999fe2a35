"""Identity: trusted networks, namespaces, and the (temporary) keys file."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from gateway.platform.errors import ApiError
from gateway.router.identity import Identity, KeyFile, is_trusted, parse_networks


def basic(value: str) -> str:
    return "Basic " + base64.b64encode(value.encode()).decode()


def test_trusted_networks() -> None:
    nets = parse_networks(["127.0.0.1/32", "::1/128", "10.0.0.0/8"])
    assert is_trusted("127.0.0.1", nets) and is_trusted("::1", nets)
    assert is_trusted("10.2.3.4", nets)
    assert not is_trusted("192.168.1.1", nets)
    assert not is_trusted(None, nets) and not is_trusted("not-an-ip", nets)


def test_own_namespace_only() -> None:
    me = Identity("alice", "guest")
    assert me.resolve("_") == "guest" and me.resolve("guest") == "guest"
    with pytest.raises(ApiError) as exc:
        me.resolve("bob")
    assert exc.value.status == 403 and "'bob'" in exc.value.message


def test_keys_file(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# uuid:key,subject,namespace\n\nu1:k1,alice,guest\n")
    keys = KeyFile.load(path)
    assert keys.check(basic("u1:k1")) == Identity("alice", "guest")
    for header in (None, "Bearer x", basic("u1:wrong"), basic("u2:k1"), "Basic !!!"):
        with pytest.raises(ApiError) as exc:
            keys.check(header)
        assert exc.value.status == 401
    path.write_text("u1:k1,alice\n")
    with pytest.raises(ValueError, match=r"keys:1: expected 'uuid:key,subject,namespace'"):
        KeyFile.load(path)
