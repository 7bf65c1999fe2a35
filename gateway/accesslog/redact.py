"""What of a request may be logged: query parameters and referers without credentials.

The path is logged as the front door canonicalized it. Its query often carries selectors
worth seeing (``watch=1``, ``labelSelector``), but some clients put secrets there
(``?access_token=``, pre-signed URLs' ``X-Amz-Signature``): the value of every parameter
whose name looks like one is replaced by ``REDACTED``. Headers that carry credentials
(``Authorization``, ``Cookie``, ``Proxy-Authorization``) are never read by the log at all.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote_plus, urlsplit, urlunsplit

REDACTED: Final = "REDACTED"
# Names (decoded, any case) whose values are never logged: OAuth and OpenID Connect
# parameters, API keys, passwords, signatures of pre-signed URLs, session ids.
_SENSITIVE: Final = re.compile(
    r"token|secret|passw|pwd|signature|credential|session|auth|api[-_]?key|^key$|^code$"
    r"|^sig$|^jwt$|^assertion$",
    re.IGNORECASE,
)


def redact_query(query: str) -> str:
    if not query:
        return query
    parts = query.split("&")
    for i, part in enumerate(parts):
        name, sep, _value = part.partition("=")
        if _SENSITIVE.search(unquote_plus(name)):
            parts[i] = name + "=" + REDACTED if sep else name
    return "&".join(parts)


def redact_url(url: str) -> str:
    """A URL (a ``Referer``) without user information and with its query redacted."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return REDACTED
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, redact_query(parts.query), ""))
