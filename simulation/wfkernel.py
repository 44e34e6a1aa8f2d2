"""Compiled (numba) kernel of the water-filling in ``simulation.waterfill``.

``fill_classes`` is the same computation as ``waterfill._fill_class`` called once per priority
class (highest first), with the same floating-point operations in the same order, so the rates
are bit-identical to the numpy version:

* a constraint's level is ``cb / w`` (``w``: flow count of the unfrozen entities, exact);
* each round freezes the entities of every constraint whose level is a local minimum, at
  their tightest level;
* what a round's newly frozen entities take from a constraint is summed from 0 in the order
  of the incidence entries (as ``np.bincount`` does) and then subtracted once, then the
  residual is clipped at 0;
* after a class, what it takes is summed the same way and subtracted from the residual.

The numpy version needs several passes over all entries per round; here a round is one pass
over the entries of the entities still unfrozen, with no temporaries.
"""
from __future__ import annotations

import numpy as np
from numba import njit

_INF = np.inf


@njit(cache=True)
def _index(rows, cols, sel, ent_map, con_map):
    """Compact numbering of the entities and constraints of the entries ``sel`` (sorted ids,
    as np.unique), each entry's local entity and constraint, and the entries grouped by entity
    (CSR ``ecount`` / ``eent``) in their order.  Leaves ``ent_map`` / ``con_map`` set."""
    ns = len(sel)
    # compact entity and constraint numbering, in increasing id order (as np.unique)
    ne = 0
    kc = 0
    for j in range(ns):
        i = sel[j]
        r = rows[i]
        if ent_map[r] < 0:
            ent_map[r] = 0
            ne += 1
        c = cols[i]
        if con_map[c] < 0:
            con_map[c] = 0
            kc += 1
    uents = np.empty(ne, dtype=np.int64)
    ucons = np.empty(kc, dtype=np.int64)
    a = 0
    b = 0
    for j in range(ns):
        i = sel[j]
        r = rows[i]
        if ent_map[r] == 0:
            ent_map[r] = -2
            uents[a] = r
            a += 1
        c = cols[i]
        if con_map[c] == 0:
            con_map[c] = -2
            ucons[b] = c
            b += 1
    uents.sort()
    ucons.sort()
    for k in range(ne):
        ent_map[uents[k]] = k
    for k in range(kc):
        con_map[ucons[k]] = k
    le = np.empty(ns, dtype=np.int64)
    lc = np.empty(ns, dtype=np.int64)
    for j in range(ns):
        i = sel[j]
        le[j] = ent_map[rows[i]]
        lc[j] = con_map[cols[i]]
    # entries grouped by entity (CSR), keeping their order
    ecount, eent = _grouped(le, np.arange(ns), ne)
    return uents, ucons, le, lc, ecount, eent


@njit(cache=True)
def _grouped(keys, items, n):
    """``items`` grouped by their ``keys`` (0..n-1), in their order within a key: key k's
    are ``out[start[k]:start[k + 1]]`` (CSR); returns (start, out)."""
    start = np.zeros(n + 1, dtype=np.int64)
    for j in range(len(keys)):
        start[keys[j] + 1] += 1
    for k in range(n):
        start[k + 1] += start[k]
    pos = start[:n].copy()
    out = np.empty(len(keys), dtype=np.int64)
    for j in range(len(keys)):
        k = keys[j]
        out[pos[k]] = items[j]
        pos[k] += 1
    return start, out


@njit(cache=True)
def _capacities(base, vals, sel, ucons, lc):
    """A class's constraints: what is left of each (``cb``, never below 0) and the summed
    weight of its entries (``w``, in entry order)."""
    kc = len(ucons)
    cb = np.empty(kc)
    w = np.zeros(kc)
    for k in range(kc):
        v = base[ucons[k]]
        cb[k] = v if v > 0.0 else 0.0
    for j in range(len(sel)):
        w[lc[j]] += vals[sel[j]]
    return cb, w


