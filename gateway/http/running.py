"""The running task, without a Python-level call on CPython 3.11.

Admission (to own a request's deadline) and the proxy's client watch (to cancel the request
when its client leaves) need the request's task once per request. ``asyncio.current_task()``
is a Python function on 3.11 (a frame, ``get_running_loop()``, a dict lookup); 3.12 made it C.
On 3.11 ``running_task`` does the same two C calls itself: compiled (``gateway.compiled``) it
costs no frame at all, under any server (the gateway's own or uvicorn under a sidecar's
application), since it reads what the event loop's task step records, not what the server
passes along. The table it reads is asyncio's own (``asyncio.tasks._current_tasks``, also the
C tasks' table on 3.11); ``tests/frontdoor/test_running_task.py`` checks it against
``asyncio.current_task()``.
"""

from __future__ import annotations

import asyncio
import asyncio.tasks
import sys
from asyncio import AbstractEventLoop, Task, get_running_loop
from typing import Any, Final

if sys.version_info >= (3, 12):
    running_task: Final = asyncio.current_task  # C since 3.12
else:
    # The task each running loop is stepping (written by the task step, C or Python).
    # getattr: typeshed does not declare the private name.
    _CURRENT: Final[dict[AbstractEventLoop, Task[Any]]] = getattr(  # noqa: B009
        asyncio.tasks, "_current_tasks"
    )

    def running_task() -> Task[Any] | None:
        """``asyncio.current_task()`` (raises ``RuntimeError`` outside a running loop)."""
        return _CURRENT.get(get_running_loop())
