"""One budget for the request body all queued requests read ahead (issue 21 item 6).

Real sockets: uploads queue behind a held request in a one-seat level, the gateway's exported
gauges show what they read ahead, and every body still reaches the upstream whole once the
requests are admitted. The core runs on a fake clock, so no queued request times out.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from gateway.asgi.readahead import DRAINED_AFTER, ReadAhead, ReadAheadBudget
from gateway.testing import FakeEventClock
from tests.frontdoor.conftest import ServerThread, holding, start_gateway
from tests.frontdoor.test_flowcontrol import CONFIG, hold, level_state, metric
from tests.support.wait import wait_until

BUDGET = 256 * 1024
# What the server hands over in one message at most: 64 KiB it buffers before pausing the
# socket, plus one socket read of 256 KiB (docs/frontdoor.md, "Proxy framing and buffering").
ONE_READ = 64 * 1024 + 256 * 1024
UPLOADS = 16
SIZE = 200_000

WIDE = """
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: wide-queue}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 5
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse:
      type: Queue
      queuing: {queues: 1, handSize: 1, queueLengthLimit: 64}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: wide-fs}
spec:
  matchingPrecedence: 150
  priorityLevelConfiguration: {name: wide-queue}
  rules:
  - subjects:
    - {kind: Group, group: {name: system:unauthenticated}}
    nonResourceRules:
    - {verbs: ["*"], nonResourceURLs: ["/wide/*"]}
"""


@pytest.fixture
def gw(
    upstream: ServerThread, gateways: list[ServerThread], tmp_path: Path
) -> Iterator[ServerThread]:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('admin-token,admin,1,"system:masters"\n')
    wide = tmp_path / "wide.yaml"
    wide.write_text(WIDE)
    server = start_gateway(
        {
            "upstreams": [{"url": upstream.url}],
            "authentication": {"tokenAuthFile": str(tokens)},
            "client": {"maxQueuedBodyBytes": BUDGET},
        },
        [CONFIG, str(wide)],
        clock=lambda loop: FakeEventClock(start=1000.0),
    )
    gateways.append(server)
    yield server


def upload(port: int, size: int) -> tuple[int, dict[str, int]]:
    """POST a body of ``size`` bytes on a fresh connection; (status, upstream's JSON)."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        head = (
            f"POST /wide/upload HTTP/1.1\r\nhost: x\r\ncontent-length: {size}\r\n"
            "connection: close\r\n\r\n"
        )
        s.sendall(head.encode() + b"u" * size)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head_bytes, _, body = answer.partition(b"\r\n\r\n")
    return int(head_bytes.split()[1]), json.loads(body)


def read_ahead(gw: ServerThread) -> dict[str, float]:
    name = "gateway_queued_request_body_bytes"
    return {
        "held": metric(gw, name),
        "peak": metric(gw, name + "_peak"),
        "limit": metric(gw, name + "_limit"),
    }


def test_queued_uploads_read_ahead_within_one_budget_and_lose_nothing(
    gw: ServerThread, upstream: ServerThread
) -> None:
    with ThreadPoolExecutor(UPLOADS + 2) as pool:
        running = hold(pool, gw, "/wide/hold/a")
        wait_until(lambda: "a" in holding(upstream), what="the held request upstream")
        uploads = [pool.submit(upload, gw.port, SIZE) for _ in range(UPLOADS)]
        wait_until(
            lambda: level_state(gw, "wide-queue")["waiting"] == UPLOADS,
            what=lambda: f"{UPLOADS} queued uploads: {level_state(gw, 'wide-queue')}",
        )
        # 16 x 200 kB offered, each under the 1 MiB a request may read ahead: only the budget
        # stops them.
        wait_until(
            lambda: read_ahead(gw)["held"] >= BUDGET,
            what=lambda: f"the read-ahead to reach the budget: {read_ahead(gw)}",
            interval=0.05,
        )
        seen = read_ahead(gw)
        assert seen["limit"] == BUDGET
        assert BUDGET <= seen["peak"] <= BUDGET + ONE_READ, seen
        assert metric(gw, "gateway_queued_request_body_read_ahead_stopped_total") > 0

        # A queued request without a body still leaves its queue when its client goes,
        # though the budget is spent (reading ahead an empty body costs nothing).
        with socket.create_connection(("127.0.0.1", gw.port)) as s:
            s.sendall(b"GET /wide/echo HTTP/1.1\r\nhost: x\r\n\r\n")
            wait_until(lambda: level_state(gw, "wide-queue")["waiting"] == UPLOADS + 1)
        wait_until(
            lambda: level_state(gw, "wide-queue")["waiting"] == UPLOADS,
            what="the body-less request whose client left to leave the queue",
        )

        httpx.get(upstream.url + "/release/a")
        assert running.result().status_code == 200
        for done in uploads:
            status, answer = done.result()
            assert status == 200 and answer["bytes"] == SIZE, answer
    after = read_ahead(gw)
    assert after["held"] == 0, after
    assert after["peak"] <= BUDGET + ONE_READ, after


def test_an_emptied_budget_asks_once_per_burst_for_the_memory_back() -> None:
    drained: list[int] = []
    budget = ReadAheadBudget(BUDGET, on_drained=lambda: drained.append(budget.held))
    reader = ReadAhead(budget)
    budget.take(DRAINED_AFTER - 1, reader)
    budget.give_back(DRAINED_AFTER - 1)
    assert drained == []  # a small burst: nothing worth a trim
    budget.take(DRAINED_AFTER, reader)
    budget.take(10, reader)
    budget.give_back(DRAINED_AFTER)
    assert drained == []  # not empty yet
    budget.give_back(10)
    assert drained == [0]
    budget.take(10, reader)
    budget.give_back(10)
    assert drained == [0]  # the burst was already reported
