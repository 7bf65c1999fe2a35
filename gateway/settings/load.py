"""Reading ``GatewayConfiguration`` documents: every error names file, document and field path.

The converter walks the frozen dataclasses in ``model.py`` by their type hints, so a new field
needs no parsing code; numbers that are durations also accept ``"500ms"``, ``"15s"``, ``"1m"``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from typing import Any

from gateway.networks import parse_cidrs
from gateway.settings.model import (
    API_VERSION,
    KIND,
    GatewaySettings,
    UpstreamSettings,
    UpstreamTLSSettings,
)

Document = tuple[str, int, dict[str, Any]]  # (source file, index from 1, content)
COMMAND_LINE = "command line"
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|s|m|h))+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
MAX_QUEUED_BODY_BYTES = 1 << 30
MAX_LIST_LEARNING_BYTES = 64 << 20


class SettingsError(ValueError):
    def __init__(self, errors: list[str]) -> None:
        super().__init__("invalid configuration:\n  " + "\n  ".join(errors))
        self.errors = errors


class CredentialFileError(ValueError):
    """A credential file the settings name (``authentication.tokenAuthFile``,
    ``openwhiskKeysFile``) could not be read; the message names the file and the line. Raised
    where the files are read (``asgi.credentials``); a reload refuses it as ``credentials``."""


def read_credential_file(path: str, what: str, limit: int) -> bytes:
    """A certificate, key or CA file's bytes (at most ``limit``: a bound on what a reload
    reads), or ``CredentialFileError`` naming the setting and the file."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise CredentialFileError(f"{what} {path}: cannot read: {exc.strerror or exc}") from exc
    if len(data) > limit:
        raise CredentialFileError(f"{what} {path}: larger than {limit} bytes")
    return data


def is_gateway_document(doc: dict[str, Any]) -> bool:
    return doc.get("kind") == KIND


def settings_from_document(source: str, index: int, doc: dict[str, Any]) -> GatewaySettings:
    """Raises ``SettingsError`` with every problem found, each prefixed ``file: document N:``."""
    errors: list[str] = []
    where = source if source == COMMAND_LINE else f"{source}: document {index}"
    if doc.get("apiVersion") != API_VERSION:
        errors.append(
            f"{where}: apiVersion: must be {API_VERSION!r}, got {doc.get('apiVersion')!r}"
        )
    body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata")}
    value = _convert(GatewaySettings, body, "", errors)
    if not errors:
        _validate(value, errors)
    if errors:
        raise SettingsError([e if e.startswith(where) else f"{where}: {e}" for e in errors])
    assert isinstance(value, GatewaySettings)
    return value


def yaml_key(f: dataclasses.Field[Any]) -> str:
    """The document key of a settings field."""
    return str(f.metadata.get("yaml") or _camel(f.name))


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _convert(tp: Any, value: Any, path: str, errors: list[str]) -> Any:
    origin = typing.get_origin(tp)
    label = path or "(document)"
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            errors.append(f"{label}: expected a mapping, got {type(value).__name__}")
            return None
        hints = typing.get_type_hints(tp)
        fields = {yaml_key(f): f for f in dataclasses.fields(tp)}
        for key in value:
            if key not in fields:
                errors.append(f"{_join(path, str(key))}: unknown field")
        kwargs = {}
        missing = False
        for key, f in fields.items():
            if key in value:
                kwargs[f.name] = _convert(hints[f.name], value[key], _join(path, key), errors)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                errors.append(f"{_join(path, key)}: required")
                missing = True
        if missing or any(v is None for v in kwargs.values()):
            return None
        return tp(**kwargs)
    if origin is tuple:
        (item,) = typing.get_args(tp)[:1]
        if isinstance(value, str) and item is str:
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            errors.append(f"{label}: expected a list, got {type(value).__name__}")
            return None
        items = [_convert(item, v, f"{path}[{i}]", errors) for i, v in enumerate(value)]
        return tuple(items) if all(i is not None for i in items) else None
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            errors.append(f"{label}: must be one of {', '.join(map(repr, choices))}, got {value!r}")
            return None
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        errors.append(f"{label}: expected true or false, got {value!r}")
        return None
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        errors.append(f"{label}: expected an integer, got {value!r}")
        return None
    if tp is float:
        seconds = parse_duration(value)
        if seconds is None or not math.isfinite(seconds):
            errors.append(f"{label}: expected seconds or a duration like '15s', got {value!r}")
            return None
        return seconds
    if tp is str:
        if isinstance(value, str):
            return value
        errors.append(f"{label}: expected a string, got {type(value).__name__}")
        return None
    raise TypeError(f"unsupported settings type {tp}")


