"""Log sentinels from a real runtime, and the router's ``ContainerLogs`` attributing the lines of
a real runtime's output files to each activation."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from gateway.router.logs import ContainerLogs
from gateway.runtime import SENTINEL
from gateway.runtime.logsplit import format_line
from tests.support.wait import async_wait_until

CODE = """
    import sys
    print("loading module")
    def main(a):
        print("out", a["tag"])
        print("err", a["tag"], file=sys.stderr)
        print("partial", a["tag"], end="")
        if a.get("fail"):
            raise RuntimeError("failed " + a["tag"])
        return {}
"""
LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z (stdout|stderr): (.*)$")
RUNTIME = (sys.executable, "-m", "gateway.runtime", "--host", "127.0.0.1", "--port", "0")


def listening_port(line: bytes) -> int:
    name, _, port = line.decode(errors="replace").strip().partition(" ")
    assert name == "LISTENING" and port.isdigit(), line
    return int(port)


@pytest.fixture
async def runtime() -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    proc = await asyncio.create_subprocess_exec(
        *RUNTIME, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    port = listening_port(await proc.stdout.readline())
    yield f"http://127.0.0.1:{port}", proc
    proc.kill()
    await proc.wait()


def texts(lines: list[str]) -> list[tuple[str, str]]:
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), lines
    return [(m.group(1), m.group(2)) for m in parsed if m]


async def test_sentinels_end_every_activation_on_both_streams(
    runtime: tuple[str, asyncio.subprocess.Process],
) -> None:
    url, proc = runtime
    assert proc.stdout is not None and proc.stderr is not None
    async with httpx.AsyncClient(base_url=url) as client:
        await client.post("/init", json={"value": {"code": textwrap.dedent(CODE)}})
        await client.post("/run", json={"value": {"tag": "A"}})
    out = [await proc.stdout.readline() for _ in range(3)]
    err = [await proc.stderr.readline() for _ in range(2)]
    sentinel = (SENTINEL + "\n").encode()
    assert out == [b"loading module\n", sentinel, b"out A\n"]
    assert err == [sentinel, b"err A\n"]
    assert await proc.stdout.readline() == b"partial A" + sentinel
    assert await proc.stderr.readline() == sentinel


async def test_container_logs_attribute_lines_to_their_activation(tmp_path: Path) -> None:
    """As the local backend runs it: output into files, the router reading each activation's
    lines once its response is in (the runtime writes the sentinels before responding)."""
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(*RUNTIME, stdout=out, stderr=err)
    try:
        await async_wait_until(lambda: out_path.read_bytes().endswith(b"\n"), timeout=20)
        port = listening_port(out_path.read_bytes())
        logs = ContainerLogs(str(out_path), str(err_path))  # from here on: activations only
        runs = []
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            await client.post("/init", json={"value": {"code": textwrap.dedent(CODE)}})
            runs.append(await logs.take(None))
            for value in ({"tag": "A"}, {"tag": "B", "fail": True}, {"tag": "C"}):
                await client.post("/run", json={"value": value})
                runs.append(await logs.take(None))
        logs.close()
    finally:
        proc.kill()
        await proc.wait()
    init, run_a, run_b, run_c = runs
    assert texts(init) == [("stdout", "loading module")]
    assert sorted(texts(run_a)) == [
        ("stderr", "err A"),
        ("stdout", "out A"),
        ("stdout", "partial A"),
    ]
    assert ("stdout", "out B") in texts(run_b)
    assert ("stderr", "RuntimeError: failed B") in texts(run_b)  # the traceback is logged
    assert not any("A" in text or "C" in text for _, text in texts(run_b) if "Error" not in text)
    assert sorted(texts(run_c)) == [
        ("stderr", "err C"),
        ("stdout", "out C"),
        ("stdout", "partial C"),
    ]


async def test_container_logs_return_what_is_there_without_a_sentinel(tmp_path: Path) -> None:
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    out_path.write_bytes(b"")
    err_path.write_bytes(b"")
    logs = ContainerLogs(str(out_path), str(err_path))
    with out_path.open("ab") as out:
        out.write(f"one\n{SENTINEL}\n".encode() + b"x" * 50 + b"\n" + b"y" * 50 + b"\n")
    with err_path.open("ab") as err:
        err.write(f"{SENTINEL}\n".encode())
    assert texts(await logs.take(100)) == [("stdout", "one")]
    second = await logs.take(100)  # a failed run: no sentinel, whatever it wrote
    assert texts(second)[0] == ("stdout", "x" * 50)
    assert texts(second)[-1] == (  # OpenWhisk stores the notice as one more stderr line
        "stderr",
        "Logs were truncated because the total bytes size exceeds the limit of 100 bytes.",
    )
    assert await logs.take(100) == []
    logs.close()


def test_format_line_matches_openwhisk_shape() -> None:
    assert format_line(1.25, "stderr", "x") == "1970-01-01T00:00:01.250000Z stderr: x"
    assert json.dumps(format_line(0, "stdout", "é"))  # any text is fine
