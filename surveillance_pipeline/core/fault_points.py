"""Named moments in a load where the fault suite may kill or freeze it; a no-op in production.

A process crash is only worth testing where it can hurt: after a partition's rows were deleted, in the
middle of COPY, just before COMMIT. The loaders name those moments here. Unless ``SURVEILLANCE_FAULT_POINT``
names the point reached, ``fault_point`` is one dictionary lookup; when it does, the handler the fault
suite ships (``surveillance_pipeline_tests/support/faults/points.py``) decides what happens.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

FAULT_POINT_VARIABLE = "SURVEILLANCE_FAULT_POINT"
AFTER_DELETE = "after_delete"
MID_COPY = "mid_copy"
BEFORE_COMMIT = "before_commit"
FAULT_POINTS = (AFTER_DELETE, MID_COPY, BEFORE_COMMIT)
# A fixed module, never a name from the environment: the variable only arms a point.
FAULT_HANDLER = "surveillance_pipeline_tests.support.faults.points"


def fault_point(name: str, conn: Any = None) -> None:
    """Hand ``name`` to the fault suite's handler when ``SURVEILLANCE_FAULT_POINT`` names it; else nothing."""
    if os.environ.get(FAULT_POINT_VARIABLE) == name:
        importlib.import_module(FAULT_HANDLER).fire(name, conn)
