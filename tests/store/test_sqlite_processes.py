"""Several router processes on one host share one SQLite file."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from asyncio.subprocess import PIPE
from pathlib import Path

from gateway.store import open_store

WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from gateway.store import open_store

    async def main(url: str, tag: str) -> None:
        store = open_store(url)
        await store.open()
        print("ready", flush=True)
        sys.stdin.readline()  # both processes start writing together
        for i in range(100):
            await store.put_activations([
                {"namespace": "guest", "name": tag, "activationId": f"{tag}{i:03d}{j}",
                 "start": i, "response": {}} for j in range(5)
            ])
            await store.put_action("guest", "shared", {"by": tag}, overwrite=True)
        await store.close()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_two_processes_write_one_file(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'shared.db'}"
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", WORKER, url, tag, stdin=PIPE, stdout=PIPE
        )
        for tag in ("p", "q")
    ]
    for p in procs:
        assert p.stdout is not None
        assert await p.stdout.readline() == b"ready\n"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(b"go\n")
        await p.stdin.drain()
    assert [await p.wait() for p in procs] == [0, 0]
    store = open_store(url)
    await store.open()
    try:
        records = await store.list_activations("guest", limit=0)
        assert len(records) == 2 * 100 * 5
        assert {r["name"] for r in records} == {"p", "q"}
        shared = await store.get_action("guest", "shared")
        # 200 overwrites from two processes, none lost: 0.0.1 then 199 bumps
        assert shared is not None and shared["version"] == "0.0.200"
    finally:
        await store.close()
