"""Log sentinels from a real runtime, and ActivationLogs attributing lines per activation."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import textwrap
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.runtime import SENTINEL
from gateway.runtime.logs import ActivationLogs, RuntimeStartError, format_line, read_listening

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


@pytest.fixture
async def runtime() -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "gateway.runtime", "--host", "127.0.0.1", "--port", "0"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    port = await read_listening(proc.stdout)
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


async def test_splitter_attributes_lines_to_their_activation(
    runtime: tuple[str, asyncio.subprocess.Process],
) -> None:
    url, proc = runtime
    assert proc.stdout is not None and proc.stderr is not None
    logs = ActivationLogs(proc.stdout, proc.stderr)
    async with httpx.AsyncClient(base_url=url) as client:
        await client.post("/init", json={"value": {"code": textwrap.dedent(CODE)}})
        await client.post("/run", json={"value": {"tag": "A"}})
        await client.post("/run", json={"value": {"tag": "B", "fail": True}})
        await client.post("/run", json={"value": {"tag": "C"}})
    init, run_a, run_b, run_c = [await asyncio.wait_for(logs.next(), 10) for _ in range(4)]
    await logs.close()
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


async def test_splitter_returns_leftovers_at_eof_and_truncates() -> None:
    out, err = asyncio.StreamReader(), asyncio.StreamReader()
    logs = ActivationLogs(out, err, max_bytes=100, now=lambda: 0.5)
    out.feed_data(f"one\n{SENTINEL}\n".encode() + b"x" * 50 + b"\n" + b"y" * 50 + b"\n")
    err.feed_data(f"{SENTINEL}\n".encode())
    out.feed_eof()
    err.feed_eof()
    assert await logs.next() == ["1970-01-01T00:00:00.500000Z stdout: one"]
    second = await logs.next()
    assert second[0].endswith("x" * 50)
    assert second[1] == (  # OpenWhisk stores the notice as one more stderr line
        "1970-01-01T00:00:00.500000Z stderr: "
        "Logs were truncated because the total bytes size exceeds the limit of 100 bytes."
    )
    assert await logs.next() == []
    assert logs.closed
    await logs.close()


async def test_read_listening_rejects_other_output() -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(b"Traceback (most recent call last):\n")
    with pytest.raises(RuntimeStartError, match="LISTENING"):
        await read_listening(reader)


def test_format_line_matches_openwhisk_shape() -> None:
    assert format_line(1.25, "stderr", "x") == "1970-01-01T00:00:01.250000Z stderr: x"
    assert json.dumps(format_line(0, "stdout", "é"))  # any text is fine


async def test_pipes_keep_draining_past_an_endless_line_and_the_limit() -> None:
    """A 4 MB line without a newline: dropped (only ``max_bytes`` are ever held), the pipe is
    still read to the sentinel, and the next activation's lines arrive intact."""
    out, err = asyncio.StreamReader(), asyncio.StreamReader()
    logs = ActivationLogs(out, err, max_bytes=100, now=lambda: 0.5)
    for _ in range(64):
        out.feed_data(b"z" * 65536)
        await asyncio.sleep(0)
    out.feed_data(f"{SENTINEL}\nnext\n{SENTINEL}\n".encode())
    err.feed_data(f"{SENTINEL}\n{SENTINEL}\n".encode())
    first = await asyncio.wait_for(logs.next(), 5)
    assert first == [
        "1970-01-01T00:00:00.500000Z stderr: "
        "Logs were truncated because the total bytes size exceeds the limit of 100 bytes."
    ]
    assert await asyncio.wait_for(logs.next(), 5) == ["1970-01-01T00:00:00.500000Z stdout: next"]
    assert not logs.closed
    await logs.close()
