"""Max-min fair rate allocation (progressive filling) under strict priority classes.

The fluid model's one allocation routine, vectorised with numpy.

An *entity* is something that moves at one rate: a single flow, several identical flows
between the same two hosts (they get the same share), or a whole synchronised ring (every
ring edge advances at the pace of the slowest, so the ring has one rate, see
``simulation.engine``).  Entity ``e`` loads constraint ``k`` with ``a[e, k]`` times its rate
(``a`` = how many of its flows cross link ``k``).  Constraints are the directed links plus
virtual ones (per-job rate caps on a link, the intra-host path).  Allocation:

* strict priority: class 0 is filled first against the full capacities, class 1 gets what
  class 0 left, and so on;
* inside a class, max-min fairness per *flow* (TCP-like): raise the rate of every unfrozen
  entity at the same pace; a constraint is full when ``sum_e a[e,k] * r_e = residual_k``;
  the entities crossing a full constraint freeze.  An entity whose ``a`` is 2 on the
  bottleneck therefore gets two flows' worth of that link, as two TCP flows would.

The incidence is given in COO form (``rows``: entity position, ``cols``: constraint index,
``vals``: multiplicity), so the cost per filling round is O(nnz).
"""
from __future__ import annotations

import numpy as np

_REL_EPS = 1e-9


def waterfill(n_entities: int, classes: np.ndarray, rows: np.ndarray, cols: np.ndarray,
              vals: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Rates (same unit as ``capacity``) of ``n_entities`` entities.

    ``classes``: priority class of each entity (0 highest).  ``rows/cols/vals``: the incidence
    (``vals`` are flow counts: positive integers, so the per-constraint sums are exact).
    ``capacity``: capacity of every constraint index used in ``cols``.
    An entity with no constraint at all gets ``inf``.
    """
    rates = np.zeros(n_entities)
    if n_entities == 0:
        return rates
    if len(rows) == 0:
        rates[:] = np.inf
        return rates
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    vals = np.asarray(vals, dtype=float)
    constrained = np.bincount(rows, minlength=n_entities) > 0
    rates[~constrained] = np.inf
    classes = np.asarray(classes)
    cls_c = classes[constrained]
    capacity = np.asarray(capacity, dtype=float)
    if len(cls_c) and cls_c.min() == cls_c.max():
        # one class: fill against the full capacities
        residual = capacity.copy() if len(capacity) else capacity
        _fill_class(rates, rows, cols, vals, residual)
        return rates
    residual = capacity.copy()
    cls_nz = classes[rows]
    for c in np.unique(cls_c):
        nz = cls_nz == c
        _fill_class(rates, rows[nz], cols[nz], vals[nz], residual)
        np.maximum(residual, 0.0, out=residual)   # the next class sees what is left
    return rates


def _segments(keys: np.ndarray):
    """Sort ``keys``: (order, unique keys, start of each key's run, inverse index)."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    flag = np.empty(len(sk), dtype=bool)
    flag[0] = True
    np.not_equal(sk[1:], sk[:-1], out=flag[1:])
    starts = np.flatnonzero(flag)
    inv = np.empty(len(sk), dtype=np.int64)
    inv[order] = np.cumsum(flag) - 1
    return order, sk[starts], starts, inv


def _fill_class(rates, r_rows, r_cols, r_vals, base):
    """Max-min fair rates of one class's entities against the capacities ``base`` (updated
    in place to what the class leaves).

    Parallel progressive filling: a constraint's fair level is F_c = base_c / w_c (what every
    unfrozen entity crossing it would get if it saturated next).  Sequential filling freezes
    the constraint with the smallest F first; freezing raises the other levels or leaves them
    alone, so *every* constraint whose F is the smallest among the constraints it shares an
    entity with (a local minimum) saturates at exactly its current F.  Each round freezes the
    entities of all local minima at once: the same allocation, in far fewer rounds."""
    by_col, ucols, col_start, lc = _segments(r_cols)
    if len(r_rows) > 1 and bool(np.all(r_rows[1:] >= r_rows[:-1])):
        flag = np.empty(len(r_rows), dtype=bool)
        flag[0] = True
        np.not_equal(r_rows[1:], r_rows[:-1], out=flag[1:])
        row_start = np.flatnonzero(flag)
        urows = r_rows[row_start]
        lr = np.cumsum(flag) - 1
        cols_by_row = lc
    else:
        by_row, urows, row_start, lr = _segments(r_rows)
        cols_by_row = lc[by_row]
    kc, ne = len(ucols), len(urows)
    cb = base[ucols]
    rows_by_col = lr[by_col]
    w = np.bincount(lc, weights=r_vals, minlength=kc)
    frozen = np.zeros(ne, dtype=bool)
    rate = np.zeros(ne)
    F = np.empty(kc)
    left = ne
    while left > 0:
        live_c = w > 0.5                      # flow counts are integers: exact sums
        F.fill(np.inf)
        np.divide(np.maximum(cb, 0.0), w, out=F, where=live_c)
        m = np.minimum.reduceat(F[cols_by_row], row_start)      # each entity's tightest level
        m[frozen] = np.inf
        cmin = np.minimum.reduceat(m[rows_by_col], col_start)   # smallest level next to c
        local = live_c & (F <= cmin)
        if not local.any():                   # cannot happen; guard against a stall
            local[int(np.argmin(F))] = True
        newly = np.zeros(ne, dtype=bool)
        newly[lr[local[lc]]] = True
        newly &= ~frozen
        rate[newly] = m[newly]
        frozen |= newly
        left -= int(np.count_nonzero(newly))
        if left <= 0:
            break
        nzm = newly[lr]
        sel_c = lc[nzm]
        sel_v = r_vals[nzm]
        w -= np.bincount(sel_c, weights=sel_v, minlength=kc)
        cb -= np.bincount(sel_c, weights=sel_v * rate[lr[nzm]], minlength=kc)
        w[local] = 0.0
    rates[urows] = rate
    # what the class leaves on its constraints
    base[ucols] -= np.bincount(lc, weights=r_vals * rate[lr], minlength=kc)


def link_loads(rates: np.ndarray, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray,
               n_constraints: int) -> np.ndarray:
    """Load on every constraint given entity rates (inf rates count as 0)."""
    if len(rows) == 0:
        return np.zeros(n_constraints)
    r = rates[rows]
    r = np.where(np.isfinite(r), r, 0.0)
    return np.bincount(cols, weights=r * vals, minlength=n_constraints)
