"""What kube-apiserver's request info reads from a query: ``watch`` and a name in ``fieldSelector``.

Follows ``requestinfo.go`` and what it calls: Go's ``url.ParseQuery`` (``&`` only; a pair with a
``;`` or a malformed escape is dropped), ``ListOptions`` decoding (a present ``watch`` is true
unless its first value is ``0`` or ``false`` in any case, so ``?watch`` and ``?watch=`` watch;
``limit`` and ``timeoutSeconds`` must be integers), ``fields.ParseSelector`` (terms split on
unescaped ``,`` and sorted; operators ``!=``, ``==``, ``=``; ``\\``-escapes in values) and
``RequiresExactMatch("metadata.name")``. A name is only used when it is a valid path segment
name (not ``.``/``..``, no ``/`` or ``%``). When decoding fails kube-apiserver keeps ``watch`` and
drops the name; so does this. Known gap: ``labelSelector`` syntax is not checked, so an invalid
label selector does not drop the name here.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote_plus

from gateway.flowcontrol.queryvalues import Query, first, list_options_decode, parse_bool

__all__ = ["Query", "SelectorError", "exact_match", "is_watch", "parse_query", "selected_name"]

_BAD_ESCAPE: Final = re.compile(r"%(?![0-9A-Fa-f]{2})")


class SelectorError(ValueError):
    pass


def parse_query(query_string: bytes, keep: frozenset[str]) -> Query:
    """The ``(key, value)`` pairs whose key is in ``keep``, in order, as Go decodes them."""
    if not query_string:
        return ()
    out = []
    for pair in query_string.decode("latin-1").split("&"):
        if not pair or ";" in pair:
            continue
        key, _, value = pair.partition("=")
        if "%" in pair:
            if _BAD_ESCAPE.search(pair):
                continue
            key = unquote_plus(key)
        elif "+" in key:
            key = key.replace("+", " ")
        if key in keep:
            out.append((key, unquote_plus(value) if "%" in value or "+" in value else value))
    return tuple(out)


def is_watch(query: Query) -> bool:
    value = first(query, "watch")
    return value is not None and parse_bool(value)


def selected_name(query: Query) -> str:
    """The name ``fieldSelector`` pins with ``metadata.name=`` (or ``==``), or ``""``; ``""`` too
    when the list options would not decode."""
    if not list_options_decode(query):
        return ""
    selector = first(query, "fieldSelector")
    if not selector:
        return ""
    try:
        name = exact_match(selector, "metadata.name")
    except SelectorError:
        return ""
    if name in (".", "..") or "/" in name or "%" in name:
        return ""
    return name


def exact_match(selector: str, field: str) -> str:
    """The value ``selector`` requires ``field`` to equal, or ``""``. Raises ``SelectorError``."""
    found = ""
    matched = False
    for term in sorted(_terms(selector)):
        if not term:
            continue
        lhs, op, rhs = _split_term(term)
        value = _unescape(rhs)
        if not matched and op != "!=" and lhs == field:
            found, matched = value, True
    return found


def _terms(selector: str) -> list[str]:
    if "\\" not in selector:
        return selector.split(",")
    terms = []
    start = 0
    escaped = False
    for i, c in enumerate(selector):
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == ",":
            terms.append(selector[start:i])
            start = i + 1
    terms.append(selector[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str]:
    """At the first place where one of ``!=``, ``==``, ``=`` starts (tried in that order)."""
    eq = term.find("=")
    if eq < 0:
        raise SelectorError(f"invalid selector term {term!r}")
    if eq > 0 and term[eq - 1] == "!":
        return term[: eq - 1], "!=", term[eq + 1 :]
    if term.startswith("==", eq):
        return term[:eq], "==", term[eq + 2 :]
    return term[:eq], "=", term[eq + 1 :]


def _unescape(value: str) -> str:
    if "\\" not in value and "," not in value and "=" not in value:
        return value
    out = []
    escaped = False
    for c in value:
        if escaped:
            if c not in "\\,=":
                raise SelectorError(f"invalid escape sequence \\{c}")
            out.append(c)
            escaped = False
        elif c == "\\":
            escaped = True
        elif c in ",=":
            raise SelectorError(f"unescaped {c!r} in a selector value")
        else:
            out.append(c)
    if escaped:
        raise SelectorError("invalid escape sequence \\")
    return "".join(out)
