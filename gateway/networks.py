"""Sets of IP networks and whether a peer's address is in one: the front door's trusted front
proxies (``authentication.requestHeader.allowedCIDRs``) and a router's trusted peers.

Stdlib only: the settings validate with it, the request shell and the routers check peers
with it, and none of them imports another for it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_cidrs(values: Iterable[str]) -> tuple[Network, ...]:
    """Parse CIDRs (bare addresses allowed); raises ValueError naming the bad entry."""
    nets = []
    for v in values:
        try:
            nets.append(ipaddress.ip_network(v.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"invalid CIDR {v!r}: {exc}") from exc
    return tuple(nets)


def in_networks(address: str | None, networks: Iterable[Network]) -> bool:
    """Whether ``address`` (a peer's, as the server reports it: maybe none, maybe not an IP
    address at all, such as a Unix socket's) is in one of ``networks``."""
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in networks)
