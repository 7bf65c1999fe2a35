"""One canonical path for probes, classification and what the upstream receives (issue 14.3)."""

from __future__ import annotations

import json
from urllib.parse import unquote

import pytest

from gateway.asgi.canonical import BadPath, canonical_path, canonical_query, canonicalize
from tests.frontdoor.conftest import ServerThread, gateways, start_gateway
from tests.frontdoor.recording_upstream import RecordingUpstream, get, recorder

__all__ = ["gateways", "recorder"]

TRANSPORTS = ["h1", "aiohttp", "httpx", "httpx-aiohttp"]

ACCEPTED = [
    # raw path, decoded path, path sent upstream
    ("/", "/", "/"),
    ("/api/v1/pods", "/api/v1/pods", "/api/v1/pods"),
    ("/api/v1/pods/", "/api/v1/pods/", "/api/v1/pods/"),
    ("/.well-known/x", "/.well-known/x", "/.well-known/x"),
    ("/a/.b/c..", "/a/.b/c..", "/a/.b/c.."),
    ("/api/v1/namespaces/%64efault/pods", "/api/v1/namespaces/default/pods",
     "/api/v1/namespaces/default/pods"),
    ("/a%7eb%2D", "/a~b-", "/a~b-"),
    ("/a%3ab/%e2%82%ac", "/a:b/\u20ac", "/a%3Ab/%E2%82%AC"),
    ("/a:b;c=d@e", "/a:b;c=d@e", "/a:b;c=d@e"),
    ("/x/%25/y", "/x/%/y", "/x/%25/y"),
    ("/a%2Bb+c", "/a+b+c", "/a%2Bb+c"),
    ("/a\"b{c}", "/a\"b{c}", "/a%22b%7Bc%7D"),
]  # fmt: skip

REFUSED = [
    ("/healthz/../x", "'.' and '..'"),
    ("/api/v1/proxy/../../../x", "'.' and '..'"),
    ("/a/./b", "'.' and '..'"),
    ("/a/..", "'.' and '..'"),
    ("/a/.", "'.' and '..'"),
    ("/a/%2e%2e/b", "'.' and '..'"),
    ("/a/.%2E/b", "'.' and '..'"),
    ("/a/..;x/b", "'.' and '..'"),
    ("/a/.%2e%3bx/b", "'.' and '..'"),
    ("/a/.;/b", "'.' and '..'"),
    ("/a%2Fb", "%2F"),
    ("/a%2fb", "%2F"),
    ("/a%5Cb", "%5C"),
    ("/a\\b", "0x5C"),
    ("/a%00b", "%00"),
    ("/a%0d%0ab", "%0D"),
    ("/a%7Fb", "%7F"),
    ("/a\x01b", "0x01"),
    ("//api/v1/pods", "empty path segment"),
    ("/api/v1/namespaces//pods", "empty path segment"),
    ("/a%zz", "malformed"),
    ("/a%4", "malformed"),
    ("/a%ff", "not UTF-8"),
    ("*", "must start with '/'"),
    ("/x#frag", "fragment"),
]


@pytest.mark.parametrize(("raw", "decoded", "sent"), ACCEPTED)
def test_canonical_path(raw: str, decoded: str, sent: str) -> None:
    assert canonical_path(raw.encode("latin-1")) == (decoded, sent.encode("ascii"))


@pytest.mark.parametrize(("raw", "decoded", "sent"), ACCEPTED)
def test_a_target_seen_before_gives_the_same_scope(raw: str, decoded: str, sent: str) -> None:
    """The second sight of a target (a plain one is answered from the memo) agrees with the
    first."""
    scope = {"path": unquote(raw), "raw_path": raw.encode("latin-1"), "query_string": b"a=%20"}
    for _ in range(2):
        result = canonicalize(dict(scope))
        assert (result["path"], result["raw_path"]) == (decoded, sent.encode("ascii"))


def test_a_plain_target_keeps_its_scope() -> None:
    scope = {"path": "/api/v1/pods", "raw_path": b"/api/v1/pods", "query_string": b"limit=5"}
    assert canonicalize(scope) is scope
    assert canonicalize(scope) is scope  # seen before


@pytest.mark.parametrize(("raw", "reason"), REFUSED)
def test_refused_paths(raw: str, reason: str) -> None:
    with pytest.raises(BadPath, match=reason.replace(".", r"\.").replace("*", r"\*")):
        canonical_path(raw.encode("latin-1"))


def test_query_kept_except_bytes_a_query_may_not_carry() -> None:
    q = b"watch&fieldSelector=metadata.name%3D%3Dp&x=%2F..%2F&y=%zz"
    assert canonical_query(q) is q
    assert canonical_query(b'a="<b>"') == b"a=%22%3Cb%3E%22"
    with pytest.raises(BadPath, match="fragment"):
        canonical_query(b"a=b#c")


