"""The JSON line against ``json.dumps``: the formatter builds it from tables, cached field
texts and pieces whose quotes belong to their neighbours (decision 0033), so every string
field is checked, for any text (quotes, backslashes, control characters, non-BMP characters,
lone surrogates), to come out exactly as ``json.dumps`` writes that value, in the documented
order, whichever of the line's shortcuts (first use or cached, empty query or not, no
distinguisher, not queued, no referer) the record takes."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.accesslog.fields import Entry, JsonFormat
from gateway.accesslog.redact import redact_query, redact_url
from gateway.apfconfig import bootstrap
from gateway.asgi.context import CONTEXT_KEY, RequestContext
from gateway.flowcontrol.controller import Classification
from gateway.flowcontrol.digest import RequestDigest, RequestInfo, UserInfo, WorkEstimate
from gateway.flowcontrol.level import PriorityLevel
from gateway.flowcontrol.stats import FlowStats
from gateway.testing import FakeEventClock
from tests.support.examples import examples

# any code point, surrogates included (a scope's strings may hold them: surrogateescape)
TEXT = st.text(st.characters(codec=None, categories=None), max_size=12)
# the values a field would repeat, so that the caches' hits are drawn too
SOME = st.one_of(TEXT, st.sampled_from(["", "GET", "a", '"', "\\", "\x00", "\U0001f600"]))
LATIN1 = st.binary(max_size=12)
SECONDS = st.one_of(st.floats(0, 5000, allow_nan=False), st.sampled_from([0.0, 0.9999996]))
# request IDs as request_id() lets them through: a client's visible ASCII (not generated),
# or 32 generated hex digits
RID = st.one_of(
    st.tuples(
        st.binary(min_size=1, max_size=40).map(lambda b: bytes(0x21 + x % 94 for x in b)),
        st.just(False),
    ),
    st.tuples(st.integers(0, 2**128 - 1).map(lambda n: b"%032x" % n), st.just(True)),
)


def _level() -> PriorityLevel:
    config = next(pl for pl in bootstrap.defaults().priority_levels if pl.name == "exempt")
    return PriorityLevel(config, FakeEventClock(), estimated_service=0.003)


LEVEL = _level()


@dataclass
class Record:
    started: float
    duration: float
    rid: tuple[bytes, bool]  # the ID, and whether it was generated
    client: str | None
    method: str
    path: str
    query: bytes
    status: int
    bytes_in: int
    bytes_out: int
    websocket: bool
    http_version: str
    agent: bytes | None
    referer: bytes | None
    context: tuple[str, float, float, str, str] | None  # user, upstream, wait, apf, reason
    classification: tuple[str, str, str, int] | None  # flow schema, level, dist, seats


RECORDS = st.builds(
    Record,
    started=st.floats(0, 4e9, allow_nan=False),
    duration=SECONDS,
    rid=RID,
    client=st.none() | SOME,
    method=SOME,
    path=SOME,
    query=st.one_of(st.just(b""), LATIN1, st.just(b"token=secret&x=1")),
    status=st.one_of(st.integers(0, 999), st.sampled_from([200, 429])),
    bytes_in=st.one_of(st.just(0), st.integers(0, 10**12)),
    bytes_out=st.one_of(st.integers(0, 1100), st.integers(0, 10**12)),  # the table and past it
    websocket=st.booleans(),
    http_version=st.one_of(st.sampled_from(["1.0", "1.1", "2"]), TEXT),
    agent=st.none() | LATIN1,
    referer=st.none() | LATIN1,
    context=st.none()
    | st.tuples(
        SOME,
        st.one_of(st.just(-1.0), SECONDS),
        st.one_of(st.just(0.0), SECONDS),
        st.one_of(st.sampled_from(["", "executed", "rejected"]), SOME),
        st.one_of(st.just(""), SOME),
    ),
    classification=st.none()
    | st.tuples(SOME, SOME, st.one_of(st.just(""), SOME), st.integers(0, 1000)),
)


def _entry(r: Record) -> Entry:
    headers = [(b"host", b"h")]
    if r.agent is not None:
        headers.append((b"user-agent", r.agent))
    if r.referer is not None:
        headers.append((b"referer", r.referer))
    scope: dict[str, Any] = {
        "type": "websocket" if r.websocket else "http", "http_version": r.http_version,
        "method": r.method, "path": r.path, "query_string": r.query, "headers": headers,
        "client": None if r.client is None else (r.client, 1234),
    }  # fmt: skip
    if r.context is not None:
        user, upstream, wait, apf, reason = r.context
        info = RequestInfo(is_resource_request=False, path="/", verb="get")
        context = RequestContext(RequestDigest(UserInfo(user), info))
        context.upstream_seconds = upstream
        context.queue_wait = wait
        context.apf = apf
        context.apf_reason = reason
        if r.classification is not None:
            fs, pl, dist, seats = r.classification
            context.classification = Classification(
                flow_schema=fs, fs_uid="", priority_level=pl, pl_uid="", exempt=False,
                distinguisher=dist, hash_value=0, level=LEVEL, flow_stats=FlowStats(),
            )  # fmt: skip
            context.work = WorkEstimate(initial_seats=seats)
        scope[CONTEXT_KEY] = context
    rid, generated = r.rid
    return Entry(
        r.started, r.duration, rid.decode("ascii"), scope, r.status, r.bytes_in, r.bytes_out,
        generated=generated,
    )  # fmt: skip


def _seconds(value: float) -> str:
    """Six decimals of rounded microseconds (the durations' own test checks the rounding)."""
    micros = max(0, int(value * 1_000_000.0 + 0.5))
    return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"


def _expected(r: Record) -> str:
    def s(value: str | None) -> str:
        return json.dumps(value, ensure_ascii=False)

    second = int(r.started)
    millis = int((r.started - second) * 1000.0)
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)) + f".{millis:03d}Z"
    query = redact_query(r.query.decode("latin-1")) if r.query else ""
    fields: list[tuple[str, str]] = [
        ("time", s(when)), ("requestID", s(r.rid[0].decode("ascii"))), ("client", s(r.client)),
        ("user", s(r.context[0] if r.context else None)), ("method", s(r.method)),
        ("path", s(r.path)), ("query", s(query)), ("status", str(r.status)),
        ("bytesIn", str(r.bytes_in)), ("bytesOut", str(r.bytes_out)),
        ("durationSeconds", _seconds(r.duration)),
    ]  # fmt: skip
    c, k = r.context, r.classification
    fields += [
        ("upstreamSeconds", "null" if c is None or c[1] < 0 else _seconds(c[1])),
        ("flowSchema", s(k[0] if c and k else None)),
        ("priorityLevel", s(k[1] if c and k else None)),
        ("flowDistinguisher", s(k[2] if c and k and k[2] else None)),
        ("seats", str(k[3]) if c and k else "null"),
        ("queueWaitSeconds", _seconds(c[2]) if c and c[3] else "0.000000"),
        ("apf", s(c[3] if c and c[3] else None)),
        ("apfReason", s(c[4] if c and c[3] and c[4] else None)),
        ("protocol", s("websocket" if r.websocket else _protocol(r.http_version))),
        ("userAgent", s(None if r.agent is None else r.agent.decode("latin-1"))),
        ("referer", s(None if r.referer is None else redact_url(r.referer.decode("latin-1")))),
    ]  # fmt: skip
    return "{" + ",".join(f"{json.dumps(name)}:{value}" for name, value in fields) + "}"


def _protocol(version: str) -> str:
    return {"1.1": "http/1.1", "2": "h2", "1.0": "http/1.0"}.get(version, "http/" + version)


@settings(max_examples=examples(400), deadline=None)
@given(records=st.lists(RECORDS, min_size=1, max_size=4))
def test_json_line_equals_json_dumps_of_each_field(records: list[Record]) -> None:
    fmt = JsonFormat()  # one formatter for several records, twice: cache misses and hits
    for r in records * 2:
        assert fmt(_entry(r)) == _expected(r)
