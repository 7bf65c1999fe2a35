"""A FastAPI app behind API Priority and Fairness, in-process.

Run: pip install apf-gateway fastapi && uvicorn fastapi_app:app (in this folder).
"""

import asyncio
from pathlib import Path
from typing import Annotated

from fastapi import FastAPI, Query, Request

from gateway.asgi.context import request_context
from gateway.sidecar import build_middleware

HERE = Path(__file__).parent
api = FastAPI()


@api.get("/api/v1/namespaces/{namespace}/reports")
async def list_reports(namespace: str, request: Request) -> dict[str, object]:
    context = request_context(request.scope)  # how admission described the request
    assert context is not None
    digest = context.digest
    return {"kind": "ReportList", "items": [], "user": digest.user.name,
            "verb": digest.info.verb, "resource": digest.info.resource}  # fmt: skip


@api.post("/api/v1/namespaces/{namespace}/reports")
async def create_report(
    namespace: str, seconds: Annotated[float, Query(ge=0, le=60)] = 0.1
) -> dict[str, object]:
    await asyncio.sleep(seconds)  # stands in for slow work holding its seat
    return {"kind": "Report", "namespace": namespace}


app = build_middleware(
    api,
    config_files=[HERE / "flowcontrol.yaml"],
    token_file=HERE / "tokens.csv",
    settings={"tooManyRequestsBody": "status"},  # a 429 names its level in a Status body
)
