"""Kubernetes field errors (``k8s.io/apimachinery/pkg/util/validation/field``) and name rules.

``FieldError`` renders exactly as the API server prints a ``field.Error``
(``spec.x: Invalid value: 70: detail``); strict decoding and validation both produce them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REQUIRED = "Required value"
INVALID = "Invalid value"
NOT_SUPPORTED = "Unsupported value"
FORBIDDEN = "Forbidden"
DUPLICATE = "Duplicate value"
UNKNOWN_FIELD = "unknown field"  # strict decoding, rendered as the API server does

_OMIT = object()


@dataclass(frozen=True, slots=True)
class FieldError:
    type: str
    field: str
    value: object = _OMIT
    detail: str = ""

    def body(self) -> str:
        if self.type == UNKNOWN_FIELD:
            return f'unknown field "{self.field}"'
        s = self.type
        if self.value is not _OMIT and self.type not in (REQUIRED, FORBIDDEN):
            s += ": " + go_value(self.value)
        if self.detail:
            s += ": " + self.detail
        return s

    def __str__(self) -> str:
        if self.type == UNKNOWN_FIELD:
            return self.body()
        return f"{self.field}: {self.body()}"


MAX_VALUE_TEXT = 1024  # a bad value is quoted up to this many characters


def go_value(value: object) -> str:
    """Render a bad value the way ``field.Error`` prints it (``%v``, ``%q`` or ``%#v``),
    cut at ``MAX_VALUE_TEXT`` characters so a huge value cannot flood the error output."""
    text = _go_value(value)
    if len(text) > MAX_VALUE_TEXT:
        return f"{text[:MAX_VALUE_TEXT]}... ({len(text) - MAX_VALUE_TEXT} more characters)"
    return text


def _go_value(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return "[]string{" + ", ".join(json.dumps(v, ensure_ascii=False) for v in value) + "}"
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def required(path: str, detail: str = "") -> FieldError:
    return FieldError(REQUIRED, path, detail=detail)


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(FORBIDDEN, path, detail=detail)


def invalid(path: str, value: object, detail: str) -> FieldError:
    return FieldError(INVALID, path, value, detail)


def not_supported(path: str, value: object, supported: Sequence[str]) -> FieldError:
    return FieldError(NOT_SUPPORTED, path, value, "supported values: " + _quoted(supported))


def _quoted(values: Sequence[str]) -> str:
    return ", ".join(json.dumps(v) for v in sorted(values))


# --- names (k8s.io/apimachinery/pkg/util/validation) ---------------------------------------------

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_RE = re.compile(_LABEL)
_SUBDOMAIN_RE = re.compile(_LABEL + r"(\." + _LABEL + r")*")
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _SUBDOMAIN_RE.fullmatch(value):
        errs.append(_SUBDOMAIN_MSG)
    return errs


def dns1123_label(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_RE.fullmatch(value):
        errs.append(_LABEL_MSG)
    return errs


def validate_metadata(meta: Mapping[str, Any]) -> list[FieldError]:
    """``ValidateObjectMeta`` for a cluster-scoped object with a DNS-subdomain name."""
    errs: list[FieldError] = []
    name = meta.get("name", "")
    if not name:
        errs.append(required("metadata.name", "name or generateName is required"))
    else:
        errs += [FieldError(INVALID, "metadata.name", name, m) for m in dns1123_subdomain(name)]
    if meta.get("namespace"):
        errs.append(FieldError(FORBIDDEN, "metadata.namespace", detail="not allowed on this type"))
    if meta.get("generation", 0) < 0:
        errs.append(
            FieldError(
                INVALID,
                "metadata.generation",
                meta["generation"],
                "must be greater than or equal to 0",
            )
        )
    return errs
