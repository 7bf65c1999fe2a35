"""One activation inside one container: ``/init`` when cold, ``/run``, the time limit, and
the outcome (status, result, times, logs) as OpenWhisk reports it.

Every request carries the container's secret (``Authorization: Bearer``), which the manager
gave this router with the container. A container that answers ``/init`` with "already
initialized" is used only if the digest it reports is the digest of the code this router
would have sent (it initialised it before a restart); anything else is discarded, so a
container somebody else initialised never runs an activation."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from gateway.platform.actions import ActionInfo
from gateway.router.activation import (
    INIT_EXITED,
    INIT_TIMEOUT,
    RUN_EXITED,
    TIMEOUT,
    Outcome,
    Status,
    error_outcome,
)
from gateway.router.logs import ContainerLogs, NoLogs
from gateway.router.pool import RouterPool, Slot, WarmContainer
from gateway.runtime.app import ALREADY_INITIALIZED, init_digest
from gateway.runtime.logsplit import TRUNCATED

SHUTTING_DOWN = "The action's container was shutting down; the activation did not run."
REFUSED = (
    "The action's container refused this router's secret; it was discarded and the activation "
    "did not run."
)
FOREIGN_CODE = (
    "The action's container was initialized with other code; it was discarded and the "
    "activation did not run."
)


MAX_RESULT_BYTES = 1024 * 1024  # OpenWhisk's whisk.activation.payload.max (and truncation)
READ_CHUNK = 64 * 1024


@dataclass(slots=True)
class Answer:
    """A container's answer to ``/init`` or ``/run``, read up to the result cap: ``data`` is
    the parsed JSON (None if not JSON); ``length`` is set when the answer was larger than the
    cap (its ``Content-Length``, or what had arrived when reading stopped) and ``data`` is
    then the first ``cap`` bytes as text."""

    status: int
    data: Any
    length: int | None = None


def truncated(answer: Answer, cap: int) -> str:
    """OpenWhisk's message for an answer larger than the cap (``Messages.truncatedResponse``)."""
    return (
        f"The action produced a response that exceeded the allowed length: {answer.length} > "
        f"{cap} bytes. The truncated response was: {answer.data}"
    )


def _ms() -> int:
    return int(time.time() * 1000)


