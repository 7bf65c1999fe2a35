"""Who is calling: the front door's identity headers, believed only with the internal token.

The front door authenticates OpenWhisk API keys and forwards ``X-Remote-User`` and
``X-Remote-Extra-Namespace`` with the platform's internal token (``Authorization: Bearer``);
the router reads those headers only on a request carrying that token (``Router.identify``),
as kube-apiserver reads front-proxy headers only from a verified client certificate. A
source address proves nothing: tenant pods share the network with the front door.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.platform.errors import not_authorized


@dataclass(frozen=True, slots=True)
class Identity:
    subject: str
    namespace: str

    def resolve(self, namespace: str) -> str:
        """``_`` is the caller's own namespace; any other must be it too."""
        if namespace in ("_", self.namespace):
            return self.namespace
        raise not_authorized(namespace)
