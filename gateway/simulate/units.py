"""Durations (``60s``, ``100ms``, ``1m30s``) and rates (``2/s``, ``30/m``, ``5/10s``).

Durations follow Go's ``time.ParseDuration`` spelling (what kubectl users type); a bare number
means seconds. Errors are ``ValueError`` with a message meant for the user.
"""

from __future__ import annotations

import math
import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_TERM = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_NUMBER = re.compile(r"[+-]?(\d+(?:\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def parse_duration(value: object) -> float:
    """Seconds in ``value``: a number (seconds) or a string such as ``100ms``, ``1m30s``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 60s, 100ms, 1m; got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if _NUMBER.fullmatch(text):
            seconds = float(text)
        else:
            seconds = 0.0
            pos = 0
            for match in _TERM.finditer(text):
                if match.start() != pos:
                    break
                seconds += float(match.group(1)) * _UNITS[match.group(2)]
                pos = match.end()
            if pos != len(text) or not text:
                raise ValueError(f"expected a duration like 60s, 100ms, 1m; got {value!r}")
    else:
        raise ValueError(f"expected a duration like 60s, 100ms, 1m; got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"must be a non-negative duration; got {value!r}")
    return seconds


def parse_rate(value: object) -> float:
    """Events per second in ``value``: a number (per second), ``2/s``, ``30/m``, ``5/10s``."""
    message = f"expected a rate like 2/s, 30/m, 5/10s; got {value!r}"
    if isinstance(value, bool):
        raise ValueError(message)
    if isinstance(value, int | float):
        rate = float(value)
    elif isinstance(value, str):
        count_text, slash, per_text = value.strip().partition("/")
        count_text, per_text = count_text.strip(), per_text.strip()
        if not _NUMBER.fullmatch(count_text) or (slash and not per_text):
            raise ValueError(message)
        per = 1.0
        if slash:
            try:
                per = _UNITS[per_text] if per_text in _UNITS else parse_duration(per_text)
            except ValueError:
                raise ValueError(message) from None
            if per <= 0:
                raise ValueError(message)
        rate = float(count_text) / per
    else:
        raise ValueError(message)
    if not math.isfinite(rate) or rate < 0:
        raise ValueError(f"must be a non-negative rate; got {value!r}")
    return rate
