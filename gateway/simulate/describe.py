"""Turn a traffic client into the ``RequestDigest`` the front door would have built.

The path goes through the front door's own request-info parser, so a simulated
``GET /api/v1/namespaces/ns1/pods`` is classified exactly as a real one; the client's ``verb``
then replaces the verb the parser derived from the HTTP method (``watch``, ``deletecollection``
and non-resource verbs cannot always be told from a method alone). Users get the groups an
authenticator would add (``system:authenticated``, or ``system:unauthenticated`` for
``system:anonymous``), so traffic lands where real traffic from that user would.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.asgi.credentials import with_authenticated
from gateway.asgi.requestinfo import RequestInfoParser
from gateway.flowcontrol.digest import ANONYMOUS, RequestDigest, UserInfo, WorkEstimate
from gateway.simulate.traffic import ClientSpec

_PARSER = RequestInfoParser()


def digest_for(client: ClientSpec) -> RequestDigest:
    path, _, query = client.path.partition("?")
    if client.verb == "watch" and "watch=" not in query:
        query = f"{query}&watch=true" if query else "watch=true"
    info, long_running = _PARSER.parse(client.method, path, query.encode("latin-1"))
    if client.verb and client.verb != info.verb:
        info = replace(info, verb=client.verb)
    return RequestDigest(user_for(client), info, long_running)


def user_for(client: ClientSpec) -> UserInfo:
    """As the authenticators would: every authenticated user is in ``system:authenticated``."""
    if client.user == ANONYMOUS.name:
        return UserInfo(client.user, (*client.groups, *ANONYMOUS.groups))
    return UserInfo(client.user, with_authenticated(client.groups))


def work_for(client: ClientSpec, level_max_seats: int) -> WorkEstimate:
    """The client's seats, capped at the level's maximum as Kubernetes' work estimator caps them."""
    initial, final = client.seats, client.final_seats
    if level_max_seats > 0:
        initial = min(initial, level_max_seats)
        final = min(final, level_max_seats)
    return WorkEstimate(initial, final, client.additional_latency)
