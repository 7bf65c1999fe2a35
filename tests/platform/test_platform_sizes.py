"""Every size a tenant controls has a bound (issue 21 items 2, 3 and 10), on real routers,
managers and runtimes: list paging parameters, request bodies, action results."""

from __future__ import annotations

import httpx
from platform_support import Platform, openwhisk_error

BIG = str(2**63)


async def test_out_of_range_paging_is_400_on_every_list(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    """``skip``/``limit`` are read as OpenWhisk reads them (a 32-bit ``toInt``): a value the
    stores cannot hold is "not an integer", never a 500 with a traceback."""
    platform.start_manager()
    r = platform.start_router("r1")
    api = f"{r.url}/api/v1/namespaces/_"
    for collection in ("actions", "activations"):
        for query in ("", "&count=true"):
            for key, value in (
                ("skip", BIG),
                ("skip", str(2**31)),
                ("limit", BIG),
                ("skip", "-" + BIG),
                ("skip", "1_000"),
                ("limit", " 5"),
            ):
                got = await client.get(f"{api}/{collection}?{key}={value}{query}")
                assert openwhisk_error(got, 400) == (
                    f"The query parameter '{key}' was malformed:\n"
                    f"The value '{value}' is not an integer for {collection}."
                ), (collection, key, value, query)
        fits = await client.get(f"{api}/{collection}?skip={2**31 - 1}&limit=%2B200")
        assert fits.status_code == 200 and fits.json() == []
    log = (platform.root / "router-r1.log").read_text()
    assert "Traceback" not in log
