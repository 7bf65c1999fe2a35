"""The action runtime on SIGTERM (graceful removal): it stops accepting, lets the runs in
flight finish, then exits 0, so an activation gets the container's grace period."""

from __future__ import annotations

import asyncio
import select
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.wait import async_wait_until

CODE = (
    "import pathlib, time\n"
    "def main(a):\n"
    "    pathlib.Path(a['started']).touch()\n"
    "    time.sleep(a['sleep'])\n"  # the run in flight the signal must not cut
    "    return {'done': a['sleep']}\n"
)


async def refuses(url: str) -> bool:
    try:
        async with httpx.AsyncClient(timeout=2) as fresh:
            await fresh.get(url + "/")
    except httpx.ConnectError:
        return True
    return False


async def test_sigterm_finishes_runs_in_flight_then_exits(tmp_path: Path) -> None:
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
            marks = [tmp_path / "one", tmp_path / "two"]
            runs = [
                asyncio.ensure_future(
                    http.post("/run", json={"value": {"sleep": s, "started": str(m)}})
                )
                for s, m in zip((1.5, 1.7), marks, strict=True)
            ]
            await async_wait_until(lambda: all(m.exists() for m in marks), 10, "both runs")
            proc.send_signal(signal.SIGTERM)
            await async_wait_until(lambda: refuses(url), 5, "the listener closed")
            assert proc.poll() is None  # no longer accepting, still finishing its runs
            done = await asyncio.gather(*runs)
        assert [r.json() for r in done] == [{"done": 1.5}, {"done": 1.7}]
        assert await asyncio.to_thread(proc.wait, 5) == 0
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
