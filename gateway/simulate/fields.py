"""Strict readers for the fields of a YAML mapping: every problem is recorded, none raised,
so one pass over a file reports all of its mistakes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from gateway.simulate.units import parse_duration

T = TypeVar("T")


class Fields:
    """Reads fields of one mapping, recording errors instead of raising."""

    def __init__(
        self, source: str, where: str, data: Mapping[str, Any], errors: list[str], note: str = ""
    ) -> None:
        self.source, self.where, self.data, self.errors, self.note = (
            source,
            where,
            data,
            errors,
            note,
        )

    def error(self, field: str, message: str) -> None:
        path = f"{self.where}.{field}" if self.where else field
        self.errors.append(f"{self.source}: {path}{self.note}: {message}")

    def get(self, field: str, convert: Callable[[Any], T], default: T) -> T:
        if field not in self.data or self.data[field] is None:
            return default
        try:
            return convert(self.data[field])
        except ValueError as exc:
            self.error(field, str(exc))
            return default

    def unknown(self, allowed: tuple[str, ...]) -> None:
        for key in self.data:
            if key not in allowed:
                self.error(str(key), f"unknown field (known: {', '.join(allowed)})")


def integer(minimum: int) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer; got {value!r}")
        if value < minimum:
            raise ValueError(f"must be at least {minimum}; got {value}")
        return value

    return convert


def text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string; got {value!r}")
    return value


def string_list(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(g, str) and g for g in value):
        raise ValueError(f"expected a list of names; got {value!r}")
    return tuple(value)


def positive_duration(value: Any) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError(f"must be a positive duration; got {value!r}")
    return seconds
