"""A Starlette app behind API Priority and Fairness, in-process.

Run: pip install apf-gateway starlette && uvicorn starlette_app:app (in this folder).
"""

import asyncio
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.asgi.context import request_context
from gateway.sidecar import build_middleware

HERE = Path(__file__).parent


async def list_reports(request: Request) -> JSONResponse:
    context = request_context(request.scope)  # how admission described the request
    assert context is not None
    digest = context.digest
    return JSONResponse({"kind": "ReportList", "items": [], "user": digest.user.name,
                         "verb": digest.info.verb, "resource": digest.info.resource})  # fmt: skip


async def create_report(request: Request) -> JSONResponse:
    try:
        seconds = float(request.query_params.get("seconds", "0.1"))
    except ValueError:
        seconds = -1
    if not 0 <= seconds <= 60:  # NaN too
        return JSONResponse({"message": "seconds: a number from 0 to 60"}, status_code=400)
    await asyncio.sleep(seconds)  # stands in for slow work holding its seat
    return JSONResponse({"kind": "Report", "namespace": request.path_params["namespace"]})


api = Starlette(
    routes=[
        Route("/api/v1/namespaces/{namespace}/reports", list_reports, methods=["GET"]),
        Route("/api/v1/namespaces/{namespace}/reports", create_report, methods=["POST"]),
    ]
)
app = build_middleware(
    api,
    config_files=[HERE / "flowcontrol.yaml"],
    token_file=HERE / "tokens.csv",
    settings={"tooManyRequestsBody": "status"},  # a 429 names its level in a Status body
)
