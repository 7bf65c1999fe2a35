"""``Deadlines``: executing requests' deadlines on one timer of a fake clock."""

from __future__ import annotations

import asyncio

from gateway.asgi.context import RequestContext
from gateway.asgi.deadline import Deadlines, request_timeout
from gateway.asgi.requestinfo import RequestInfoParser
from gateway.flowcontrol.digest import ANONYMOUS, RequestDigest
from gateway.testing import FakeEventClock


def context() -> RequestContext:
    info, _ = RequestInfoParser().parse("GET", "/api/v1/pods", b"")
    return RequestContext(RequestDigest(ANONYMOUS, info))


def test_each_request_is_cancelled_at_its_own_deadline_on_one_timer() -> None:
    async def scenario() -> None:
        clock = FakeEventClock(start=100.0)
        deadlines = Deadlines()
        never = asyncio.Event()  # the requests' work: parked until cancelled
        tasks = [asyncio.create_task(never.wait()) for _ in range(3)]
        contexts = [context() for _ in tasks]
        deadlines.enter(clock, tasks[0], 160.0, contexts[0])
        deadlines.enter(clock, tasks[1], 130.0, contexts[1])  # shorter ?timeout=: re-armed
        deadlines.enter(clock, tasks[2], 170.0, contexts[2])
        assert clock.pending == 1
        clock.advance(29.0)
        assert not any(c.deadline_passed for c in contexts)
        clock.advance(1.0)
        assert contexts[1].deadline_passed and not contexts[0].deadline_passed
        deadlines.leave(tasks[0])  # finished in time: never cancelled
        clock.advance(40.0)
        assert not contexts[0].deadline_passed and contexts[2].deadline_passed
        assert len(deadlines) == 0 and clock.pending == 0
        await asyncio.sleep(0)  # let the cancellations land
        assert [t.cancelled() for t in tasks] == [False, True, True]
        never.set()
        await tasks[0]

    asyncio.run(scenario())


def test_request_timeout_only_shortens() -> None:
    parse = RequestInfoParser().parse
    assert request_timeout(parse("GET", "/api/v1/pods", b"timeout=5s")[0], 60.0) == 5.0
    assert request_timeout(parse("GET", "/api/v1/pods", b"timeout=10m")[0], 60.0) == 60.0
    assert request_timeout(parse("GET", "/api/v1/pods", b"timeout=0s")[0], 60.0) == 60.0
    assert request_timeout(parse("GET", "/api/v1/pods", b"timeout=bad")[0], 60.0) == 60.0
