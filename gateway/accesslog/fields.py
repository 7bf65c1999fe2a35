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
from gateway.asgi.context import request_context
from gateway.http.types import Scope

FORMATS: Final = ("json", "combined")


class Entry:
    __slots__ = ("bytes_in", "bytes_out", "duration", "request_id", "scope", "started", "status")

    def __init__(
        self,
        started: float,  # when the request reached the front door: perf_counter on the loop,
        # turned into wall-clock time by the writer thread before formatting
        duration: float,  # seconds until the response was complete
        request_id: bytes,
        scope: Scope,
        status: int,
        bytes_in: int,
        bytes_out: int,
    ) -> None:
        self.started = started
        self.duration = duration
        self.request_id = request_id
        self.scope = scope
        self.status = status
        self.bytes_in = bytes_in
        self.bytes_out = bytes_out


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


# http_version -> the JSON string of the ``protocol`` field
_PROTOCOLS: Final = {"1.1": '"http/1.1"', "2": '"h2"', "1.0": '"http/1.0"'}
# ".000Z" to ".999Z": a timestamp's milliseconds without formatting a number per line
_MILLIS: Final = tuple(f'.{n:03d}Z","requestID":' for n in range(1000))
_CACHE_SIZE: Final = 4096


def _seconds(value: float) -> str:
    """``value`` with 6 decimals from integer arithmetic and ``str`` of ints (formatting a
    float costs several times more)."""
    micros = int(value * 1_000_000.0 + 0.5)
    if micros <= 0:
        return "0.000000"
    if micros < 1_000_000:
        return "0." + str(micros + 1_000_000)[1:]  # zero-padded to 6 digits
    return str(micros // 1_000_000) + "." + str(micros % 1_000_000 + 1_000_000)[1:]


class _Quoted:
    """Strings as JSON string literals, remembered for the values that repeat (users, flow
    schemas, levels, methods, user agents, clients): a dict hit costs a fraction of escaping
    the string anew. Bounded: emptied when full."""

    def __init__(self) -> None:
        self.known: dict[str, str] = {}

    def get(self, value: str) -> str:
        quoted = self.known.get(value)
        if quoted is None:
            quoted = encode_basestring(value)
            if len(self.known) >= _CACHE_SIZE:
                self.known.clear()
            self.known[value] = quoted
        return quoted


class JsonFormat:
    """One list of pieces in the documented field order, joined once: constants for the
    field names, ``encode_basestring`` (C) for strings that vary, a small cache for strings
    that repeat. Measured against a dict serialized by orjson and an f-string (mypyc makes it
    one ``str.format`` per field): decision 0033."""

    def __init__(self) -> None:
        self._second = _SecondCache("%Y-%m-%dT%H:%M:%S")
        self._quoted = _Quoted()

    def __call__(self, e: Entry) -> str:
        raw = e.scope
        scope: dict[str, Any] = raw if isinstance(raw, dict) else dict(raw)
        q = self._quoted
        second = int(e.started)
        millis = int((e.started - second) * 1000.0)
        client = scope.get("client")
        context = request_context(scope)
        agent, referer = _agent_and_referer(scope["headers"])
        query: bytes = scope.get("query_string", b"")
        if scope["type"] == "websocket":
            proto = '"websocket"'
        else:
            version: str = scope.get("http_version", "1.1")
            proto = _PROTOCOLS.get(version) or encode_basestring("http/" + version)
        if context is None:
            user = upstream = fs = pl = dist = seats = apf = reason = "null"
            wait = "0.000000"
        else:
            user = q.get(context.digest.user.name)
            upstream = (
                "null" if context.upstream_seconds < 0 else _seconds(context.upstream_seconds)
            )
            c = context.classification
            if c is None:
                fs = pl = dist = seats = "null"
            else:
                fs = q.get(c.flow_schema)
                pl = q.get(c.priority_level)
                dist = q.get(c.distinguisher) if c.distinguisher else "null"
                seats = str(context.work.initial_seats)
            if context.apf:
                wait = _seconds(context.queue_wait)
                apf = q.get(context.apf)
                reason = q.get(context.apf_reason) if context.apf_reason else "null"
            else:
                wait = "0.000000"
                apf = reason = "null"
        return "".join([
            '{"time":"', self._second.text_of(second), _MILLIS[millis if 0 <= millis < 1000 else 0],
            encode_basestring(e.request_id.decode("ascii")),
            ',"client":', q.get(client[0]) if client else "null",
            ',"user":', user,
            ',"method":', q.get(scope.get("method", "GET")),
            ',"path":', encode_basestring(scope["path"]),
            ',"query":', encode_basestring(redact_query(query.decode("latin-1"))) if query
            else '""',
            ',"status":', str(e.status),
            ',"bytesIn":', str(e.bytes_in),
            ',"bytesOut":', str(e.bytes_out),
            ',"durationSeconds":', _seconds(e.duration),
            ',"upstreamSeconds":', upstream,
            ',"flowSchema":', fs,
            ',"priorityLevel":', pl,
            ',"flowDistinguisher":', dist,
            ',"seats":', seats,
            ',"queueWaitSeconds":', wait,
            ',"apf":', apf,
            ',"apfReason":', reason,
            ',"protocol":', proto,
            ',"userAgent":', "null" if agent is None else q.get(agent.decode("latin-1")),
            ',"referer":', "null" if referer is None
            else encode_basestring(redact_url(referer.decode("latin-1"))),
            "}",
        ])  # fmt: skip


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


class CombinedFormat:
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


def formatter(name: str) -> JsonFormat | CombinedFormat:
    if name == "combined":
        return CombinedFormat()
    if name == "json":
        return JsonFormat()
    raise ValueError(f"unknown access log format {name!r} (expected one of {FORMATS})")
