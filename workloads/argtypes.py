"""Argument types shared by the command lines (``python -m simulation``, ``python -m analysis``,
...): each raises argparse.ArgumentTypeError with a one-line message."""
from __future__ import annotations

import argparse

from .cluster import MAX_CLASS_GUARANTEE


def positive_float(v: str) -> float:
    """A number > 0."""
    try:
        x = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {v!r}") from None
    if not x > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 (got {v})")
    return x


def positive_int(v: str) -> int:
    """A whole number >= 1 (a count)."""
    try:
        x = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {v!r}") from None
    if x < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {v})")
    return x


def class_share(v: str) -> float:
    """A share of a link a priority class keeps (``ClusterSpec.class_guarantee``)."""
    try:
        x = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {v!r}") from None
    if not 0.0 <= x <= MAX_CLASS_GUARANTEE:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_CLASS_GUARANTEE:g} (got {v})")
    return x
