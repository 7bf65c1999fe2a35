from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.flowcontrol.configset import ConfigSet
from gateway.flowcontrol.loader import load_paths

HERE = Path(__file__).parent
TENANTS = HERE / "tenants.yaml"
STRICT = HERE / "strict.yaml"


@pytest.fixture(scope="session")
def tenants_config() -> ConfigSet:
    """Only the ``tenants`` objects (the controller adds the mandatory ones): with server limit
    100 the level's limit is ceil(100 * 95 / (95 + 5 catch-all + 0 exempt)) = 95, fixed."""
    return load_paths([TENANTS])


def write_traffic(tmp_path: Path, data: dict[str, Any], name: str = "traffic.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path
