"""When a watch counts as initialized (``gateway.asgi.watchinit``), from its query and stream."""

from __future__ import annotations

import pytest

from gateway.asgi.requestinfo import RequestInfoParser
from gateway.asgi.watchinit import (
    AT_FIRST_CHUNK,
    AT_HEADERS,
    AT_MARKER,
    INITIAL_EVENTS_END,
    MarkerScanner,
    initialized_at,
)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (b"watch=1", AT_FIRST_CHUNK),  # no resourceVersion: initial events, no marker
        (b"watch=1&resourceVersion=0", AT_FIRST_CHUNK),
        (b"watch=1&resourceVersion=", AT_FIRST_CHUNK),
        (b"watch=1&resourceVersion=42", AT_HEADERS),  # an informer's re-watch
        (b"watch=1&resourceVersion=42&sendInitialEvents=false", AT_HEADERS),
        (b"watch=1&sendInitialEvents=FALSE", AT_HEADERS),
        (b"watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan", AT_MARKER),
        (b"watch=1&sendInitialEvents&resourceVersionMatch=NotOlderThan", AT_MARKER),
        (b"watch=1&sendInitialEvents=1&resourceVersion=42", AT_MARKER),
    ],
)
def test_where_a_watch_is_initialized(query: bytes, expected: int) -> None:
    info, _ = RequestInfoParser().parse("GET", "/api/v1/namespaces/ns/pods", query)
    assert info.verb == "watch"
    assert initialized_at(info) == expected


def test_marker_found_in_one_chunk_and_across_chunk_boundaries() -> None:
    bookmark = (
        b'{"type":"BOOKMARK","object":{"metadata":'
        b'{"annotations":{"k8s.io/initial-events-end":"true"}}}}\n'
    )
    assert MarkerScanner().feed(bookmark)
    start = bookmark.index(INITIAL_EVENTS_END)
    for cut in range(start + 1, start + len(INITIAL_EVENTS_END)):
        scanner = MarkerScanner()
        assert not scanner.feed(b'{"type":"ADDED"}\n')
        assert not scanner.feed(bookmark[:cut])
        assert scanner.feed(bookmark[cut:]), cut
    # One byte at a time.
    scanner = MarkerScanner()
    assert [scanner.feed(bookmark[i : i + 1]) for i in range(len(bookmark))].count(True) == 1


def test_events_without_the_marker_never_match() -> None:
    scanner = MarkerScanner()
    for _ in range(100):
        assert not scanner.feed(
            b'{"type":"ADDED","object":{"metadata":{"name":"k8s.io/initial"}}}\n'
        )
