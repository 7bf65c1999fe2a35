"""How kube-apiserver reads list options from a query (``Convert_url_Values_To_v1_ListOptions``).

Its conversions (``k8s.io/apimachinery/pkg/runtime/conversion.go``) take a parameter's first
value: a bool (``watch``, ``sendInitialEvents``) is false only for ``0`` or ``false`` in any case
(Go's ``strings.EqualFold``), so ``?watch`` and ``?watch=`` are true; an integer (``limit``,
``timeoutSeconds``) must parse as a base-10 int64 or the whole conversion fails. Shared by the
request-info parser (the front door) and the list work estimator (the engine), which charges a
request whose options do not decode the maximum seats.
"""

from __future__ import annotations

import re
from typing import Final

Query = tuple[tuple[str, str], ...]

_INT64: Final = re.compile(r"[+-]?[0-9]+")
_INT64_MAX: Final = 2**63 - 1
INTEGER_OPTIONS: Final = ("limit", "timeoutSeconds")


def first(query: Query, key: str) -> str | None:
    """The first value of ``key`` (Go's ``values[key][0]``); None when absent."""
    for k, v in query:
        if k == key:
            return v
    return None


def parse_bool(value: str) -> bool:
    """``Convert_Slice_string_To_bool`` on a present value (``casefold`` folds as ``EqualFold``
    does, so ``FALſE`` is false there too)."""
    return value != "0" and value.casefold() != "false"


def query_bool(query: Query, key: str) -> bool | None:
    """A ``*bool`` option: None when absent, else kube's reading of its first value."""
    value = first(query, key)
    return None if value is None else parse_bool(value)


def is_int64(value: str) -> bool:
    """``strconv.ParseInt(value, 10, 64)`` succeeds."""
    return bool(_INT64.fullmatch(value)) and -_INT64_MAX - 1 <= int(value) <= _INT64_MAX


def list_options_decode(query: Query) -> bool:
    """Whether the list options convert (only the integer options can fail)."""
    for key in INTEGER_OPTIONS:
        value = first(query, key)
        if value is not None and not is_int64(value):
            return False
    return True
