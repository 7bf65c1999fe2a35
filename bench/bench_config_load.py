"""Cost of loading a configuration (``load_config``, what ``serve`` runs at start and, in a
worker thread, on reload): wall time and peak memory per input, each in a fresh process.

Run by hand: ``.venv/bin/python bench/bench_config_load.py``. The baseline, measured in the
same run, is a process that imports the loader and loads a one-line GatewayConfiguration.
Results: docs/performance.md, "Configuration loading".
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
GW = "apiVersion: gateway.apf.dev/v1alpha1\nkind: GatewayConfiguration\n"
CHILD = """
import json, sys, time
from gateway.settings.sources import ConfigLoadError, load_config

def peak_mb():  # this process's own high-water mark (ru_maxrss would include the parent's)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024

t = time.perf_counter()
try:
    load_config([sys.argv[1]])
    result = "loaded"
except ConfigLoadError as exc:
    result = f"refused ({exc.reason})"
print(json.dumps({"seconds": time.perf_counter() - t, "result": result,
                  "rss_mb": peak_mb()}))
"""


def flow_schemas(n: int, rules: int) -> str:
    rule = {
        "subjects": [{"kind": "Group", "group": {"name": "dev"}}],
        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                           "clusterScope": True, "namespaces": ["*"]}],
    }  # fmt: skip
    docs = [{"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
             "metadata": {"name": f"fs-{i}"},
             "spec": {"priorityLevelConfiguration": {"name": "global-default"},
                      "matchingPrecedence": 1000 + i,
                      "rules": [copy.deepcopy(rule) for _ in range(rules)]}}
            for i in range(n)]  # fmt: skip
    return yaml.safe_dump_all(docs)


def bomb(levels: int) -> str:
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return GW + "\n".join(lines) + "\n"


CASES: dict[str, Callable[[], str]] = {
    "baseline: one-line GatewayConfiguration": lambda: GW,
    "kubectl dump of a cluster's APF objects (fixture)": (
        ROOT / "tests/config/fixtures/kubectl-get-flowcontrol.yaml"
    ).read_text,
    "500 FlowSchemas x 5 rules (largest realistic)": lambda: flow_schemas(500, 5),
    "densest accepted: one list of 230k integers": lambda: (
        "apiVersion: v1\nkind: ConfigMap\ndata: [" + "1," * 230_000 + "1]\n"
    ),
    "alias bomb, 9 levels (9^9 values)": lambda: bomb(9),
    "46 MB file": lambda: "#" + "x" * (46 << 20) + "\n" + GW,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CASES}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):  # rounds interleave the cases, baseline included
            for name, make in CASES.items():
                f = Path(tmp) / "config.yaml"
                f.write_text(make())
                sizes[name] = f.stat().st_size
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, str(f)], capture_output=True, text=True,
                    check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT)},
                )  # fmt: skip
                runs[name].append(json.loads(out.stdout))
    base = statistics.median(r["rss_mb"] for r in runs[next(iter(CASES))])
    print(f"{rounds} rounds; median (min-max)")
    print("| input | bytes | result | seconds | peak MB above baseline |\n|---|---|---|---|---|")
    for name, rs in runs.items():
        secs = [r["seconds"] for r in rs]
        mbs = [r["rss_mb"] - base for r in rs]
        print(f"| {name} | {sizes[name]} | {rs[0]['result']} | "
              f"{statistics.median(secs):.3f} ({min(secs):.3f}-{max(secs):.3f}) | "
              f"{statistics.median(mbs):.1f} ({min(mbs):.1f}-{max(mbs):.1f}) |")  # fmt: skip


if __name__ == "__main__":
    main()
