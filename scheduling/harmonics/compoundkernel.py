"""Compiled (numba) compounding of a rack-spanning job's slowdown over its racks
(``GlobalCoordinator._product_vec``): the same arithmetic in the same order as the numpy
expression, per element, in one pass and without its (racks x options x jobs) temporaries
(the Coordinator's descent evaluates it for every rack-spanning job of every round).

``compound(V, P, c, iso, starved)``: ``V`` racks x options x jobs (NaN: not reported by
that rack), ``P`` racks x jobs (True: the job meets rack-local jobs in that rack), ``c`` and
``iso`` per job; returns options x jobs.  ``available()`` is False without numba or with
``HARMONICS_NO_JIT=1``: the caller then runs the numpy expression (the reference).
"""
from __future__ import annotations

import os

import numpy as np

try:
    import numba
except ImportError:      # GlobalCoordinator._product_vec's numpy expression is used
    numba = None


def _compound(V, P, c, iso, starved):
    """Per element: ``worst`` the largest reported slowdown; the factor the product over the
    racks, in rack order, of max(1, (v * iso - c) / t0) where reported with peers (the
    numpy product multiplies 1.0 elsewhere: the same result); then the numpy expression's
    min / max, and ``worst`` alone where t0 <= 0, iso <= 0 or worst >= starved."""
    R, O, C = V.shape
    out = np.empty((O, C))
    for o in range(O):
        for j in range(C):
            cj = c[j]
            ij = iso[j]
            t0 = ij - cj
            plain = t0 <= 0 or ij <= 0
            worst = -np.inf
            f = 1.0
            for r in range(R):
                v = V[r, o, j]
                if not np.isnan(v):
                    worst = np.maximum(worst, v)
                    if P[r, j] and not plain:
                        f = f * np.maximum(1.0, (v * ij - cj) / t0)
            if plain or worst >= starved:
                out[o, j] = worst
            else:
                out[o, j] = np.minimum(starved, np.maximum(worst, (cj + t0 * f) / ij))
    return out


_KERNEL = numba.njit(cache=True, error_model="numpy")(_compound) if numba is not None else None


def available() -> bool:
    return _KERNEL is not None and os.environ.get("HARMONICS_NO_JIT") != "1"


def compound(V, P, c, iso, starved):
    return _KERNEL(V, P, c, iso, starved)


def warm_up() -> None:
    """Compile (or load from numba's on-disk cache) once per process, before any decision."""
    if not available():
        return
    compound(np.ones((1, 1, 1)), np.ones((1, 1), dtype=np.bool_), np.zeros(1), np.ones(1), 1e6)
