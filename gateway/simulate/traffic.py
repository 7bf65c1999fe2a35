"""The traffic file: who sends what, how often, for how long (see ``docs/simulate.md``).

Parsing is strict (unknown fields are errors, so a typo never silently means "default") and
collects every problem; each message names the file and the field path, e.g.
``traffic.yaml: clients[1].rate (client "mouse"): expected a rate like 2/s, 30/m, 5/10s``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from gateway.simulate.fields import Fields, integer, positive_duration, string_list, text
from gateway.simulate.units import parse_duration, parse_rate

DEFAULT_SEED = 1
DEFAULT_SERVER_CONCURRENCY_LIMIT = 400 + 200
# kube-apiserver waits at most a quarter of its 60 s request timeout in a queue.
DEFAULT_WAIT_LIMIT = 15.0

Arrival = Literal["poisson", "uniform"]
T = TypeVar("T")

# Kubernetes verbs and the HTTP method the front door would have seen for them.
VERB_METHODS = {
    "get": "GET",
    "list": "GET",
    "watch": "GET",
    "proxy": "GET",
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETE",
    "post": "POST",
    "put": "PUT",
    "head": "HEAD",
    "options": "OPTIONS",
}
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_VERB = re.compile(r"[a-z]+")

TOP_FIELDS = ("duration", "seed", "serverConcurrencyLimit", "waitLimit", "clients")
CLIENT_FIELDS = (
    "name",
    "user",
    "groups",
    "verb",
    "method",
    "path",
    "threads",
    "calls",
    "thinkTime",
    "rate",
    "arrival",
    "serviceTime",
    "seats",
    "finalSeats",
    "additionalLatency",
    "waitLimit",
    "start",
    "stop",
    "replicas",
)


@dataclass(frozen=True, slots=True)
class ClientSpec:
    """One client. Closed loop when ``threads`` > 0, else open loop at ``rate`` per second."""

    name: str
    user: str
    groups: tuple[str, ...]
    verb: str  # "" when only ``method`` was given: the path parser decides
    method: str
    path: str
    service_time: float
    threads: int = 0
    calls: int | None = None
    think_time: float = 0.0
    rate: float = 0.0
    arrival: Arrival = "poisson"
    seats: int = 1
    final_seats: int = 0
    additional_latency: float = 0.0
    wait_limit: float = DEFAULT_WAIT_LIMIT
    start: float = 0.0
    stop: float = math.inf
    replicas: int = 1

    @property
    def closed_loop(self) -> bool:
        return self.threads > 0


@dataclass(frozen=True, slots=True)
class Traffic:
    source: str
    duration: float
    clients: tuple[ClientSpec, ...]
    seed: int = DEFAULT_SEED
    server_concurrency_limit: int = DEFAULT_SERVER_CONCURRENCY_LIMIT
    wait_limit: float = DEFAULT_WAIT_LIMIT


class TrafficError(Exception):
    """Every problem found in a traffic file, one per line."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("\n".join(errors))


def _arrival(value: Any) -> Arrival:
    if value == "poisson":
        return "poisson"
    if value == "uniform":
        return "uniform"
    raise ValueError(f'expected "poisson" or "uniform"; got {value!r}')


def _verb(value: Any) -> str:
    if not isinstance(value, str) or not _VERB.fullmatch(value):
        raise ValueError(f"expected a lowercase verb such as list, get, create; got {value!r}")
    return value


def _method(value: Any) -> str:
    if not isinstance(value, str) or value.upper() not in HTTP_METHODS:
        raise ValueError(
            f"expected an HTTP method ({', '.join(sorted(HTTP_METHODS))}); got {value!r}"
        )
    return value.upper()


