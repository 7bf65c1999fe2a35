"""The package boundaries of docs/architecture.md, checked on the source: every import of every
module under ``gateway/`` (module level, function level and ``TYPE_CHECKING`` alike), read
with ``ast`` so that nothing is imported and a lazy import cannot hide an edge. No cycles
between modules, nor between packages (``gateway/<package>/``, or a top-level module)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gateway"

ENGINE = "gateway.flowcontrol"
# What the engine may import from the gateway: itself and the clock (stdlib and third-party
# libraries are not restricted here). Everything else is a layer above it, or beside it.
ENGINE_MAY_IMPORT = (ENGINE, "gateway.clock")
# The platform tier shares the clock with the engine, never the engine itself.
NO_ENGINE = ("gateway.router", "gateway.manager", "gateway.store")


@dataclass(frozen=True, slots=True)
class Edge:
    source: str  # importing module
    path: str  # its file, relative to the repository
    line: int
    target: str  # imported gateway module

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.source} imports {self.target}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def known(name: str) -> str:
    """The longest prefix of ``name`` that is a module of the gateway ("" if none)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports(name: str) -> Iterator[Edge]:
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    rel = str(path.relative_to(ROOT))
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [known(a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            # ``from gateway.flowcontrol import debug`` imports the module ``debug``
            targets = [known(f"{base}.{a.name}") or known(base) for a in node.names]
        for target in dict.fromkeys(targets):  # once per statement and module
            if target and target != name:
                yield Edge(name, rel, node.lineno, target)


EDGES = [edge for name in MODULES for edge in imports(name)]


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def report(edges: list[Edge]) -> str:
    return "\n".join(["", *map(str, edges)])


def test_the_engine_imports_only_itself_and_the_clock() -> None:
    bad = [e for e in EDGES if within(e.source, (ENGINE,))]
    bad = [e for e in bad if not within(e.target, ENGINE_MAY_IMPORT)]
    if bad:
        pytest.fail("the engine may import only " + ", ".join(ENGINE_MAY_IMPORT) + report(bad))


def test_router_manager_and_store_import_no_engine_module() -> None:
    bad = [e for e in EDGES if within(e.source, NO_ENGINE) and within(e.target, (ENGINE,))]
    if bad:
        pytest.fail("the platform tier must not import the APF engine" + report(bad))


def cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root, targets in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(targets)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles() -> None:
    found = cycles(EDGES)
    lines = []
    for component in found:
        members = set(component)
        edges = [e for e in EDGES if e.source in members and e.target in members]
        lines.append(" <-> ".join(component) + report(edges))
    if found:
        pytest.fail(
            "import cycles (every import inside each; break one per cycle):\n" + "\n".join(lines)
        )


def package(module: str) -> str:
    """The gateway package a module belongs to: ``gateway.asgi.authn`` -> ``gateway.asgi``; a
    top-level module (``gateway.server``) is its own."""
    return ".".join(module.split(".")[:2])


# Package cycles that are needed, with the reason; each must still exist (a stale entry fails).
ALLOWED_PACKAGE_CYCLES: dict[frozenset[str], str] = {}


def package_cycles(edges: list[Edge]) -> list[list[str]]:
    """Cycles between packages: modules may import one another one way only, package by package
    (``asgi`` may use ``settings``, then nothing of ``settings`` may import ``asgi``)."""
    between = [e for e in edges if package(e.source) != package(e.target)]
    return cycles([Edge(package(e.source), e.path, e.line, package(e.target)) for e in between])


def test_no_import_cycles_between_packages() -> None:
    found = package_cycles(EDGES)
    lines = []
    for component in found:
        if frozenset(component) in ALLOWED_PACKAGE_CYCLES:
            continue
        members = set(component)
        edges = [
            e
            for e in EDGES
            if package(e.source) in members
            and package(e.target) in members
            and package(e.source) != package(e.target)
        ]
        lines.append(" <-> ".join(component) + report(edges))
    if lines:
        pytest.fail(
            "import cycles between packages (every import inside each; move what both need "
            "to a module neither imports, or let the consumer define a Protocol):\n"
            + "\n".join(lines)
        )
    stale = set(ALLOWED_PACKAGE_CYCLES) - {frozenset(c) for c in found}
    assert not stale, f"allowed package cycles that no longer exist: {stale}"


def test_a_package_cycle_is_found_where_modules_do_not_cycle() -> None:
    # asgi.authn -> settings.model and settings.load -> asgi.authn: no module cycle, yet the
    # two packages depend on each other (the parse_cidrs cycle, type-only import included)
    edges = [
        Edge("gateway.asgi.authn", "a.py", 1, "gateway.settings.model"),
        Edge("gateway.settings.load", "b.py", 1, "gateway.asgi.authn"),
        Edge("gateway.settings.load", "b.py", 2, "gateway.settings.model"),
    ]
    assert cycles(edges) == []
    assert package_cycles(edges) == [["gateway.asgi", "gateway.settings"]]


def test_the_cycle_finder_finds_a_cycle() -> None:
    # The check above passes on an acyclic tree; make sure it can fail at all.
    edges = [Edge("a", "a.py", 1, "b"), Edge("b", "b.py", 1, "c"), Edge("c", "c.py", 1, "a")]
    assert cycles([*edges, Edge("c", "c.py", 2, "d")]) == [["a", "b", "c"]]
    assert cycles(edges[:2]) == []


NOQA = re.compile(r"#\s*noqa:[^#\n]*\bPLC0415\b(?P<rest>[^\n]*)")


def test_every_function_level_import_says_why() -> None:
    """Ruff (PLC0415) refuses a function-level import unless marked; the mark must give a
    reason, and docs/architecture.md lists the reasons."""
    unexplained = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "loadtests").rglob("*.py")]):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            m = NOQA.search(line)
            if m and not re.match(r"\s*-\s*\S", m.group("rest")):
                unexplained.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    if unexplained:
        pytest.fail("write '# noqa: PLC0415 - <reason>'\n" + "\n".join(unexplained))
