"""The access log's writer on a real pipe: a reader that stops reading fills the queue, and
then lines are dropped and counted while ``submit`` keeps returning at once; what is queued
is written at close. Plus the request ID rule and the redaction of query strings."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.accesslog.fields import _CACHE_SIZE, Entry, JsonFormat
from gateway.accesslog.redact import redact_query, redact_url
from gateway.accesslog.requestid import is_safe, request_id
from gateway.accesslog.writer import AccessLogWriter
from gateway.settings.load import SettingsError, build_settings
from tests.support.wait import wait_until


def _entry(n: int) -> Entry:
    scope = {
        "type": "http", "http_version": "1.1", "method": "GET", "path": f"/x/{n}",
        "query_string": b"", "headers": [], "client": ("127.0.0.1", 1),
    }  # fmt: skip
    return Entry(time.perf_counter(), 0.001, f"id-{n}", scope, 200, 0, 2)


def test_a_stalled_reader_drops_lines_and_never_blocks_submit() -> None:
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    with contextlib.suppress(BlockingIOError):
        while True:  # fill the pipe: nobody reads it, so the writer's write() will block
            os.write(write_end, b"-" * 4096)
    os.set_blocking(write_end, True)
    # batch_interval=0: the thread writes its first line at once and is stuck in write()
    writer = AccessLogWriter(
        write_end, format="json", queue_size=10, flush_timeout=10, batch_interval=0
    )
    writer.start()
    try:
        writer.submit(_entry(0))
        wait_until(writer.queue.empty, what="the writer to take the first line")
        # The writer is stuck in write(); the queue fills to its bound, then every further
        # line is dropped and counted, and submit() returns at once each time.
        for n in range(1, 1011):
            writer.submit(_entry(n))
        assert writer.queue.qsize() == 10
        assert writer.dropped >= 900 and writer.written == 0
    finally:
        drained = threading.Thread(target=_read_all, args=(read_end,), daemon=True)
        drained.start()
        writer.close()
        drained.join(10)
    # every line is accounted for: written once the reader read again, or dropped
    assert writer.written + writer.dropped == 1011 and writer.written >= 11


def _read_all(fd: int) -> None:
    with os.fdopen(fd, "rb") as f:
        while f.read(65536):
            pass


def test_close_writes_what_is_queued(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    writer = AccessLogWriter.open(str(path), format="combined", queue_size=100, flush_timeout=5)
    writer.start()
    for n in range(50):
        writer.submit(_entry(n))
    writer.close()  # SIGTERM's lifespan shutdown calls this after the last request
    lines = path.read_text().splitlines()
    assert len(lines) == 50 and writer.written == 50 and writer.dropped == 0
    assert lines[-1].startswith("127.0.0.1 - - [") and '"GET /x/49 HTTP/1.1" 200 2' in lines[-1]


@pytest.mark.parametrize(
    ("value", "safe"),
    [
        (b"abc-123", True),
        (b"x" * 128, True),
        (b"x" * 129, False),
        (b"", False),
        (b"has space", False),
        (b"tab\there", False),
        (b"caf\xc3\xa9", False),
        (b"del\x7f", False),
        (b'"quoted"\\', True),  # visible ASCII; the log escapes it
    ],
)
def test_safe_request_ids(value: bytes, safe: bool) -> None:
    assert is_safe(value) is safe
    rid, text, kept = request_id([(b"x-request-id", value)], b"x-request-id")
    assert kept is safe and (rid == value) is safe and text == rid.decode("ascii")


def test_two_request_id_headers_are_replaced() -> None:
    rid, text, kept = request_id(
        [(b"x-request-id", b"a"), (b"x-request-id", b"b")], b"x-request-id"
    )
    assert not kept and len(rid) == 32 and text == rid.decode("ascii")


def test_query_and_referer_redaction() -> None:
    assert redact_query("watch=1&access_token=s3&labelSelector=a%3Db") == (
        "watch=1&access_token=REDACTED&labelSelector=a%3Db"
    )
    assert redact_query("X-Amz-Signature=abc&X-Amz-Credential=k&Api-Key=1&key=2&code=3") == (
        "X-Amz-Signature=REDACTED&X-Amz-Credential=REDACTED&Api-Key=REDACTED&key=REDACTED"
        "&code=REDACTED"
    )
    assert redact_query("pass%77ord=x&id_token=y") == "pass%77ord=REDACTED&id_token=REDACTED"
    assert redact_url("https://me:pw@host:8443/p?token=t&a=1#frag") == (
        "https://host:8443/p?token=REDACTED&a=1"
    )


def test_settings_are_validated() -> None:
    doc = {"apiVersion": "gateway.apf.dev/v1alpha1", "kind": "GatewayConfiguration"}
    settings = build_settings([("c.yaml", 1, doc)])
    assert settings.access_log.enabled and settings.access_log.format == "json"
    assert settings.access_log.path == "-" and settings.request_id_header == "X-Request-Id"
    bad = {
        **doc, "requestIDHeader": "X Request", "accessLog": {
            "queueSize": 0, "path": "", "flushTimeout": "0s",
        },
    }  # fmt: skip
    with pytest.raises(SettingsError) as info:
        build_settings([("c.yaml", 1, bad)])
    text = str(info.value)
    for field in ("requestIDHeader", "accessLog.queueSize", "accessLog.path", "accessLog.flush"):
        assert f"c.yaml: document 1: {field}" in text, text
    with pytest.raises(SettingsError, match=r"accessLog\.format: must be one of 'json'"):
        build_settings([("c.yaml", 1, {**doc, "accessLog": {"format": "common"}})])


def test_entries_carry_perf_counter_times_and_lines_carry_wall_clock_time(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    writer = AccessLogWriter.open(str(path), format="json", queue_size=10, flush_timeout=5)
    writer.start()
    before = time.time()
    writer.submit(_entry(0))  # started: a perf_counter reading, as RequestLog takes it
    writer.close()
    after = time.time()
    (line,) = path.read_text().splitlines()
    logged = datetime.strptime(json.loads(line)["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
    seconds = logged.replace(tzinfo=UTC).timestamp()
    assert int(before * 1000) / 1000 <= seconds <= after


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["requestID"] for line in path.read_text().splitlines()]


def test_reopen_sends_later_lines_to_the_new_file_and_none_twice(tmp_path: Path) -> None:
    """logrotate's order: rename, then SIGUSR1 (``reopen``). Lines queued before the mark go
    to the renamed file, the rest to the path opened anew; each exactly once (a double
    write, as a miscompiled write loop once did, shows as a repeated ID)."""
    path = tmp_path / "access.log"
    writer = AccessLogWriter.open(
        str(path), format="json", queue_size=100, flush_timeout=5
    )  # not started: all of it is queued when the thread drains it, marks included
    for n in range(5):
        writer.submit(_entry(n))
    path.rename(tmp_path / "access.log.1")
    writer.reopen()
    for n in range(5, 12):
        writer.submit(_entry(n))
    writer.start()
    writer.close()
    assert _ids(tmp_path / "access.log.1") == [f"id-{n}" for n in range(5)]
    assert _ids(path) == [f"id-{n}" for n in range(5, 12)]
    assert writer.written == 12 and writer.dropped == 0 and writer.reopened == 1


def test_a_failed_reopen_keeps_writing_to_the_open_file(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    path = folder / "access.log"
    writer = AccessLogWriter.open(str(path), format="json", queue_size=100, flush_timeout=5)
    writer.start()
    writer.submit(_entry(0))
    moved = tmp_path / "moved"
    folder.rename(moved)  # the path's folder is gone: reopening it fails
    writer.reopen()
    writer.submit(_entry(1))
    writer.close()
    assert _ids(moved / "access.log") == ["id-0", "id-1"]
    assert writer.reopened == 0 and writer.dropped == 0


def test_standard_output_is_not_reopened() -> None:
    writer = AccessLogWriter.open("-", format="json", queue_size=10, flush_timeout=5)
    writer.reopen()
    assert writer.queue.empty()
    writer.close()


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0, "0.000000"), (0.0012344, "0.001234"), (0.9999996, "1.000000"), (3.5, "3.500000"),
     (1234.000001, "1234.000001")],
)  # fmt: skip
def test_json_durations_have_six_decimals(seconds: float, text: str) -> None:
    entry = _entry(0)
    entry.duration = seconds
    line = JsonFormat()(entry)
    assert f'"durationSeconds":{text},' in line
    assert json.loads(line)["durationSeconds"] == float(text)


def test_json_strings_are_escaped_whether_remembered_or_not() -> None:
    """The line's strings go through a cache of JSON literals: the first and the repeated
    use of a value that needs escaping give the same, valid line."""
    fmt = JsonFormat()
    entry = _entry(0)
    entry.request_id = 'id"with\\quote'
    entry.scope["path"] = '/p/"q"\\\x01\u00e9'
    entry.scope["headers"] = [
        (b"user-agent", b'agent "x"\\\x7f\xe9'),
        (b"referer", b'http://h/"x"'),
    ]
    for _ in range(2):
        doc = json.loads(fmt(entry))
        assert doc["requestID"] == 'id"with\\quote'
        assert doc["path"] == '/p/"q"\\\x01\u00e9'
        assert doc["userAgent"] == 'agent "x"\\\x7f\u00e9' and doc["referer"] == 'http://h/"x"'
        assert list(doc) == [
            "time", "requestID", "client", "user", "method", "path", "query", "status",
            "bytesIn", "bytesOut", "durationSeconds", "upstreamSeconds", "flowSchema",
            "priorityLevel", "flowDistinguisher", "seats", "queueWaitSeconds", "apf",
            "apfReason", "protocol", "userAgent", "referer",
        ]  # fmt: skip


def test_remembered_json_values_are_bounded() -> None:
    """Paths and user agents can take any number of values: the cache of their JSON text is
    emptied when full, so it never grows past its bound, and a line stays right after."""
    fmt = JsonFormat()
    entry = _entry(0)
    for n in range(_CACHE_SIZE + 10):
        entry.scope["path"] = f"/p/{n}"
        assert json.loads(fmt(entry))["path"] == f"/p/{n}"
        assert len(fmt._path.known) <= _CACHE_SIZE