def _path(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError(f"expected a path starting with '/'; got {value!r}")
    return value


def parse_traffic(data: Any, source: str) -> Traffic:
    """Validate a decoded traffic document; raises ``TrafficError`` listing every problem."""
    errors: list[str] = []
    if not isinstance(data, dict):
        raise TrafficError([f"{source}: expected a mapping with duration and clients"])
    top = Fields(source, "", data, errors)
    top.unknown(TOP_FIELDS)
    if "duration" not in data:
        top.error("duration", "required (virtual time to simulate, e.g. 60s)")
    duration = top.get("duration", positive_duration, 60.0)
    seed = top.get("seed", integer(-(2**63)), DEFAULT_SEED)
    limit = top.get("serverConcurrencyLimit", integer(1), DEFAULT_SERVER_CONCURRENCY_LIMIT)
    wait_limit = top.get("waitLimit", positive_duration, DEFAULT_WAIT_LIMIT)
    raw_clients = data.get("clients")
    clients: list[ClientSpec] = []
    if not isinstance(raw_clients, list) or not raw_clients:
        top.error("clients", "required: a non-empty list of clients")
    else:
        seen: set[str] = set()
        for index, raw in enumerate(raw_clients):
            name = raw.get("name") if isinstance(raw, dict) else None
            if isinstance(name, str) and name in seen:
                errors.append(f'{source}: clients[{index}].name: duplicate name "{name}"')
            if isinstance(name, str):
                seen.add(name)
            client = _client(raw, index, source, duration, wait_limit, errors)
            if client is not None:
                clients.append(client)
    if errors:
        raise TrafficError(errors)
    return Traffic(source, duration, tuple(clients), seed, limit, wait_limit)


def _client(
    raw: Any, index: int, source: str, duration: float, wait_limit: float, errors: list[str]
) -> ClientSpec | None:
    where = f"clients[{index}]"
    if not isinstance(raw, dict):
        errors.append(f"{source}: {where}: expected a mapping with name, user, path ...")
        return None
    name = raw.get("name")
    note = f' (client "{name}")' if isinstance(name, str) and name else ""
    f = Fields(source, where, raw, errors, note)
    before = len(errors)
    f.unknown(CLIENT_FIELDS)
    for required in ("name", "user", "path", "serviceTime"):
        if raw.get(required) is None:
            f.error(required, "required")
    name = f.get("name", text, "")
    user = f.get("user", text, "")
    no_groups: tuple[str, ...] = ()
    groups = f.get("groups", string_list, no_groups)
    path = f.get("path", _path, "/")
    verb = f.get("verb", _verb, "")
    method = f.get("method", _method, "")
    if not verb and not method:
        f.error("verb", "required: a verb (list, get, create, ...) or an HTTP method")
    elif verb and not method:
        method = VERB_METHODS.get(verb, "GET")
    service_time = f.get("serviceTime", positive_duration, 1.0)
    threads = f.get("threads", integer(1), 0)
    rate_errors = len(errors)
    rate = f.get("rate", parse_rate, 0.0)
    if "rate" in raw and rate <= 0 and len(errors) == rate_errors:
        f.error("rate", "must be positive")
    if ("threads" in raw) == ("rate" in raw):
        f.error("threads", "give either threads (closed loop) or rate (open loop), not both")
    for closed_only in ("calls", "thinkTime"):
        if closed_only in raw and "rate" in raw:
            f.error(closed_only, "only for closed-loop clients (with threads)")
    if "arrival" in raw and "threads" in raw:
        f.error("arrival", "only for open-loop clients (with rate)")
    calls = f.get("calls", integer(1), None)
    think_time = f.get("thinkTime", parse_duration, 0.0)
    poisson: Arrival = "poisson"
    arrival = f.get("arrival", _arrival, poisson)
    seats = f.get("seats", integer(1), 1)
    final_seats = f.get("finalSeats", integer(0), 0)
    additional_latency = f.get("additionalLatency", parse_duration, 0.0)
    client_wait_limit = f.get("waitLimit", positive_duration, wait_limit)
    replicas = f.get("replicas", integer(1), 1)
    time_errors = len(errors)
    start = f.get("start", parse_duration, 0.0)
    stop = min(f.get("stop", parse_duration, duration), duration)
    if start >= stop and len(errors) == time_errors:
        f.error("start", f"must be before stop and the end of the run ({stop:g}s)")
    if len(errors) > before:
        return None
    return ClientSpec(
        name=name,
        user=user,
        groups=groups,
        verb=verb,
        method=method,
        path=path,
        service_time=service_time,
        threads=threads,
        calls=calls,
        think_time=think_time,
        rate=rate,
        arrival=arrival,
        seats=seats,
        final_seats=final_seats,
        additional_latency=additional_latency,
        wait_limit=client_wait_limit,
        start=start,
        stop=stop,
        replicas=replicas,
    )


def load_traffic(path: str | Path) -> Traffic:
    """Read and validate a traffic file; raises ``TrafficError`` (never a traceback's worth)."""
    source = str(path)
    try:
        content = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TrafficError([f"{source}: cannot read: {exc.strerror or exc}"]) from exc
    except UnicodeDecodeError as exc:
        raise TrafficError([f"{source}: not UTF-8 text: {exc.reason}"]) from exc
    try:
        data = yaml.safe_load(content)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise TrafficError([f"{source}: invalid YAML{where}: {problem}"]) from exc
    return parse_traffic(data, source)
