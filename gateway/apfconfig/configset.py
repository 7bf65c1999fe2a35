"""A validated set of FlowSchemas and PriorityLevelConfigurations, and the errors that stop one.

A ``ConfigSet`` is what the engine swaps in as a whole; it is only ever built from objects that
passed decoding, defaulting and validation together, so the engine never sees half a config.
``ConfigErrors`` carries every problem found in the input, each pointing at file, document,
object and Kubernetes-style field path. ``ConfigLimits`` bounds what reading may cost: a
configuration is text an attacker (or a half-finished ``kubectl cp``) may control.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gateway.flowcontrol.objects import FlowSchema, PriorityLevelConfiguration


@dataclass(frozen=True, slots=True)
class ConfigSet:
    flow_schemas: tuple[FlowSchema, ...] = ()
    priority_levels: tuple[PriorityLevelConfiguration, ...] = ()

    def flow_schema(self, name: str) -> FlowSchema | None:
        for fs in self.flow_schemas:
            if fs.name == name:
                return fs
        return None

    def priority_level(self, name: str) -> PriorityLevelConfiguration | None:
        for pl in self.priority_levels:
            if pl.name == name:
                return pl
        return None

    def __len__(self) -> int:
        return len(self.flow_schemas) + len(self.priority_levels)


@dataclass(frozen=True, slots=True)
class ConfigError:
    """One problem. ``document`` counts YAML documents from 1; ``item`` is the 1-based index
    inside a ``kind: List`` document; ``field`` is the Kubernetes field path inside the object."""

    file: str
    document: int | None
    kind: str
    name: str
    field: str
    message: str
    item: int | None = None
    # Why the input was refused, for the reload metric: "unreadable", "empty", "too_large",
    # "syntax"; "" for an object that decoded but failed validation ("invalid").
    code: str = ""

    def __str__(self) -> str:
        where = self.file
        if self.document is not None:
            where += f": document {self.document}"
            if self.item is not None:
                where += f" item {self.item}"
        if self.kind or self.name:
            obj = self.kind or "object"
            if self.name:
                obj += f' "{self.name}"'
            where += f" ({obj})"
        if self.field:
            return f"{where}: {self.field}: {self.message}"
        return f"{where}: {self.message}"


DEFAULT_MAX_BYTES = 2 << 20  # a full 1 MiB ConfigMap fits, aliases expanded and values counted
DEFAULT_MAX_OBJECTS = 1000
DEFAULT_MAX_ERRORS = 100
MAX_DEPTH = 100  # nesting levels; real objects use fewer than 15
VALUE_COST = 8  # bytes each YAML value counts besides its text


@dataclass(frozen=True, slots=True)
class ConfigLimits:
    """``max_bytes`` bounds the bytes read and the size of the documents with YAML aliases
    expanded, each value counted as its text plus ``VALUE_COST`` (so memory stays bounded even
    for ``[1,1,1,...]``); ``max_objects`` the documents plus list items; ``max_errors`` what is
    reported (the rest is only counted)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_objects: int = DEFAULT_MAX_OBJECTS
    max_errors: int = DEFAULT_MAX_ERRORS


class ConfigErrors(Exception):
    """Every error found in a configuration, up to a limit; ``str()`` lists them one per line
    and says how many more there were."""

    def __init__(
        self, errors: Iterable[ConfigError], *, limit: int | None = None, more: int = 0
    ) -> None:
        found = list(errors)
        keep = len(found) if limit is None else max(limit, 1)
        self.errors: list[ConfigError] = found[:keep]
        self.more = len(found) - len(self.errors) + more  # found but not kept
        super().__init__(str(self))

    @property
    def reason(self) -> str:
        """The first error's ``code`` ("invalid" when it failed validation)."""
        return next((e.code for e in self.errors if e.code), "invalid")

    def lines(self) -> list[str]:
        out = [str(e) for e in self.errors]
        if self.more:
            out.append(more_errors(self.more))
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def more_errors(n: int) -> str:
    return f"... and {n} more error{'s' if n != 1 else ''}"
