"""One access log entry and its two line formats (a line without its newline); run in the
writer thread, never on the event loop.

An entry is what the middleware had at hand when the response ended: the scope (read here,
after the request is over, so the event loop copies nothing) and the few numbers only it
knows. JSON field names follow the issue that asked for them and Kubernetes' httplog where it
has one (``apf_pl``, ``apf_fs``, ``apf_iseats``); ``combined`` is nginx's format.
"""

from __future__ import annotations

import time
from json.encoder import encode_basestring
from typing import Any, Final

from gateway.accesslog.redact import redact_query, redact_url
from gateway.asgi.context import CONTEXT_KEY, RequestContext, request_context
from gateway.http.types import Scope

FORMATS: Final = ("json", "combined")


class Entry:
    __slots__ = (
        "bytes_in", "bytes_out", "duration", "generated", "request_id", "scope", "started",
        "status",
    )  # fmt: skip

    def __init__(
        self,
        started: float,  # when the request reached the front door: perf_counter on the loop,
        # turned into wall-clock time by the writer thread before formatting
        duration: float,  # seconds until the response was complete
        request_id: str,  # visible ASCII (requestid.is_safe) or generated
        scope: Scope,
        status: int,
        bytes_in: int,
        bytes_out: int,
        generated: bool = False,  # the ID is the gateway's hex: nothing to escape, no check
    ) -> None:
        self.started = started
        self.duration = duration
        self.request_id = request_id
        self.scope = scope
        self.status = status
        self.bytes_in = bytes_in
        self.bytes_out = bytes_out
        self.generated = generated


class _SecondCache:
    """A timestamp's text down to the second, formatted once per second."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.second = -1
        self.text = ""

    def text_of(self, second: int) -> str:
        if second != self.second:
            self.text = time.strftime(self.fmt, time.gmtime(second))
            self.second = second
        return self.text


def _header(scope: Scope, name: bytes) -> str | None:
    for n, v in scope["headers"]:
        if n == name:
            return str(v.decode("latin-1"))
    return None


def _agent_and_referer(headers: list[tuple[bytes, bytes]]) -> tuple[bytes | None, bytes | None]:
    """Both headers the JSON line has, in one pass over the request's headers."""
    agent: bytes | None = None
    referer: bytes | None = None
    for n, v in headers:
        if n == b"user-agent":
            if agent is None:
                agent = v
        elif n == b"referer" and referer is None:
            referer = v
    return agent, referer


# http_version -> the ``protocol`` field
_PROTOCOLS: Final = {
    "1.1": ',"protocol":"http/1.1"', "2": ',"protocol":"h2"', "1.0": ',"protocol":"http/1.0"',
}  # fmt: skip
_HTTP11: Final = ',"protocol":"http/1.1"'
_GET: Final = ',"method":"GET"'
# Numbers as text from tables, not formatted per line, each with the field name in front so
# the line has fewer pieces: "000" to "999"; a duration's head "<name>0.000" to "<name>0.999"
# (seconds and milliseconds; its microseconds come from _DIGITS3); statuses; small counts.
_DIGITS3: Final = tuple(f"{n:03d}" for n in range(1000))
_DURATIONS: Final = tuple(f',"durationSeconds":0.{n:03d}' for n in range(1000))
_UPSTREAMS: Final = tuple(f',"upstreamSeconds":0.{n:03d}' for n in range(1000))
_WAITS: Final = tuple(f',"queueWaitSeconds":0.{n:03d}' for n in range(1000))
_STATUSES: Final = tuple(f',"status":{n}' for n in range(600))
# the usual bodiless request: status, no bytes in, and the name of bytesOut, as one piece
_STATUSES_NO_BODY: Final = tuple(f',"status":{n},"bytesIn":0,"bytesOut":' for n in range(600))
# ... and with the empty query in front (no query string: most requests)
_PLAIN: Final = tuple(f',"query":""{text}' for text in _STATUSES_NO_BODY)
_SEATS: Final = tuple(f',"seats":{n}' for n in range(100))
# ... and with no distinguisher in front (most flow schemas have none)
_UNDISTINGUISHED: Final = tuple(f',"flowDistinguisher":null{text}' for text in _SEATS)
# the request ID's opening quote goes with the milliseconds, its closing one with the client
_MILLIS: Final = tuple(f'.{n:03d}Z","requestID":"' for n in range(1000))
# response sizes as text (small bodies: errors, short JSON) instead of ``str(int)`` per line
_SIZES: Final = tuple(str(n) for n in range(1024))
_CACHE_SIZE: Final = 4096
_NO_CONTEXT: Final = (
    ',"upstreamSeconds":null,"flowSchema":null,"priorityLevel":null'
    ',"flowDistinguisher":null,"seats":null,"queueWaitSeconds":0.000000,"apf":null'
    ',"apfReason":null'
)


