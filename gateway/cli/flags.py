"""Flag shapes the commands share: a duration in seconds, a size in bytes.

A bad value is refused by argparse itself (exit 2, the flag named), before a command starts
anything.
"""

from __future__ import annotations

import argparse
import math


def seconds(text: str) -> float:
    """A positive, finite number of seconds (argparse ``type``)."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def seconds_or_zero(text: str) -> float:
    """A finite number of seconds, zero or more (argparse ``type``)."""
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}")
    return value


def add_seconds(
    parser: argparse.ArgumentParser,
    flag: str,
    default: float | None,
    help: str,
    *,
    zero: bool = False,
    default_note: str = "",
) -> None:
    """A ``SECONDS`` flag: positive, or zero too (``zero``: zero turns something off or makes
    it immediate); its help ends with the default (``default_note`` says what it means, or
    stands for a ``None`` default)."""
    shown = default_note or f"{default:g}"
    parser.add_argument(
        flag,
        type=seconds_or_zero if zero else seconds,
        default=default,
        metavar="SECONDS",
        help=f"{help} (default {shown})",
    )


def byte_count(text: str) -> int:
    """A positive whole number of bytes (argparse ``type``)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of bytes, got {text!r}")
    return value


def add_bytes(parser: argparse.ArgumentParser, flag: str, default: int, help: str) -> None:
    """A ``BYTES`` flag (a positive integer); its help ends with the default."""
    parser.add_argument(
        flag, type=byte_count, default=default, metavar="BYTES", help=f"{help} (default {default})"
    )
