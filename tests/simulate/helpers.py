"""Shared test data: configuration files and a traffic-file writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent
# A Queue level "tenants" (95 shares, no lending or borrowing) for every authenticated user, ByUser.
TENANTS = HERE / "tenants.yaml"
# A Reject level "strict" (10 shares, no lending or borrowing) for user "scraper".
STRICT = HERE / "strict.yaml"


def write_traffic(tmp_path: Path, data: dict[str, Any], name: str = "traffic.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path