@njit(cache=True)
def _fill_one(rates, rows, cols, vals, sel, base, ent_map, con_map):
    """One class: the entries ``sel`` (increasing indices into rows/cols/vals).
    ``ent_map`` / ``con_map``: scratch arrays of -1 (restored on return)."""
    uents, ucons, le, lc, ecount, eent = _index(rows, cols, sel, ent_map, con_map)
    ns = len(sel)
    ne = len(uents)
    kc = len(ucons)
    cb, w = _capacities(base, vals, sel, ucons, lc)
    for k in range(kc):
        if w[k] < 0.5:
            cb[k] = _INF
            w[k] = 1.0
    frozen = np.zeros(ne, dtype=np.bool_)
    newly = np.zeros(ne, dtype=np.bool_)
    rate = np.zeros(ne)
    m = np.empty(ne)
    F = np.empty(kc)
    cmin = np.empty(kc)
    local = np.zeros(kc, dtype=np.bool_)
    sw = np.zeros(kc)
    sr = np.zeros(kc)
    left = ne
    while left > 0:
        for k in range(kc):
            F[k] = cb[k] / w[k]
            cmin[k] = _INF
        for e in range(ne):
            if frozen[e]:
                m[e] = _INF
                continue
            mm = _INF
            for q in range(ecount[e], ecount[e + 1]):
                f = F[lc[eent[q]]]
                if f < mm:
                    mm = f
            m[e] = mm
        for j in range(ns):
            k = lc[j]
            x = m[le[j]]
            if x < cmin[k]:
                cmin[k] = x
        anyl = False
        for k in range(kc):
            loc = F[k] <= cmin[k] and F[k] < _INF
            local[k] = loc
            if loc:
                anyl = True
        if not anyl:                       # cannot happen; guard against a stall
            best = 0
            for k in range(kc):
                if F[k] < F[best]:
                    best = k
            local[best] = True
        nnew = 0
        for e in range(ne):
            newly[e] = False
            if frozen[e]:
                continue
            for q in range(ecount[e], ecount[e + 1]):
                if local[lc[eent[q]]]:
                    newly[e] = True
                    break
            if newly[e]:
                rate[e] = m[e]
                frozen[e] = True
                nnew += 1
        left -= nnew
        if left <= 0:
            break
        for k in range(kc):
            sw[k] = 0.0
            sr[k] = 0.0
        for j in range(ns):
            e = le[j]
            if newly[e]:
                k = lc[j]
                v = vals[sel[j]]
                sw[k] += v
                sr[k] += v * rate[e]
        for k in range(kc):
            w[k] = w[k] - sw[k]
            c = cb[k] - sr[k]
            cb[k] = c if c > 0.0 else 0.0
            if local[k] or w[k] < 0.5:
                cb[k] = _INF
                w[k] = 1.0
    _finish(rates, vals, sel, base, ent_map, con_map, uents, ucons, le, lc, rate, sr)


@njit(cache=True)
def _index_sorted(rows, cols, sel, con_map):
    """``_index`` for entries grouped by entity in increasing order (rows non-decreasing
    along ``sel``), in one pass: entities numbered in that order (the same numbering as
    ``_index``), their entries contiguous (entity ``e``'s are ``ecount[e]:ecount[e+1]``);
    constraints numbered in order of first appearance (their order changes no sum: every
    per-constraint quantity is computed on its own).  Leaves ``con_map`` set."""
    ns = len(sel)
    le = np.empty(ns, dtype=np.int64)
    lc = np.empty(ns, dtype=np.int64)
    ecount = np.zeros(ns + 1, dtype=np.int64)
    uents = np.empty(ns, dtype=np.int64)
    ucons = np.empty(ns, dtype=np.int64)
    ne = 0
    kc = 0
    last = -1
    for j in range(ns):
        i = sel[j]
        r = rows[i]
        if ne == 0 or r != last:
            uents[ne] = r
            ecount[ne] = j
            ne += 1
            last = r
        le[j] = ne - 1
        c = cols[i]
        k = con_map[c]
        if k < 0:
            k = kc
            con_map[c] = k
            ucons[kc] = c
            kc += 1
        lc[j] = k
    ecount[ne] = ns
    return uents[:ne].copy(), ucons[:kc].copy(), le, lc, ecount[:ne + 1].copy()


@njit(cache=True)
def _finish(rates, vals, sel, base, ent_map, con_map, uents, ucons, le, lc, rate, sr):
    """The end of a class: its rates out, what it takes off ``base`` (summed in entry order,
    subtracted once), the scratch maps restored."""
    ne = len(uents)
    kc = len(ucons)
    ns = len(sel)
    for e in range(ne):
        rates[uents[e]] = rate[e]
    for k in range(kc):
        sr[k] = 0.0
    for j in range(ns):
        sr[lc[j]] += vals[sel[j]] * rate[le[j]]
    for k in range(kc):
        base[ucons[k]] = base[ucons[k]] - sr[k]
    for e in range(ne):
        ent_map[uents[e]] = -1
    for k in range(kc):
        con_map[ucons[k]] = -1


