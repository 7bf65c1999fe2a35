"""``ClientWatch``: a departure cancels the armed request's task once, and only its own
cancellation is taken back (a deadline's or a shutdown's still ends the task)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from gateway.http.departure import Departure
from gateway.http.types import Message
from gateway.proxy.client_watch import ClientWatch


async def parked() -> Message:
    await asyncio.Event().wait()  # a client that never sends anything more
    raise AssertionError("unreachable")


def disconnect_after(gate: asyncio.Event) -> Callable[[], Awaitable[Message]]:
    async def receive() -> Message:
        await gate.wait()
        return {"type": "http.disconnect"}

    return receive


async def armed_request(
    watch_of: Callable[[], ClientWatch], ready: asyncio.Event, *, reading_body: bool = False
) -> tuple[ClientWatch, bool]:
    """Park as a proxy waiting on its upstream; (the watch, whether its handler returned)."""
    watch = watch_of()
    watch.arm(reading_body=reading_body)
    ready.set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        if not watch.handled():
            raise
        return watch, True
    finally:
        watch.disarm()
    return watch, False


def test_a_departure_ends_the_request_and_its_cancellation_is_taken_back() -> None:
    async def scenario() -> None:
        departure = Departure()
        ready = asyncio.Event()
        task = asyncio.create_task(armed_request(lambda: ClientWatch(parked, departure), ready))
        await ready.wait()
        departure()
        watch, returned = await task
        assert returned and watch.left and task.cancelling() == 0
        assert departure.callback is None

    asyncio.run(scenario())


def test_a_deadline_at_the_same_time_still_cancels_the_task() -> None:
    async def scenario() -> None:
        departure = Departure()
        ready = asyncio.Event()
        task = asyncio.create_task(armed_request(lambda: ClientWatch(parked, departure), ready))
        await ready.wait()
        departure()
        task.cancel()  # the deadline's
        await asyncio.wait((task,))
        assert task.cancelled()

    asyncio.run(scenario())


def test_a_client_gone_before_arming_is_reported_without_a_cancellation() -> None:
    async def scenario() -> None:
        departure = Departure()
        departure()  # reset before the request's task ran
        watch = ClientWatch(parked, departure)
        watch.arm(reading_body=False)
        assert watch.left and not watch.armed and departure.callback is None
        await asyncio.sleep(0)  # a cancellation, had there been one, would land here

    asyncio.run(scenario())


def test_a_departure_after_disarming_changes_nothing() -> None:
    async def scenario() -> None:
        departure = Departure()
        watch = ClientWatch(parked, departure)
        watch.arm(reading_body=False)
        watch.disarm()
        departure()
        assert not watch.left
        await asyncio.sleep(0)

    asyncio.run(scenario())


def test_a_departure_inside_the_task_only_marks_it() -> None:
    """An HTTP/2 send that fails disconnects the stream from within the request's own task:
    the relay sees ``left`` at its next chunk."""

    async def scenario() -> None:
        departure = Departure()
        watch = ClientWatch(parked, departure)
        watch.arm(reading_body=False)
        departure()
        assert watch.left and not watch.cancelled
        await asyncio.sleep(0)
        watch.disarm()

    asyncio.run(scenario())


def test_without_a_departure_receive_is_watched_once_the_body_is_read() -> None:
    async def scenario() -> None:
        gate = asyncio.Event()
        ready = asyncio.Event()
        receive = disconnect_after(gate)
        made: list[ClientWatch] = []

        def watch_of() -> ClientWatch:
            made.append(ClientWatch(receive, None))
            return made[0]

        task = asyncio.create_task(armed_request(watch_of, ready, reading_body=True))
        await ready.wait()
        gate.set()
        for _ in range(5):
            await asyncio.sleep(0)  # the body's reader, not the watch, reads receive() now
        assert not task.done()
        made[0].body_read()
        watch, returned = await task
        assert returned and watch.left

    asyncio.run(scenario())
