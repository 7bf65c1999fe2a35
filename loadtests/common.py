"""Shared pieces of the locustfiles: identities, the tenant user classes, the event log.

Runs inside Locust processes only (it imports locust, which monkey-patches with gevent).
The runner hands over the resolved scenario as JSON in ``APF_LT_RUN`` (see
``loadtests.scenario.RunSpec``); every tenant becomes one ``User`` subclass with
``fixed_count`` users, so Locust's CSV has a row per tenant (``name="<tenant> <op>"``).

Outcomes: 2xx is goodput; a 429 with a valid ``Retry-After`` is an *expected* outcome (it is
reported under ``"<tenant> 429"`` as a success, so Locust's failure count stays for real
failures); anything else is a failure. Every request is also appended to a per-process JSONL
event log (time, tenant, status, latency, upstream service time, 429 reason, Retry-After) that
the report generator reads.
"""

from __future__ import annotations

import base64
import csv
import json
import os
import time
from pathlib import Path
from typing import Any, ClassVar

import gevent
from locust import FastHttpUser, constant, constant_throughput, events, task

RUN: dict[str, Any] = json.loads(Path(os.environ["APF_LT_RUN"]).read_text())


def load_tokens(path: str) -> dict[str, str]:
    """user name -> bearer token, from a kube-apiserver token CSV (token,user,uid,"groups")."""
    out: dict[str, str] = {}
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if len(row) >= 3 and not row[0].startswith("#"):
                out[row[1]] = row[0]
    return out


TOKENS = load_tokens(RUN["tokenFile"])


class EventLog:
    """Buffered JSONL, one file per Locust process (several processes never share a file)."""

    def __init__(self, directory: str) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.path = Path(directory) / f"events-{os.getpid()}.jsonl"
        self.file = self.path.open("a", buffering=1 << 16)

    def write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def flush(self) -> None:
        self.file.flush()


_logs: list[EventLog] = []


def event_log() -> EventLog:
    """This process's log, opened lazily (after Locust forked its worker processes)."""
    if not _logs:
        _logs.append(EventLog(RUN["eventDir"]))
    return _logs[0]


@events.test_stop.add_listener
def _flush_on_stop(**_kwargs: Any) -> None:
    for log in _logs:
        log.flush()


@events.quitting.add_listener
def _flush_on_quit(**_kwargs: Any) -> None:
    for log in _logs:
        log.flush()


def reject_reason(body: bytes) -> str:
    """The reason from a Status-bodied 429 (``tooManyRequestsBody: status``), else ''."""
    try:
        doc = json.loads(body)
        causes = doc.get("details", {}).get("causes", [])
        return str(causes[0].get("reason", "")) if causes else ""
    except (ValueError, AttributeError, IndexError):
        return ""


class TenantUser(FastHttpUser):
    """One tenant's user. Subclasses pick the request; the runner's spec sets the numbers."""

    abstract = True
    tenant: ClassVar[str] = ""
    spec: ClassVar[dict[str, Any]] = {}
    method: ClassVar[str] = "GET"
    op: ClassVar[str] = "get"
    network_timeout = 70.0
    connection_timeout = 10.0

    def on_start(self) -> None:
        self.auth_header = self.authorization()
        self.honor_retry_after = bool(self.spec.get("honorRetryAfter", True))
        self.seq = 0

    def authorization(self) -> str:
        return f"Bearer {TOKENS[self.tenant]}"

    def path(self) -> str:
        ns = self.spec.get("namespace", self.tenant)
        self.seq += 1
        return f"/api/v1/namespaces/{ns}/configmaps/cm-{self.seq % 100}"

    def body(self) -> bytes | None:
        return None

    def known_service_time(self) -> float | None:
        """Service time when the upstream does not report it (``X-Service-Time``)."""
        return None

    @task
    def call(self) -> None:
        path = self.path()
        query = self.spec.get("query", "")
        if query:
            path = f"{path}?{query}"
        name = f"{self.tenant} {self.op}"
        started = time.time()
        headers = {"Authorization": self.auth_header}
        body = self.body()
        if body is not None:
            headers["Content-Type"] = "application/json"
        retry_after = 0
        with self.client.request(
            self.method, path, name=name, headers=headers, data=body, catch_response=True
        ) as resp:
            status = resp.status_code
            record: dict[str, Any] = {
                "t": started,
                "tenant": self.tenant,
                "op": self.op,
                "status": status,
                "latency": time.time() - started,
            }
            if 200 <= status < 300:
                service = resp.headers.get("x-service-time") or self.known_service_time()
                if service:
                    record["service"] = float(service)
                resp.success()
            elif status == 429:
                raw = resp.headers.get("retry-after", "")
                if raw.isdigit() and int(raw) >= 1:
                    retry_after = int(raw)
                    record["retryAfter"] = retry_after
                    record["reason"] = reject_reason(resp.content or b"")
                    resp.request_meta["name"] = f"{self.tenant} 429"
                    resp.success()
                else:
                    resp.failure(f"429 without a valid Retry-After ({raw!r})")
            else:
                err = str(resp.error) if resp.error else f"HTTP {status}"
                record["error"] = err[:200]
                resp.failure(err)
        event_log().write(record)
        if retry_after and self.honor_retry_after:
            gevent.sleep(retry_after)


