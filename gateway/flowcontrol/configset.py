"""A validated set of FlowSchemas and PriorityLevelConfigurations, and the errors that stop one.

A ``ConfigSet`` is what the engine swaps in as a whole; it is only ever built from objects that
passed decoding, defaulting and validation together, so the engine never sees half a config.
``ConfigErrors`` carries every problem found in the input, each pointing at file, document,
object and Kubernetes-style field path.
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


class ConfigErrors(Exception):
    """Every error found in a configuration; ``str()`` lists them one per line."""

    def __init__(self, errors: Iterable[ConfigError]) -> None:
        self.errors: list[ConfigError] = list(errors)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)
