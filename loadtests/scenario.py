"""Scenario files (``loadtests/scenarios/*.yaml``) and what a run generates from them.

A scenario names priority levels, tenants (each one flow: its own user, so flow distinguisher
``ByUser`` gives every tenant its own queue hand), a load shape, phases for the report, timed
events (config rewrite, rolling restart) and the targets the report checks. From it a run
writes a GatewayConfiguration, FlowSchemas and PriorityLevelConfigurations, and a token file
(kube-apiserver CSV) with one bearer token per tenant plus a privileged scraper.
"""

from __future__ import annotations

import copy
import csv
import io
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
SCRAPER = "lt-scraper"
KINDS = ("elephant", "mouse", "privileged", "writer", "wide", "openwhisk")


class ScenarioError(ValueError):
    """A scenario file is missing or malformed; the message says which field."""


def seconds(value: Any, what: str) -> float:
    """``30``, ``30s``, ``500ms`` or ``2m`` as seconds."""
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    for unit, factor in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
        if text.endswith(unit):
            try:
                return float(text[: -len(unit)]) * factor
            except ValueError:
                break
    try:
        return float(text)
    except ValueError:
        raise ScenarioError(f"{what}: not a duration: {value!r}") from None


def available() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def scenario_path(name: str) -> Path:
    p = Path(name)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    candidate = SCENARIO_DIR / f"{name}.yaml"
    if not candidate.exists():
        raise ScenarioError(f"no scenario {name!r}; available: {', '.join(available())}")
    return candidate


@dataclass
class Scenario:
    name: str
    doc: dict[str, Any]
    tenants: list[dict[str, Any]] = field(default_factory=list)

    @property
    def duration(self) -> float:
        return seconds(self.doc.get("duration", 30), "duration")

    @property
    def service_time(self) -> float:
        return seconds(self.doc.get("serviceTime", 0.1), "serviceTime")


