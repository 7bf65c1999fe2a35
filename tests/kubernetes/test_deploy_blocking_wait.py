"""deploy/: the front door's proxy read timeout outlasts the routers' blocking wait, so a
blocking invoke running past the wait gets the router's 202, not the proxy's 504."""

from __future__ import annotations

import yaml
from test_deploy import find, pod_spec, rendered

from gateway.settings.load import parse_duration


def test_front_door_read_timeout_is_longer_than_the_routers_blocking_wait() -> None:
    objects = rendered("base")
    gateway = yaml.safe_load(
        find(objects, "ConfigMap", "apf-gateway-frontdoor")["data"]["gateway.yaml"]
    )
    read_timeout = parse_duration(gateway.get("proxy", {}).get("readTimeout", 60.0))
    (router,) = pod_spec(find(objects, "Deployment", "apf-gateway-router"))["containers"]
    args = router["args"]
    wait = (
        float(args[args.index("--max-blocking-wait") + 1])
        if "--max-blocking-wait" in args
        else 60.0
    )
    assert read_timeout is not None and read_timeout > wait