class Executor:
    """``lost(container, reason)`` is called when a container must not be used again."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        pool: RouterPool,
        logs: dict[str, ContainerLogs | NoLogs],
        lost: Callable[[WarmContainer, str], None],
        max_result_bytes: int = MAX_RESULT_BYTES,
    ) -> None:
        self.http = http
        self.cap = max_result_bytes
        self.pool = pool
        self.logs = logs
        self._lost = lost

    async def execute(
        self, slot: Slot, action: ActionInfo, params: dict[str, Any], activation_id: str, t0: float
    ) -> Outcome:
        c = slot.container
        outcome = Outcome(Status.SUCCESS, {}, container=c.id)
        outcome.start_ms = _ms()
        outcome.wait_ms = int((time.monotonic() - t0) * 1000)
        limit = action.timeout_ms / 1000
        logs: list[str] = []
        if slot.needs_init:
            failed = await self._init(slot, action, outcome, limit)
            logs = await self._logs(c, action, [])
            if failed is not None:
                self._lost(c, "init-failed")  # after its logs: they say why
                failed.logs = logs
                return failed
        deadline = outcome.start_ms + action.timeout_ms
        body = {
            "value": {**action.parameters, **params},
            "namespace": action.namespace,
            "action_name": f"/{action.path}",
            "action_version": action.version,
            "activation_id": activation_id,
            "transaction_id": activation_id,
            "deadline": str(deadline),
        }
        try:
            async with asyncio.timeout(limit):
                answer = await self._post(c, "/run", body)
        except TimeoutError:
            return error_outcome(
                Status.DEVELOPER_ERROR,
                TIMEOUT.format(action.timeout_ms),
                timed_out=True,
                **self._times(outcome, c, await self._lose(c, action, logs, "timeout")),
            )
        except (aiohttp.ClientError, ValueError):
            return error_outcome(
                Status.DEVELOPER_ERROR,
                RUN_EXITED,
                **self._times(outcome, c, await self._lose(c, action, logs, "failed")),
            )
        kw = self._times(outcome, c, await self._logs(c, action, logs))
        status, data = answer.status, answer.data
        if answer.length is not None:  # OpenWhisk: an application error; the container stays
            return error_outcome(Status.APPLICATION_ERROR, truncated(answer, self.cap), **kw)
        if status in (401, 503):  # refused our secret, or stopping: not the action's fault
            self._lost(c, "failed")
            return error_outcome(
                Status.WHISK_ERROR, SHUTTING_DOWN if status == 503 else REFUSED, **kw
            )
        if not isinstance(data, dict):
            return error_outcome(Status.DEVELOPER_ERROR, RUN_EXITED, **kw)
        if status == 200 and "error" not in data:
            return Outcome(Status.SUCCESS, data, **kw)
        if status == 200 or "error" in data:
            return Outcome(Status.APPLICATION_ERROR, data, **kw)
        return error_outcome(Status.DEVELOPER_ERROR, RUN_EXITED, **kw)

    @staticmethod
    def _times(outcome: Outcome, c: WarmContainer, logs: list[str]) -> dict[str, Any]:
        return {
            "start_ms": outcome.start_ms,
            "end_ms": _ms(),
            "wait_ms": outcome.wait_ms,
            "init_ms": outcome.init_ms,
            "container": c.id,
            "logs": logs,
        }

    async def _init(
        self, slot: Slot, action: ActionInfo, outcome: Outcome, limit: float
    ) -> Outcome | None:
        c = slot.container
        env = {
            "__OW_NAMESPACE": action.namespace,
            "__OW_ACTION_NAME": f"/{action.path}",
            "__OW_ACTION_VERSION": action.version,
        }
        if action.concurrency > 1:
            env["__OW_ALLOW_CONCURRENT"] = "true"
        body = {
            "value": {
                "name": action.name,
                "main": action.main,
                "code": action.code,
                "binary": action.binary,
                "env": env,
            }
        }
        started = time.monotonic()
        failure: Outcome | None = None
        try:
            async with asyncio.timeout(limit):
                answer = await self._post(c, "/init", body)
            status, data = answer.status, answer.data
            again = (
                status == 403
                and isinstance(data, dict)
                and data.get("error") == ALREADY_INITIALIZED
            )
            ok = status == 200 or (again and data.get("digest") == init_digest(body["value"]))
            if answer.length is not None:  # OpenWhisk: a developer error at init
                failure = error_outcome(Status.DEVELOPER_ERROR, truncated(answer, self.cap))
            elif again and not ok:
                failure = error_outcome(Status.WHISK_ERROR, FOREIGN_CODE)
            elif status == 401:
                failure = error_outcome(Status.WHISK_ERROR, REFUSED)
            elif not ok:
                message = data.get("error") if isinstance(data, dict) else None
                failure = error_outcome(Status.DEVELOPER_ERROR, str(message or INIT_EXITED))
        except TimeoutError:
            failure = error_outcome(
                Status.DEVELOPER_ERROR, INIT_TIMEOUT.format(action.timeout_ms), timed_out=True
            )
        except (aiohttp.ClientError, ValueError):
            failure = error_outcome(Status.DEVELOPER_ERROR, INIT_EXITED)
        outcome.init_ms = int((time.monotonic() - started) * 1000)
        self.pool.init_done(slot, failure is None)
        if failure is not None:
            failure.start_ms, failure.end_ms = outcome.start_ms, _ms()
            failure.wait_ms, failure.init_ms, failure.container = (
                outcome.wait_ms,
                outcome.init_ms,
                c.id,
            )
        return failure

    async def _post(self, c: WarmContainer, path: str, body: dict[str, Any]) -> Answer:
        """POST to the container and read its answer up to the cap: what is beyond is never
        read (the connection is closed instead), so a result's size costs the router at most
        the cap, whatever the action returns."""
        headers = {"Content-Type": "application/json"}
        if c.secret:
            headers["Authorization"] = "Bearer " + c.secret
        cap = self.cap
        async with self.http.post(c.url + path, data=json.dumps(body), headers=headers) as resp:
            raw = bytearray()
            declared = resp.content_length
            while len(raw) <= cap:
                chunk = await resp.content.read(min(READ_CHUNK, cap + 1 - len(raw)))
                if not chunk:
                    break
                raw += chunk
            if len(raw) > cap or (declared is not None and declared > cap):
                resp.close()  # the rest stays unread: this connection is not reused
                length = declared if declared is not None and declared > cap else len(raw)
                return Answer(resp.status, raw[:cap].decode(errors="replace"), length)
        try:
            return Answer(resp.status, json.loads(raw) if raw else None)
        except ValueError:
            return Answer(resp.status, None)

    async def _lose(
        self, c: WarmContainer, action: ActionInfo, before: list[str], reason: str
    ) -> list[str]:
        """The lines a failed run wrote so far (OpenWhisk keeps them too), then stop using
        the container (the manager kills it)."""
        lines = await self._logs(c, action, before)
        self._lost(c, reason)
        return lines

    async def _logs(self, c: WarmContainer, action: ActionInfo, before: list[str]) -> list[str]:
        """``before`` (the init's lines, if any) plus what follows, within ``limits.logs``
        for the whole activation: a run after a truncated init adds nothing."""
        tail = self.logs.get(c.id)
        if tail is None:
            return before
        limit = action.logs_mb * 1024 * 1024
        used = sum(len(line.encode()) for line in before)
        lines = await tail.take(max(0, limit - used), limit=limit, idle=c.in_flight <= 1)
        if before and before[-1].endswith(TRUNCATED.format(limit)):
            return before
        return before + lines
