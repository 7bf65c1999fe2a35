"""OpenWhisk action invocations through ``apf-gateway up`` (the platform's front door).

Tenants of kind ``openwhisk`` invoke an action with their API key (HTTP Basic); other kinds in
the same run (e.g. a Kubernetes-style elephant) are included too, so platform and API traffic
can share one front door.
"""

from __future__ import annotations

from loadtests.common import RUN, tenant_classes
from loadtests.shapes import SHAPES

_classes = tenant_classes(None)
globals().update(_classes)

_shape = (RUN.get("shape") or {}).get("type")
if _shape:
    Shape = type("Shape", (SHAPES[_shape],), {"classes": list(_classes.values())})
