"""The sidecar examples in ``examples/sidecar/`` run as documented (``uvicorn <module>:app`` in
that folder, a real process) and do what docs/frontdoor.md says: two users from the token
file, classified by the FlowSchemas of ``flowcontrol.yaml``, the PF headers, a saturated level's
429 with a Kubernetes Status body, and ``/metrics`` with the ``apiserver_flowcontrol_*`` set.
Everything the test expects (tokens, UIDs, names) is read from the example files themselves."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support.wait import wait_for, wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "sidecar"
APPS = ["fastapi_app", "starlette_app"]
REPORTS = "/api/v1/namespaces/default/reports"


def tokens() -> dict[str, str]:
    """user -> token, from the example's token file (kube's CSV: token,user,uid,groups)."""
    with (EXAMPLES / "tokens.csv").open(newline="") as f:
        return {row[1]: row[0] for row in csv.reader(f)}


def uids() -> dict[tuple[str, str], str]:
    """(kind, name) -> metadata.uid of every object in the example's flowcontrol.yaml."""
    docs = yaml.safe_load_all((EXAMPLES / "flowcontrol.yaml").read_text())
    return {
        (d["kind"], d["metadata"]["name"]): d["metadata"]["uid"] for d in docs if "metadata" in d
    }


@dataclass
class App:
    url: str
    log: Path

    def get(self, path: str, user: str | None = None, **kw: object) -> httpx.Response:
        return httpx.get(self.url + path, headers=auth(user), timeout=10, **kw)  # type: ignore[arg-type]


def auth(user: str | None) -> dict[str, str]:
    return {} if user is None else {"Authorization": f"Bearer {tokens()[user]}"}


# One worker runs the module (pytest-xdist): its apps start once, in this order.
pytestmark = pytest.mark.xdist_group("sidecar-examples")


# One process per example for the module (its start is most of the time); the 429 test, which
# leaves the batch level's seat taken, comes last.
@pytest.fixture(scope="module", params=APPS)
def app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    log = tmp_path_factory.mktemp(request.param) / "uvicorn.log"
    with log.open("wb") as out:
        # The documented command, on a free port; a short grace period so the test's slow
        # request does not hold up the shutdown.
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", f"{request.param}:app", "--host", "127.0.0.1",
             "--port", "0", "--timeout-graceful-shutdown", "1"],
            cwd=EXAMPLES, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=out,
        )  # fmt: skip
        try:

            def port() -> str | None:
                if proc.poll() is not None:
                    raise AssertionError(f"the example exited:\n{log.read_text()}")
                found = re.search(r"running on http://127\.0\.0\.1:(\d+)", log.read_text())
                return found.group(1) if found else None

            url = "http://127.0.0.1:" + wait_for(port, 30, log.read_text)
            yield App(url, log)
        finally:
            proc.terminate()
            proc.wait(15)


def pf(response: httpx.Response) -> tuple[str, str]:
    """The FlowSchema and priority level UIDs kube-apiserver's headers name."""
    return (
        response.headers["X-Kubernetes-PF-FlowSchema-UID"],
        response.headers["X-Kubernetes-PF-PriorityLevel-UID"],
    )


