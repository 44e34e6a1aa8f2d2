"""Compiled (numba) version of the model's fluid event simulation (``evaluate.simulate``).

The same algorithm as ``fluid._Alloc._fill`` (progressive filling: strict priority between
classes, per-flow max-min fairness inside one, per-job bounds) and as the event loop of
``fluid._simulate_py`` (exact-cycle detection on snapshots taken when the reference job
completes, else the mean over the second half of the run), on plain numpy arrays.  The
floating-point operations are the same and in the same order (no fastmath), so the results
equal the Python path bit for bit; see ``_round7`` for the one (theoretical) exception.

Rate allocations are cached per call in a dense table indexed by the bit mask of the
communicating jobs (filled lazily), hence the limit of ``MAX_JOBS`` communicating jobs:
``evaluate.simulate`` runs larger groups (and everything when numba is missing or
``HARMONICS_NO_JIT=1``) in Python.

numba is imported here, guarded: ``AVAILABLE`` says whether the kernel can run; this module
is imported by ``evaluate.simulate`` on first use only.
"""
from __future__ import annotations

import math
import time
from typing import Mapping, Optional, Sequence

import numpy as np

from .fluid import SimJob

try:
    import numba
    from numba import types
    from numba.typed import Dict as _TypedDict
except ImportError:      # evaluate.simulate then uses the pure-Python path
    numba = None

AVAILABLE = numba is not None
MAX_JOBS = 16            # rate table: 2**MAX_JOBS rows (8 MB of float64 at 16 jobs)

INF = math.inf


def _njit(f):
    """numba.njit(cache=True) when numba is there; the plain function otherwise (never
    called then, but the module stays importable)."""
    return numba.njit(cache=True)(f) if AVAILABLE else f


# ---------------------------------------------------------------------------
# Rate allocation
# ---------------------------------------------------------------------------

@_njit
def _fill(mask, prio, ncls, lmax, bmax, jptr, jlink, ja, uptr, uj, ua, capl, x):
    """Progress rates of the jobs in ``mask`` into ``x`` (0 for the others): ``_Alloc._fill``.

    Jobs: ``prio`` (dense 0..ncls-1), ``lmax``, ``bmax``; job j's links are
    ``jlink[jptr[j]:jptr[j+1]]`` with flow-equivalents ``ja`` (B / bmax).  ``uptr``/``uj``/
    ``ua``: per link, its users (job, flow-equivalents) in ascending job order -- the order in
    which the Python code sums a link's flow-equivalents.  The order in which links are
    visited does not matter (only minima and per-link sums are taken over them)."""
    m = prio.shape[0]
    nl = capl.shape[0]
    for j in range(m):
        x[j] = 0.0
    resid = capl.copy()
    R = np.empty(nl)
    fu = np.empty(nl)                   # frozen_used
    llev = np.empty(nl)                 # link level of this round
    lhas = np.zeros(nl, np.bool_)       # link has a level this round
    inuse = np.zeros(nl, np.bool_)
    ul = np.empty(nl, np.int64)         # the links of the class's members
    unfrozen = np.zeros(m, np.bool_)
    newly = np.zeros(m, np.bool_)
    lam = np.empty(m)
    for k in range(ncls):
        nun = 0
        for j in range(m):
            unfrozen[j] = ((mask >> j) & 1) == 1 and prio[j] == k
            if unfrozen[j]:
                nun += 1
        if nun == 0:
            continue
        nu = 0
        for j in range(m):
            if unfrozen[j]:
                for p in range(jptr[j], jptr[j + 1]):
                    l = jlink[p]
                    if not inuse[l]:
                        inuse[l] = True
                        ul[nu] = l
                        nu += 1
        for q in range(nu):
            l = ul[q]
            r = resid[l]
            R[l] = r if r > 0.0 else 0.0          # max(0.0, r)
            fu[l] = 0.0
        level = 0.0
        while nun > 0:
            cand = INF
            for q in range(nu):
                l = ul[q]
                w = 0.0
                for s in range(uptr[l], uptr[l + 1]):
                    if unfrozen[uj[s]]:
                        w += ua[s]
                if w > 0.0:
                    v = (R[l] - fu[l]) / w
                    llev[l] = v
                    lhas[l] = True
                    if v < cand:
                        cand = v
                else:
                    lhas[l] = False
            for j in range(m):
                if unfrozen[j] and lmax[j] < cand:
                    cand = lmax[j]
            if cand == INF:
                for j in range(m):
                    if unfrozen[j]:
                        lam[j] = INF
                        unfrozen[j] = False
                break
            if cand > level:
                level = cand
            a = abs(level)
            lim = level + 1e-12 * (a if a > 1.0 else 1.0)   # max(1.0, abs(level))
            for q in range(nu):
                l = ul[q]
                if lhas[l] and llev[l] <= lim:
                    for s in range(uptr[l], uptr[l + 1]):
                        j = uj[s]
                        if unfrozen[j]:
                            newly[j] = True
            for j in range(m):
                if unfrozen[j] and lmax[j] <= lim:
                    newly[j] = True
            lv = level if level > 0.0 else 0.0           # max(0.0, level)
            for j in range(m):                           # sorted(newly)
                if newly[j]:
                    newly[j] = False
                    unfrozen[j] = False
                    nun -= 1
                    lam[j] = lv
                    for p in range(jptr[j], jptr[j + 1]):
                        fu[jlink[p]] += ja[p] * lv
        for q in range(nu):
            l = ul[q]
            resid[l] = R[l] - fu[l]
            inuse[l] = False
        for j in range(m):
            if ((mask >> j) & 1) == 1 and prio[j] == k:
                x[j] = lam[j] / bmax[j]


