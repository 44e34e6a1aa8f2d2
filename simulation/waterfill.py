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

import math
from types import SimpleNamespace

import numpy as np

_REL_EPS = 1e-9

# incidence entries from which a call uses the compiled kernel (simulation.wfkernel, the same
# rates bit for bit); below, the numpy filling, which spares small runs numba's import
KERNEL_MIN_NNZ = 512
_kernel = None


def _wfkernel():
    global _kernel
    if _kernel is None:
        from .updatekernel import refill, update_prelude
        from .wfkernel import fill_classes
        _kernel = SimpleNamespace(fill_classes=fill_classes, refill=refill,
                                  update_prelude=update_prelude)
    return _kernel


def waterfill(n_entities: int, classes: np.ndarray, rows: np.ndarray, cols: np.ndarray,
              vals: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Rates (same unit as ``capacity``) of ``n_entities`` entities.

    ``classes``: priority class of each entity (0 highest).  ``rows/cols/vals``: the incidence
    (``vals`` are flow counts: positive integers, so the per-constraint sums are exact).
    ``capacity``: capacity of every constraint index used in ``cols``.
    An entity with no constraint at all gets ``inf``.
    """
    rates, rows, cols, vals, constrained = _start(n_entities, rows, cols, vals)
    if constrained is None:
        return rates
    if len(rows) < KERNEL_MIN_NNZ:
        return _waterfill_np(rates, classes, rows, cols, vals, capacity, constrained)
    residual = np.array(capacity, dtype=float)
    _wfkernel().fill_classes(rates, np.asarray(classes, dtype=np.int64), rows, cols, vals, residual)
    return rates


def waterfill_numpy(n_entities: int, classes: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                    vals: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """``waterfill`` with the numpy filling (``_fill_class``): the reference the compiled
    kernel (``simulation.wfkernel``) is checked against, bit for bit."""
    rates, rows, cols, vals, constrained = _start(n_entities, rows, cols, vals)
    if constrained is None:
        return rates
    return _waterfill_np(rates, classes, rows, cols, vals, capacity, constrained)


def _start(n_entities: int, rows, cols, vals) -> tuple:
    """Both fillings' start: (rates, rows, cols, vals, constrained), the entities with no
    constraint at ``inf``; ``constrained`` None when nothing is left to fill."""
    rates = np.zeros(n_entities)
    if n_entities == 0:
        return rates, rows, cols, vals, None
    if len(rows) == 0:
        rates[:] = np.inf
        return rates, rows, cols, vals, None
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    vals = np.asarray(vals, dtype=float)
    constrained = np.bincount(rows, minlength=n_entities) > 0
    rates[~constrained] = np.inf
    return rates, rows, cols, vals, constrained


def _waterfill_np(rates, classes, rows, cols, vals, capacity, constrained):
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
    np.maximum(cb, 0.0, out=cb)
    rows_by_col = lr[by_col]
    w = np.bincount(lc, weights=r_vals, minlength=kc)
    frozen = np.zeros(ne, dtype=bool)
    rate = np.zeros(ne)
    inf = np.inf
    left = ne
    # a constraint with no unfrozen entity left gets level inf (cb = inf, w = 1)
    dead = w < 0.5
    cb[dead] = inf
    w[dead] = 1.0
    while left > 0:
        F = cb / w                            # flow counts are integers: exact sums
        m = np.minimum.reduceat(F[cols_by_row], row_start)      # each entity's tightest level
        m[frozen] = inf
        cmin = np.minimum.reduceat(m[rows_by_col], col_start)   # smallest level next to c
        local = F <= cmin
        local &= F < inf
        if not local.any():                   # cannot happen; guard against a stall
            local[int(np.argmin(F))] = True
        newly = np.maximum.reduceat(local[cols_by_row], row_start)
        newly &= ~frozen
        nnew = int(np.count_nonzero(newly))
        rate[newly] = m[newly]
        frozen |= newly
        left -= nnew
        if left <= 0:
            break
        nzm = newly[lr]
        sel_c = lc[nzm]
        sel_v = r_vals[nzm]
        w -= np.bincount(sel_c, weights=sel_v, minlength=kc)
        cb -= np.bincount(sel_c, weights=sel_v * rate[lr[nzm]], minlength=kc)
        np.maximum(cb, 0.0, out=cb)
        dead = local | (w < 0.5)
        cb[dead] = inf
        w[dead] = 1.0
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


def waterfill_update(n_entities: int, classes: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                     vals: np.ndarray, capacity: np.ndarray, prev: np.ndarray,
                     is_new: np.ndarray, removed) -> np.ndarray:
    """The same allocation as ``waterfill`` after a few entities were added or removed,
    reusing the previous allocation where max-min fairness says it cannot have changed.

    ``prev``: previous rates of the entities that were already there (ignored where
    ``is_new``); ``removed``: ``(rate, class)`` of every entity gone since ``prev`` was
    computed.  Capacities and the other entities' classes and constraints must be unchanged.

    Why it is exact: let ``c0`` be the highest-priority class that changed.  Classes above
    it see the same capacities and keep their rates.  Inside ``c0``, progressive filling is
    unchanged below the level ``lam``, the smallest of

    * the old rate of every removed entity (every constraint it crossed saturated at or above
      its rate, and removing it only lowers those loads), and
    * ``residual_k / w_k`` over the constraints ``k`` of every added entity (``w_k``: flow
      count of all class-``c0`` entities on ``k`` now; no constraint can fill below that
      level, whatever the others get, since each entity loads it with at most ``a * level``).

    So every class-``c0`` entity with an old rate below ``lam`` keeps it, and the others (and
    every lower class) are the max-min allocation of what those fixed entities leave: filling
    that residual from zero reaches no constraint before ``lam``, and above ``lam`` it is the
    same process."""
    rates = np.zeros(n_entities)
    if n_entities == 0:
        return rates
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    vals = np.asarray(vals, dtype=float)
    classes = np.asarray(classes)
    capacity = np.asarray(capacity, dtype=float)
    is_new = np.asarray(is_new, dtype=bool)
    if len(rows) >= KERNEL_MIN_NNZ:
        return _update_compiled(rates, classes, rows, cols, vals, capacity,
                                np.asarray(prev, dtype=float), is_new, removed)
    prev = np.where(is_new, 0.0, np.asarray(prev, dtype=float))
    changed = [int(c) for _, c in removed] + [int(c) for c in np.unique(classes[is_new])]
    if not changed:
        return prev.copy()
    if len(rows) == 0 or not np.all(np.isfinite(prev)) or \
            np.bincount(rows, minlength=n_entities).min() == 0:
        return waterfill(n_entities, classes, rows, cols, vals, capacity)
    c0 = min(changed)
    lam = min([float(r) for r, c in removed if int(c) == c0], default=math.inf)
    hi = classes < c0
    new0 = is_new & (classes == c0)
    if new0.any():
        if hi.any():
            m = hi[rows]
            nzr = prev[rows[m]] * vals[m]
            res_hi = capacity - np.bincount(cols[m], weights=nzr, minlength=len(capacity))
        else:
            res_hi = capacity
        lam = min(lam, _first_fill_level(rows, cols, vals, res_hi, prev, classes == c0, new0))
    fixed = hi | ((classes == c0) & ~is_new & (prev < lam * (1.0 - 1e-12)))
    if not fixed.any():
        return waterfill(n_entities, classes, rows, cols, vals, capacity)
    free = ~fixed
    fm = fixed[rows]
    residual = capacity - np.bincount(cols[fm], weights=prev[rows[fm]] * vals[fm],
                                      minlength=len(capacity))
    np.maximum(residual, 0.0, out=residual)
    rates[fixed] = prev[fixed]
    nf = int(np.count_nonzero(free))
    if nf:
        pos = np.cumsum(free) - 1
        um = ~fm
        rates[free] = waterfill(nf, classes[free], pos[rows[um]], cols[um], vals[um], residual)
    return rates


def _update_compiled(rates, classes, rows, cols, vals, capacity, prev, is_new, removed):
    """``waterfill_update`` for large incidences: the same steps, with the passes over every
    entity and entry compiled (``simulation.updatekernel``, then ``wfkernel.fill_free``: the
    same comparisons, and the same sums in the same order), so the rates are bit-identical
    to the numpy steps above."""
    kern = _wfkernel()
    cls = np.asarray(classes, dtype=np.int64)
    prev, c_new, ok = kern.update_prelude(prev, is_new, cls, rows)
    if not removed and c_new < 0:
        return prev.copy()
    if not ok:
        return waterfill(len(rates), classes, rows, cols, vals, capacity)
    r, applied = kern.refill(cls, rows, cols, vals, capacity, prev, is_new, c_new,
                             np.array([x for x, _ in removed], dtype=float),
                             np.array([c for _, c in removed], dtype=np.int64))
    return r if applied else waterfill(len(rates), classes, rows, cols, vals, capacity)


def _first_fill_level(rows, cols, vals, cap, prev, in_class, new):
    """Smallest level at which a constraint crossed by a ``new`` entity fills, while the old
    entities of the class keep their previous rates ``prev`` (each loads ``k`` with
    ``a * min(prev, level)``) and the new ones rise with the level: per constraint, the root
    of the piecewise-linear ``sum_old a*min(r, x) + W_new*x = cap``."""
    kn = np.unique(cols[new[rows]])
    nk = len(cap)
    on = np.zeros(nk, dtype=bool)
    on[kn] = True
    sel = on[cols] & in_class[rows]
    nzr, nzc, nzv = rows[sel], cols[sel], vals[sel]
    isn = new[nzr]
    W = np.bincount(nzc[isn], weights=nzv[isn], minlength=nk)[kn]
    capk = np.maximum(cap[kn], 0.0)
    oc, ov, orate = nzc[~isn], nzv[~isn], prev[nzr[~isn]]
    pos = np.searchsorted(kn, oc)                       # constraint position in kn
    order = np.lexsort((orate, pos))
    pos, ov, orate = pos[order], ov[order], orate[order]
    nkn = len(kn)
    tot_a = np.bincount(pos, weights=ov, minlength=nkn)
    ar = ov * orate
    cs_ar = np.concatenate([[0.0], np.cumsum(ar)])      # prefix sums, from 0
    cs_a = np.concatenate([[0.0], np.cumsum(ov)])
    start = np.searchsorted(pos, np.arange(nkn))        # first entry of each constraint
    i = np.arange(len(pos))
    before_ar = cs_ar[i] - cs_ar[start[pos]]            # sum a*r of the entries below this one
    from_a = tot_a[pos] - (cs_a[i] - cs_a[start[pos]])  # sum a of this entry and those above
    g = before_ar + orate * (from_a + W[pos])           # load at level = this entry's rate
    hit = g >= capk[pos]
    level = np.full(nkn, np.inf)
    # constraints where some breakpoint reaches capacity: the root in the first such segment
    hk = np.flatnonzero(np.bincount(pos[hit], minlength=nkn) > 0)
    if len(hk):
        first = np.full(nkn, len(pos))
        np.minimum.at(first, pos[hit], np.flatnonzero(hit))
        j = first[hk]
        level[hk] = (capk[hk] - before_ar[j]) / (from_a[j] + W[hk])
    # the others: every old entity below the root
    rest = np.ones(nkn, dtype=bool)
    rest[hk] = False
    tot_ar = np.bincount(pos, weights=ar, minlength=nkn)
    level[rest] = (capk[rest] - tot_ar[rest]) / W[rest]
    return float(np.min(np.maximum(level, 0.0)))


def waterfill_guaranteed(n_entities: int, classes: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                         vals: np.ndarray, capacity: np.ndarray, n_links: int,
                         share: float) -> np.ndarray:
    """``waterfill`` where every priority class below the highest one present keeps ``share``
    of each link (``cols`` < ``n_links``) while a higher class is backlogged, as htb's
    guaranteed rates or a switch's ETS minimum give (``ClusterSpec.class_guarantee``).

    Two stages, as htb serves its classes:
    * the guarantees: every entity of a lower class is filled against its class's guarantee
      on each of its links (``share`` x the link, one virtual constraint per class and link)
      and the real constraints, all lower classes in one max-min filling;
    * what is left goes by strict priority: ``waterfill`` of every class (the highest first)
      against the residual, each entity's increment added to its guaranteed rate.
    Both stages are one strict-priority filling of an augmented incidence, whose top class
    is the guarantees (a copy of every lower-class entity). ``share`` 0, or a single class:
    ``waterfill`` itself."""
    classes = np.asarray(classes, dtype=np.int64)
    rows = np.asarray(rows, dtype=np.int64)
    present = np.unique(classes[rows]) if share > 0 and n_entities else classes[:0]
    if len(present) < 2:
        return waterfill(n_entities, classes, rows, cols, vals, capacity)
    cols = np.asarray(cols, dtype=np.int64)
    vals = np.asarray(vals, dtype=float)
    capacity = np.asarray(capacity, dtype=float)
    rank = np.minimum(np.searchsorted(present, classes), len(present) - 1)   # 0: the highest present
    lower = np.flatnonzero(rank > 0)
    copy_of = np.full(n_entities, -1, dtype=np.int64)
    copy_of[lower] = n_entities + np.arange(len(lower))
    sel = copy_of[rows] >= 0
    c_rows, c_cols, c_vals = copy_of[rows[sel]], cols[sel], vals[sel]
    on_link = c_cols < n_links
    g_cols = len(capacity) + (rank[rows[sel]][on_link] - 1) * n_links + c_cols[on_link]
    # (a copy's entries are not contiguous: both fillings take entries in any order)
    a_rows = np.concatenate([rows, c_rows, c_rows[on_link]])
    a_cols = np.concatenate([cols, c_cols, g_cols])
    a_vals = np.concatenate([vals, c_vals, c_vals[on_link]])
    a_cap = np.concatenate([capacity, np.tile(capacity[:n_links] * share, len(present) - 1)])
    a_cls = np.concatenate([rank + 1, np.zeros(len(lower), dtype=np.int64)])
    r = waterfill(n_entities + len(lower), a_cls, a_rows, a_cols, a_vals, a_cap)
    out = r[:n_entities].copy()
    out[lower] += r[n_entities:]
    return out
