"""Identity: trusted networks and namespaces."""

from __future__ import annotations

import pytest

from gateway.cli.main import main
from gateway.platform.errors import ApiError
from gateway.router.identity import Identity, is_trusted, parse_networks


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


def test_the_router_no_longer_checks_keys_itself(capsys: pytest.CaptureFixture[str]) -> None:
    """The front door authenticates OpenWhisk keys; the router's stop-gap flag is gone."""

    with pytest.raises(SystemExit) as exc:
        main(["router", "--openwhisk-keys-file", "keys"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --openwhisk-keys-file" in capsys.readouterr().err
