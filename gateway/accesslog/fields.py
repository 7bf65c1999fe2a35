"""One access log entry and its two line formats; run in the writer thread, never on the
event loop.

An entry is what the middleware had at hand when the response ended: the scope (read here,
after the request is over, so the event loop copies nothing) and the few numbers only it
knows. JSON field names follow the issue that asked for them and Kubernetes' httplog where it
has one (``apf_pl``, ``apf_fs``, ``apf_iseats``); ``combined`` is nginx's format.
"""

from __future__ import annotations

import time
from json.encoder import encode_basestring
from typing import Final

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


def _str(value: str | None) -> str:
    return "null" if value is None else encode_basestring(value)


def _seconds(value: float) -> str:
    """``value`` with 6 decimals, from integers (float formatting costs ~10x more)."""
    digits = str(int(value * 1_000_000.0 + 0.5))
    if len(digits) < 7:
        digits = "0000000"[len(digits) :] + digits
    return digits[:-6] + "." + digits[-6:]


class JsonFormat:
    """Built by joining pieces: an f-string with this many fields compiles (mypyc) to one
    ``str.format`` call per field, which cost more than the rest of the line."""

    def __init__(self) -> None:
        self._second = _SecondCache("%Y-%m-%dT%H:%M:%S")

    def __call__(self, e: Entry) -> str:
        scope = e.scope
        second = int(e.started)
        millis = str(int((e.started - second) * 1000.0))
        client = scope.get("client")
        context = request_context(scope)
        referer = _header(scope, b"referer")
        query: bytes = scope.get("query_string", b"")
        parts = [
            '{"time":"', self._second(second), ".", "000"[len(millis) :], millis,
            'Z","requestID":', encode_basestring(e.request_id.decode("ascii")),
            ',"client":', _str(client[0] if client else None),
        ]  # fmt: skip
        if context is None:
            parts.append(',"user":null')
        else:
            parts += (',"user":', encode_basestring(context.digest.user.name))
        parts += (
            ',"method":', encode_basestring(scope.get("method", "GET")),
            ',"path":', encode_basestring(scope["path"]),
            ',"query":', encode_basestring(redact_query(query.decode("latin-1"))) if query
            else '""',
            ',"status":', str(e.status),
            ',"bytesIn":', str(e.bytes_in),
            ',"bytesOut":', str(e.bytes_out),
            ',"durationSeconds":', _seconds(e.duration),
        )  # fmt: skip
        c = context.classification if context is not None else None
        if context is None or context.upstream_seconds < 0:
            parts.append(',"upstreamSeconds":null')
        else:
            parts += (',"upstreamSeconds":', _seconds(context.upstream_seconds))
        if context is None or c is None:
            parts.append(',"flowSchema":null,"priorityLevel":null,"flowDistinguisher":null'
                         ',"seats":null')  # fmt: skip
        else:
            parts += (
                ',"flowSchema":', encode_basestring(c.flow_schema),
                ',"priorityLevel":', encode_basestring(c.priority_level),
                ',"flowDistinguisher":', encode_basestring(c.distinguisher) if c.distinguisher
                else "null",
                ',"seats":', str(context.work.initial_seats),
            )  # fmt: skip
        if context is None or not context.apf:
            parts.append(',"queueWaitSeconds":0.000000,"apf":null,"apfReason":null')
        else:
            parts += (
                ',"queueWaitSeconds":', _seconds(context.queue_wait),
                ',"apf":"', context.apf,  # one of a few fixed words
                '","apfReason":', encode_basestring(context.apf_reason) if context.apf_reason
                else "null",
            )  # fmt: skip
        parts += (
            ',"protocol":"', protocol(scope),
            '","userAgent":', _str(_header(scope, b"user-agent")),
            ',"referer":', "null" if referer is None else encode_basestring(redact_url(referer)),
            "}",
        )  # fmt: skip
        return "".join(parts)


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
        return (
            f"{_quoted(client[0] if client else None)} - {_quoted(user)} "
            f'[{self._second(int(e.started))}] "{_quoted(request)}" {e.status} {e.bytes_out} '
            f'"{_quoted(None if referer is None else redact_url(referer))}" '
            f'"{_quoted(_header(scope, b"user-agent"))}"'
        )


def formatter(name: str) -> JsonFormat | CombinedFormat:
    if name == "combined":
        return CombinedFormat()
    if name == "json":
        return JsonFormat()
    raise ValueError(f"unknown access log format {name!r} (expected one of {FORMATS})")
