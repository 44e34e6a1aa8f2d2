"""Priority classes on the wire: the contract between the controller's DSCP marks (set at a
flow's first ToR, and in the workers' control files) and the hosts' and links' tc filters
(emulation/qos.py) that sort the marked packets into the classes.  No dependency: both sides
import it.

Class k = 0 is the highest; the last class of a run is always best effort (DSCP 0).
"""
from __future__ import annotations

from typing import Sequence

# DSCP of priority class k (k = 0 highest); the last class is best effort
CLASS_DSCP: Sequence[int] = (46, 34, 26, 18, 10, 12, 4, 0)
MAX_CLASSES = len(CLASS_DSCP)


def class_dscp(k: int, num_classes: int) -> int:
    """DSCP of class k among num_classes; the lowest class is always best effort (0)."""
    if not 0 <= k < num_classes <= MAX_CLASSES:
        raise ValueError(f"class {k} of {num_classes}")
    return 0 if k == num_classes - 1 else CLASS_DSCP[k]


def clamp_class(k, num_classes: int) -> int:
    """Priority class ``k`` clamped to the classes there are (0 .. num_classes - 1, at least
    one class): the one rule for a decision's class in both back ends (a policy may decide
    more classes than the run has: those share the lowest)."""
    return min(max(int(k), 0), max(1, num_classes) - 1)


def priority_dscp(priority: int, num_classes: int) -> int:
    """DSCP of a decision's priority, clamped to the run's classes."""
    return class_dscp(clamp_class(priority, num_classes), num_classes)
