"""The fluid event simulation of the shared contention model, in pure Python: a job as the
simulation sees it (``SimJob``), the rate allocation (``allocate``, ``_Alloc``), the event loop
(``_simulate_py``: the reference of the compiled ``kernel.py``; ``evaluate.simulate`` chooses
between the two) and the closed form of one job alone (``isolated_sim_time``).

Model (a fluid model of periodic synchronous jobs)
--------------------------------------------------
* Job j iterates forever: a compute phase of ``compute_s`` seconds (communication that the
  trace lets overlap compute is already folded out of ``compute_s``), then a communication
  phase that moves ``pair_bytes[(a, b)]`` bytes between every ordered host pair (a, b) over
  the pair's path (``Cluster.path``; the spine is the job's decision, default ECMP hash).
  ``shift_s`` delays the job's first iteration (CASSINI-style).
* A synchronous collective moves at the pace of its slowest flow: the job's pairs progress
  together, pair (a, b) at rate ``b_ab * x_j`` where ``x_j`` is the job's progress rate
  (fraction of its communication per second); the phase ends when the progress reaches 1,
  i.e. when all flows are done.  Bandwidth a fast flow cannot use (its job waits for the slow
  one anyway) is left to other jobs.
* On link e job j then uses ``B_je * x_j`` bytes/s, ``B_je`` = its bytes per iteration on e.
  Sharing inside a priority class is max-min fair per flow (what TCP gives): the water level
  ``lam`` is the rate of the job's heaviest flow, job j's flow-equivalents on e are
  ``A_je = B_je / bmax_j`` (= number of its flows on e for equal-sized ring flows), so j
  takes ``A_je * lam_j`` of e.  Strict priority between classes (0 first): a class shares
  what the classes above left.  A rate cap (Gb/s, per job and link) bounds ``A_je * lam_j``.
* Rates are recomputed at every event (a job starts or ends communicating).  The evaluation
  runs events until the joint state repeats (an exact cycle: every job's steady-state
  iteration time is then cycle length / its iterations in the cycle) or an event budget is
  spent (then the mean over the second half of the run).  A job that makes no progress in a
  cycle (starved by higher classes) gets an infinite iteration time.

Independent groups of jobs (no shared link) are evaluated separately and cached under a
canonical key (``evaluate.Evaluator``), so repeated sub-problems (same shapes in many racks)
cost one evaluation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

INF = float("inf")
BYTES_PER_GBIT = 1e9 / 8.0
STARVED_SLOWDOWN = 1e6          # stands in for an infinite slowdown in objectives


# ---------------------------------------------------------------------------
# Core: a job as the fluid simulation sees it
# ---------------------------------------------------------------------------

@dataclass
class SimJob:
    """One job inside the fluid evaluation.  ``links``: link keys (any hashable);
    ``B``: bytes per iteration on each link; ``bmax``: bytes of its heaviest pair;
    ``lam_max``: bound on the heaviest flow's rate (bytes/s) from caps / an external floor;
    ``priority``: 0 = highest."""
    compute_s: float
    links: Tuple
    B: Tuple[float, ...]
    bmax: float
    priority: int = 0
    lam_max: float = INF
    shift_s: float = 0.0

    @property
    def A(self) -> Tuple[float, ...]:
        return tuple(b / self.bmax for b in self.B)


def allocate(jobs: Sequence[SimJob], active: Sequence[int], cap: Mapping) -> Dict[int, float]:
    """Progress rates x_j (1/s) of the communicating jobs ``active``: strict priority between
    classes, per-flow max-min fairness (progressive filling on the water level) inside one,
    per-job bounds ``lam_max``.  ``cap``: link key -> capacity in bytes/s."""
    x: Dict[int, float] = {}
    resid: Dict = {}
    by_class: Dict[int, List[int]] = {}
    for j in active:
        by_class.setdefault(jobs[j].priority, []).append(j)
    for k in sorted(by_class):
        members = by_class[k]
        users: Dict = {}
        for j in members:
            jb = jobs[j]
            for l, b in zip(jb.links, jb.B):
                users.setdefault(l, []).append((j, b / jb.bmax))
        R = {l: max(0.0, resid.get(l, cap[l])) for l in users}
        frozen_used = {l: 0.0 for l in users}
        lam: Dict[int, float] = {}
        unfrozen = set(members)
        level = 0.0
        while unfrozen:
            cand = INF
            link_level = {}
            for l, us in users.items():
                w = 0.0
                for j, a in us:
                    if j in unfrozen:
                        w += a
                if w > 0.0:
                    v = (R[l] - frozen_used[l]) / w
                    link_level[l] = v
                    if v < cand:
                        cand = v
            for j in unfrozen:
                if jobs[j].lam_max < cand:
                    cand = jobs[j].lam_max
            if cand == INF:        # jobs with no link and no bound: cannot happen for comm jobs
                for j in unfrozen:
                    lam[j] = INF
                break
            level = max(level, cand)
            tol = 1e-12 * max(1.0, abs(level))
            newly = set()
            for l, v in link_level.items():
                if v <= level + tol:
                    for j, _a in users[l]:
                        if j in unfrozen:
                            newly.add(j)
            for j in unfrozen:
                if jobs[j].lam_max <= level + tol:
                    newly.add(j)
            for j in newly:
                lam[j] = max(0.0, level)
                jb = jobs[j]
                for l, b in zip(jb.links, jb.B):
                    frozen_used[l] += b / jb.bmax * lam[j]
            unfrozen -= newly
        for l in users:
            resid[l] = R[l] - frozen_used[l]
        for j in members:
            x[j] = lam[j] / jobs[j].bmax
    return x


class _Alloc:
    """``allocate`` specialised to one fixed list of jobs (the same rules and the same
    floating-point operations in the same order), built once per ``simulate`` call: link
    keys become small ints, per-link user lists are built once, results are cached per set
    of communicating jobs (bit mask)."""

    __slots__ = ("m", "prio", "lmax", "bmax", "jl", "capl", "classes", "cache", "shared", "ids")

    def __init__(self, sub: Sequence[SimJob], cap: Mapping, shared: Optional[dict] = None):
        lk: Dict = {}
        jl = []
        for jb in sub:
            lst = []
            for l, b in zip(jb.links, jb.B):
                k = lk.get(l)
                if k is None:
                    k = lk[l] = len(lk)
                lst.append((k, b / jb.bmax))
            jl.append(lst)
        self.m = len(sub)
        self.jl = jl
        self.capl = [cap[l] for l in lk]
        self.prio = [jb.priority for jb in sub]
        self.lmax = [jb.lam_max for jb in sub]
        self.bmax = [jb.bmax for jb in sub]
        self.classes = sorted(set(self.prio))
        self.cache: Dict[int, List[float]] = {}
        # ``shared``: allocations reused across simulations (the rates of a set of
        # communicating jobs do not depend on the jobs that are computing).  Jobs are
        # interned by their full signature; identical jobs get identical rates by symmetry.
        self.shared = shared
        if shared is not None:
            intern = shared.setdefault("__ids__", {})
            self.ids = [intern.setdefault((jb.links, jb.B, jb.bmax, jb.priority, jb.lam_max),
                                          len(intern)) for jb in sub]

    def rates(self, mask: int) -> List[float]:
        x = self.cache.get(mask)
        if x is not None:
            return x
        if self.shared is not None:
            ids = self.ids
            key = tuple(sorted(ids[j] for j in range(self.m) if (mask >> j) & 1))
            byid = self.shared.get(key)
            if byid is None:
                x = self._fill(mask)
                self.shared[key] = {ids[j]: x[j] for j in range(self.m) if (mask >> j) & 1}
            else:
                x = [byid[ids[j]] if (mask >> j) & 1 else 0.0 for j in range(self.m)]
            self.cache[mask] = x
            return x
        x = self._fill(mask)
        self.cache[mask] = x
        return x

    def _fill(self, mask: int) -> List[float]:
        m, prio, lmax, jl = self.m, self.prio, self.lmax, self.jl
        x = [0.0] * m
        resid = list(self.capl)
        for k in self.classes:
            members = [j for j in range(m) if (mask >> j) & 1 and prio[j] == k]
            if not members:
                continue
            users: Dict[int, List[Tuple[int, float]]] = {}
            for j in members:
                for l, a in jl[j]:
                    u = users.get(l)
                    if u is None:
                        users[l] = [(j, a)]
                    else:
                        u.append((j, a))
            R = {l: max(0.0, resid[l]) for l in users}
            frozen_used = dict.fromkeys(users, 0.0)
            lam: Dict[int, float] = {}
            unfrozen = set(members)
            level = 0.0
            while unfrozen:
                cand = INF
                link_level = []
                for l, us in users.items():
                    w = 0.0
                    for j, a in us:
                        if j in unfrozen:
                            w += a
                    if w > 0.0:
                        v = (R[l] - frozen_used[l]) / w
                        link_level.append((l, v))
                        if v < cand:
                            cand = v
                for j in unfrozen:
                    if lmax[j] < cand:
                        cand = lmax[j]
                if cand == INF:
                    for j in unfrozen:
                        lam[j] = INF
                    break
                if cand > level:
                    level = cand
                lim = level + 1e-12 * max(1.0, abs(level))
                newly = set()
                for l, v in link_level:
                    if v <= lim:
                        for j, _a in users[l]:
                            if j in unfrozen:
                                newly.add(j)
                for j in unfrozen:
                    if lmax[j] <= lim:
                        newly.add(j)
                lv = max(0.0, level)
                for j in sorted(newly):
                    lam[j] = lv
                    for l, a in jl[j]:
                        frozen_used[l] += a * lv
                unfrozen -= newly
            for l in users:
                resid[l] = R[l] - frozen_used[l]
            for j in members:
                x[j] = lam[j] / self.bmax[j]
        return x



def _simulate_py(jobs: Sequence[SimJob], cap: Mapping, max_events: Optional[int] = None,
                 alloc_cache: Optional[dict] = None) -> List[float]:
    """``simulate`` in pure Python (the reference for the compiled kernel; any group size).
    ``alloc_cache``: a dict shared by many calls on the same links (``Evaluator``) to reuse
    rate allocations across simulations (equal up to float summation order)."""
    n = len(jobs)
    if n == 0:
        return []
    comm = [j.bmax > 0 and (bool(j.links) or j.lam_max < INF) for j in jobs]
    out = [0.0] * n
    idx = [j for j in range(n) if comm[j]]
    for j in range(n):
        if not comm[j]:
            out[j] = jobs[j].compute_s
    if not idx:
        return out
    if max_events is None:
        max_events = 60 + 30 * len(idx)
    sub = [jobs[j] for j in idx]
    m = len(sub)
    comp = [j.compute_s for j in sub]
    norm = [c if c > 0 else 1.0 for c in comp]
    tiny = [1e-9 * v for v in norm]
    state = [0] * m           # 0: compute (or waiting for the shift), 1: communicate
    rem = [0.0] * m
    for i, jb in enumerate(sub):
        rem[i] = jb.shift_s + jb.compute_s
        if rem[i] <= 0.0:
            state[i], rem[i] = 1, 1.0
    # snapshots are taken when the job with the longest isolated period completes
    ref = max(range(m), key=lambda i: isolated_sim_time(sub[i], cap))
    counts = [0] * m
    done_times: List[List[float]] = [[] for _ in range(m)]
    alloc = _Alloc(sub, cap, alloc_cache)
    rates = alloc.rates
    rcache = alloc.cache
    rng = range(m)
    mask = 0
    for i in rng:
        if state[i]:
            mask |= 1 << i
    seen: Dict[tuple, Tuple[float, Tuple[int, ...]]] = {}
    t = 0.0
    result: Optional[List[float]] = None
    # per set of communicating jobs (bit mask): the communicating and the computing indices
    split: Dict[int, Tuple[List[int], List[int]]] = {}
    for _ev in range(max_events):
        x = rcache.get(mask)
        if x is None:
            x = rates(mask)
        sp = split.get(mask)
        if sp is None:
            sp = split[mask] = ([i for i in rng if (mask >> i) & 1],
                                [i for i in rng if not (mask >> i) & 1])
        act, idle = sp
        dt = INF
        for i in act:
            xi = x[i]
            if xi > 0.0:
                d = rem[i] / xi
                if d < dt:
                    dt = d
        for i in idle:
            if rem[i] < dt:
                dt = rem[i]
        if dt == INF:
            break
        t += dt
        ref_done = False
        for i in act:
            r = rem[i] - x[i] * dt
            if r <= 1e-9:
                counts[i] += 1
                done_times[i].append(t)
                if i == ref:
                    ref_done = True
                if comp[i] > 0.0:
                    state[i], rem[i] = 0, comp[i]
                    mask ^= 1 << i
                else:
                    rem[i] = 1.0
            else:
                rem[i] = r
        for i in idle:
            r = rem[i] - dt
            if r <= tiny[i]:
                state[i], rem[i] = 1, 1.0
                mask |= 1 << i
            else:
                rem[i] = r
        if ref_done:
            key = tuple((state[i], round(rem[i] / (1.0 if state[i] else norm[i]), 7))
                        for i in rng)
            prev = seen.get(key)
            if prev is not None:
                t0, c0 = prev
                span = t - t0
                result = [span / (counts[i] - c0[i]) if counts[i] > c0[i] else INF for i in rng]
                break
            seen[key] = (t, tuple(counts))
    if result is None:   # no exact cycle within the budget: average over the second half
        result = []
        for i in rng:
            d = done_times[i]
            if len(d) >= 3:
                h = len(d) // 2
                result.append((d[-1] - d[h - 1]) / (len(d) - h))
            elif d:
                result.append(max(t, d[-1]) / len(d))
            else:
                result.append(INF)
    for k, j in enumerate(idx):
        out[j] = result[k]
    return out



def isolated_sim_time(jb: SimJob, cap: Mapping) -> float:
    """Closed form for one job alone: compute + slowest-link time (with its bound)."""
    if jb.bmax <= 0 or (not jb.links and jb.lam_max == INF):
        return jb.compute_s
    lam = jb.lam_max
    for l, b in zip(jb.links, jb.B):
        lam = min(lam, cap[l] / (b / jb.bmax))
    if lam <= 0:
        return INF
    return jb.compute_s + jb.bmax / lam


