"""Compiled (numba) scoring of the closed-form load proxy of large groups
(``RackView._proxy``, ``proxy_block="max"``): the same arithmetic in the same order as the
numpy expression, per candidate, without its (candidates x jobs x links) temporaries.

``score(TU, TT, TF, hidx, P, c, iso, pos, oidx, po, K, free_min, starved)`` returns the
candidates x jobs slowdowns; candidate i replaces job ``pos[i]``'s row by table row
``oidx[i]`` in class ``po[i]``; ``pos[i] = -1``: the held assignment itself.
``available()`` is False without numba or with ``HARMONICS_NO_JIT=1``: the caller then runs
the numpy expression (the reference).

``score`` runs ``_score_sparse``: ``_score``'s figures (bit for bit) visiting only the links a
row uses (a job uses a few of the rack's links; see ``_score_sparse``); ``sparsity(TU, TT)``
gives its row index of them.
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


def _score_sparse(TU, TT, TF, nzp, nzi, hidx, P, c, iso, pos, oidx, po, K, free_min, starved):
    """``_score`` with each row's links listed (``sparsity``: row r uses links
    ``nzi[nzp[r]:nzp[r + 1]]``, those where TU or TT is not 0).  The same operations on
    every value that can differ:
    - a candidate changes the class loads and their prefix sums only on the links of the two
      rows it swaps (elsewhere ``_score`` subtracts or adds 0.0: the same values), so those
      columns are updated from the held ones, in ``_score``'s order, and restored after;
    - a link a row does not use gives v = 0.0 * (1 + ex) / fr = 0.0 (ex >= 0, fr > 0): the
      maximum over the links starts at 0.0 if the row leaves one unused, else at -inf."""
    O = pos.shape[0]
    J = hidx.shape[0]
    L = TU.shape[1]
    out = np.empty((O, J))
    load = np.zeros((K, L))
    for j in range(J):                   # the class loads: rows added in job order
        for e in range(L):
            load[P[j], e] += TU[hidx[j], e]
    pre0 = np.empty((K + 1, L))          # the held prefix sums
    for e in range(L):
        pre0[0, e] = 0.0
    for k in range(K):
        for e in range(L):
            pre0[k + 1, e] = pre0[k, e] + load[k, e]
    lc = load.copy()
    pre = pre0.copy()
    for i in range(O):
        p = pos[i]
        ro = rn = -1
        if p >= 0:
            ro, rn = hidx[p], oidx[i]
            for x in range(nzp[ro], nzp[ro + 1]):
                e = nzi[x]
                lc[P[p], e] -= TU[ro, e]
            for x in range(nzp[rn], nzp[rn + 1]):
                e = nzi[x]
                lc[po[i], e] += TU[rn, e]
            for r in (ro, rn):
                for x in range(nzp[r], nzp[r + 1]):
                    e = nzi[x]
                    for k in range(K):
                        pre[k + 1, e] = pre[k, e] + lc[k, e]
        for j in range(J):
            if j == p:
                r, pj = oidx[i], po[i]
            else:
                r, pj = hidx[j], P[j]
            fj = TF[r]
            tm = -np.inf if nzp[r + 1] - nzp[r] == L else 0.0
            for x in range(nzp[r], nzp[r + 1]):
                e = nzi[x]
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
        if p >= 0:                       # back to the held loads
            for r in (ro, rn):
                for x in range(nzp[r], nzp[r + 1]):
                    e = nzi[x]
                    for k in range(K):
                        lc[k, e] = load[k, e]
                        pre[k + 1, e] = pre0[k + 1, e]
    return out


_KERNEL = numba.njit(cache=True)(_score_sparse) if numba is not None else None


def available() -> bool:
    return _KERNEL is not None and os.environ.get("HARMONICS_NO_JIT") != "1"


def sparsity(TU: np.ndarray, TT: np.ndarray) -> tuple:
    """The links each row uses (TU or TT not 0), as ``_score_sparse`` reads them: row r's
    are ``nzi[nzp[r]:nzp[r + 1]]``, in link order."""
    nz = (TU != 0) | (TT != 0)
    nzp = np.zeros(len(TT) + 1, dtype=np.int64)
    np.cumsum(nz.sum(axis=1), out=nzp[1:])
    return nzp, np.nonzero(nz)[1].astype(np.int64)


def score(TU, TT, TF, *args):
    """``_score``'s figures; ``args``: its arguments after TF.  The ``sparsity`` is formed
    per call: ``score_sparse`` takes it formed (kept with the table)."""
    return _KERNEL(TU, TT, TF, *sparsity(TU, TT), *args)


def score_sparse(*args):
    """``_score_sparse`` compiled: (TU, TT, TF, nzp, nzi, hidx, P, c, iso, pos, oidx, po,
    K, free_min, starved)."""
    return _KERNEL(*args)


def warm_up() -> None:
    """Compile (or load from numba's on-disk cache) once per process, before any decision."""
    if not available():
        return
    z = np.zeros((1, 1))
    i = np.zeros(1, dtype=np.int64)
    score(z, z, np.zeros(1), i, i, np.zeros(1), np.ones(1), i - 1, i, i, 1, 0.05, 1e6)
    score(z + 1, z + 1, np.zeros(1), i, i, np.zeros(1), np.ones(1), i, i, i, 1, 0.05, 1e6)
