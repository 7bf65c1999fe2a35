"""Identity: trusted networks and namespaces."""

from __future__ import annotations

import pytest

from gateway.cli.main import main
from gateway.networks import in_networks, parse_cidrs
from gateway.platform.errors import ApiError
from gateway.router.identity import Identity


def test_trusted_networks() -> None:
    """The router's check of its peers (``--trusted``) is the front door's (gateway.networks)."""
    nets = parse_cidrs(["127.0.0.1/32", "::1/128", "10.0.0.0/8"])
    assert in_networks("127.0.0.1", nets) and in_networks("::1", nets)
    assert in_networks("10.2.3.4", nets)
    assert not in_networks("192.168.1.1", nets)
    assert not in_networks(None, nets) and not in_networks("not-an-ip", nets)


def test_own_namespace_only() -> None:
    me = Identity("alice", "guest")
    assert me.resolve("_") == "guest" and me.resolve("guest") == "guest"
    with pytest.raises(ApiError) as exc:
        me.resolve("bob")
    assert exc.value.status == 403 and "'bob'" in exc.value.message


def test_the_router_no_longer_checks_keys_itself(capsys: pytest.CaptureFixture[str]) -> None:
    """The front door authenticates OpenWhisk keys; the router's stop-gap flag is gone."""

    with pytest.raises(SystemExit) as exc:
        main(["router", "--openwhisk-keys-file", "keys"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --openwhisk-keys-file" in capsys.readouterr().err