# ---------------------------------------------------------------------------
# Snapshot keys
# ---------------------------------------------------------------------------

_TWO52 = 4503599627370496.0


@_njit
def _round7(v):
    """``round(v, 7)`` as CPython computes it, and an int64 for hashing (the integer count of
    1e-7 steps; 0 for the values handled approximately).

    CPython rounds the exact binary value of v to 7 decimals (ties to even) and converts the
    decimal back to the nearest double.  Here: p = v * 1e7 and its exact rounding error e
    (Dekker's product: 1e7 has 17 significant bits, so v's 26-bit halves times 1e7 are
    exact); rint(p) is the right integer k unless p is a half-integer, when the sign of e
    decides; k / 1e7 (k exact as a double, one correctly rounded division) is then the double
    nearest to k * 10**-7, as CPython's.  Identical to round(v, 7) for |v * 1e7| < 2**52
    (|v| < 4.5e8).  Beyond that (a remaining time of more than 4.5e8 compute periods) the
    result is rint(v * 1e7) / 1e7, which can differ from round() by an ulp or so; nan and
    +-inf are returned unchanged, as round() does."""
    if v != v or v == INF or v == -INF:
        return v, 0
    p = v * 1e7
    if not (abs(p) < _TWO52):
        return np.rint(p) / 1e7, 0
    c = 134217729.0 * v                 # Veltkamp split of v into 26-bit halves
    vh = c - (c - v)
    vl = v - vh
    e = (vh * 1e7 - p) + vl * 1e7       # v * 1e7 == p + e exactly
    k = np.rint(p)                      # ties to even, as round()
    d = p - k                           # exact
    if d == 0.5 or d == -0.5:           # p is a half-integer: the exact value is not
        if e > 0.0:
            k = p + 0.5
        elif e < 0.0:
            k = p - 0.5
    r = k / 1e7
    if r == 0.0:
        r = math.copysign(0.0, v)       # round(-1e-9, 7) == -0.0
    return r, np.int64(k)


# ---------------------------------------------------------------------------
# Event loop
# ---------------------------------------------------------------------------

@_njit
def _link_users(jptr, jlink, ja, m, nl):
    """Per link, its users (job, flow-equivalents) in ascending job order (see ``_fill``):
    (uptr, uj, ua), link l's users at ``uptr[l]:uptr[l+1]``."""
    uptr = np.zeros(nl + 1, np.int64)
    for p in range(jptr[m]):
        uptr[jlink[p] + 1] += 1
    for l in range(nl):
        uptr[l + 1] += uptr[l]
    fillp = np.empty(nl, np.int64)
    for l in range(nl):
        fillp[l] = uptr[l]
    uj = np.empty(jptr[m], np.int64)
    ua = np.empty(jptr[m])
    for j in range(m):
        for p in range(jptr[j], jptr[j + 1]):
            l = jlink[p]
            uj[fillp[l]] = j
            ua[fillp[l]] = ja[p]
            fillp[l] += 1
    return uptr, uj, ua