class ElephantUser(TenantUser):
    """Saturating: closed loop with no think time (or the spec's thinkTime)."""

    abstract = True


class MouseUser(TenantUser):
    """Light: constant throughput (``rate`` per user) or closed loop with a long think time."""

    abstract = True


class PrivilegedUser(TenantUser):
    """A system:masters client; the mandatory ``exempt`` FlowSchema sends it to level exempt."""

    abstract = True


class WriterUser(TenantUser):
    """Mutating traffic (PUT, an update: idempotent, so clients may retry it on a closed
    keep-alive connection)."""

    abstract = True
    method = "PUT"
    op = "update"

    def body(self) -> bytes | None:
        return b'{"kind":"ConfigMap","apiVersion":"v1","data":{"k":"v"}}'


class WideUser(TenantUser):
    """Wide (multi-seat) requests: Kubernetes lists, charged by learned collection size."""

    abstract = True
    op = "list"

    def path(self) -> str:
        ns = self.spec.get("namespace", self.tenant)
        return f"/api/v1/namespaces/{ns}/pods"


class OpenWhiskUser(TenantUser):
    """Blocking action invocations through ``apf-gateway up`` (HTTP Basic with an API key)."""

    abstract = True
    method = "POST"
    op = "invoke"

    def authorization(self) -> str:
        key = str(self.spec["apiKey"])
        return "Basic " + base64.b64encode(key.encode()).decode()

    def path(self) -> str:
        ns = self.spec.get("namespace", "_")
        action = self.spec.get("action", "echo")
        return f"/api/v1/namespaces/{ns}/actions/{action}?blocking=true&result=true"

    def body(self) -> bytes | None:
        return json.dumps({"tenant": self.tenant, "sleep": RUN.get("serviceTime", 0.1)}).encode()

    def known_service_time(self) -> float | None:
        return float(RUN.get("serviceTime", 0.1))  # the action's sleep; the rest is overhead


KINDS: dict[str, type[TenantUser]] = {
    "elephant": ElephantUser,
    "mouse": MouseUser,
    "privileged": PrivilegedUser,
    "writer": WriterUser,
    "wide": WideUser,
    "openwhisk": OpenWhiskUser,
}


def wait_time_for(spec: dict[str, Any]) -> Any:
    rate = spec.get("rate")
    if rate:
        return constant_throughput(float(rate))
    return constant(float(spec.get("thinkTime", 0.0)))


def tenant_classes(kinds: set[str] | None = None) -> dict[str, type[TenantUser]]:
    """One ``User`` subclass per tenant of the run (optionally only some kinds)."""
    out: dict[str, type[TenantUser]] = {}
    # Locust does not spawn fixed_count classes that a shape's stage adds later, so with
    # per-stage classes the late arrivals (elephants, or a tenant with a start time) are
    # weighted by their user count: the fixed tenants keep their users and the shape asks for
    # exactly the sum, so the late ones split the rest in proportion.
    staged = (RUN.get("shape") or {}).get("type") == "elephants-arrive"
    for spec in RUN["tenants"]:
        by_weight = staged and (spec["kind"] == "elephant" or float(spec.get("start", 0)) > 0)
        if kinds is not None and spec["kind"] not in kinds:
            continue
        base = KINDS[spec["kind"]]
        attrs: dict[str, Any] = {
            "abstract": False,
            "tenant": spec["name"],
            "spec": spec,
            # Tenants with a weight are the ones a load shape scales; the others stay fixed.
            "fixed_count": 0 if spec.get("weight") or by_weight else int(spec["users"]),
            "weight": int(spec.get("weight") or (spec["users"] if by_weight else 1)),
            "wait_time": wait_time_for(spec),
        }
        if spec.get("method"):
            attrs["method"] = spec["method"]
            attrs["op"] = spec.get("op", spec["method"].lower())
        cls_name = "T_" + "".join(c if c.isalnum() else "_" for c in spec["name"])
        out[cls_name] = type(cls_name, (base,), attrs)
    return out
