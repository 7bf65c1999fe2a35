"""One access log entry and its two line formats (each gives a line's bytes, without the
newline); run in the writer thread, never on the event loop.

An entry is what the middleware had at hand when the response ended: the scope (read here,
after the request is over, so the event loop copies nothing) and the few numbers only it
knows. JSON field names follow the issue that asked for them and Kubernetes' httplog where it
has one (``apf_pl``, ``apf_fs``, ``apf_iseats``); ``combined`` is nginx's format.
"""

from __future__ import annotations

import json
import time
from typing import Final

import orjson

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

    def __call__(self, second: int) -> str:
        if second != self.second:
            self.text = time.strftime(self.fmt, time.gmtime(second))
            self.second = second
        return self.text


def protocol(scope: Scope) -> str:
    if scope["type"] == "websocket":
        return "websocket"
    version = scope.get("http_version", "1.1")
    return "h2" if version == "2" else "http/" + version


def _header(scope: Scope, name: bytes) -> str | None:
    for n, v in scope["headers"]:
        if n == name:
            return str(v.decode("latin-1"))
    return None


def _agent_and_referer(scope: Scope) -> tuple[str | None, str | None]:
    """Both headers the JSON line has, in one pass over the request's headers."""
    agent: str | None = None
    referer: str | None = None
    for n, v in scope["headers"]:
        if n == b"user-agent":
            if agent is None:
                agent = str(v.decode("latin-1"))
        elif n == b"referer" and referer is None:
            referer = str(v.decode("latin-1"))
    return agent, referer


def _seconds(value: float) -> float:
    """``value`` to the microsecond (floats, so orjson writes them; 1e-6 s is what a line
    needs, and the shortest repr of the rounded value is short)."""
    return int(value * 1_000_000.0 + 0.5) / 1_000_000.0


# ".000Z" to ".999Z": a timestamp's milliseconds without formatting a number per line
_MILLIS: Final = tuple(f".{n:03d}Z" for n in range(1000))


class JsonFormat:
    """A dict in the documented field order, serialized by orjson (decision 0033): one C call
    escapes and joins every field, where joining escaped pieces in Python cost ~3x more."""

    def __init__(self) -> None:
        self._second = _SecondCache("%Y-%m-%dT%H:%M:%S")

    def __call__(self, e: Entry) -> bytes:
        scope = e.scope
        second = int(e.started)
        millis = int((e.started - second) * 1000.0)
        client = scope.get("client")
        context = request_context(scope)
        agent, referer = _agent_and_referer(scope)
        query: bytes = scope.get("query_string", b"")
        line: dict[str, object] = {
            "time": self._second(second) + _MILLIS[millis if 0 <= millis < 1000 else 0],
            "requestID": e.request_id.decode("ascii"),
            "client": client[0] if client else None,
            "user": None if context is None else context.digest.user.name,
            "method": scope.get("method", "GET"),
            "path": scope["path"],
            "query": redact_query(query.decode("latin-1")) if query else "",
            "status": e.status,
            "bytesIn": e.bytes_in,
            "bytesOut": e.bytes_out,
            "durationSeconds": _seconds(e.duration),
            "upstreamSeconds": None,
            "flowSchema": None,
            "priorityLevel": None,
            "flowDistinguisher": None,
            "seats": None,
            "queueWaitSeconds": 0.0,
            "apf": None,
            "apfReason": None,
            "protocol": protocol(scope),
            "userAgent": agent,
            "referer": None if referer is None else redact_url(referer),
        }
        if context is not None:
            if context.upstream_seconds >= 0:
                line["upstreamSeconds"] = _seconds(context.upstream_seconds)
            c = context.classification
            if c is not None:
                line["flowSchema"] = c.flow_schema
                line["priorityLevel"] = c.priority_level
                line["flowDistinguisher"] = c.distinguisher or None
                line["seats"] = context.work.initial_seats
            if context.apf:
                line["queueWaitSeconds"] = _seconds(context.queue_wait)
                line["apf"] = context.apf
                line["apfReason"] = context.apf_reason or None
        try:
            return orjson.dumps(line)
        except orjson.JSONEncodeError:  # a string orjson refuses (a lone surrogate)
            return json.dumps(line, ensure_ascii=False).encode("utf-8", "replace")


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

    def __call__(self, e: Entry) -> bytes:
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
        return (
            f"{_quoted(client[0] if client else None)} - {_quoted(user)} "
            f'[{self._second(int(e.started))}] "{_quoted(request)}" {e.status} {e.bytes_out} '
            f'"{_quoted(None if referer is None else redact_url(referer))}" '
            f'"{_quoted(_header(scope, b"user-agent"))}"'
        ).encode("utf-8", "replace")


def formatter(name: str) -> JsonFormat | CombinedFormat:
    if name == "combined":
        return CombinedFormat()
    if name == "json":
        return JsonFormat()
    raise ValueError(f"unknown access log format {name!r} (expected one of {FORMATS})")