@_njit
def _start(jobf, comp):
    """The state at time 0: (norm, tiny, state, rem, mask).  ``norm``: the scale of a job's
    remaining compute in snapshot keys; ``tiny``: its completion tolerance; ``state`` 0:
    compute (or waiting for the shift), 1: communicate; ``rem``: remaining compute seconds
    or communication fraction; ``mask``: bit mask of the communicating jobs."""
    m = jobf.shape[0]
    norm = np.empty(m)
    tiny = np.empty(m)
    state = np.zeros(m, np.int8)
    rem = np.empty(m)
    for i in range(m):
        c = comp[i]
        norm[i] = c if c > 0 else 1.0
        tiny[i] = 1e-9 * norm[i]
        rem[i] = jobf[i, 1] + c
        if rem[i] <= 0.0:
            state[i] = 1
            rem[i] = 1.0
    mask = 0
    for i in range(m):
        if state[i] == 1:
            mask |= 1 << i
    return norm, tiny, state, rem, mask


@_njit
def _step(x, mask, t, ref, comp, tiny, act, state, rem, counts, done):
    """One event at rates ``x``: advance to the next completion (of a job's communication or
    compute phase), record completions in ``done``/``counts``, switch phases.  Returns
    (dt, t, mask, ref_done); dt == INF: nothing can progress (the caller stops)."""
    m = rem.shape[0]
    for i in range(m):
        act[i] = ((mask >> i) & 1) == 1
    dt = INF
    for i in range(m):
        if act[i]:
            xi = x[i]
            if xi > 0.0:
                d = rem[i] / xi
                if d < dt:
                    dt = d
    for i in range(m):
        if not act[i] and rem[i] < dt:
            dt = rem[i]
    if dt == INF:
        return dt, t, mask, False
    t += dt
    ref_done = False
    for i in range(m):
        if act[i]:
            r = rem[i] - x[i] * dt
            if r <= 1e-9:
                done[counts[i], i] = t
                counts[i] += 1
                if i == ref:
                    ref_done = True
                if comp[i] > 0.0:
                    state[i] = 0
                    rem[i] = comp[i]
                    mask ^= 1 << i
                else:
                    rem[i] = 1.0
            else:
                rem[i] = r
    for i in range(m):
        if not act[i]:
            r = rem[i] - dt
            if r <= tiny[i]:
                state[i] = 1
                rem[i] = 1.0
                mask |= 1 << i
            else:
                rem[i] = r
    return dt, t, mask, ref_done


@_njit
def _snapshot(t, state, rem, norm, counts, kv, heads, s_state, s_val, s_cnt, s_t, s_next, ns):
    """Look the current state (phases, rounded remainders) up among the snapshots; if it is
    new, add it.  Returns (row of the equal snapshot or -1, snapshots taken).  Snapshots are
    found by a hash of the key: heads[hash] = the last row with that hash, s_next[row] = the
    previous one."""
    m = rem.shape[0]
    h = np.int64(1469598103934665603)
    for i in range(m):
        if state[i] == 1:
            v, kh = _round7(rem[i] / 1.0)
        else:
            v, kh = _round7(rem[i] / norm[i])
        kv[i] = v
        h = h * np.int64(1099511628211) + kh * 2 + state[i]   # wraps around
    head = heads[h] if h in heads else -1
    s = head
    while s >= 0:
        same = True
        for i in range(m):
            if s_state[s, i] != state[i] or not (s_val[s, i] == kv[i]):
                same = False
                break
        if same:
            return s, ns
        s = s_next[s]
    for i in range(m):
        s_state[ns, i] = state[i]
        s_val[ns, i] = kv[i]
        s_cnt[ns, i] = counts[i]
    s_t[ns] = t
    s_next[ns] = head
    heads[h] = ns
    return -1, ns + 1


@_njit
def _iteration_times(found, t, s_t, s_cnt, counts, done):
    """Every job's iteration time: over the exact cycle back to snapshot ``found``, or (no
    cycle within the budget: found < 0) the mean over the second half of the run."""
    m = counts.shape[0]
    out = np.empty(m)
    if found >= 0:
        span = t - s_t[found]
        for i in range(m):
            c0 = s_cnt[found, i]
            out[i] = span / (counts[i] - c0) if counts[i] > c0 else INF
        return out
    for i in range(m):
        n = counts[i]
        if n >= 3:
            hh = n // 2
            out[i] = (done[n - 1, i] - done[hh - 1, i]) / (n - hh)
        elif n > 0:
            last = done[n - 1, i]
            out[i] = (last if last > t else t) / n          # max(t, d[-1])
        else:
            out[i] = INF
    return out


