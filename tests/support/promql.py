"""Just enough PromQL for the dashboard tests: the series an expression selects (metric name
and label matchers) and the labels it groups by, matched against scraped samples."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", *GROUPING}
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True)
class Selector:
    """``name{matchers}`` and the labels the expression around it groups by."""

    name: str
    matchers: tuple[tuple[str, str, str], ...] = ()  # (label, op, value)
    grouped_by: frozenset[str] = field(default_factory=frozenset)

    def labels(self) -> set[str]:
        """Labels a sample must carry for this selector (and its grouping) to make sense."""
        return set(self.grouped_by) | {label for label, op, _ in self.matchers if op in "=~"}

    def matches(self, name: str, labels: dict[str, str]) -> bool:
        if name != self.name or not self.labels() <= labels.keys():
            return False
        for label, op, value in self.matchers:
            if "$" in value:  # a dashboard variable: any value will do
                continue
            got = labels.get(label, "")
            hit = got == value if op in ("=", "!=") else re.fullmatch(value, got) is not None
            if hit != (op in ("=", "=~")):
                return False
        return True


def _skip(expr: str, i: int, close: str) -> int:
    """The index after ``close`` (strings inside skipped)."""
    while i < len(expr) and expr[i] != close:
        i = _string_end(expr, i) if expr[i] == '"' else i + 1
    return i + 1


def _string_end(expr: str, i: int) -> int:
    m = re.compile(r'"(?:[^"\\]|\\.)*"').match(expr, i)
    assert m, f"unterminated string at {i} in {expr!r}"
    return m.end()


def selectors(expr: str) -> list[Selector]:
    """Every series selector in ``expr``; each carries all labels of the expression's
    ``by (...)`` clauses (the dashboard's expressions group every selector the same way)."""
    found: list[tuple[str, tuple[tuple[str, str, str], ...]]] = []
    grouped: set[str] = set()
    i = 0
    while i < len(expr):
        c = expr[i]
        if c == '"':
            i = _string_end(expr, i)
        elif c == "[":
            i = _skip(expr, i, "]")
        elif c.isdigit() or c == ".":
            i = re.compile(r"[0-9.eE+]+[a-z]*").match(expr, i).end()  # type: ignore[union-attr]
        elif m := _IDENT.match(expr, i):
            word, i = m.group(), m.end()
            rest = expr[i:].lstrip()
            if word in GROUPING and rest.startswith("("):
                start = expr.index("(", i)
                end = _skip(expr, start, ")")
                if word == "by":
                    grouped |= {
                        x.strip() for x in expr[start + 1 : end - 1].split(",") if x.strip()
                    }
                i = end
            elif word in KEYWORDS or rest.startswith("(") or re.match(r"(by|without)\b", rest):
                continue  # a keyword, a function or an aggregation
            else:
                matchers: list[tuple[str, str, str]] = []
                if rest.startswith("{"):
                    start = expr.index("{", i)
                    end = _skip(expr, start, "}")
                    body, j = expr[start + 1 : end - 1], 0
                    while j < len(body):
                        mm = _MATCHER.match(body, j)
                        assert mm, f"cannot read the matchers {body!r} in {expr!r}"
                        matchers.append((mm.group(1), mm.group(2), mm.group(3)))
                        j = mm.end()
                    i = end
                found.append((word, tuple(matchers)))
        else:
            i += 1
    return [Selector(name, matchers, frozenset(grouped)) for name, matchers in found]


def dashboard_expressions(dashboard: dict[str, Any]) -> list[str]:
    """Every panel's PromQL, and the metric each ``label_values(metric, label)`` variable
    reads (as a bare selector)."""
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        query = var.get("query")
        if isinstance(query, dict):
            inner = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", query["query"])
            assert inner, query
            exprs.append(f"sum by ({inner.group(2)}) ({inner.group(1)})")
    return exprs


def dashboard_selectors(path: Path) -> list[Selector]:
    dashboard = json.loads(path.read_text())
    return [s for expr in dashboard_expressions(dashboard) for s in selectors(expr)]


Sample = tuple[str, dict[str, str], float]


def samples(text: str) -> list[Sample]:
    """Prometheus text as ``(name, labels, value)``."""
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def series_key(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