@njit(cache=True)
def _smallest_level(cb, w, F, ucons):
    """The stall guard's constraint, as ``_fill_one``'s: every level recomputed, the smallest,
    then the smallest constraint id."""
    kc = len(cb)
    for k in range(kc):
        F[k] = cb[k] / w[k]
    best = 0
    for k in range(kc):
        if F[k] < F[best] or (F[k] == F[best] and ucons[k] < ucons[best]):
            best = k
    return best


@njit(cache=True)
def _fill_one_sorted(rates, rows, cols, vals, sel, base, ent_map, con_map):
    """``_fill_one`` when the entries ``sel`` are grouped by entity in increasing entity order
    (rows non-decreasing along ``sel``, as the engine assembles them): entity-major order is
    then entry order, so every per-constraint sum adds the same terms in the same order.
    A round visits only the entities still unfrozen and the constraints still live
    (a constraint, once dead, has level inf and no unfrozen entity for good); the newly
    frozen entities are found from the local constraints' entity lists (a constraint is
    local once at most: it dies then, so these lists are read once per fill in all)."""
    uents, ucons, le, lc, ecount = _index_sorted(rows, cols, sel, con_map)
    ns = len(sel)
    ne = len(uents)
    kc = len(ucons)
    cb, w = _capacities(base, vals, sel, ucons, lc)
    lv = np.empty(ns)
    for j in range(ns):
        lv[j] = vals[sel[j]]
    ccount, cent = _grouped(lc, le, kc)         # the entities of each constraint
    F = np.empty(kc)
    live = np.empty(kc, dtype=np.int64)
    nlive = 0
    for k in range(kc):
        if w[k] < 0.5:
            cb[k] = _INF
            w[k] = 1.0
            F[k] = _INF
        else:
            live[nlive] = k
            nlive += 1
    act = np.arange(ne)
    nact = ne
    newl = np.empty(ne, dtype=np.int64)
    hit = np.zeros(ne, dtype=np.bool_)
    rate = np.zeros(ne)
    m = np.empty(ne)
    cmin = np.empty(kc)
    local = np.zeros(kc, dtype=np.bool_)
    sw = np.zeros(kc)
    sr = np.zeros(kc)
    while nact > 0:
        for t in range(nlive):
            k = live[t]
            F[k] = cb[k] / w[k]
            cmin[k] = _INF
        for a in range(nact):
            e = act[a]
            q0 = ecount[e]
            q1 = ecount[e + 1]
            mm = _INF
            for q in range(q0, q1):
                f = F[lc[q]]
                if f < mm:
                    mm = f
            m[e] = mm
            for q in range(q0, q1):
                k = lc[q]
                if mm < cmin[k]:
                    cmin[k] = mm
        anyl = False
        guard = -1
        for t in range(nlive):
            k = live[t]
            loc = F[k] <= cmin[k] and F[k] < _INF
            local[k] = loc
            if loc:
                anyl = True
        if not anyl:                       # cannot happen; guard against a stall
            guard = _smallest_level(cb, w, F, ucons)
            local[guard] = True
        for t in range(nlive):
            k = live[t]
            if local[k]:
                for q in range(ccount[k], ccount[k + 1]):
                    hit[cent[q]] = True
        nnew = 0
        na = 0
        for a in range(nact):
            e = act[a]
            if hit[e]:
                rate[e] = m[e]
                newl[nnew] = e
                nnew += 1
            else:
                act[na] = e
                na += 1
        nact = na
        if nact <= 0:
            break
        for t in range(nlive):
            k = live[t]
            sw[k] = 0.0
            sr[k] = 0.0
        for b in range(nnew):
            e = newl[b]
            re = rate[e]
            for q in range(ecount[e], ecount[e + 1]):
                k = lc[q]
                v = lv[q]
                sw[k] += v
                sr[k] += v * re
        nl = 0
        for t in range(nlive):
            k = live[t]
            w[k] = w[k] - sw[k]
            c = cb[k] - sr[k]
            cb[k] = c if c > 0.0 else 0.0
            if local[k] or w[k] < 0.5:
                cb[k] = _INF
                w[k] = 1.0
                F[k] = _INF
                local[k] = False
            else:
                live[nl] = k
                nl += 1
        nlive = nl
        if guard >= 0:
            local[guard] = False
    _finish(rates, vals, sel, base, ent_map, con_map, uents, ucons, le, lc, rate, sr)


