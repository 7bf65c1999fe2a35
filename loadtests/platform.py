"""Platform scenarios: OpenWhisk invocations through ``apf-gateway up``.

``up`` runs its own front door with the bootstrap flow-control objects and offers no way to
pass a scenario's FlowSchemas, so the scenario's gateway is chained in front of it:
Locust -> scenario gateway (the scenario's levels, OpenWhisk keys) -> ``up``'s front door ->
routers -> action containers. Each tenant gets its own API key and namespace: they are added to
``up``'s key file (its front door reloads credential files on change) and the scenario gateway
reads the same file. Every tenant's action is created before the load starts.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import socket
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from loadtests import procs

DEFAULT_CODE = (
    "import time\n\n\ndef main(args):\n"
    "    time.sleep(float(args.get('sleep', 0.1)))\n"
    "    return {'tenant': args.get('tenant', '')}\n"
)


def free_port() -> int:
    """``up`` needs a concrete port (it waits for it); bind 0, read, release."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def add_keys(tenants: list[dict[str, Any]]) -> None:
    for t in tenants:
        if t["kind"] == "openwhisk":
            t["apiKey"] = f"{uuid.uuid4()}:{secrets.token_urlsafe(32)}"
            t.setdefault("namespace", "_")


def key_lines(tenants: list[dict[str, Any]], keep: str) -> str:
    lines = [keep.rstrip("\n")] if keep.strip() else []
    lines += [f"{t['apiKey']},{t['name']},{t['name']}" for t in tenants if t.get("apiKey")]
    return "\n".join(lines) + "\n"


def _call(url: str, key: str, method: str = "GET", body: Any = None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", "Basic " + base64.b64encode(key.encode()).decode())
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return 0


def start_up(out: Path, doc: dict[str, Any], tenants: list[dict[str, Any]]) -> procs.Proc:
    """Start ``apf-gateway up``, add the tenants' keys, create their actions."""
    spec = doc.get("platform") or {}
    port = free_port()
    state = out / "platform"
    argv = [
        sys.executable, "-m", "gateway.cli.main", "up", "--listen", f"127.0.0.1:{port}",
        "--state-dir", str(state), "--routers", str(spec.get("routers", 1)),
        "--prewarm", str(spec.get("prewarm", "python:3=1")),
    ]  # fmt: skip
    proc = procs.spawn("platform", argv, out / "platform.log")
    proc.port = port
    up = "apf-gateway is up"
    proc.wait_started(lambda text: True if up in text else None, 90, 0.2, grace=10)
    keys = state / "openwhisk-keys"
    tmp = keys.with_suffix(".tmp")
    tmp.write_text(key_lines(tenants, keys.read_text()))
    os.replace(tmp, keys)
    action = spec.get("action", "echo")
    code = spec.get("code", DEFAULT_CODE)
    limits = {"timeout": 30000, "memory": 128, "concurrency": int(spec.get("concurrency", 8))}
    for t in tenants:
        if not t.get("apiKey"):
            continue
        t["action"] = action
        api = f"{proc.url}/api/v1/namespaces/_/actions"
        deadline = time.monotonic() + 20  # the front door polls its key file
        while _call(api, t["apiKey"]) != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"up's front door never accepted {t['name']}'s key")
            time.sleep(0.3)
        body = {"exec": {"kind": "python:3", "code": code}, "limits": limits}
        status = _call(f"{api}/{action}?overwrite=true", t["apiKey"], "PUT", body)
        if status != 200:
            raise RuntimeError(f"creating {t['name']}'s action failed: HTTP {status}")
    return proc


def keys_file(out: Path) -> Path:
    return out / "platform" / "openwhisk-keys"