@pytest.fixture(params=TRANSPORTS)
def gateway(request: pytest.FixtureRequest, recorder: RecordingUpstream) -> ServerThread:
    proxy = {"transport": request.param}
    gw = start_gateway({"upstreams": [{"url": recorder.url}], "proxy": proxy})
    request.addfinalizer(gw.stop)
    return gw


# What the client sends -> what the upstream must receive, on every transport.
FORWARDED = [
    ("/api/v1/namespaces/%64efault/pods?watch&x=%2F..%2F",
     "/api/v1/namespaces/default/pods?watch&x=%2F..%2F"),
    ("/api/v1/namespaces/ns/pods/a%3ab?fieldSelector=a%3D%3Db",
     "/api/v1/namespaces/ns/pods/a%3Ab?fieldSelector=a%3D%3Db"),
    ("/x/%7e/%25/y;p=1/", "/x/~/%25/y;p=1/"),
    ("/a/.well-known/b..c", "/a/.well-known/b..c"),
]  # fmt: skip


def test_upstream_receives_exactly_the_canonical_path(
    gateway: ServerThread, recorder: RecordingUpstream
) -> None:
    for sent, expected in FORWARDED:
        status, body = get(gateway.port, sent)
        assert status == 200, body
        assert recorder.received[-1].target == expected


@pytest.mark.parametrize(
    "target",
    ["/healthz/../x", "/api/v1/proxy/../../../x", "/readyz/%2e%2e/x", "/a/%2E%2E/b",
     "/a%2Fb", "/a\\b", "/a%00b", "//x", "/api/v1/namespaces//pods", "/x/..;/y",
     "/x#y", "/x?a=b#c"],
)  # fmt: skip
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_ambiguous_paths_are_refused_before_anything_else(
    gateway: ServerThread, recorder: RecordingUpstream, target: str, method: str
) -> None:
    status, body = get(gateway.port, target, "content-length: 0", method=method)
    assert status == 400
    doc = json.loads(body)
    assert doc["kind"] == "Status" and doc["reason"] == "BadRequest"
    assert doc["message"].startswith("invalid request path: ")
    assert recorder.received == []  # nothing reached the upstream


def test_probes_answer_only_their_exact_path(
    gateway: ServerThread, recorder: RecordingUpstream
) -> None:
    assert get(gateway.port, "/healthz") == (200, b"ok")
    assert get(gateway.port, "/health%7a") == (200, b"ok")  # the same path, canonically
    assert recorder.received == []


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_stripped_prefix_is_cut_from_the_canonical_path(
    recorder: RecordingUpstream, gateways: list[ServerThread], transport: str
) -> None:
    gw = start_gateway({
        "upstreams": [{"url": recorder.url, "prefix": "/caf\u00e9/", "stripPrefix": True}],
        "proxy": {"transport": transport},
    })  # fmt: skip
    gateways.append(gw)
    assert get(gw.port, "/caf%C3%A9/a%3ab?q=1")[0] == 200
    assert get(gw.port, "/caf%c3%a9/")[0] == 200
    assert [r.target for r in recorder.received] == ["/a%3Ab?q=1", "/"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_query_bytes_httptools_lets_through_are_sent_alike(
    recorder: RecordingUpstream, gateways: list[ServerThread], transport: str
) -> None:
    # zttp refuses these targets itself; httptools passes them on.
    gw = start_gateway({
        "upstreams": [{"url": recorder.url}], "httpImplementation": "httptools",
        "proxy": {"transport": transport},
    })  # fmt: skip
    gateways.append(gw)
    assert get(gw.port, '/x?a="<>`{|}^\\&b=%2F')[0] == 200
    assert recorder.received[-1].target == "/x?a=%22%3C%3E%60%7B%7C%7D%5E%5C&b=%2F"


@pytest.mark.parametrize("transport", ["h1", "httpx"])
def test_prefixes_match_on_segment_boundaries_only(
    recorder: RecordingUpstream, gateways: list[ServerThread], transport: str
) -> None:
    # Issue 21 item 7: /publicadmin was classified as /publicadmin, stripped to /admin upstream.
    gw = start_gateway({
        "upstreams": [{"url": recorder.url, "prefix": "/public", "stripPrefix": True}],
        "proxy": {"transport": transport},
    })  # fmt: skip
    gateways.append(gw)
    status, body = get(gw.port, "/publicadmin")
    assert status == 404, body
    assert b"no upstream serves /publicadmin" in body
    assert get(gw.port, "/public/admin")[0] == 200
    assert get(gw.port, "/public")[0] == 200
    assert [r.target for r in recorder.received] == ["/admin", "/"]
