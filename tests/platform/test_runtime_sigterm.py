"""The action runtime on SIGTERM (graceful removal): it stops accepting, lets the runs in
flight finish, then exits 0, so an activation gets the container's grace period."""

from __future__ import annotations

import asyncio
import select
import signal
import subprocess
import sys

import httpx
import pytest

CODE = "import time\ndef main(a):\n    time.sleep(a['sleep'])\n    return {'done': a['sleep']}\n"


async def test_sigterm_finishes_runs_in_flight_then_exits() -> None:
    proc = subprocess.Popen(  # noqa: ASYNC220 - starts at once, no wait
        [sys.executable, "-m", "gateway.runtime", "--port", "0", "--concurrency", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    try:
        assert select.select([proc.stdout], [], [], 10)[0]
        port = int(proc.stdout.readline().split()[1])
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            init = await http.post("/init", json={"value": {"code": CODE}})
            assert init.status_code == 200
            runs = [
                asyncio.ensure_future(http.post("/run", json={"value": {"sleep": s}}))
                for s in (0.6, 0.8)
            ]
            await asyncio.sleep(0.2)  # both are running
            proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.1)
            assert proc.poll() is None  # still finishing its runs
            with pytest.raises(httpx.ConnectError):  # but no longer accepting
                async with httpx.AsyncClient(timeout=2) as fresh:
                    await fresh.post(url + "/run", json={"value": {"sleep": 0}})
            done = await asyncio.gather(*runs)
        assert [r.json() for r in done] == [{"done": 0.6}, {"done": 0.8}]
        assert await asyncio.to_thread(proc.wait, 5) == 0
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