def expand_tenants(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``count: N`` makes N tenants ``name-1 .. name-N``; defaults are filled in."""
    out: list[dict[str, Any]] = []
    for i, t in enumerate(raw):
        if "name" not in t or "kind" not in t:
            raise ScenarioError(f"tenants[{i}]: needs name and kind")
        if t["kind"] not in KINDS:
            raise ScenarioError(f"tenants[{i}].kind: {t['kind']!r} is not one of {KINDS}")
        count = int(t.get("count", 1))
        for n in range(1, count + 1):
            spec = {k: v for k, v in t.items() if k != "count"}
            if count > 1:
                spec["name"] = f"{t['name']}-{n}"
            spec.setdefault("users", 1)
            spec.setdefault("seats", 1)
            if spec["kind"] == "privileged":
                spec.setdefault("groups", ["system:masters"])
                spec.setdefault("level", "exempt")
            out.append(spec)
    names = [t["name"] for t in out]
    if len(set(names)) != len(names):
        raise ScenarioError("tenants: names must be unique")
    return out


def load(name: str, overrides: dict[str, Any] | None = None) -> Scenario:
    path = scenario_path(name)
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: {exc}") from exc
    if not isinstance(doc, dict):
        raise ScenarioError(f"{path}: expected a mapping")
    doc.update({k: v for k, v in (overrides or {}).items() if v is not None})
    tenants = expand_tenants(doc.get("tenants") or [])
    if not tenants:
        raise ScenarioError(f"{path}: no tenants")
    scale = float(doc.get("userScale", 1.0))
    if scale != 1.0:
        for t in tenants:
            t["users"] = max(1, round(int(t["users"]) * scale))
    return Scenario(path.stem, doc, tenants)


# --- generated configuration -------------------------------------------------------------


def level_object(level: dict[str, Any]) -> dict[str, Any]:
    name = level["name"]
    if level.get("type") == "Exempt":
        spec: dict[str, Any] = {"type": "Exempt", "exempt": {}}
    else:
        limited: dict[str, Any] = {
            "nominalConcurrencyShares": int(level.get("shares", 30)),
            "lendablePercent": int(level.get("lendablePercent", 0)),
        }
        if level.get("borrowingLimitPercent") is not None:
            limited["borrowingLimitPercent"] = int(level["borrowingLimitPercent"])
        if level.get("reject"):
            limited["limitResponse"] = {"type": "Reject"}
        else:
            limited["limitResponse"] = {
                "type": "Queue",
                "queuing": {
                    "queues": int(level.get("queues", 64)),
                    "handSize": int(level.get("handSize", 6)),
                    "queueLengthLimit": int(level.get("queueLengthLimit", 50)),
                },
            }
        spec = {"type": "Limited", "limited": limited}
    return {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name},
        "spec": spec,
    }


def schema_object(level: str, users: list[str], precedence: int) -> dict[str, Any]:
    return {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": f"lt-{level}"},
        "spec": {
            "priorityLevelConfiguration": {"name": level},
            "matchingPrecedence": precedence,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [{"kind": "User", "user": {"name": u}} for u in users],
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "namespaces": ["*"],
                            "clusterScope": True,
                        }
                    ],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }


def flow_documents(doc: dict[str, Any], tenants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    levels = doc.get("levels") or []
    objs = [level_object(lv) for lv in levels]
    known = {lv["name"] for lv in levels} | {"exempt", "catch-all"}
    by_level: dict[str, list[str]] = {}
    for t in tenants:
        lv = t.get("level")
        if not lv or (t["kind"] == "privileged" and lv == "exempt"):
            continue
        if lv not in known:
            raise ScenarioError(f"tenant {t['name']}: unknown level {lv!r}")
        by_level.setdefault(lv, []).append(t["name"])
    for i, (lv, users) in enumerate(sorted(by_level.items())):
        objs.append(schema_object(lv, users, 1000 + i))
    return objs


def gateway_document(
    doc: dict[str, Any], token_file: Path, openwhisk_keys: Path | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        # The scenario's levels alone (plus the mandatory ones): Kubernetes' suggested levels
        # would take most of the seats and lend them, which no scenario's numbers assume.
        "flowControlObjects": "exact",
        "tooManyRequestsBody": "status",
        "configPollInterval": "1s",
        "shutdownGracePeriod": "20s",
    }
    body.update(copy.deepcopy(doc.get("gateway") or {}))
    auth = body.setdefault("authentication", {})
    auth["tokenAuthFile"] = str(token_file)
    if openwhisk_keys is not None:
        auth["openwhiskKeysFile"] = str(openwhisk_keys)
    return {"apiVersion": "gateway.apf.dev/v1alpha1", "kind": "GatewayConfiguration", **body}


def token_csv(tenants: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for i, t in enumerate([*tenants, {"name": SCRAPER, "groups": ["system:masters"]}]):
        groups = ",".join(t.get("groups") or [])
        w.writerow([f"lt{i}-{secrets.token_hex(12)}", t["name"], f"uid-{i}", groups])
    return buf.getvalue()


def apply_changes(doc: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` with ``changes`` applied: ``levels: {name: {field: value}}`` edits a
    level, ``gateway: {...}`` merges into the GatewayConfiguration."""
    new = copy.deepcopy(doc)
    for name, fields in (changes.get("levels") or {}).items():
        for lv in new.get("levels") or []:
            if lv["name"] == name:
                lv.update(fields)
                break
        else:
            raise ScenarioError(f"events: no level {name!r} to change")
    if changes.get("gateway"):
        new.setdefault("gateway", {}).update(changes["gateway"])
    return new


def write_yaml(path: Path, docs: list[dict[str, Any]]) -> None:
    """Atomic (write + rename), so a polling reloader never reads half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    os.replace(tmp, path)


def write_config(
    config_dir: Path,
    doc: dict[str, Any],
    tenants: list[dict[str, Any]],
    token_file: Path,
    openwhisk_keys: Path | None = None,
) -> None:
    config_dir.mkdir(parents=True, exist_ok=True)
    write_yaml(config_dir / "gateway.yaml", [gateway_document(doc, token_file, openwhisk_keys)])
    write_yaml(config_dir / "flow.yaml", flow_documents(doc, tenants))
