"""The access log and request IDs of a real ``apf-gateway serve`` process: every outcome
(proxied, 400, 401, 403, 429, 502, 504) gets one parsed line and an ``X-Request-Id``, and no
credential sent in any form reaches the log."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.frontdoor.conftest import ServerThread, holding
from tests.support.ports import free_port
from tests.support.wait import wait_for, wait_until

CONFIG = Path(__file__).with_name("apf_config.yaml")
ROOT = Path(__file__).resolve().parents[2]
TOKEN = "tok-SECRET-bearer-4711"
QUERY_SECRET = "SECRET-query-0815"
COOKIE_SECRET = "SECRET-cookie-1234"
REFERER_SECRET = "SECRET-referer-999"
BASIC_SECRET = "SECRET-basic-pass"
HEX32 = re.compile(r"^[0-9a-f]{32}$")


class Serve:
    def __init__(self, proc: subprocess.Popen[bytes], url: str, stdout: Path) -> None:
        self.proc = proc
        self.url = url
        self.stdout = stdout

    def lines(self, path: Path | None = None) -> list[str]:
        return [x for x in (path or self.stdout).read_text().splitlines() if x.strip()]


def _serve(tmp_path: Path, upstream: ServerThread, *extra: str) -> Iterator[Serve]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    tokens = tmp_path / "tokens.csv"
    tokens.write_text(f'{TOKEN},alice,u1,"dev"\n')
    out = tmp_path / "stdout.log"
    err = tmp_path / "stderr.log"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--config", str(CONFIG),
             "--upstream", upstream.url, "--upstream", f"/down=http://127.0.0.1:{free_port()}",
             "--listen", f"127.0.0.1:{port}", "--token-auth-file", str(tokens),
             "--upstream-read-timeout", "3s", "--log-level", "warning", *extra],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=stdout, stderr=stderr,
        )  # fmt: skip
    try:
        wait_until(lambda: _up(url), timeout=30, what="serve answers /livez")
        yield Serve(proc, url, out)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/livez").status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture
def serve(tmp_path: Path, upstream: ServerThread) -> Iterator[Serve]:
    yield from _serve(tmp_path, upstream)


def _by_id(serve: Serve, rid: str) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        for line in serve.lines():
            if line.startswith("{"):
                doc = json.loads(line)
                if doc["requestID"] == rid:
                    return dict(doc)
        return None

    return wait_for(find, timeout=10, what=f"the access log line of request {rid}")


FIELDS = {
    "time", "requestID", "client", "user", "method", "path", "status", "bytesIn", "bytesOut",
    "durationSeconds", "upstreamSeconds", "flowSchema", "priorityLevel", "flowDistinguisher",
    "seats", "queueWaitSeconds", "apf", "protocol",
}  # fmt: skip


def test_every_outcome_is_logged_with_its_request_id_and_no_credential(
    serve: Serve, upstream: ServerThread
) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=serve.url, timeout=15) as client:
        # proxied, with every place a credential can hide
        ok = client.post(
            "/api/v1/namespaces/default/configmaps/echo",
            params={"access_token": QUERY_SECRET, "limit": "5"},
            headers={**auth, "X-Request-Id": "client-id-1", "Cookie": f"session={COOKIE_SECRET}",
                     "Referer": f"https://u:{BASIC_SECRET}@ui.example/?token={REFERER_SECRET}",
                     "User-Agent": "kubectl/v1.31"},
            content=b"12345",
        )  # fmt: skip
        assert ok.status_code == 200 and ok.headers["x-request-id"] == "client-id-1"
        seen = dict((k, v) for k, v in ok.json()["headers"])
        assert seen["x-request-id"] == "client-id-1"  # forwarded upstream
        # a client value that is not a safe token is replaced, upstream and back
        bad_id = "x" * 129
        replaced = client.get("/api/v1/echo", headers={**auth, "X-Request-Id": bad_id})
        new_id = replaced.headers["x-request-id"]
        assert HEX32.match(new_id)
        assert [v for k, v in replaced.json()["headers"] if k == "x-request-id"] == [new_id]
        unauthorized = client.get("/api/v1/echo", headers={"Authorization": "Bearer wrong-SECRET"})
        forbidden = client.get("/api/v1/echo", headers={**auth, "Impersonate-User": "root"})
        bad_path = client.get("/api/v1/%2e%2e/echo", headers=auth)
        bad_gateway = client.get("/down/x", headers=auth)
        basic = client.get("/api/v1/echo", auth=("someone", BASIC_SECRET))
        with ThreadPoolExecutor(2) as pool:
            held = pool.submit(client.get, "/reject/hold/a", headers=auth)
            wait_until(lambda: "a" in holding(upstream), what="the first request upstream")
            rejected = client.get("/reject/echo", headers=auth)
            httpx.get(upstream.url + "/release/a")
            assert held.result().status_code == 200
        # the upstream never answers: the read timeout (3s) is the behaviour under test
        timeout = client.get("/api/v1/hold/never", headers=auth)
    expected = {
        unauthorized: 401, forbidden: 403, bad_path: 400, bad_gateway: 502, rejected: 429,
        timeout: 504,
    }  # fmt: skip
    assert HEX32.match(basic.headers["x-request-id"])
    for response, code in expected.items():
        assert response.status_code == code, response.text
        assert HEX32.match(response.headers["x-request-id"]), response.headers

    line = _by_id(serve, "client-id-1")
    assert set(line) >= FIELDS
    assert line["user"] == "alice" and line["method"] == "POST" and line["status"] == 200
    assert line["path"] == "/api/v1/namespaces/default/configmaps/echo"
    assert line["query"] == "access_token=REDACTED&limit=5"
    assert line["bytesIn"] == 5 and line["bytesOut"] == len(ok.content)
    assert line["apf"] == "executed" and line["flowSchema"] == "queue-fs"
    # one queue: no shuffle sharding, so no flow distinguisher (Kubernetes' rule)
    assert line["priorityLevel"] == "tiny-queue" and line["flowDistinguisher"] is None
    assert line["seats"] == 1 and line["queueWaitSeconds"] == 0
    assert line["protocol"] == "http/1.1" and line["client"] == "127.0.0.1"
    assert 0 < line["upstreamSeconds"] <= line["durationSeconds"]
    assert line["userAgent"] == "kubectl/v1.31"
    assert line["referer"] == "https://ui.example/?token=REDACTED"
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", line["time"])

    assert _by_id(serve, new_id)["status"] == 200
    line = _by_id(serve, unauthorized.headers["x-request-id"])
    assert (line["status"], line["user"], line["apf"]) == (401, None, None)
    line = _by_id(serve, forbidden.headers["x-request-id"])
    assert (line["status"], line["user"], line["apf"]) == (403, "alice", "executed")
    assert _by_id(serve, bad_path.headers["x-request-id"])["status"] == 400
    line = _by_id(serve, bad_gateway.headers["x-request-id"])
    assert line["status"] == 502 and line["upstreamSeconds"] is not None
    line = _by_id(serve, rejected.headers["x-request-id"])
    assert (line["status"], line["apf"], line["apfReason"]) == (
        429,
        "rejected",
        "concurrency-limit",
    )
    assert (line["flowSchema"], line["priorityLevel"]) == ("reject-fs", "tiny-reject")
    line = _by_id(serve, timeout.headers["x-request-id"])
    assert line["status"] == 504 and line["upstreamSeconds"] >= 3

    text = serve.stdout.read_text()
    for secret in (
        TOKEN,
        QUERY_SECRET,
        COOKIE_SECRET,
        REFERER_SECRET,
        BASIC_SECRET,
        "wrong-SECRET",
    ):
        assert secret not in text
    assert "SECRET" not in text
    metrics = httpx.get(serve.url + "/metrics").text
    assert "gateway_access_log_dropped_lines_total 0.0" in metrics
    assert re.search(r"^gateway_access_log_lines_total [1-9]", metrics, re.M)


def test_request_id_header_is_a_setting_and_the_log_can_be_off(
    tmp_path: Path, upstream: ServerThread
) -> None:
    for serve in _serve(tmp_path, upstream, "--request-id-header", "X-Trace", "--access-log=false"):
        r = httpx.get(serve.url + "/api/v1/echo", headers={"X-Trace": "trace-7"})
        assert r.headers["x-trace"] == "trace-7" and "x-request-id" not in r.headers
        assert ["x-trace", "trace-7"] in r.json()["headers"]
        refused = httpx.get(serve.url + "/api/v1/echo", headers={"Authorization": "Bearer no"})
        assert refused.status_code == 401 and HEX32.match(refused.headers["x-trace"])
        serve.proc.send_signal(signal.SIGTERM)
        assert serve.proc.wait(15) == 0
        assert serve.lines() == []  # nothing logged, and nothing else on stdout


COMBINED = re.compile(
    r'^(?P<addr>\S+) - (?P<user>\S+) \[(?P<time>[^\]]+)\] "(?P<request>[^"]*)" (?P<status>\d{3}) '
    r'(?P<bytes>\d+) "(?P<referer>[^"]*)" "(?P<agent>[^"]*)"$'
)


def test_combined_format_to_a_file_flushed_on_sigterm(
    tmp_path: Path, upstream: ServerThread
) -> None:
    path = tmp_path / "access.log"
    args = ("--access-log-format", "combined", "--access-log-path", str(path))
    for serve in _serve(tmp_path, upstream, *args):
        auth = {"Authorization": f"Bearer {TOKEN}"}
        r = httpx.get(
            serve.url + "/api/v1/echo?watch=1&access_token=" + QUERY_SECRET,
            headers={**auth, "User-Agent": 'say "hi"'},
        )
        assert r.status_code == 200
        serve.proc.send_signal(signal.SIGTERM)
        assert serve.proc.wait(15) == 0
        lines = path.read_text().splitlines()
        assert len(lines) == 2, lines  # /livez (startup probe) and the request
        m = COMBINED.match(lines[-1])
        assert m, lines[-1]
        assert m["addr"] == "127.0.0.1" and m["user"] == "alice" and m["status"] == "200"
        assert m["request"] == "GET /api/v1/echo?watch=1&access_token=REDACTED HTTP/1.1"
        assert m["bytes"] == str(len(r.content)) and m["referer"] == "-"
        assert m["agent"] == "say \\x22hi\\x22"
        assert re.match(r"^\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d \+0000$", m["time"])
        assert QUERY_SECRET not in path.read_text() and TOKEN not in path.read_text()


def test_protocol_is_h2_for_http2_streams_and_websocket_for_websockets(
    tmp_path: Path, upstream: ServerThread
) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for serve in _serve(tmp_path, upstream, "--http2-prior-knowledge"):
        with httpx.Client(base_url=serve.url, http1=False, http2=True, timeout=15) as client:
            r = client.get("/api/v1/echo", headers=auth)
        assert r.status_code == 200 and r.http_version == "HTTP/2"
        assert _by_id(serve, r.headers["x-request-id"])["protocol"] == "h2"
        # a websocket handshake without credentials: refused with 401, and logged as such
        ws = httpx.get(
            serve.url + "/api/v1/echo",
            headers={"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                     "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "X-Request-Id": "ws-1",
                     "Authorization": "Bearer no"},
        )  # fmt: skip
        assert ws.status_code == 401 and ws.headers["x-request-id"] == "ws-1"
        line = _by_id(serve, "ws-1")
        assert (line["protocol"], line["status"]) == ("websocket", 401)


def test_sigusr1_reopens_the_file_after_logrotate_renamed_it(
    tmp_path: Path, upstream: ServerThread
) -> None:
    """nginx's USR1: logrotate renames the file, then signals; the lines of requests answered
    before go to the renamed file, those after to a new file at the path, none lost or
    written twice."""
    path = tmp_path / "access.log"
    rotated = tmp_path / "access.log.1"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for serve in _serve(tmp_path, upstream, "--access-log-path", str(path)):
        with httpx.Client(base_url=serve.url, headers=auth, timeout=15) as client:
            for n in range(20):
                r = client.get("/api/v1/echo", headers={"X-Request-Id": f"before-{n}"})
                assert r.status_code == 200
            path.rename(rotated)
            serve.proc.send_signal(signal.SIGUSR1)
            wait_until(path.exists, timeout=10, what="the gateway to open a new access.log")
            for n in range(20):
                r = client.get("/api/v1/echo", headers={"X-Request-Id": f"after-{n}"})
                assert r.status_code == 200
        serve.proc.send_signal(signal.SIGTERM)
        assert serve.proc.wait(15) == 0
    old = [json.loads(x)["requestID"] for x in serve.lines(rotated)]
    new = [json.loads(x)["requestID"] for x in serve.lines(path)]
    assert [x for x in old if x.startswith(("before", "after"))] == [
        f"before-{n}" for n in range(20)
    ]
    assert new == [f"after-{n}" for n in range(20)]
    assert len(old) == 21  # and the startup probe's /livez
