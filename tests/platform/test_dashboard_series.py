"""The dashboard's series exist, from zero: ``apf-gateway up`` through a scripted session (a
cold start, warm invokes, an eviction for space, a quota 429), scraped before and after.

``rate()`` and ``increase()`` see no step into a series that appears with its first event, so
every series whose labels are known in advance must already be in the first scrape, at 0; a
namespace's rejection series must exist before its first 429.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
from platform_support import SLOW, wait_running
from test_platform_up import free_port, start_up, wait_up

from gateway.cli.up import DEFAULT_API_KEY
from gateway.platform import internal_token
from tests.support.promql import (
    Sample,
    Selector,
    dashboard_selectors,
    samples,
    selectors,
    series_key,
)

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "apf-gateway.json"
#: labels whose values come from users (actions), so not known before their first activation
USER_LABELS = {"namespace", "action"}


def scrape_targets(state: Path) -> tuple[str, list[str]]:
    """The manager's and the routers' URLs, from the file_sd targets ``up`` writes for
    Prometheus (docs/deploy.md)."""
    groups = json.loads((state / "prometheus-targets.json").read_text())
    by_component: dict[str, list[str]] = {}
    for group in groups:
        (target,) = group["targets"]
        by_component.setdefault(group["labels"]["component"], []).append(f"http://{target}")
    assert set(by_component) == {"manager", "router"}, groups
    (manager,) = by_component["manager"]
    return manager, by_component["router"]


class Scraper:
    def __init__(self, client: httpx.AsyncClient, front: str, manager: str, routers: list[str]):
        self.client = client
        self.front = front
        self.internal = [manager, *routers]

    async def __call__(self) -> list[Sample]:
        uuid, _, key = DEFAULT_API_KEY.partition(":")
        got = await self.client.get(self.front + "/metrics", auth=(uuid, key))
        assert got.status_code == 200, got.text
        texts = [got.text]
        for url in self.internal:  # probes and /metrics of the platform need no token
            resp = await self.client.get(url + "/metrics")
            assert resp.status_code == 200, (url, resp.text)
            texts.append(resp.text)
        return [s for text in texts for s in samples(text)]


def values(scrape: list[Sample]) -> dict[str, float]:
    return {series_key(name, labels): value for name, labels, value in scrape}


async def session(
    client: httpx.AsyncClient, api: str, router: str, token: str, scrape: Scraper
) -> list[Sample]:
    """Cold start, warm invokes, an eviction for space, a quota 429 (``--quota 1``); the
    scrape taken before the 429."""
    base = f"{api}/api/v1/namespaces/_/actions"
    for name, safe in (("first", "Always"), ("second", "OnUpgrade")):
        body = {"exec": {"kind": "python:3", "code": SLOW}, "eviction": {"safe": safe}}
        put = await client.put(f"{base}/{name}", json=body)
        assert put.status_code == 200, put.text
    for _ in range(3):  # one cold start, two warm
        resp = await client.post(f"{base}/first?blocking=true", json={"sleep": 0})
        assert resp.status_code == 200, resp.text
    # the quota is full: the idle "first" container (eviction.safe=Always) goes for space
    resp = await client.post(f"{base}/second?blocking=true", json={"sleep": 0})
    assert resp.status_code == 200, resp.text
    busy = await client.post(f"{base}/second", json={"sleep": 3})  # the only container, busy
    assert busy.status_code == 202, busy.text
    async with httpx.AsyncClient(timeout=30) as internal:  # no API key: the internal token
        await wait_running(internal, router, internal_token.bearer(token), 1)
    before_429 = await scrape()
    resp = await client.post(f"{base}/first?blocking=true", json={"sleep": 0})
    assert resp.status_code == 429, resp.text  # nothing evictable: OnUpgrade and busy
    return before_429


async def test_every_dashboard_series_exists_from_zero(tmp_path: Path) -> None:
    port = free_port()
    proc = start_up(port, tmp_path, "--quota", "1", routers=1)
    try:
        wait_up(proc)
        manager, routers = scrape_targets(tmp_path)
        api = f"http://127.0.0.1:{port}"
        uuid, _, key = DEFAULT_API_KEY.partition(":")
        async with httpx.AsyncClient(auth=(uuid, key), timeout=30) as client:
            scrape = Scraper(client, api, manager, routers)
            before = await scrape()
            token = internal_token.read(tmp_path / "internal-token")
            before_429 = values(await session(client, api, routers[0], token, scrape))
            after = await scrape()
    finally:
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 0, out

    wanted = dashboard_selectors(DASHBOARD)
    assert len({s.name for s in wanted}) >= 25
    # every selector of the dashboard finds a series with the labels it groups by
    missing = [s for s in wanted if not any(s.matches(n, labels) for n, labels, _ in after)]
    assert not missing, "\n".join(
        f"{s.name} {s.matchers} by {sorted(s.grouped_by)}" for s in missing
    )
    # ...and every such series whose labels are known in advance was there from the start
    used = {s.name for s in wanted}
    first = values(before)
    late = sorted(
        series_key(name, labels)
        for name, labels, _ in after
        if name in used
        and not USER_LABELS & labels.keys()
        and series_key(name, labels) not in first
    )
    assert not late, f"{len(late)} series appeared only with their first event:\n" + "\n".join(
        late[:40]
    )
    # the steps the session made were seen from 0
    last = values(after)
    for series, was, now in (
        ('apf_router_init_duration_seconds_count{kind="python:3"}', 0, 2),
        ('apf_router_wait_duration_seconds_count{start="cold"}', 0, 2),
        ('apf_manager_evictions_total{outcome="stopped",policy="Always",reason="space"}', 0, 1),
        ('apf_manager_container_removals_total{reason="space"}', 0, 1),
    ):
        assert (first[series], last[series]) == (was, now), series
    # a namespace's rejection series exist from its first acquire, and an action's statuses
    # from its first activation here: both before the 429, which then steps them from 0
    for series in (
        'apf_manager_quota_rejections_total{limit="quota",namespace="guest"}',
        'apf_router_invocations_total{action="first",namespace="guest",status="throttled"}',
    ):
        assert (before_429[series], last[series]) == (0, 1), series


def test_the_selector_reader_sees_through_promql() -> None:
    expr = (
        'histogram_quantile(0.9, sum by (le, priority_level) (rate(a_bucket{x="y{z}",b=~"c|d"}'
        "[5m]))) / on (pod) group_left (l) max without (q) (b) and c offset 5m"
    )
    got = {s.name: s for s in selectors(expr)}
    assert set(got) == {"a_bucket", "b", "c"}
    a = got["a_bucket"]
    assert a.matchers == (("x", "=", "y{z}"), ("b", "=~", "c|d"))
    assert a.labels() == {"le", "priority_level", "x", "b"}
    assert a.matches("a_bucket", {"le": "1", "priority_level": "p", "x": "y{z}", "b": "d"})
    assert not a.matches("a_bucket", {"le": "1", "priority_level": "p", "x": "y{z}", "b": "e"})
    assert not a.matches("a_bucket", {"le": "1", "x": "y{z}", "b": "d"})  # no priority_level
    variable = Selector("m", (("priority_level", "=~", "$priority_level"),))
    assert variable.matches("m", {"priority_level": "anything"})
