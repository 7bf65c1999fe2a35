"""One canonical request path, fixed before anything reads the path.

Health routing, authentication, request info, flow-control classification, upstream routing and
the request line sent upstream all use the same path, so no later parser (ours, an HTTP client
library's, the upstream's) can read a different one. Percent-encoded unreserved characters are
decoded and other escapes upper-cased (RFC 3986 6.2.2); bytes a path may not carry are
percent-encoded. A path whose meaning depends on who resolves it is refused with 400 instead of
rewritten: dot segments (also encoded, also ``..;``), empty segments (``//``), an encoded ``/``,
a backslash, control characters, a raw ``#``, malformed escapes and escapes that are not UTF-8.
kube-apiserver does not resolve dot segments either: its filters see the path as sent, and Go's
``ServeMux`` redirects rather than serves an unclean path.

The query string is kept as sent, except that bytes RFC 3986 does not allow in a query are
percent-encoded (every transport then sends the same bytes; some would encode them anyway) and
a ``#`` is refused (HTTP parsers keep or drop a fragment differently).
"""

from __future__ import annotations

from typing import Final
from urllib.parse import quote, unquote

from gateway.asgi.refusal import RequestRefused
from gateway.http.types import Scope

_ALNUM: Final = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
UNRESERVED: Final = frozenset(_ALNUM + b"-._~")
# What a path may carry as it is: RFC 3986 pchar (without escapes) and "/".
_PATH_PLAIN: Final = bytes(sorted(UNRESERVED | frozenset(b"!$&'()*+,;=:@/")))
_PATH_PLAIN_SET: Final = frozenset(_PATH_PLAIN)
_QUERY_PLAIN: Final = bytes(sorted(_PATH_PLAIN_SET | frozenset(b"?%")))
# Never accepted in a path, raw or encoded: the segment structure or the bytes are in doubt.
_REFUSED: Final = frozenset(range(0x20)) | {0x7F, ord("\\")}
_HEX: Final = frozenset(b"0123456789abcdefABCDEF")
_DOT_SEGMENTS: Final = (b".", b"..")
# (raw path, query) pairs seen to be canonical already: most traffic repeats a few targets, and
# a look-up is a third of the check. Bounded: emptied when full.
_KNOWN: dict[tuple[bytes, bytes], None] = {}
_KNOWN_SIZE: Final = 4096


class BadPath(RequestRefused):
    """The request target is refused (HTTP 400); the message says why."""

    prefix = "invalid request path: "


def canonical_path(raw: bytes) -> tuple[str, bytes]:
    """(decoded path, path to send upstream) for a raw request path. Raises ``BadPath``."""
    plain = raw[:1] == b"/" and not raw.translate(None, _PATH_PLAIN)
    if plain and raw.find(b"//") < 0 and raw.find(b"/.") < 0:
        return raw.decode("ascii"), raw  # the common case: nothing to decode or check
    if raw[:1] != b"/":
        raise BadPath("the path must start with '/'")
    segments = raw[1:].split(b"/")
    last = len(segments) - 1
    out = []
    for i, segment in enumerate(segments):
        if not segment and i != last:
            raise BadPath("empty path segment ('//')")
        canon = _segment(segment)
        # "..;x" (also "..%3Bx") counts too: some servers drop ";" path parameters first.
        if canon.replace(b"%3B", b";").partition(b";")[0] in _DOT_SEGMENTS:
            raise BadPath("'.' and '..' path segments are not accepted")
        out.append(canon)
    canonical = b"/" + b"/".join(out)
    text = canonical.decode("ascii")
    if b"%" not in canonical:
        return text, canonical
    try:
        return unquote(text, errors="strict"), canonical
    except UnicodeDecodeError:
        raise BadPath("percent-encoded bytes that are not UTF-8") from None


def _segment(segment: bytes) -> bytes:
    out = bytearray()
    i, n = 0, len(segment)
    while i < n:
        byte = segment[i]
        if byte == 0x25:  # "%"
            escape = segment[i + 1 : i + 3]
            if len(escape) != 2 or escape[0] not in _HEX or escape[1] not in _HEX:
                raise BadPath("malformed percent-encoding")
            value = int(escape, 16)
            if value == 0x2F or value in _REFUSED:
                raise BadPath(f"encoded byte %{value:02X} is not accepted in a path")
            if value in UNRESERVED:
                out.append(value)
            else:
                out += b"%%%02X" % value
            i += 3
            continue
        if byte in _REFUSED:
            raise BadPath(f"byte 0x{byte:02X} is not accepted in a path")
        if byte == 0x23:  # some HTTP parsers keep a fragment in the path, others drop it
            raise BadPath("a fragment ('#') is not accepted in a request target")
        if byte in _PATH_PLAIN_SET:
            out.append(byte)
        else:
            out += b"%%%02X" % byte
        i += 1
    return bytes(out)


def canonical_query(query: bytes) -> bytes:
    """Raises ``BadPath`` for a fragment, which HTTP parsers treat differently."""
    if not query.translate(None, _QUERY_PLAIN):
        return query
    if b"#" in query:
        raise BadPath("a fragment ('#') is not accepted in a request target")
    return quote(query, safe=_QUERY_PLAIN.decode("ascii")).encode("ascii")


def canonicalize(scope: Scope) -> Scope:
    """``scope`` with canonical ``path``, ``raw_path`` and ``query_string`` (the same object
    when it already was). Raises ``BadPath``."""
    raw: bytes | None = scope.get("raw_path")
    query: bytes = scope["query_string"]
    if (raw, query) in _KNOWN:
        return scope
    sent = raw
    if raw is None:  # optional in ASGI: rebuild it from the decoded path
        raw = quote(scope["path"], safe=_PATH_PLAIN.decode("ascii")).encode("ascii")
    path, canonical = canonical_path(raw)
    fixed_query = canonical_query(query)
    if canonical is raw and fixed_query is query and path == scope["path"]:
        if sent is not None:
            if len(_KNOWN) >= _KNOWN_SIZE:
                _KNOWN.clear()
            _KNOWN[sent, query] = None
        return scope
    return {**scope, "path": path, "raw_path": canonical, "query_string": fixed_query}
