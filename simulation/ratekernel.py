"""Compiled (numba) per-event passes of the engine's rate state (``simulation.rates``), for
large runs: the incremental assembly of the incidence, the links' load and the jobs' rates
after an allocation, a whole incremental rate update in one call (``incremental``), the
completions, the next completion and the progress between events.

Each is the numpy code it replaces, loop for loop: integer bookkeeping (exact), and float
sums accumulated from 0 in entry order as ``np.bincount`` does, products and quotients taken
element by element as numpy does, so the engine's state is bit-identical either way
(``tests/test_simulation.py`` compares both paths).  Imported only once a run's incidence
reaches ``simulation.waterfill.KERNEL_MIN_NNZ`` entries, as the water-filling kernel.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .updatekernel import refill

_INF = np.inf

# ``incremental``'s outcomes
DONE, EMPTY, FULL = 0, 1, 2


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
    n_new = len(ns)
    cap = len(p_rows) + len(new_cols)        # room for every entry; trimmed below
    idx = np.empty(n_keep + n_new, dtype=p_idx.dtype)
    rows = np.empty(cap, dtype=np.int64)
    cols = np.empty(cap, dtype=p_cols.dtype)
    vals = np.empty(cap, dtype=p_vals.dtype)
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
    nz_keep = q
    for t in range(n_new):
        idx[n_keep + t] = ns[t]
        for _ in range(slot_len[ns[t]]):
            rows[q] = n_keep + t
            q += 1
    for t in range(len(new_cols)):
        cols[nz_keep + t] = new_cols[t]
        vals[nz_keep + t] = new_vals[t]
    return idx, rows[:q], cols[:q], vals[:q]


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
def advance(idx, rate, rem, dt, job_cum, job_rate, polling):
    """Every active entity's remaining bytes after ``dt`` at its rate, and, when
    ``polling``, every job's bytes so far (``job_cum += job_rate * dt``)."""
    for i in range(len(idx)):
        s = idx[i]
        rem[s] = rem[s] - rate[s] * dt
    if polling:
        for j in range(len(job_cum)):
            job_cum[j] = job_cum[j] + job_rate[j] * dt


@njit(cache=True)
def add_load(acc, load, seg):
    """A time bin's link bytes: ``acc += load * seg``."""
    for k in range(len(acc)):
        acc[k] = acc[k] + load[k] * seg


@njit(cache=True)
def finished(idx, rem, total, fslot):
    """The active slots whose flow groups are done (``rem <= 1e-9 * total + 1e-6``, in
    ``idx`` order), with ``fslot`` (the next completion found before the advance) added at
    the end if it is not among them, as ``Engine.run``'s numpy test."""
    n = 0
    out = np.empty(len(idx) + 1, dtype=np.int64)
    seen = False
    for i in range(len(idx)):
        s = idx[i]
        if rem[s] <= 1e-9 * total[s] + 1e-6:
            out[n] = s
            n += 1
            if s == fslot:
                seen = True
    if fslot >= 0 and not seen:
        out[n] = fslot
        n += 1
    return out[:n]


@njit(cache=True)
def incremental(p_idx, p_rows, p_cols, p_vals, alive, ns, slot_len, new_cols, new_vals, rate,
                slot_job, job_cls, capacity, rem_rate, rem_cls, nflows, n_jobs, n_links, polling):
    """One incremental rate update in a single call: ``assemble``, then
    ``waterfill.waterfill_update``'s compiled steps (the new entities are the slots ``ns``,
    at the end; ``rem_rate`` / ``rem_cls``: the entities gone since the last allocation),
    then ``after_fill``.  Returns (idx, rows, cols, vals, outcome, load, job_rate):
    outcome ``EMPTY`` (no entity left) or ``FULL`` (the update does not apply: the caller
    fills from scratch) leave ``rate`` untouched and the last two empty."""
    idx, rows, cols, vals = assemble(p_idx, p_rows, p_cols, p_vals, alive, ns, slot_len,
                                     new_cols, new_vals)
    n = len(idx)
    if n == 0:
        return idx, rows, cols, vals, EMPTY, np.zeros(0), np.zeros(0)
    # update_prelude's checks, in the same pass that reads the classes and previous rates;
    # every entity has an entry here (the kept ones keep all theirs, a new slot has
    # slot_len >= 1: an entity off the network is never added), so only finiteness is checked
    cls = np.empty(n, dtype=np.int64)
    prev = np.empty(n)
    is_new = np.zeros(n, dtype=np.bool_)
    c_new = -1
    ok = True
    n_old = n - len(ns)
    for e in range(n):
        s = idx[e]
        c = job_cls[slot_job[s]]
        cls[e] = c
        if e >= n_old:
            is_new[e] = True
            prev[e] = 0.0
            if c_new < 0 or c < c_new:
                c_new = c
        else:
            x = rate[s]
            prev[e] = x
            if not np.isfinite(x):
                ok = False
    if len(rem_cls) == 0 and c_new < 0:
        r = prev.copy()
    elif not ok:
        return idx, rows, cols, vals, FULL, np.zeros(0), np.zeros(0)
    else:
        r, applied = refill(cls, rows, cols, vals, capacity, prev, is_new, c_new, rem_rate,
                            rem_cls)
        if not applied:
            return idx, rows, cols, vals, FULL, np.zeros(0), np.zeros(0)
    load, job_rate = after_fill(r, idx, rows, cols, vals, n_links, rate, slot_job, nflows,
                                n_jobs, polling)
    return idx, rows, cols, vals, DONE, load, job_rate
