"""Compiled (numba) steps of ``simulation.waterfill.waterfill_update`` before its filling
(``wfkernel.fill_free``), for large incidences: the checks, the residual of the classes above
the changed one, the level under which no constraint of a new entity can fill
(``first_fill_level``) and the entities that keep their rates; ``refill`` chains them with
the filling (the compiled update of both ``waterfill_update`` and
``ratekernel.incremental``).  Each does the numpy step's
comparisons and sums in the same order, so the update is bit-identical to the numpy one
(``tests/test_waterfill_kernel.py``).  On the 16,384-GPU headroom mix the numpy steps took
about a quarter of the time of the filling they prepare (~75 s against 303 s over 692,635
updates), nearly all of it call overhead.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .wfkernel import fill_free

_INF = np.inf


@njit(cache=True)
def update_prelude(prev, is_new, ent_cls, rows):
    """``waterfill_update``'s checks in one pass: ``prev`` with the new entities at 0, the
    highest-priority class among the new ones (-1: none), and whether every previous rate is
    finite and every entity has an entry (else the update is not applicable)."""
    n = len(prev)
    p = np.empty(n)
    c_new = -1
    ok = len(rows) > 0
    for e in range(n):
        if is_new[e]:
            p[e] = 0.0
            if c_new < 0 or ent_cls[e] < c_new:
                c_new = ent_cls[e]
        else:
            p[e] = prev[e]
            if not np.isfinite(p[e]):
                ok = False
    if ok:
        seen = np.zeros(n, dtype=np.bool_)
        for i in range(len(rows)):
            seen[rows[i]] = True
        for e in range(n):
            if not seen[e]:
                ok = False
                break
    return p, c_new, ok


@njit(cache=True)
def hi_residual(capacity, ent_cls, rows, cols, vals, prev, c0):
    """``capacity`` minus the load of the classes above ``c0`` at ``prev`` (summed in entry
    order from 0, as ``np.bincount``)."""
    s = np.zeros(len(capacity))
    for i in range(len(rows)):
        e = rows[i]
        if ent_cls[e] < c0:
            s[cols[i]] += prev[e] * vals[i]
    out = np.empty(len(capacity))
    for k in range(len(capacity)):
        out[k] = capacity[k] - s[k]
    return out


@njit(cache=True)
def fixed_mask(ent_cls, is_new, prev, c0, below):
    """The entities that keep their rates: every class above ``c0``, and the old class-``c0``
    entities with a rate under ``below``; and whether there is any."""
    n = len(prev)
    fixed = np.zeros(n, dtype=np.bool_)
    anyf = False
    for e in range(n):
        c = ent_cls[e]
        if c < c0 or (c == c0 and not is_new[e] and prev[e] < below):
            fixed[e] = True
            anyf = True
    return fixed, anyf


@njit(cache=True)
def first_fill_level(rows, cols, vals, cap, prev, ent_cls, c0, is_new):
    """``waterfill._first_fill_level`` for the new entities of class ``c0``: the same sums in
    the same order (per constraint in entry order as ``np.bincount``; the old entries sorted
    by constraint, then rate, then position, as ``np.lexsort``; running sums as
    ``np.cumsum``), so the level is bit-identical."""
    nk = len(cap)
    nz = len(rows)
    on = np.zeros(nk, dtype=np.bool_)
    for i in range(nz):
        e = rows[i]
        if is_new[e] and ent_cls[e] == c0:
            on[cols[i]] = True
    posk = np.full(nk, -1, dtype=np.int64)
    nkn = 0
    for k in range(nk):
        if on[k]:
            posk[k] = nkn
            nkn += 1
    W = np.zeros(nkn)
    capk = np.empty(nkn)
    for k in range(nk):
        if on[k]:
            c = cap[k]
            capk[posk[k]] = c if c > 0.0 else 0.0
    m = 0
    for i in range(nz):
        e = rows[i]
        if on[cols[i]] and ent_cls[e] == c0 and not is_new[e]:
            m += 1
    opos = np.empty(m, dtype=np.int64)
    ov = np.empty(m)
    orate = np.empty(m)
    j = 0
    for i in range(nz):
        e = rows[i]
        if not on[cols[i]] or ent_cls[e] != c0:
            continue
        if is_new[e]:
            W[posk[cols[i]]] += vals[i]
        else:
            opos[j] = posk[cols[i]]
            ov[j] = vals[i]
            orate[j] = prev[e]
            j += 1
    o1 = np.argsort(orate, kind="mergesort")
    o2 = np.argsort(opos[o1], kind="mergesort")
    order = o1[o2]
    pos = opos[order]
    ov = ov[order]
    orate = orate[order]
    tot_a = np.zeros(nkn)
    tot_ar = np.zeros(nkn)
    ar = np.empty(m)
    for q in range(m):
        tot_a[pos[q]] += ov[q]
        ar[q] = ov[q] * orate[q]
    for q in range(m):
        tot_ar[pos[q]] += ar[q]
    cs_ar = np.zeros(m + 1)
    cs_a = np.zeros(m + 1)
    for q in range(m):
        cs_ar[q + 1] = cs_ar[q] + ar[q]
        cs_a[q + 1] = cs_a[q] + ov[q]
    start = np.full(nkn, m, dtype=np.int64)
    for q in range(m - 1, -1, -1):
        start[pos[q]] = q
    level = np.full(nkn, _INF)
    found = np.zeros(nkn, dtype=np.bool_)
    for q in range(m):
        k = pos[q]
        if found[k]:
            continue
        s0 = start[k]
        before_ar = cs_ar[q] - cs_ar[s0]
        from_a = tot_a[k] - (cs_a[q] - cs_a[s0])
        g = before_ar + orate[q] * (from_a + W[k])
        if g >= capk[k]:
            found[k] = True
            level[k] = (capk[k] - before_ar) / (from_a + W[k])
    best = _INF
    for k in range(nkn):
        if not found[k]:
            level[k] = (capk[k] - tot_ar[k]) / W[k]
        x = level[k] if level[k] > 0.0 else 0.0
        if x < best:
            best = x
    return best


@njit(cache=True)
def refill(cls, rows, cols, vals, capacity, prev, is_new, c_new, rem_rate, rem_cls):
    """``waterfill_update`` after its checks (``prev`` with the new entities at 0, ``c_new``
    their highest class or -1; ``rem_rate`` / ``rem_cls``: the entities gone): the changed
    class ``c0``, the level ``lam`` under which its old entities keep their rates, the fixed
    set, and the filling of the others (``wfkernel.fill_free``).  Returns (rates, applied);
    not applied (no entity fixed): the caller fills from scratch."""
    c0 = c_new
    for c in rem_cls:
        if c0 < 0 or c < c0:
            c0 = c
    lam = _INF
    for i in range(len(rem_cls)):
        if rem_cls[i] == c0 and rem_rate[i] < lam:
            lam = rem_rate[i]
    if c_new == c0:
        res_hi = hi_residual(capacity, cls, rows, cols, vals, prev, c0)
        x = first_fill_level(rows, cols, vals, res_hi, prev, cls, c0, is_new)
        if x < lam:
            lam = x
    r = np.zeros(len(prev))
    fixed, any_fixed = fixed_mask(cls, is_new, prev, c0, lam * (1.0 - 1e-12))
    if not any_fixed:
        return r, False
    fill_free(r, cls, rows, cols, vals, capacity, prev, fixed)
    return r, True
