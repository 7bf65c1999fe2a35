"""``up``'s Prometheus targets: the manager's and the routers' ``/metrics`` in the file format
of Prometheus' ``file_sd_configs``, rewritten whenever a child serves on a new port.

The routers listen on ports picked at start (and again at each restart), so a static scrape
configuration cannot name them; Prometheus re-reads the file when it changes. The front door
is not listed: its ``/metrics`` needs the API key, so it has a job of its own
(docs/deploy.md, "Prometheus").
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

FILE_NAME = "prometheus-targets.json"


def targets(children: Iterable[tuple[str, str]]) -> list[dict[str, object]]:
    """One target group per child ``(name, url)`` serving now, labelled with its name."""
    groups: list[dict[str, object]] = []
    for name, url in sorted(children):
        if not url:
            continue  # restarting: not serving yet
        component = "router" if name.startswith("router-") else name
        groups.append(
            {
                "targets": [urlsplit(url).netloc],
                "labels": {"component": component, "instance_name": name},
            }
        )
    return groups


class TargetsFile:
    """Writes the targets when they change, atomically (Prometheus may read it any time)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._last: list[dict[str, object]] | None = None

    def update(self, children: Iterable[tuple[str, str]]) -> None:
        groups = targets(children)
        if groups == self._last:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(groups, indent=2) + "\n")
        os.replace(tmp, self.path)
        self._last = groups
