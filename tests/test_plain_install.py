"""A plain install (no extras) runs every command (issue 20). Every import in ``gateway/``,
function-level ones included, is the standard library, the gateway or a declared dependency,
unless its module is one of those an extra is for; and in a venv holding only what
``[project.dependencies]`` brings (tests/support/plain_install.py), the parser builds, every
command's help prints, every module and everything the commands import loads, and ``loadtest``
says in one line what it needs."""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gateway.cli.loadtest import EXTRA_MODULES
from tests.support import plain_install
from tests.support.plain_install import PROJECT, ROOT, closure, import_names

# The modules an extra is for, and that extra: only they may import what it brings.
EXTRA_USERS = {
    "gateway.proxy.httpx_transport": "httpx",
    "gateway.manager.backends.kubernetes": "kubernetes",
    "gateway.manager.backends.k8s.api": "kubernetes",
    "gateway.manager.backends.k8s.lease": "kubernetes",
    "gateway.manager.backends.k8s.supervise": "kubernetes",
    "gateway.manager.backends.k8s.watch": "kubernetes",
    "gateway.store.postgres": "postgres",  # asyncpg at function level
    "gateway.asgi.jwtauth": "jwt",
    "gateway.asgi.jwtkeys": "jwt",
    "gateway.asgi.jws": "jwt",
}
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def absolute_imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every absolute import in ``path``, wherever it stands."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def third_party(tree: str) -> dict[str, list[tuple[str, int, str]]]:
    """module -> [(file, line, imported top-level name)] of the imports outside the standard
    library and this repository, in the ``*.py`` files under ``tree``."""
    found: dict[str, list[tuple[str, int, str]]] = {}
    for path in sorted((ROOT / tree).rglob("*.py")):
        for line, name in absolute_imports(path):
            top = name.split(".")[0]
            if top not in STDLIB and top not in ("gateway", "loadtests"):
                rel = str(path.relative_to(ROOT))
                found.setdefault(module_name(path), []).append((rel, line, top))
    return found


@functools.cache
def extra_names(extra: str) -> set[str]:
    """What the gateway and an extra bring, transitively."""
    extras = PROJECT["optional-dependencies"][extra]
    return import_names(closure([*PROJECT["dependencies"], *extras]).values())


def test_every_import_is_declared() -> None:
    declared = {n for r in PROJECT["dependencies"] for n in _own_names(r)}
    wrong = [
        f"{file}:{line}: {top}"
        for module, found in third_party("gateway").items()
        for file, line, top in found
        if top not in declared
        and (module not in EXTRA_USERS or top not in extra_names(EXTRA_USERS[module]))
    ]
    assert wrong == [], "imports outside [project.dependencies] (declare them, or the extra)"


def test_loadtests_imports_are_the_loadtest_extra() -> None:
    declared = {n for r in PROJECT["dependencies"] for n in _own_names(r)}
    extra = PROJECT["optional-dependencies"]["loadtest"]
    # EXTRA_MODULES names one import of each of the extra's distributions, and nothing else
    owners = [_own_names(r) & set(EXTRA_MODULES) for r in extra]
    assert all(owners) and set().union(*owners) == set(EXTRA_MODULES), owners
    allowed = declared | extra_names("loadtest")
    wrong = [
        f"{file}:{line}: {top}"
        for found in third_party("loadtests").values()
        for file, line, top in found
        if top not in allowed
    ]
    assert wrong == []
    # and what loadtests/ imports itself (not through locust) is named by the extra
    direct = {top for found in third_party("loadtests").values() for _, _, top in found}
    assert direct - declared - {"uvloop", "gevent"} <= set(EXTRA_MODULES)


@functools.cache
def _own_names(requirement: str) -> set[str]:
    """The import names of the one distribution ``requirement`` names."""
    name = canonicalize_name(Requirement(requirement).name)
    return import_names([closure([requirement])[name]])


CHECK = """
import argparse, importlib, json, pkgutil, sys
import gateway
from gateway.cli.main import build_parser

def parsers(parser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from parsers(sub)

helps = [p.prog for p in parsers(build_parser()) if p.format_help()]
failed = {}
for info in pkgutil.walk_packages(gateway.__path__, "gateway."):
    if not info.name.endswith(".__main__"):
        try:
            importlib.import_module(info.name)
        except ImportError as exc:
            failed[info.name] = repr(exc)
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError as exc:
        failed[name] = repr(exc)
print(json.dumps({"helps": helps, "failed": failed}))
"""


# One worker builds the plain venv once for all the module's checks (pytest-xdist).
pytestmark = pytest.mark.xdist_group("plain-install")


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install -e .`` without extras."""
    return plain_install.make(tmp_path_factory.mktemp("plain") / "venv", editable=True)


def run(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), *args], cwd=ROOT.parent, capture_output=True, text=True, timeout=120,
        check=False, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    )  # fmt: skip


def test_plain_install_builds_every_parser_and_imports_what_commands_load(plain: Path) -> None:
    needed = sorted(
        {
            name
            for module, path in ((module_name(p), p) for p in (ROOT / "gateway").rglob("*.py"))
            if module not in EXTRA_USERS
            for _, name in absolute_imports(path)
            if name.split(".")[0] not in STDLIB
        }
    )
    out = run(plain, "-c", CHECK, *needed)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    commands = {p.split()[1] for p in result["helps"] if len(p.split()) > 1}
    assert commands == {"serve", "up", "config", "simulate", "manager", "router", "loadtest"}
    assert set(result["failed"]) <= set(EXTRA_USERS), result["failed"]
    assert "gateway.manager.backends.k8s.api" in result["failed"]  # lightkube is really absent


def test_plain_install_runs_the_commands(plain: Path) -> None:
    out = run(plain, "-m", "gateway", "--help")
    assert out.returncode == 0 and "loadtest" in out.stdout, out.stderr
    out = run(plain, "-m", "gateway", "config", "validate", str(ROOT / "config/flowcontrol"))
    assert out.returncode == 0, out.stderr
    traffic = ROOT / "config/examples/traffic/elephant-and-mouse.yaml"
    out = run(plain, "-m", "gateway", "simulate", "--json", str(traffic))
    assert out.returncode == 0 and json.loads(out.stdout), out.stderr


def test_loadtest_without_its_extra_says_which_in_one_line(plain: Path) -> None:
    out = run(plain, "-m", "gateway", "loadtest", "equal-tenants")
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr == (
        "apf-gateway loadtest: needs the 'loadtest' extra (missing: locust, matplotlib, "
        "psutil): pip install -e '.[loadtest]'\n"
    )
    out = run(plain, "-m", "gateway", "loadtest", "--help")
    assert out.returncode == 0 and "--duration" in out.stdout, out.stderr


def test_non_editable_install_without_loadtests_says_so(tmp_path: Path) -> None:
    python = plain_install.make(tmp_path / "venv", editable=False)
    out = run(python, "-m", "gateway", "loadtest", "equal-tenants")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1
    assert out.stderr.startswith("apf-gateway loadtest: needs a source checkout"), out.stderr
    out = run(python, "-m", "gateway", "--help")
    assert out.returncode == 0, out.stderr
