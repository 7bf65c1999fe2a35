"""An action printing 30 MB, on real processes: the router keeps answering while it splits
the logs, the record holds ``limits.logs`` worth of lines and OpenWhisk's truncation line,
the next activation's logs are clean, and the container's output file is emptied."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from platform_support import Platform, annotation, invoke, put_action

CHATTY = """
import sys
def main(a):
    n = a.get("lines", 0)
    print("first line")
    sys.stdout.write(("x" * 99 + "\\n") * n)
    print("to stderr", file=sys.stderr)
    return {"printed": n}
"""
MIB = 1024 * 1024


async def poll_livez(url: str, stop: asyncio.Event) -> list[int]:
    """GET /livez every 50 ms until ``stop``; each must answer within 2 s."""
    answered = []
    async with httpx.AsyncClient(timeout=2) as client:
        while not stop.is_set():
            answered.append((await client.get(url + "/livez")).status_code)
            await asyncio.sleep(0.05)
    return answered


async def test_30_mb_of_stdout_is_truncated_without_stalling_the_router(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    platform.start_manager()
    r = platform.start_router("r1")
    await put_action(client, r, "chatty", CHATTY, limits={"logs": 1})
    warm = await invoke(client, r, "chatty", {"lines": 0})
    assert warm.status_code == 200, warm.text
    stop = asyncio.Event()
    poller = asyncio.ensure_future(poll_livez(r.url, stop))
    try:
        resp = await invoke(client, r, "chatty", {"lines": 300_000})  # 30 MB
    finally:
        stop.set()
        answered = await poller
    assert resp.status_code == 200, resp.text
    assert answered and set(answered) == {200}  # never a timeout (httpx would raise)
    logs = resp.json()["logs"]
    assert logs[0].endswith(" stdout: first line")
    assert logs[-1].endswith(
        " stderr: Logs were truncated because the total bytes size exceeds the limit of "
        f"{MIB} bytes."
    )
    kept = logs[:-1]
    odd = [line for line in kept[1:] if not line.endswith(" stdout: " + "x" * 99)]
    assert all(line.endswith(" stderr: to stderr") for line in odd), odd[:3]
    assert MIB - 200 < sum(len(line.encode()) for line in kept) <= MIB
    # the next activation of the same container gets its own lines only
    after = await invoke(client, r, "chatty", {"lines": 2})
    assert annotation(after.json(), "container") == annotation(resp.json(), "container")
    texts = [line.split(" ", 1)[1] for line in after.json()["logs"]]
    assert sorted(texts) == sorted(
        ["stdout: first line", "stdout: " + "x" * 99, "stdout: " + "x" * 99, "stderr: to stderr"]
    )
    # the container's output file does not keep the 30 MB
    cid = annotation(after.json(), "container")
    stdout_log = Path(platform.state) / "containers" / cid / "stdout.log"
    assert stdout_log.stat().st_size < MIB  # emptied when the 30 MB had been read


async def test_failed_inits_and_timed_out_runs_keep_the_logs_they_wrote(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    """The container is dropped after a failure, but only once its output was read: the
    traceback of a failed init and the lines of a timed-out run explain the failure."""
    platform.start_manager()
    r = platform.start_router("r1")
    await put_action(client, r, "broken", "raise ValueError('boom at import')\n")
    failed = await invoke(client, r, "broken")
    assert failed.status_code == 502
    assert any("ValueError: boom at import" in line for line in failed.json()["logs"])
    slow = "import time\ndef main(a):\n    print('before the sleep', flush=True)\n"
    slow += "    time.sleep(5)\n    return {}\n"
    await put_action(client, r, "slow", slow, limits={"timeout": 1000})
    timed_out = await invoke(client, r, "slow")
    assert timed_out.status_code == 502
    assert annotation(timed_out.json(), "timeout") is True
    assert any(line.endswith(" stdout: before the sleep") for line in timed_out.json()["logs"])
