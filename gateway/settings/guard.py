"""What a reload may not do: weaken security settings by leaving their keys out.

At start a missing key means its default. On reload the same rule would let a truncated or
half-written file (an editor or ``kubectl cp`` writing in place) turn anonymous access back on
or drop the token file. So a reload that changes an authentication setting or
``debugAllowedGroups`` is refused unless the new document (or a flag) states that key; to go
back to a default, write the default value, or restart.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

from gateway.settings.load import COMMAND_LINE, yaml_key
from gateway.settings.model import KIND, GatewaySettings
from gateway.settings.sources import LoadedConfig

GUARDED = ("authentication", "debugAllowedGroups")


def unstated_changes(running: GatewaySettings, new: LoadedConfig) -> list[str]:
    """One error per guarded setting that ``new`` changes only because its key is missing."""
    out = []
    where = new.where if new.where != COMMAND_LINE else f"no {KIND} document"
    for path, before, after in _leaves(running, new.settings):
        if path.split(".")[0] in GUARDED and before != after and path not in new.stated:
            out.append(
                f"{where}: {path}: key missing; the running value {_show(before)} would "
                f"become the default {_show(after)}. A reload changes security settings only "
                "when the key is written (or restart)"
            )
    return out


def _leaves(a: Any, b: Any, prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    for f in dataclasses.fields(a):
        path = f"{prefix}.{yaml_key(f)}" if prefix else yaml_key(f)
        x, y = getattr(a, f.name), getattr(b, f.name)
        if dataclasses.is_dataclass(x):
            yield from _leaves(x, y, path)
        else:
            yield path, x, y


def _show(value: Any) -> str:
    return json.dumps(list(value) if isinstance(value, tuple) else value)
