"""Fixtures: a platform (manager + routers, cleaned up after) and an identified client."""

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
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(headers=IDENTITY, timeout=30) as c:
        yield c