@_njit
def _simulate(jobf, prio, jptr, jlink, ja, capl, max_events, ref):
    """Iteration time of every job of one group of communicating jobs (np.inf: starved);
    the event loop of ``fluid._simulate_py``.  ``jobf``: per job (compute_s, shift_s, bmax,
    lam_max); ``prio``: dense priority classes; job j's links: ``jlink[jptr[j]:jptr[j+1]]``
    (indices into ``capl``, bytes/s) with flow-equivalents ``ja``; ``ref``: the job whose
    completions trigger the snapshots."""
    m = jobf.shape[0]
    nl = capl.shape[0]
    comp = np.empty(m)
    bmax = np.empty(m)
    lmax = np.empty(m)
    for j in range(m):
        comp[j] = jobf[j, 0]
        bmax[j] = jobf[j, 2]
        lmax[j] = jobf[j, 3]
    ncls = 0
    for j in range(m):
        if prio[j] + 1 > ncls:
            ncls = prio[j] + 1
    uptr, uj, ua = _link_users(jptr, jlink, ja, m, nl)
    # rates per set of communicating jobs (bit mask), filled on first use
    X = np.empty((1 << m, m))
    have = np.zeros(1 << m, np.bool_)
    norm, tiny, state, rem, mask = _start(jobf, comp)
    counts = np.zeros(m, np.int64)
    # a job completes at most once per event and a snapshot is taken at most once per event:
    # max_events rows suffice (fixed sizes; growing arrays cost numba seconds of compile time)
    rows = max(1, max_events)
    done = np.empty((rows, m))          # done[c, i]: time of job i's (c+1)-th completion
    # snapshots (state, rounded remainders, counts, time), see _snapshot
    s_state = np.empty((rows, m), np.int8)
    s_val = np.empty((rows, m))
    s_cnt = np.empty((rows, m), np.int64)
    s_t = np.empty(rows)
    s_next = np.empty(rows, np.int64)
    ns = 0
    heads = _TypedDict.empty(key_type=types.int64, value_type=types.int64)
    kv = np.empty(m)
    act = np.zeros(m, np.bool_)
    t = 0.0
    found = -1
    for _ev in range(max_events):
        if not have[mask]:
            _fill(mask, prio, ncls, lmax, bmax, jptr, jlink, ja, uptr, uj, ua, capl, X[mask])
            have[mask] = True
        dt, t, mask, ref_done = _step(X[mask], mask, t, ref, comp, tiny, act, state, rem,
                                      counts, done)
        if dt == INF:
            break
        if ref_done:
            found, ns = _snapshot(t, state, rem, norm, counts, kv, heads, s_state, s_val,
                                  s_cnt, s_t, s_next, ns)
            if found >= 0:
                break
    return _iteration_times(found, t, s_t, s_cnt, counts, done)


# ---------------------------------------------------------------------------
# Python entry points
# ---------------------------------------------------------------------------

def simulate_group(sub: Sequence, cap: Mapping, max_events: int, ref: int) -> list:
    """Iteration times of ``sub`` (SimJobs that all communicate, at most MAX_JOBS of them)
    with ``ref`` the snapshot job: ``fluid._simulate_py``'s result for them, as a list.
    Link keys become dense ints, priorities dense ranks (only their order matters)."""
    lk: dict = {}
    jptr = [0]
    jlink = []
    ja = []
    for jb in sub:
        bm = jb.bmax
        for l, b in zip(jb.links, jb.B):
            k = lk.get(l)
            if k is None:
                k = lk[l] = len(lk)
            jlink.append(k)
            ja.append(b / bm)           # the Python operation, as _Alloc does
        jptr.append(len(jlink))
    ranks = {p: r for r, p in enumerate(sorted({jb.priority for jb in sub}))}
    jobf = np.array([(jb.compute_s, jb.shift_s, jb.bmax, jb.lam_max) for jb in sub],
                    dtype=np.float64)
    res = _simulate(jobf, np.array([ranks[jb.priority] for jb in sub], dtype=np.int64),
                    np.array(jptr, dtype=np.int64), np.array(jlink, dtype=np.int64),
                    np.array(ja, dtype=np.float64),
                    np.array([cap[l] for l in lk], dtype=np.float64),
                    int(max_events), int(ref))
    return res.tolist()


def warm_up() -> Optional[float]:
    """Compile (or load from numba's on-disk cache) the kernel by running a tiny 2-job case;
    returns the seconds it took (None without numba).  The first simulate call would
    otherwise pay it."""
    if not AVAILABLE:
        return None
    t0 = time.perf_counter()
    jobs = [SimJob(0.5, ("L",), (1.0,), 1.0, 0), SimJob(0.25, ("L",), (1.0,), 1.0, 1)]
    simulate_group(jobs, {"L": 2.0}, 50, 0)
    return time.perf_counter() - t0
