"""YAML values a Kubernetes object cannot hold (issue 21 item 8).

An object is JSON, as kubectl sends it; YAML can also build bytes (``!!binary``), timestamps
(``!!timestamp``; the loader's implicit resolver for them is off, an explicit tag still makes
one), sets (``!!set``) and keys that are not strings. Each is a field error naming its path,
for both loaders (FlowSchema/PLC and ``GatewayConfiguration`` documents), before anything
serializes the document.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from typing import Any

# YAML values JSON cannot hold (what kubectl would refuse to send): by the tag that made them.
_YAML_TAGS: tuple[tuple[type, str], ...] = (
    (bytes, "!!binary"),
    (datetime.datetime, "!!timestamp"),
    (datetime.date, "!!timestamp"),
    (set, "!!set"),
)


def not_json(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(field path, message) for every value and key of a YAML document that JSON cannot
    hold: an object is JSON (Kubernetes' objects are), so these are field errors, not crashes
    further on (``json.dumps`` of a ``!!binary`` value in a FlowSchema used to raise)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                shown = json.dumps(key) if isinstance(key, int | float | None) else "a key"
                yield path, f"Invalid value: {shown}: a key must be a string, not {_yaml_type(key)}"
                continue
            yield from not_json(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for n, item in enumerate(value):
            yield from not_json(item, f"{path}[{n}]")
    elif not isinstance(value, str | int | float | bool) and value is not None:
        yield path, f"Invalid value: a YAML {_yaml_type(value)} value, which JSON cannot hold"


def _yaml_type(value: Any) -> str:
    for cls, tag in _YAML_TAGS:
        if isinstance(value, cls):
            return tag
    return {bool: "bool", int: "int", float: "float"}.get(type(value), "null")


def kind_and_name(obj: dict[str, Any]) -> tuple[str, str]:
    """(kind, name) of a document, as far as they are strings, for its errors."""
    kind, meta = obj.get("kind"), obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return (kind if isinstance(kind, str) else "", name if isinstance(name, str) else "")