def _micros(value: float) -> int:
    return max(0, int(value * 1_000_000.0 + 0.5))


def _head(heads: tuple[str, ...], name: str, micros: int) -> str:
    """A duration's field name and text up to its milliseconds (``_DIGITS3`` gives the rest)."""
    millis = micros // 1000
    if millis < 1000:
        return heads[millis]
    return name + str(millis // 1000) + "." + _DIGITS3[millis % 1000]


class _Field:
    """A field's ``,"name":value`` text, remembered for the values that repeat (clients,
    users, methods, paths, flow schemas, levels, user agents): a dict hit costs a fraction of
    escaping the value and adds one piece to the line, not two. Bounded: emptied when full.
    The last value is also kept: the same value as the last request's (a user's name, a
    client's address, the path of a client that polls) costs a string comparison (a pointer
    comparison for the same object), not hashing a new string and a dict look-up. ``last``
    starts as a real value with its text, so it is always a ``str`` (a native comparison,
    compiled) and never stale."""

    def __init__(self, name: str, prefix: str = ",", suffix: str = "") -> None:
        self.prefix = f'{prefix}"{name}":'
        self.suffix = suffix
        self.known: dict[str, str] = {}
        self.last = ""
        self.last_text = self.prefix + '""' + suffix

    def get(self, value: str) -> str:
        if value == self.last:
            return self.last_text
        text = self.known.get(value)
        if text is None:
            text = self.prefix + encode_basestring(value) + self.suffix
            if len(self.known) >= _CACHE_SIZE:
                self.known.clear()
            self.known[value] = text
        self.last = value
        self.last_text = text
        return text


class LineFormat:
    """An entry's line (without its newline). The writer calls ``__call__`` through this
    base: a native call in the compiled build, where a union of the two formats was a
    generic one."""

    def __call__(self, e: Entry) -> str:
        raise NotImplementedError


class JsonFormat(LineFormat):
    """One f-string of ~24 pieces in the documented field order (mypyc builds it in one C
    call, without a list; constant runs of the line are folded into tables and cached field
    texts, so it has few pieces; orjson's dict was slower here): decision 0033."""

    def __init__(self) -> None:
        self._second = _SecondCache('{"time":"%Y-%m-%dT%H:%M:%S')
        self._client = _Field("client", '",')  # closes the request ID's quotes
        self._user = _Field("user")
        self._method = _Field("method")
        self._path = _Field("path")
        self._fs = _Field("flowSchema")
        self._pl = _Field("priorityLevel")
        self._dist = _Field("flowDistinguisher")
        self._apf = _Field("apf")
        self._reason = _Field("apfReason")
        self._agent = _Field("userAgent")
        self._agent_end = _Field("userAgent", suffix=',"referer":null}')
        # apf's text after a zero queue wait and before ``"apfReason":null`` (a request that
        # was not queued: nearly every one), and a flow schema's with its level's
        self._apf_now = _Field("apf", ',"queueWaitSeconds":0.000000,', ',"apfReason":null')
        self._schemas: dict[str, tuple[str, str]] = {}
        self._last_schema: str | None = None
        self._last_level: str | None = None
        self._last_schema_text = ""

    def __call__(self, e: Entry) -> str:
        raw = e.scope
        scope: dict[str, Any] = raw if isinstance(raw, dict) else dict(raw)
        second = int(e.started)
        millis = int((e.started - second) * 1000.0)
        rid = e.request_id
        if not e.generated and not rid.isalnum():  # a client's ID may hold " or \
            rid = encode_basestring(rid)[1:-1]
        client = scope.get("client")
        # request_context's look-up, on the dict: a native get, not ``Mapping.get``'s method call
        found = scope.get(CONTEXT_KEY)
        context = found if isinstance(found, RequestContext) else None
        agent, referer = _agent_and_referer(scope["headers"])
        query: bytes = scope.get("query_string", b"")
        status = e.status
        duration = _micros(e.duration)
        kind: str = scope["type"]  # typed: a native comparison, not a generic one
        if kind == "websocket":
            proto = ',"protocol":"websocket"'
        else:
            version: str = scope.get("http_version", "1.1")
            if version == "1.1":
                proto = _HTTP11
            else:
                proto = _PROTOCOLS.get(version) or ',"protocol":' + encode_basestring(
                    "http/" + version
                )
        if e.bytes_in == 0 and 0 <= status < 600:
            counts = _STATUSES_NO_BODY[status] if query else _PLAIN[status]
        else:
            counts = (
                (_STATUSES[status] if 0 <= status < 600 else ',"status":' + str(status))
                + ',"bytesIn":' + str(e.bytes_in) + ',"bytesOut":'
            )  # fmt: skip
            if not query:
                counts = ',"query":""' + counts
        if context is None:
            user = ',"user":null'
            up_head = _NO_CONTEXT
            up_tail = fs = seats = apf = ""
        else:
            user = self._user.get(context.digest.user.name)
            if context.upstream_seconds < 0:
                up_head = ',"upstreamSeconds":null'
                up_tail = ""
            else:
                upstream = _micros(context.upstream_seconds)
                up_head = _head(_UPSTREAMS, ',"upstreamSeconds":', upstream)
                up_tail = _DIGITS3[upstream % 1000]
            c = context.classification
            if c is None:
                fs = ',"flowSchema":null,"priorityLevel":null,"flowDistinguisher":null'
                seats = ',"seats":null'
            else:
                fs = self._schema(c.flow_schema, c.priority_level)
                n = context.work.initial_seats
                if not c.distinguisher and 0 <= n < 100:
                    seats = _UNDISTINGUISHED[n]
                else:
                    seats = (
                        (self._dist.get(c.distinguisher) if c.distinguisher
                         else ',"flowDistinguisher":null')
                        + (_SEATS[n] if 0 <= n < 100 else ',"seats":' + str(n))
                    )  # fmt: skip
            if not context.apf:
                apf = ',"queueWaitSeconds":0.000000,"apf":null,"apfReason":null'
            elif context.queue_wait <= 0.0 and not context.apf_reason:  # not queued
                apf = self._apf_now.get(context.apf)
            else:
                wait = _micros(context.queue_wait)
                apf = (
                    _head(_WAITS, ',"queueWaitSeconds":', wait) + _DIGITS3[wait % 1000]
                    + self._apf.get(context.apf)
                    + (self._reason.get(context.apf_reason) if context.apf_reason
                       else ',"apfReason":null')
                )  # fmt: skip
        when = self._second.text_of(second)
        ms = _MILLIS[millis if 0 <= millis < 1000 else 0]
        host = self._client.get(client[0]) if client else '","client":null'
        verb: str = scope.get("method", "GET")
        method = _GET if verb == "GET" else self._method.get(verb)
        path = self._path.get(scope["path"])
        query_text = _query(query) if query else ""  # else in ``counts``
        dur_head = _head(_DURATIONS, ',"durationSeconds":', duration)
        dur_tail = _DIGITS3[duration % 1000]
        if referer is None:  # the last two fields and the closing brace as one piece
            end = (
                self._agent_end.get(agent.decode("latin-1")) if agent is not None
                else ',"userAgent":null,"referer":null}'
            )  # fmt: skip
        else:
            end = (
                self._agent.get(agent.decode("latin-1")) if agent is not None
                else ',"userAgent":null'
            ) + _referer(referer)  # fmt: skip
        out = e.bytes_out
        size = _SIZES[out] if 0 <= out < 1024 else str(out)
        return (
            f"{when}{ms}{rid}{host}{user}{method}{path}{query_text}{counts}{size}"
            f"{dur_head}{dur_tail}{up_head}{up_tail}{fs}{seats}{apf}{proto}{end}"
        )

    def _schema(self, flow_schema: str, level: str) -> str:
        """The flow schema's and its priority level's text: one look-up, as a flow schema
        names one level (the level is compared, for the moment a configuration changes)."""
        if flow_schema is self._last_schema and level is self._last_level:
            return self._last_schema_text
        self._last_schema = flow_schema
        self._last_level = level
        text = self._last_schema_text = self._schema_text(flow_schema, level)
        return text

    def _schema_text(self, flow_schema: str, level: str) -> str:
        known = self._schemas.get(flow_schema)
        if known is not None and known[0] == level:
            return known[1]
        text = self._fs.get(flow_schema) + self._pl.get(level)
        if len(self._schemas) >= _CACHE_SIZE:
            self._schemas.clear()
        self._schemas[flow_schema] = (level, text)
        return text


def _query(query: bytes) -> str:
    return ',"query":' + encode_basestring(redact_query(query.decode("latin-1")))


def _referer(referer: bytes) -> str:
    return ',"referer":' + encode_basestring(redact_url(referer.decode("latin-1"))) + "}"


def _quoted(value: str | None) -> str:
    """nginx's default log escaping: ``"``, ``\\`` and bytes outside 0x20-0x7E as ``\\xHH``."""
    if value is None or value == "":
        return "-"
    if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return value
    out = []
    for byte in value.encode("utf-8", "surrogateescape"):
        if byte < 0x20 or byte > 0x7E or byte in (0x22, 0x5C):
            out.append(f"\\x{byte:02X}")
        else:
            out.append(chr(byte))
    return "".join(out)


class CombinedFormat(LineFormat):
    """``$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent
    "$http_referer" "$http_user_agent"`` (nginx's ``combined``), time in UTC."""

    def __init__(self) -> None:
        self._second = _SecondCache("%d/%b/%Y:%H:%M:%S +0000")

    def __call__(self, e: Entry) -> str:
        scope = e.scope
        client = scope.get("client")
        context = request_context(scope)
        user = context.digest.user.name if context is not None else None
        raw = scope.get("raw_path") or scope["path"].encode("utf-8")
        target = raw.decode("latin-1")
        query = scope.get("query_string", b"")
        if query:
            target += "?" + redact_query(query.decode("latin-1"))
        if scope["type"] == "websocket":
            version = "HTTP/1.1"
        else:
            version = "HTTP/" + scope.get("http_version", "1.1")
        request = f"{scope.get('method', 'GET')} {target} {version}"
        referer = _header(scope, b"referer")
        when = self._second.text_of(int(e.started))
        return (
            f"{_quoted(client[0] if client else None)} - {_quoted(user)} "
            f'[{when}] "{_quoted(request)}" {e.status} {e.bytes_out} '
            f'"{_quoted(None if referer is None else redact_url(referer))}" '
            f'"{_quoted(_header(scope, b"user-agent"))}"'
        )


def formatter(name: str) -> LineFormat:
    if name == "combined":
        return CombinedFormat()
    if name == "json":
        return JsonFormat()
    raise ValueError(f"unknown access log format {name!r} (expected one of {FORMATS})")
