"""Work-estimate rules for non-Kubernetes APIs: the first rule whose match fits sets the seats.

A match may name HTTP methods, a path template (``/v2/{namespace}/reports/{name}``; a
trailing ``/*`` matches anything below), exact header values and exact query values; what a
match leaves out matches anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from gateway.flowcontrol.digest import WorkEstimate


def compile_template(template: str) -> re.Pattern[str]:
    if template.endswith("/*"):
        body, tail = template[:-2], "(?:/.*)?"
    else:
        body, tail = template, ""
    parts = re.split(r"(\{[A-Za-z_][A-Za-z0-9_]*\})", body)
    regex = "".join(
        f"(?P<{p[1:-1]}>[^/]+)" if p.startswith("{") and p.endswith("}") else re.escape(p)
        for p in parts
    )
    return re.compile(f"^{regex}{tail}$")


@dataclass(frozen=True)
class RuleMatch:
    methods: tuple[str, ...] = ()
    path: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    query: tuple[tuple[str, str], ...] = ()

    @cached_property
    def _path_re(self) -> re.Pattern[str] | None:
        return compile_template(self.path) if self.path else None

    def matches(
        self, method: str, path: str, headers: Mapping[str, str], query: Mapping[str, str]
    ) -> bool:
        if self.methods and method.upper() not in self.methods:
            return False
        pattern = self._path_re
        if pattern is not None and pattern.match(path) is None:
            return False
        for name, value in self.headers:
            if headers.get(name.lower()) != value:
                return False
        return all(query.get(key) == value for key, value in self.query)


@dataclass(frozen=True)
class WorkRule:
    name: str
    match: RuleMatch
    work: WorkEstimate
    # Learn seats for this route from observed service time instead of using ``work``.
    adaptive: bool = False
    extra: dict[str, str] = field(default_factory=dict, compare=False)
