"""Compiled (numba) per-event passes of the engine's rate state (``simulation.rates``), for
large runs: the incremental assembly of the incidence, the links' load and the jobs' rates
after an allocation, the next completion and the progress between events.

Each is the numpy code it replaces, loop for loop: integer bookkeeping (exact), and float
sums accumulated from 0 in entry order as ``np.bincount`` does, products and quotients taken
element by element as numpy does, so the engine's state is bit-identical either way
(``tests/test_simulation.py`` compares both paths).  Imported only once a run's incidence
reaches ``simulation.waterfill.KERNEL_MIN_NNZ`` entries, as the water-filling kernel.
"""
from __future__ import annotations

import numpy as np
from numba import njit

_INF = np.inf


@njit(cache=True)
def assemble(p_idx, p_rows, p_cols, p_vals, alive, ns, slot_len, new_cols, new_vals):
    """The previous incidence (slots ``p_idx``, COO ``p_rows/p_cols/p_vals``) minus the
    entities gone (not ``alive``, or in ``ns``: freed and reused since), plus the new slots
    ``ns`` at the end with their entries ``new_cols/new_vals`` (concatenated in ``ns``
    order).  Returns (idx, rows, cols, vals) as ``FlowRates._recompute``'s numpy path."""
    npv = len(p_idx)
    stale = np.zeros(len(alive), dtype=np.bool_)
    for s in ns:
        stale[s] = True
    pos = np.empty(npv, dtype=np.int64)
    n_keep = 0
    for i in range(npv):
        s = p_idx[i]
        if alive[s] and not stale[s]:
            pos[i] = n_keep
            n_keep += 1
        else:
            pos[i] = -1
    nz_keep = 0
    for j in range(len(p_rows)):
        if pos[p_rows[j]] >= 0:
            nz_keep += 1
    n_new = len(ns)
    nz = nz_keep + len(new_cols)
    idx = np.empty(n_keep + n_new, dtype=p_idx.dtype)
    rows = np.empty(nz, dtype=np.int64)
    cols = np.empty(nz, dtype=p_cols.dtype)
    vals = np.empty(nz, dtype=p_vals.dtype)
    for i in range(npv):
        if pos[i] >= 0:
            idx[pos[i]] = p_idx[i]
    q = 0
    for j in range(len(p_rows)):
        r = pos[p_rows[j]]
        if r >= 0:
            rows[q] = r
            cols[q] = p_cols[j]
            vals[q] = p_vals[j]
            q += 1
    for t in range(n_new):
        idx[n_keep + t] = ns[t]
        for _ in range(slot_len[ns[t]]):
            rows[q] = n_keep + t
            q += 1
    for t in range(len(new_cols)):
        cols[nz_keep + t] = new_cols[t]
        vals[nz_keep + t] = new_vals[t]
    return idx, rows, cols, vals


@njit(cache=True)
def after_fill(r, idx, rows, cols, vals, n_links, rate, slot_job, nflows, n_jobs, polling):
    """After an allocation ``r`` of the entities ``idx``: non-finite rates to 0, ``rate``
    updated, the links' load (constraints below ``n_links``) and, when ``polling``, every
    job's rate in flows (as ``np.bincount`` with weights, in entry / entity order)."""
    n = len(idx)
    for e in range(n):
        x = r[e]
        if not np.isfinite(x):
            r[e] = 0.0
    for e in range(n):
        rate[idx[e]] = r[e]
    load = np.zeros(n_links)
    for j in range(len(rows)):
        c = cols[j]
        if c < n_links:
            load[c] += r[rows[j]] * vals[j]
    job_rate = np.zeros(n_jobs)
    if polling:
        for e in range(n):
            s = idx[e]
            job_rate[slot_job[s]] += r[e] * nflows[s]
    return load, job_rate


@njit(cache=True)
def next_completion(idx, rate, rem):
    """(time to the first completion, position in ``idx``) as ``_next_completion``'s numpy
    path (``np.argmin``: the first smallest); (inf, -1) if no entity has a positive rate."""
    best = _INF
    k = -1
    for i in range(len(idx)):
        s = idx[i]
        x = rate[s]
        if x > 0:
            t = rem[s] / x
            if k < 0 or t < best:
                best = t
                k = i
    return best, k


@njit(cache=True)
def advance(idx, rate, rem, dt):
    """Every active entity's remaining bytes after ``dt`` at its rate."""
    for i in range(len(idx)):
        s = idx[i]
        rem[s] = rem[s] - rate[s] * dt
