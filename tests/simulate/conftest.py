from __future__ import annotations

import pytest

from gateway.apfconfig.configset import ConfigSet
from gateway.apfconfig.loader import load_paths
from tests.simulate.helpers import TENANTS


@pytest.fixture(scope="session")
def tenants_config() -> ConfigSet:
    """Only the ``tenants`` objects (the controller adds the mandatory ones): with server limit
    100 the level's limit is ceil(100 * 95 / (95 + 5 catch-all + 0 exempt)) = 95, fixed."""
    return load_paths([TENANTS])