def test_each_user_is_classified_by_the_example_flowschemas(app: App) -> None:
    objects = uids()
    alice = app.get(REPORTS, "alice")
    assert alice.status_code == 200, alice.text
    assert alice.json() == {"kind": "ReportList", "items": [], "user": "alice",
                            "verb": "list", "resource": "reports"}  # fmt: skip
    assert pf(alice) == (
        objects["FlowSchema", "developers"],
        objects["PriorityLevelConfiguration", "interactive"],
    )
    bot = app.get(REPORTS, "report-bot")
    assert bot.status_code == 200, bot.text
    assert bot.json()["user"] == "report-bot"
    assert pf(bot) == (
        objects["FlowSchema", "batch-jobs"],
        objects["PriorityLevelConfiguration", "batch"],
    )
    # Anonymous requests are allowed (kube's default) and fall to Kubernetes' ensured objects.
    anonymous = app.get(REPORTS)
    assert anonymous.json()["user"] == "system:anonymous"
    assert not set(pf(anonymous)) & set(objects.values())
    # The slow endpoint takes 0 to 60 s, nothing else (NaN would corrupt the loop's timers).
    for seconds in ("nan", "61", "-1", "x"):
        r = httpx.post(app.url + REPORTS, params={"seconds": seconds}, headers=auth("alice"))
        assert r.status_code in (400, 422), (seconds, r.text)  # Starlette's, FastAPI's
    # A wrong token is refused, never taken as anonymous.
    wrong = httpx.get(app.url + REPORTS, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert wrong.json()["reason"] == "Unauthorized"


def scrape(app: App) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, from the example's /metrics."""
    r = app.get("/metrics")
    assert r.status_code == 200, r.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def sample(app: App, name: str, **labels: str) -> float | None:
    return scrape(app).get((name, tuple(sorted(labels.items()))))


# Per priority level: present for every level from the start.
LEVEL_METRICS = [
    "apiserver_flowcontrol_nominal_limit_seats",
    "apiserver_flowcontrol_current_limit_seats",
    "apiserver_flowcontrol_upper_limit_seats",
]
# Per flow schema and level: present once the pair saw a request.
FLOW_METRICS = [
    "apiserver_flowcontrol_current_executing_requests",
    "apiserver_flowcontrol_current_inqueue_requests",
    "apiserver_flowcontrol_dispatched_requests_total",
    "apiserver_flowcontrol_request_wait_duration_seconds_count",
    "apiserver_flowcontrol_request_execution_seconds_count",
]


def test_metrics_have_the_flowcontrol_set_for_the_example_levels(app: App) -> None:
    assert app.get(REPORTS, "alice").status_code == 200
    samples = scrape(app)
    for name in LEVEL_METRICS:
        levels = {dict(labels).get("priority_level") for n, labels in samples if n == name}
        assert {"interactive", "batch"} <= levels, name
    # The batch level's one seat, as flowcontrol.yaml and the example's settings make it.
    assert samples["apiserver_flowcontrol_nominal_limit_seats", (("priority_level", "batch"),)] == 1
    alice = {"flow_schema": "developers", "priority_level": "interactive"}
    for name in FLOW_METRICS:
        found = [
            v for (n, labels), v in samples.items() if n == name and alice.items() <= set(labels)
        ]
        assert found, name
    assert (
        samples["apiserver_flowcontrol_dispatched_requests_total", tuple(sorted(alice.items()))]
        >= 1
    )
    # The debug dumps are served too, to system:masters only.
    assert (
        app.get("/debug/api_priority_and_fairness/dump_priority_levels", "alice").status_code == 403
    )


def test_a_saturated_level_answers_429_with_a_status_body(app: App) -> None:
    # batch has one seat and rejects instead of queueing: one slow report holds it.
    slow: list[httpx.Response | Exception] = []

    def create() -> None:
        try:
            slow.append(
                httpx.post(app.url + REPORTS, params={"seconds": 30}, headers=auth("report-bot"),
                           timeout=60)
            )  # fmt: skip
        except httpx.HTTPError as exc:  # the server stops under it at the end
            slow.append(exc)

    holder = threading.Thread(target=create, daemon=True)
    holder.start()
    level = {"flow_schema": "batch-jobs", "priority_level": "batch"}
    wait_until(
        lambda: sample(app, "apiserver_flowcontrol_current_executing_requests", **level) == 1,
        15, "the slow report to hold batch's seat", interval=0.1,
    )  # fmt: skip
    assert not slow, slow

    refused = app.get(REPORTS, "report-bot")
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    objects = uids()
    assert pf(refused) == (
        objects["FlowSchema", "batch-jobs"],
        objects["PriorityLevelConfiguration", "batch"],
    )
    status = refused.json()
    assert (status["kind"], status["apiVersion"], status["status"]) == ("Status", "v1", "Failure")
    assert (status["code"], status["reason"]) == (429, "TooManyRequests")
    assert status["details"]["causes"] == [
        {"reason": "concurrency-limit", "field": "priorityLevel", "message": "batch"}
    ]
    # Another level is not affected.
    assert app.get(REPORTS, "alice").status_code == 200
    rejected = "apiserver_flowcontrol_rejected_requests_total"
    assert sample(app, rejected, **level, reason="concurrency-limit") == 1
