"""The action-proxy protocol against a real runtime subprocess."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import AsyncIterator
from typing import Any

import httpx

from gateway.runtime.app import init_digest

from .conftest import StartRuntime


def init_body(code: str, **extra: Any) -> dict[str, Any]:
    return {"value": {"name": "a", "main": "main", "code": textwrap.dedent(code), **extra}}


ECHO = """
    import os
    def main(args):
        return {"args": args, "aid": os.environ.get("__OW_ACTIVATION_ID")}
"""


async def test_init_and_run_happy_path(start_runtime: StartRuntime) -> None:
    async with httpx.AsyncClient(base_url=start_runtime()) as client:
        init = await client.post("/init", json=init_body(ECHO))
        assert (init.status_code, init.json()) == (200, {"ok": True})
        for name in ("ann", "bob"):  # the same process serves many runs
            run = await client.post("/run", json={"value": {"name": name}, "activation_id": name})
            assert run.status_code == 200
            assert run.json() == {"args": {"name": name}, "aid": name}


async def test_second_init_is_forbidden(start_runtime: StartRuntime) -> None:
    async with httpx.AsyncClient(base_url=start_runtime()) as client:
        assert (await client.post("/init", json=init_body(ECHO))).status_code == 200
        again = await client.post("/init", json=init_body("def main(a): return {}"))
        assert again.status_code == 403
        # the digest names the code it holds (the first), so a router can tell it is its own
        assert again.json() == {
            "error": "Cannot initialize the action more than once.",
            "digest": init_digest(init_body(ECHO)["value"]),
        }
        # still the first action
        assert "args" in (await client.post("/run", json={"value": {}})).json()


async def test_syntax_error_is_502_with_message(start_runtime: StartRuntime) -> None:
    async with httpx.AsyncClient(base_url=start_runtime()) as client:
        resp = await client.post("/init", json=init_body("def main(a) return {}"))
        assert resp.status_code == 502
        assert "SyntaxError" in resp.json()["error"]


async def test_missing_main_is_502(start_runtime: StartRuntime) -> None:
    async with httpx.AsyncClient(base_url=start_runtime()) as client:
        resp = await client.post("/init", json=init_body("def other(a): return {}"))
        assert resp.status_code == 502
        assert "'main'" in resp.json()["error"]


async def test_custom_main_name(start_runtime: StartRuntime) -> None:
    async with httpx.AsyncClient(base_url=start_runtime()) as client:
        body = init_body("def handler(a): return {'h': 1}")
        body["value"]["main"] = "handler"
        assert (await client.post("/init", json=body)).status_code == 200
        assert (await client.post("/run", json={"value": {}})).json() == {"h": 1}


async def test_run_before_init_fails(start_runtime: StartRuntime) -> None:
    async with httpx.AsyncClient(base_url=start_runtime()) as client:
        resp = await client.post("/run", json={"value": {}})
        assert resp.status_code == 502
        assert "error" in resp.json()


async def test_exception_in_main_is_502(start_runtime: StartRuntime) -> None:
    code = "def main(a):\n    raise ValueError('boom ' + a['x'])\n"
    async with httpx.AsyncClient(base_url=start_runtime()) as client:
        assert (await client.post("/init", json=init_body(code))).status_code == 200
        resp = await client.post("/run", json={"value": {"x": "42"}})
        assert resp.status_code == 502
        assert resp.json() == {"error": "ValueError: boom 42"}


async def test_non_dict_result_is_502(start_runtime: StartRuntime) -> None:
    code = "def main(a):\n    return a['ret']\n"
    async with httpx.AsyncClient(base_url=start_runtime()) as client:
        assert (await client.post("/init", json=init_body(code))).status_code == 200
        for bad in ("text", [1, 2], 3, None):
            resp = await client.post("/run", json={"value": {"ret": bad}})
            assert resp.status_code == 502, bad
            assert resp.json() == {"error": "The action did not return a dictionary."}
        assert (await client.post("/run", json={"value": {"ret": {}}})).status_code == 200


async def test_env_vars_from_init_and_run(start_runtime: StartRuntime) -> None:
    code = """
        import os
        def main(a):
            keys = ["MY_SETTING", "__OW_NAMESPACE", "__OW_ACTION_NAME", "__OW_ACTIVATION_ID",
                    "__OW_TRANSACTION_ID", "__OW_API_KEY", "__OW_DEADLINE", "__OW_ACTION_VERSION"]
            return {k: os.environ.get(k) for k in keys}
    """
    run = {
        "value": {},
        "namespace": "guest",
        "action_name": "/guest/hello",
        "activation_id": "a" * 32,
        "transaction_id": "tx1",
        "api_key": "uuid:key",
        "deadline": 1700000060000,  # a number is exported as its JSON text
        "action_version": "0.0.1",
    }
    async with httpx.AsyncClient(base_url=start_runtime()) as client:
        body = init_body(code, env={"MY_SETTING": "on"})
        assert (await client.post("/init", json=body)).status_code == 200
        got = (await client.post("/run", json=run)).json()
    assert got == {
        "MY_SETTING": "on",
        "__OW_NAMESPACE": "guest",
        "__OW_ACTION_NAME": "/guest/hello",
        "__OW_ACTIVATION_ID": "a" * 32,
        "__OW_TRANSACTION_ID": "tx1",
        "__OW_API_KEY": "uuid:key",
        "__OW_DEADLINE": "1700000060000",
        "__OW_ACTION_VERSION": "0.0.1",
    }


async def test_binary_zip_with_main_module(start_runtime: StartRuntime) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr(
            "__main__.py",
            "from helper import twice\ndef main(a):\n    return {'n': twice(a['n'])}\n",
        )
        archive.writestr("helper.py", "def twice(n):\n    return 2 * n\n")
    code = base64.b64encode(buf.getvalue()).decode()
    async with httpx.AsyncClient(base_url=start_runtime()) as client:
        resp = await client.post("/init", json=init_body(code, binary=True))
        assert resp.status_code == 200, resp.text
        assert (await client.post("/run", json={"value": {"n": 21}})).json() == {"n": 42}


async def test_zip_without_main_module_is_502(start_runtime: StartRuntime) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("other.py", "x = 1\n")
    code = base64.b64encode(buf.getvalue()).decode()
    async with httpx.AsyncClient(base_url=start_runtime()) as client:
        resp = await client.post("/init", json=init_body(code, binary=True))
        assert resp.status_code == 502
        assert "__main__.py" in resp.json()["error"]


async def test_bad_requests_get_clear_errors(start_runtime: StartRuntime) -> None:
    async with httpx.AsyncClient(base_url=start_runtime()) as client:
        assert (await client.post("/init", content=b"{not json")).status_code == 400
        assert (await client.post("/init", json=init_body(""))).status_code == 403
        assert (await client.get("/run")).status_code == 405
        missing = await client.post("/nope", json={})
        assert missing.status_code == 404
        assert "/init" in missing.json()["error"]


async def test_chunked_body_and_connection_close(start_runtime: StartRuntime) -> None:
    url = start_runtime()
    body = json.dumps(init_body(ECHO)).encode()

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 7):
            yield body[i : i + 7]

    async with httpx.AsyncClient(base_url=url) as client:
        init = await client.post("/init", content=chunks())  # Transfer-Encoding: chunked
        assert init.status_code == 200, init.text
        run = await client.post("/run", json={"value": {"k": 1}}, headers={"Connection": "close"})
        assert run.headers["connection"] == "close"
        assert run.json()["args"] == {"k": 1}


def test_bad_command_line_is_refused() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gateway.runtime", "--bogus", "1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "--bogus" in proc.stderr and "usage:" in proc.stderr
