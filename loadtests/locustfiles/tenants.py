"""Tenants against the front door: elephants, mice, privileged, writers, wide lists.

One class per tenant of the run (``APF_LT_RUN``, written by ``loadtests.runner``), plus the
scenario's load shape if it names one. Run through ``apf-gateway loadtest SCENARIO``.
"""

from __future__ import annotations

from loadtests.common import RUN, tenant_classes
from loadtests.shapes import SHAPES

_KINDS = {"elephant", "mouse", "privileged", "writer", "wide"}
_classes = tenant_classes(_KINDS)
globals().update(_classes)

_shape = (RUN.get("shape") or {}).get("type")
if _shape:
    Shape = type("Shape", (SHAPES[_shape],), {"classes": list(_classes.values())})
