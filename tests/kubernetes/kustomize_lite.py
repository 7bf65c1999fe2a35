"""Render a Kustomize directory without kustomize (not installed here).

Supports what ``deploy/kubernetes`` uses, and refuses anything else: ``resources`` (files or
kustomization directories), ``namespace``, ``configMapGenerator`` with ``files`` (and
``generatorOptions.disableNameSuffixHash: true``, ``labels``), ``images``, ``replicas`` and
``replacements`` with ``[name=value]`` list selectors. Transformers run after generators in
the order images, replicas, replacements, as in kustomize.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
SUPPORTED = {
    "apiVersion",
    "kind",
    "resources",
    "namespace",
    "configMapGenerator",
    "generatorOptions",
    "images",
    "replicas",
    "replacements",
}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}


def load_yaml(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def render(directory: Path) -> list[Obj]:
    kust = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kust) - SUPPORTED
    assert not unknown, f"{directory}: kustomize features not supported here: {unknown}"
    objects: list[Obj] = []
    for res in kust.get("resources", []):
        path = (directory / res).resolve()
        objects += render(path) if path.is_dir() else load_yaml(path)
    options = kust.get("generatorOptions", {})
    for gen in kust.get("configMapGenerator", []):
        assert options.get("disableNameSuffixHash") is True, "hashed names break hot reload"
        data = {Path(f).name: (directory / f).read_text() for f in gen["files"]}
        meta: Obj = {"name": gen["name"]}
        if options.get("labels"):
            meta["labels"] = dict(options["labels"])
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    if "namespace" in kust:
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = kust["namespace"]
    for image in kust.get("images", []):
        _set_images(objects, image)
    for rep in kust.get("replicas", []):
        for obj in objects:
            if obj["kind"] == "Deployment" and obj["metadata"]["name"] == rep["name"]:
                obj["spec"]["replicas"] = rep["count"]
    for rep in kust.get("replacements", []):
        _replace(objects, rep)
    return objects


def _containers(obj: Obj) -> list[Obj]:
    spec = obj.get("spec", {}).get("template", {}).get("spec", {})
    return list(spec.get("containers", [])) + list(spec.get("initContainers", []))


def _set_images(objects: list[Obj], image: Obj) -> None:
    for obj in objects:
        for c in _containers(obj):
            name, _, tag = c["image"].rpartition(":")
            if "/" in tag or not name:
                name, tag = c["image"], ""
            if name != image["name"]:
                continue
            c["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"


_STEP = re.compile(r"^\[(?P<key>[^=]+)=(?P<value>.*)\]$")


def _walk(node: Any, path: str, create: bool = False) -> tuple[Any, str]:
    """The parent of the last element, and the last key."""
    steps = path.split(".")
    for step in steps[:-1]:
        m = _STEP.match(step)
        if m:
            node = next(i for i in node if str(i.get(m["key"])) == m["value"])
        else:
            node = node.setdefault(step, {}) if create else node[step]
    return node, steps[-1]


def _replace(objects: list[Obj], rep: Obj) -> None:
    src = rep["source"]
    (source,) = [
        o for o in objects if o["kind"] == src["kind"] and o["metadata"]["name"] == src["name"]
    ]
    parent, key = _walk(source, src["fieldPath"])
    value = copy.deepcopy(parent[key])
    for target in rep["targets"]:
        sel = target["select"]
        for obj in objects:
            if obj["kind"] == sel["kind"] and obj["metadata"]["name"] == sel["name"]:
                for field in target["fieldPaths"]:
                    parent, key = _walk(obj, field)
                    parent[key] = value
