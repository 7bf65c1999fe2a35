"""Identifiers as OpenWhisk spells them."""

from __future__ import annotations

import re
import uuid

_ACTIVATION_ID = re.compile(r"^[0-9a-f]{32}$")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_@.\- ]{0,255}$")


def new_activation_id() -> str:
    """32 lowercase hex characters: a random UUID without dashes."""
    return uuid.uuid4().hex


def is_activation_id(value: str) -> bool:
    return bool(_ACTIVATION_ID.match(value))


def new_container_id() -> str:
    return "c-" + uuid.uuid4().hex[:12]


def is_entity_name(value: str) -> bool:
    """OpenWhisk entity names: letters, digits, ``_ @ . -`` and inner spaces, max 256."""
    return bool(_NAME.match(value)) and not value.endswith(" ")
