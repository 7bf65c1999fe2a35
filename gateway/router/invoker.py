"""The router's I/O shell around its pool: admission, capacity from the manager, container
events (pause, give back, drain) and the lease.

The pool (pure) decides which container and when; this shell gets slots (or the manager's
proxy/429 answer), hands the activation to ``execution.Executor``, gives broken containers
back, and keeps the pool in step with the manager's lease answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from gateway.clock import EventClock
from gateway.manager.model import ActionSpec
from gateway.platform.actions import ActionInfo
from gateway.router.activation import Outcome
from gateway.router.execution import MAX_RESULT_BYTES, Executor
from gateway.router.logs import ContainerLogs, NoLogs
from gateway.router.manager_client import ManagerClient, ManagerUnavailable, UnknownToManager
from gateway.router.pool import PoolSettings, RouterPool, Slot, WarmContainer

log = logging.getLogger("gateway.router")


class Throttled(Exception):
    """No slot: 429 (or 503 when the manager could not start a container)."""

    def __init__(self, message: str, retry_after: int = 1, status: int = 429) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status


class ProxyTo(Exception):
    def __init__(self, urls: list[str]) -> None:
        super().__init__(urls)
        self.urls = urls


@dataclass(frozen=True, slots=True)
class InvokerSettings:
    router_id: str
    buffer_seconds: float = 10.0  # how long a request waits for a slot before 429
    incarnation: str = ""  # this process among those that ran under router_id
    proxy_cache_seconds: float = 2.0
    max_result_bytes: int = MAX_RESULT_BYTES  # a container's answer to /init or /run
    pool: PoolSettings = field(default_factory=PoolSettings)


class Invoker:
    def __init__(
        self,
        settings: InvokerSettings,
        clock: EventClock,
        manager: ManagerClient,
        http: aiohttp.ClientSession,
    ) -> None:
        self.settings = settings
        self.manager = manager
        self.http = http
        self.url = ""  # this router's URL, set before start()
        self.pool = RouterPool(clock, settings.pool, self)
        self.logs: dict[str, ContainerLogs | NoLogs] = {}
        self.executor = Executor(http, self.pool, self.logs, self._lost, settings.max_result_bytes)
        self._pending: dict[str, int] = {}
        # waiting requests per key, with whether each came proxied from a peer router
        self._futures: dict[str, dict[asyncio.Future[Slot], bool]] = {}
        self._proxies: dict[str, tuple[list[str], float]] = {}
        self._rejected: dict[str, Throttled] = {}
        self._drained: dict[str, asyncio.Future[None]] = {}
        self._versions: dict[str, str] = {}  # action path -> newest revision seen
        # busy containers to give back once idle (old revisions, drains), with the reason
        self._retiring: dict[str, str] = {}
        # containers this router let go of: never adopted again from a (maybe stale) answer
        self._let_go: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.registered = asyncio.Event()
        self.ever_registered = False  # readiness: true after the first registration

    # ---- admission -----------------------------------------------------------------------
    async def admit(self, action: ActionInfo, *, proxied: bool) -> Slot:
        """A reserved slot, or ``ProxyTo`` / ``Throttled``. The caller must ``run`` it."""
        key = action.key
        if self._versions.get(action.path) != action.version:
            self._new_version(action)
        slot = self.pool.reserve(key)
        if slot is not None:
            return slot
        cached = self._proxies.get(key)
        if not proxied and cached and cached[1] > time.monotonic():
            raise ProxyTo(cached[0])
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Slot] = loop.create_future()

        def grant(slot: Slot) -> None:
            if future.done():
                self.pool.release(slot)
            else:
                future.set_result(slot)

        def timeout() -> None:
            if not future.done():
                rejected = self._rejected.get(key)
                future.set_exception(
                    rejected
                    or Throttled(
                        f"No container for '{action.path}' became free within "
                        f"{self.settings.buffer_seconds:g} s."
                    )
                )

        waiter = self.pool.wait(key, self.settings.buffer_seconds, grant, timeout)
        self._futures.setdefault(key, {})[future] = proxied
        self._ensure_capacity(action, proxied)
        try:
            return await future
        except BaseException:
            self.pool.cancel(waiter)
            if future.done() and not future.cancelled() and future.exception() is None:
                self.pool.release(future.result())
            raise
        finally:
            self._futures.get(key, {}).pop(future, None)

    def _new_version(self, action: ActionInfo) -> None:
        """An update: containers of other revisions are given back as soon as they are idle
        (never while busy, whatever their eviction policy)."""
        self._versions[action.path] = action.version
        self._retire(action.path, "upgrade", keep=action.key)

    def retire(self, path: str, reason: str) -> None:
        """The action at ``path`` is gone (deleted): its containers here are given back, each
        as soon as it is idle (containers adopted at registration included); the rest of
        what is kept for it goes at the next ``prune``."""
        self._versions.pop(path, None)
        self._retire(path, reason)

    def prune(self) -> None:
        """Drop the bookkeeping of actions with nothing here: no container, no request
        waiting, no acquire in flight (their revision, proxy hint, last refusal). Kept, it
        would grow with every action ever invoked here; the lease loop calls this."""
        active = {_path(k) for k in self.pool.by_key}
        active |= {_path(k) for k, waiting in self._futures.items() if waiting}
        active |= {_path(k) for k, count in self._pending.items() if count}
        for path in [p for p in self._versions if p not in active]:
            del self._versions[path]
        for table in (self._pending, self._rejected, self._futures):
            for key in [k for k in table if _path(k) not in active]:
                del table[key]
        now = time.monotonic()
        for key in [k for k, (_, expiry) in self._proxies.items() if expiry <= now]:
            del self._proxies[key]

    def _retire(self, path: str, reason: str, keep: str = "") -> None:
        for key in [k for k in self.pool.by_key if _path(k) == path and k != keep]:
            for c in self.pool.containers(key):
                if self.pool.give_back(c.id, only_if_idle=False, wait=True) == "waiting":
                    self._retiring[c.id] = reason
                    self._let_go.add(c.id)
                else:
                    self.give_back(c, reason)

    def _ensure_capacity(self, action: ActionInfo, proxied: bool) -> None:
        key = action.key
        want = math.ceil(self.pool.shortfall(key) / action.concurrency) - self._pending.get(key, 0)
        if want > 0:
            self._pending[key] = self._pending.get(key, 0) + want
            self.spawn(self._acquire(action, want, proxied))

    async def _acquire(self, action: ActionInfo, count: int, proxied: bool) -> None:
        key = action.key
        progressed = False
        try:
            await self.registered.wait()
            known = [c.id for c in self.pool.containers(key)]
            result = await self.manager.acquire(
                self.settings.router_id,
                action.spec(),
                count=count,
                known=known,
                allow_proxy=not proxied,
            )
            if result.rejected is not None:
                throttled = Throttled(result.rejected, result.retry_after, result.status)
                self._reject(key, throttled, count)
            elif result.proxy:
                urls = [p["url"] for p in result.proxy]
                expiry = time.monotonic() + self.settings.proxy_cache_seconds
                self._proxies[key] = (urls, expiry)
                self._fail_waiters(key, ProxyTo(urls))
            else:
                self._rejected.pop(key, None)
                for data in result.containers:
                    self.add_container(data)
                progressed = bool(result.containers)
        except UnknownToManager:
            self.registered.clear()
            with contextlib.suppress(ManagerUnavailable, UnknownToManager):
                await self.register()
            progressed = True  # retry while requests wait
        except ManagerUnavailable as exc:
            log.warning("manager unavailable: %s", exc)
            self._rejected[key] = Throttled(
                "No container is free and the container manager is unavailable.", 1, 503
            )
            await asyncio.sleep(0.2)
            progressed = True
        finally:
            self._pending[key] = self._pending.get(key, 0) - count
        if progressed and self.pool.waiting(key):
            self._ensure_capacity(action, proxied)

    def _reject(self, key: str, exc: Throttled, count: int) -> None:
        self._rejected[key] = exc
        others_pending = self._pending.get(key, 0) - count
        if not self.pool.containers(key) and others_pending <= 0:
            self._fail_waiters(key, exc)  # nothing will free up: answer now

    def _fail_waiters(self, key: str, exc: Exception) -> None:
        for future, proxied in list(self._futures.get(key, {}).items()):
            if proxied and isinstance(exc, ProxyTo):
                continue  # one hop only: a proxied request waits for this router's own
            if not future.done():
                future.set_exception(exc)

    # ---- running -------------------------------------------------------------------------
    async def run(
        self, slot: Slot, action: ActionInfo, params: dict[str, Any], activation_id: str, t0: float
    ) -> Outcome:
        """Init if needed, run, release the slot; always an outcome, never an exception."""
        try:
            if slot.needs_resume:
                self.resume(slot.container)
            return await self.executor.execute(slot, action, params, activation_id, t0)
        finally:
            self.pool.release(slot)

    def _lost(self, c: WarmContainer, reason: str) -> None:
        """Stop routing to a broken container at once; the manager removes it."""
        if self.pool.discard(c.id) is not None:
            self.give_back(c, reason)

    # ---- containers (PoolEvents) ---------------------------------------------------------
    def add_container(self, data: dict[str, Any]) -> None:
        if data["id"] in self.pool.by_id or data["id"] in self._let_go:
            return
        spec = ActionSpec.from_json(data["action"])
        agent = data.get("agent") or {}
        paths = agent.get("logs")
        self.logs[data["id"]] = (
            ContainerLogs(paths["stdout"], paths["stderr"], appending=bool(paths.get("append")))
            if paths
            else NoLogs()
        )
        paused = False
        if agent.get("pause") == "signal":
            with contextlib.suppress(OSError):
                paused = _proc_state(int(agent["pid"])) == "T"
        container = WarmContainer(
            data["id"],
            spec.key,
            data["url"],
            spec.concurrency,
            agent=agent,
            paused=paused,
            secret=str(data.get("secret") or ""),
        )
        self.pool.add(container)
        log.info("container %s for %s at %s", data["id"], spec.key, data["url"])

    def pause(self, container: WarmContainer) -> None:
        self._signal(container, signal.SIGSTOP)

    def resume(self, container: WarmContainer) -> None:
        self._signal(container, signal.SIGCONT)

    @staticmethod
    def _signal(container: WarmContainer, sig: signal.Signals) -> None:
        if container.agent.get("pause") == "signal":
            with contextlib.suppress(OSError):
                os.killpg(int(container.agent["pid"]), sig)

    def give_back(self, container: WarmContainer, reason: str) -> None:
        log.info("giving container %s (%s) back: %s", container.id, container.key, reason)
        self._let_go.add(container.id)
        tail = self.logs.pop(container.id, None)
        if tail is not None:
            tail.close()
        self.spawn(self._give_back(container.id, reason))

    async def _give_back(self, cid: str, reason: str) -> None:
        with contextlib.suppress(ManagerUnavailable):
            await self.manager.give_back(self.settings.router_id, cid, reason)

    def drained(self, container: WarmContainer) -> None:
        reason = self._retiring.pop(container.id, None)
        if reason is not None:
            self.give_back(container, reason)
        future = self._drained.pop(container.id, None)
        if future is not None and not future.done():
            future.set_result(None)

    async def release_on_request(
        self, cid: str, *, only_if_idle: bool, wait_seconds: float | None
    ) -> str:
        """The manager asks for a container back (eviction or drain): routing to it stops
        now. ``done``: idle, or ``wait_seconds`` passed; ``busy``: refused (``only_if_idle``);
        ``waiting`` (``wait_seconds`` None): still running, given back through the manager's
        give-back API once its activations end."""
        container = self.pool.by_id.get(cid)
        result = self.pool.give_back(cid, only_if_idle=only_if_idle, wait=True)
        log.info("the manager asks for container %s back: %s", cid, result)
        if result != "busy":
            self._let_go.add(cid)
        if result == "waiting" and container is not None and wait_seconds is None:
            self._retiring[cid] = "upgrade"
            return "waiting"
        if result == "waiting" and container is not None:
            future = asyncio.get_running_loop().create_future()
            self._drained[cid] = future
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_seconds):
                    await future
            result = "done"
        if result == "done":
            tail = self.logs.pop(cid, None)
            if tail is not None:
                tail.close()
        return result

    # ---- lease ---------------------------------------------------------------------------
    async def register(self) -> float:
        """Register (again), offering the containers held: a restarted manager adopts them."""
        held = set(self.pool.by_id)
        data = await self.manager.register(
            self.settings.router_id, self.url, sorted(held), self.settings.incarnation
        )
        self._sync(data, held)  # what the manager did not give back is no longer ours
        log.info(
            "registered with the manager as %s (%d containers held, %d assigned)",
            self.settings.router_id,
            len(held),
            len(self.pool.by_id),
        )
        self.registered.set()
        self.ever_registered = True
        return float(data.get("lease_seconds", 10.0))

    def _sync(self, data: dict[str, Any], held_before: set[str] | None = None) -> None:
        """Adopt what the manager says is ours; stop routing to what it no longer does.

        Only containers held *before* the request was sent can be dropped: one acquired while
        the renewal was in flight may be missing from an answer computed earlier.
        """
        ours = set()
        for item in data.get("containers", []):
            ours.add(item["id"])
            if item.get("url"):
                self.add_container(item)
        for cid in (held_before or set()) - ours:
            if self.pool.discard(cid) is not None:
                log.warning("the manager no longer assigns %s to this router", cid)
                tail = self.logs.pop(cid, None)
                if tail is not None:
                    tail.close()
        self._let_go &= ours  # forgotten by the manager: may be assigned again one day

    async def lease_loop(self) -> None:
        while True:
            try:
                if not self.registered.is_set():
                    lease = await self.register()
                else:
                    held = set(self.pool.by_id)
                    data = await self.manager.renew(self.settings.router_id)
                    self._sync(data, held)
                    lease = float(data.get("lease_seconds", 10.0))
                self.prune()
            except UnknownToManager:
                self.registered.clear()
                continue
            except ManagerUnavailable as exc:
                log.warning("manager unavailable: %s", exc)
                lease = 1.0
            except Exception:  # the lease must outlive any surprise
                log.exception("lease renewal failed")
                lease = 1.0
            await asyncio.sleep(max(0.05, lease / 3))

    @property
    def background(self) -> int:
        """Background tasks running: detached activations, give-backs."""
        return len(self._tasks)

    async def wait_idle(self) -> None:
        """Until background work (detached activations, give-backs) has finished."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Wait for background work, give every container back, leave the manager."""
        await self.wait_idle()
        with contextlib.suppress(ManagerUnavailable):
            await self.manager.deregister(self.settings.router_id)
        for tail in self.logs.values():
            tail.close()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _path(key: str) -> str:
    """``namespace/name`` of a revision's key ``namespace/name@version``."""
    return key.rpartition("@")[0]


def _proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
