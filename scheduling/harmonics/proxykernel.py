"""Compiled (numba) scoring of the closed-form load proxy of large groups
(``RackView._proxy``, ``proxy_block="max"``): the same arithmetic in the same order as the
numpy expression, per candidate, without its (candidates x jobs x links) temporaries.

``score(TU, TT, TF, hidx, P, c, iso, pos, oidx, po, K, free_min, starved)`` returns the
candidates x jobs slowdowns; candidate i replaces job ``pos[i]``'s row by table row
``oidx[i]`` in class ``po[i]``; ``pos[i] = -1``: the held assignment itself.
``available()`` is False without numba or with ``HARMONICS_NO_JIT=1``: the caller then runs
the numpy expression (the reference).
"""
from __future__ import annotations

import os

import numpy as np

try:
    import numba
except ImportError:      # the numpy path of RackView._proxy is used
    numba = None


def _score(TU, TT, TF, hidx, P, c, iso, pos, oidx, po, K, free_min, starved):
    """TU, TT (rows x links), TF (rows): the rack's table of proxy rows (u, t, floor) of every
    (job, spine, cap) seen; job j of the group holds row ``hidx[j]`` in class ``P[j]``."""
    O = pos.shape[0]
    J = hidx.shape[0]
    L = TU.shape[1]
    out = np.empty((O, J))
    load = np.zeros((K, L))
    for j in range(J):                   # the class loads: rows added in job order
        for e in range(L):
            load[P[j], e] += TU[hidx[j], e]
    lc = np.empty((K, L))
    pre = np.empty((K + 1, L))
    for i in range(O):
        p = pos[i]
        for k in range(K):
            for e in range(L):
                lc[k, e] = load[k, e]
        if p >= 0:
            for e in range(L):
                lc[P[p], e] -= TU[hidx[p], e]
            for e in range(L):
                lc[po[i], e] += TU[oidx[i], e]
        for e in range(L):
            pre[0, e] = 0.0
        for k in range(K):
            for e in range(L):
                pre[k + 1, e] = pre[k, e] + lc[k, e]
        for j in range(J):
            if j == p:
                r, pj = oidx[i], po[i]
            else:
                r, pj = hidx[j], P[j]
            fj = TF[r]
            tm = -np.inf
            for e in range(L):
                ex = lc[pj, e] - TU[r, e]
                if ex < 0.0:
                    ex = 0.0
                fr = 1.0 - pre[pj, e]
                if fr < free_min:
                    fr = free_min
                v = TT[r, e] * (1.0 + ex) / fr
                if v > tm:
                    tm = v
            if fj > tm:
                tm = fj
            if fj < 0.0:
                out[i, j] = 1.0
            else:
                s = (c[j] + tm) / iso[j]
                out[i, j] = s if s < starved else starved
    return out


_KERNEL = numba.njit(cache=True)(_score) if numba is not None else None


def available() -> bool:
    return _KERNEL is not None and os.environ.get("HARMONICS_NO_JIT") != "1"


def score(*args):
    return _KERNEL(*args)


def warm_up() -> None:
    """Compile (or load from numba's on-disk cache) once per process, before any decision."""
    if not available():
        return
    z = np.zeros((1, 1))
    i = np.zeros(1, dtype=np.int64)
    score(z, z, np.zeros(1), i, i, np.zeros(1), np.ones(1), i - 1, i, i, 1, 0.05, 1e6)
