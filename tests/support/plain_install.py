"""A plain install (no extras) built in a second, fast: a venv without pip whose site-packages
links only the distributions that ``[project.dependencies]`` brings (the declared ones and
what they require, with the extras they name), taken from the test venv. Anything else (the
``dev``, ``loadtest``, ``httpx``... extras) cannot be imported there, as on a user's machine
after ``pip install -e .`` or ``pip install .``.
"""

from __future__ import annotations

import shutil
import sys
import sysconfig
import tomllib
import venv
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def closure(requirements: Iterable[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions that ``requirements`` need, transitively (markers evaluated
    with the extras each requirement names)."""
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, str]] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        extras = sorted(req.extras) or [""]
        if all((name, e) in seen for e in extras):
            continue
        seen.update((name, e) for e in extras)
        dist = found.get(name) or metadata.distribution(req.name)
        found[name] = dist
        for text in dist.requires or []:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in extras):
                todo.append(sub)
    return found


def top_levels(dist: metadata.Distribution) -> set[str]:
    """What a distribution puts at the top of site-packages (packages, modules, .libs and
    .dist-info folders), from its RECORD."""
    return {
        f.parts[0]
        for f in dist.files or []
        if f.parts and f.parts[0] not in ("..", "__pycache__") and not f.parts[0].endswith(".pth")
    }


def import_names(dists: Iterable[metadata.Distribution]) -> set[str]:
    """The top-level import names of ``dists``."""
    names: set[str] = set()
    for dist in dists:
        for top in top_levels(dist):
            if top.endswith((".dist-info", ".libs", ".data")):
                continue
            names.add(top.split(".")[0])
    return names


def base_distributions() -> dict[str, metadata.Distribution]:
    return closure(PROJECT["dependencies"])


def make(where: Path, *, editable: bool) -> Path:
    """A venv at ``where`` holding only the declared dependencies and the gateway: linked to
    the checkout (editable: the checkout's ``loadtests/`` sits next to it) or copied without
    it (``pip install .``). Returns its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    python = where / "bin" / "python"
    purelib = sysconfig.get_path("purelib", vars={"base": str(where), "platbase": str(where)})
    site = Path(purelib)
    for dist in base_distributions().values():
        for top in top_levels(dist):
            link = site / top
            if not link.exists():
                link.symlink_to(Path(str(dist.locate_file(top))))
    if editable:
        (site / "gateway").symlink_to(ROOT / "gateway")
    else:
        shutil.copytree(
            ROOT / "gateway", site / "gateway", ignore=shutil.ignore_patterns("__pycache__", "*.so")
        )
    assert python.exists(), f"no python in {where} ({sys.version})"
    return python
