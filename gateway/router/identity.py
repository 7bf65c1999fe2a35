"""Who is calling: the front door's identity headers, believed only from trusted networks.

The front door authenticates OpenWhisk API keys and forwards ``X-Remote-User`` and
``X-Remote-Extra-Namespace``; the router believes those headers only from its trusted
networks (default loopback), like Kubernetes' front-proxy headers.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.platform.errors import not_authorized

DEFAULT_TRUSTED = ("127.0.0.1/32", "::1/128")


@dataclass(frozen=True, slots=True)
class Identity:
    subject: str
    namespace: str

    def resolve(self, namespace: str) -> str:
        """``_`` is the caller's own namespace; any other must be it too."""
        if namespace in ("_", self.namespace):
            return self.namespace
        raise not_authorized(namespace)
