"""All-or-nothing reconfiguration, shared by every component a reload touches.

A component's ``prepare(<its settings>)`` validates and builds whatever the new settings need
(it may raise, may run in the reload worker thread, and changes nothing that is serving) and
returns a ``Swap``. Calling the swap, on the event loop, puts the built state in place and
returns an ``Undo`` that restores what it replaced. ``apply_all`` runs the swaps in order and,
if one raises, undoes those already done: a reload applies everywhere or nowhere.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger("gateway.reload")

Undo = Callable[[], None]
Swap = Callable[[], Undo]


def assign(target: object, **values: Any) -> Swap:
    """A swap that sets attributes of ``target``; its undo sets the replaced values back."""

    def swap() -> Undo:
        before = {name: getattr(target, name) for name in values}
        for name, value in values.items():
            setattr(target, name, value)

        def undo() -> None:
            for name, value in before.items():
                setattr(target, name, value)

        return undo

    return swap


def apply_all(swaps: Iterable[Swap]) -> None:
    """Run ``swaps`` in order; when one raises, undo the earlier ones (newest first) and
    re-raise, so every component is back on what it was serving."""
    undos: list[Undo] = []
    try:
        for swap in swaps:
            undos.append(swap())
    except BaseException:
        for undo in reversed(undos):
            try:
                undo()
            except Exception:  # the other components still go back
                log.exception("undoing part of a failed reload failed")
        raise