@njit(cache=True)
def _rows_sorted(rows):
    for i in range(1, len(rows)):
        if rows[i] < rows[i - 1]:
            return False
    return True


@njit(cache=True)
def fill_classes(rates, ent_cls, rows, cols, vals, residual):
    """Fill every class present among the entries' entities, highest priority (0) first,
    against ``residual`` (updated in place; clipped at 0 after every class but the last)."""
    n = len(rates)
    ent_map = np.full(n, -1, dtype=np.int64)
    con_map = np.full(len(residual), -1, dtype=np.int64)
    nz = len(rows)
    ecls = np.empty(nz, dtype=np.int64)
    for i in range(nz):
        ecls[i] = ent_cls[rows[i]]
    ucls = np.unique(ecls)
    srt = _rows_sorted(rows)
    for t in range(len(ucls)):
        c = ucls[t]
        if len(ucls) == 1:
            sel = np.arange(nz)
        else:
            sel = np.flatnonzero(ecls == c)
        if srt:
            _fill_one_sorted(rates, rows, cols, vals, sel, residual, ent_map, con_map)
        else:
            _fill_one(rates, rows, cols, vals, sel, residual, ent_map, con_map)
        if len(ucls) > 1:
            for k in range(len(residual)):
                if residual[k] < 0.0:
                    residual[k] = 0.0


@njit(cache=True)
def fill_free(rates, ent_cls, rows, cols, vals, capacity, prev, fixed):
    """``waterfill_update``'s last step: the ``fixed`` entities keep ``prev``; the others get
    the max-min allocation of what the fixed ones leave (``capacity`` minus their load, summed
    in entry order, clipped at 0), class by class, as ``waterfill`` on that sub-problem.
    One pass over the entries sums the fixed load and lists the free entries; a counting
    sort groups those by class, keeping their order."""
    nz = len(rows)
    nk = len(capacity)
    s = np.zeros(nk)
    free_rows = np.empty(nz, dtype=np.int64)
    nfree = 0
    srt = True
    last = -1
    cmax = -1
    for i in range(nz):
        r = rows[i]
        if r < last:
            srt = False
        last = r
        if fixed[r]:
            s[cols[i]] += prev[r] * vals[i]
        else:
            free_rows[nfree] = i
            nfree += 1
            if ent_cls[r] > cmax:
                cmax = ent_cls[r]
    residual = np.empty(nk)
    for k in range(nk):
        c = capacity[k] - s[k]
        residual[k] = c if c > 0.0 else 0.0
    for e in range(len(rates)):
        if fixed[e]:
            rates[e] = prev[e]
    if nfree == 0:
        return
    start = np.zeros(cmax + 2, dtype=np.int64)      # class c's free entries: start[c]:start[c+1]
    for j in range(nfree):
        start[ent_cls[rows[free_rows[j]]] + 1] += 1
    ncls = 0
    for c in range(cmax + 1):
        if start[c + 1] > 0:
            ncls += 1
        start[c + 1] += start[c]
    bycls = free_rows[:nfree]
    if ncls > 1:
        bycls = np.empty(nfree, dtype=np.int64)
        pos = start[:cmax + 1].copy()
        for j in range(nfree):
            i = free_rows[j]
            c = ent_cls[rows[i]]
            bycls[pos[c]] = i
            pos[c] += 1
    ent_map = np.full(len(rates), -1, dtype=np.int64)
    con_map = np.full(nk, -1, dtype=np.int64)
    for c in range(cmax + 1):
        if start[c + 1] == start[c]:
            continue
        sel = bycls[start[c]:start[c + 1]]
        if srt:
            _fill_one_sorted(rates, rows, cols, vals, sel, residual, ent_map, con_map)
        else:
            _fill_one(rates, rows, cols, vals, sel, residual, ent_map, con_map)
        if ncls > 1:
            for k in range(nk):
                if residual[k] < 0.0:
                    residual[k] = 0.0
