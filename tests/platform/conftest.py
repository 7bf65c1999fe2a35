"""Fixtures: a platform (manager + routers, cleaned up after) and the front door's client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from platform_support import IDENTITY, Platform


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    p = Platform(tmp_path)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
async def client(platform: Platform) -> AsyncIterator[httpx.AsyncClient]:
    """What the front door sends: the caller's identity with the internal token (routers
    believe the identity headers only with it)."""
    async with httpx.AsyncClient(headers={**IDENTITY, **platform.auth}, timeout=30) as c:
        yield c