def parse_duration(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        v = value.strip()
        try:
            return float(v)
        except ValueError:
            pass
        if _DURATION.match(v):
            return sum(float(n) * _UNIT[u] for n, u in _PART.findall(v))
    return None


def _validate(s: GatewaySettings, errors: list[str]) -> None:
    for name in ("max_requests_inflight", "max_mutating_requests_inflight"):
        if getattr(s, name) < 0:
            errors.append(f"{_camel(name)}: must not be negative")
    _host, sep, port = s.listen.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or not 0 <= int(port) <= 65535:
        errors.append(f"listen: expected HOST:PORT, got {s.listen!r}")
    for i, u in enumerate(s.upstreams):
        if not u.url.startswith(("http://", "https://")):
            errors.append(f"upstreams[{i}].url: must start with http:// or https://, got {u.url!r}")
        if not u.prefix.startswith("/"):
            errors.append(f"upstreams[{i}].prefix: must start with '/', got {u.prefix!r}")
        _validate_upstream_tls(f"upstreams[{i}]", u, errors)
    for i, t in enumerate(s.route_templates):
        if not t.path.startswith("/"):
            errors.append(f"routeTemplates[{i}].path: must start with '/', got {t.path!r}")
    for name in ("shutdown_grace_period", "config_poll_interval"):
        if getattr(s, name) < 0:
            errors.append(f"{_camel(name)}: must not be negative")
    # The request deadline: 0 would expire every request at once (and used to mean 60 s on
    # reload only); the queue-wait bound derived from it must be positive too.
    if s.request_timeout <= 0:
        errors.append("requestTimeout: must be positive")
    for name in ("max_config_bytes", "max_config_objects", "max_config_errors"):
        if getattr(s, name) < 1:
            errors.append(f"{_camel(name)}: must be at least 1")
    if s.borrowing_adjustment_period <= 0:
        errors.append("borrowingAdjustmentPeriod: must be positive")
    _validate_work_estimation(s, errors)
    p = s.proxy
    for name in ("connect_timeout", "read_timeout", "pool_timeout", "keepalive_expiry"):
        if getattr(p, name) < 0:
            errors.append(f"proxy.{_camel(name)}: must not be negative")
    ws = p.websocket
    if not 125 <= ws.max_message_bytes <= 64 * 1024 * 1024:
        errors.append("proxy.websocket.maxMessageBytes: must be between 125 and 67108864")
    if ws.idle_timeout <= 0:
        errors.append("proxy.websocket.idleTimeout: must be positive")
    if ws.ping_interval < 0:
        errors.append("proxy.websocket.pingInterval: must not be negative")
    _validate_client(s, errors)
    _validate_tls(s, errors)
    _validate_access_log(s, errors)
    try:
        parse_cidrs(s.authentication.request_header.allowed_cidrs)
    except ValueError as exc:
        errors.append(f"authentication.requestHeader.allowedCIDRs: {exc}")


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``override`` (command-line flags, in document shape) into ``base``."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def gateway_document(docs: list[Document], overrides: dict[str, Any] | None = None) -> Document:
    """The (at most one) GatewayConfiguration document with the flag overrides merged in;
    without one, the flags alone (source ``COMMAND_LINE``)."""
    overrides = overrides or {}
    header = {"apiVersion": API_VERSION, "kind": KIND}
    settings_from_document(COMMAND_LINE, 0, {**header, **overrides})
    mine = [d for d in docs if is_gateway_document(d[2])]
    if len(mine) > 1:
        first = f"{mine[0][0]}: document {mine[0][1]}"
        raise SettingsError(
            [f"{s}: document {i}: only one {KIND} document is allowed; the first is {first}"
             for s, i, _ in mine[1:]]
        )  # fmt: skip
    if not mine:
        return COMMAND_LINE, 0, {**header, **overrides}
    source, index, doc = mine[0]
    return source, index, merge(doc, overrides)


def build_settings(
    docs: list[Document], overrides: dict[str, Any] | None = None
) -> GatewaySettings:
    """Settings from the (at most one) GatewayConfiguration document plus flag overrides."""
    return settings_from_document(*gateway_document(docs, overrides))


def stated_keys(doc: dict[str, Any], prefix: str = "") -> frozenset[str]:
    """The dotted key paths a document states (``authentication.anonymous``), lists as leaves."""
    out: set[str] = set()
    for key, value in doc.items():
        path = _join(prefix, str(key))
        out.add(path)
        if isinstance(value, dict):
            out |= stated_keys(value, path)
    return frozenset(out)


def _validate_work_estimation(s: GatewaySettings, errors: list[str]) -> None:
    w = s.work_estimation
    for name in ("maximum_list_seats", "maximum_mutating_seats"):
        if getattr(w, name) < 1:
            errors.append(f"workEstimation.{_camel(name)}: must be at least 1")
    if w.list_learning_interval < 0:
        errors.append("workEstimation.listLearningInterval: must not be negative")
    if not 0 <= w.list_learning_max_bytes <= MAX_LIST_LEARNING_BYTES:
        errors.append(
            f"workEstimation.listLearningMaxBytes: must be between 0 and {MAX_LIST_LEARNING_BYTES}"
        )
    a = w.adaptive
    if a.seat_time <= 0:
        errors.append("workEstimation.adaptive.seatTime: must be positive")
    if a.maximum_seats < 1:
        errors.append("workEstimation.adaptive.maximumSeats: must be at least 1")
    if not 0 < a.smoothing <= 1:
        errors.append("workEstimation.adaptive.smoothing: must be in (0, 1]")
    for i, rule in enumerate(w.rules):
        path = f"workEstimation.rules[{i}]"
        if not rule.name:
            errors.append(f"{path}.name: required")
        if rule.path and not rule.path.startswith("/"):
            errors.append(f"{path}.path: must start with '/', got {rule.path!r}")
        if rule.initial_seats < 1:
            errors.append(f"{path}.initialSeats: must be at least 1")
        if rule.final_seats < 0:
            errors.append(f"{path}.finalSeats: must not be negative")
        if rule.additional_latency < 0:
            errors.append(f"{path}.additionalLatency: must not be negative")
        for key in ("headers", "query"):
            for j, item in enumerate(getattr(rule, key)):
                if "=" not in item or item.startswith("="):
                    errors.append(f"{path}.{key}[{j}]: expected NAME=VALUE, got {item!r}")


def _validate_client(s: GatewaySettings, errors: list[str]) -> None:
    c = s.client
    for name in ("header_timeout", "body_timeout", "send_timeout", "keep_alive_timeout"):
        if getattr(c, name) <= 0:
            errors.append(f"client.{_camel(name)}: must be positive")
    if not 1024 <= c.max_header_bytes <= 16 * 1024 * 1024:
        errors.append("client.maxHeaderBytes: must be between 1024 and 16777216")
    if c.max_connections < 1:
        errors.append("client.maxConnections: must be at least 1")
    h = c.http2
    if not 1 <= h.max_streams_per_connection <= 2**31 - 1:
        errors.append("client.http2.maxStreamsPerConnection: must be between 1 and 2147483647")
    if not 0 <= h.header_table_size <= 1 << 20:
        errors.append("client.http2.headerTableSize: must be between 0 and 1048576")
    if not 1024 <= h.initial_window_size <= 2**31 - 1:
        errors.append("client.http2.initialWindowSize: must be between 1024 and 2147483647")
    if h.max_reset_streams < 1:
        errors.append("client.http2.maxResetStreams: must be at least 1")
    if h.reset_window <= 0:
        errors.append("client.http2.resetWindow: must be positive")
    if h.max_control_frames < 1:
        errors.append("client.http2.maxControlFrames: must be at least 1")
    if not 0 <= c.max_queued_body_bytes <= MAX_QUEUED_BODY_BYTES:
        errors.append(f"client.maxQueuedBodyBytes: must be between 0 and {MAX_QUEUED_BODY_BYTES}")


def _validate_upstream_tls(path: str, u: UpstreamSettings, errors: list[str]) -> None:
    t = u.tls
    if t != UpstreamTLSSettings() and not u.url.startswith("https://"):
        errors.append(f"{path}.tls: only for https:// upstreams, got {u.url!r}")
    if bool(t.cert_file) != bool(t.key_file):
        errors.append(f"{path}.tls: certFile and keyFile go together")


def _validate_tls(s: GatewaySettings, errors: list[str]) -> None:
    t = s.tls
    if bool(t.cert_file) != bool(t.private_key_file):
        errors.append("tls: certFile and privateKeyFile go together")
    if t.sni_cert_keys and not t.cert_file:
        errors.append("tls.sniCertKeys: needs tls.certFile (the default certificate)")
    auth = s.authentication
    for path, ca in (
        ("authentication.clientCAFile", auth.client_ca_file),
        ("authentication.requestHeader.clientCAFile", auth.request_header.client_ca_file),
    ):
        if ca and not t.cert_file:
            errors.append(f"{path}: client certificates need the TLS listener (tls.certFile)")
    rh = auth.request_header
    if rh.allowed_names and not rh.client_ca_file:
        errors.append("authentication.requestHeader.allowedNames: needs clientCAFile")


# RFC 9110 section 5.6.2: a field name is a token.
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


def _validate_access_log(s: GatewaySettings, errors: list[str]) -> None:
    a = s.access_log
    if not a.path:
        errors.append('accessLog.path: must not be empty ("-" is standard output)')
    if not 1 <= a.queue_size <= 1_000_000:
        errors.append("accessLog.queueSize: must be between 1 and 1000000")
    if a.flush_timeout <= 0:
        errors.append("accessLog.flushTimeout: must be positive")
    if not _TOKEN.match(s.request_id_header):
        errors.append(f"requestIDHeader: must be an HTTP header name, got {s.request_id_header!r}")
