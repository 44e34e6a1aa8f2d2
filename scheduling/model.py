"""The shared contention model: every policy scores its decisions with it, the simulator and
the controller use its predictions and its estimator.

Pure Python + numpy (the event simulation runs compiled when numba is installed: ``kernel.py``);
no Mininet, no os-ken.

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
canonical key, so repeated sub-problems (same shapes in many racks) cost one evaluation.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

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


_KERNEL = None      # the compiled kernel module once imported; False: numba is missing


def _jit_kernel():
    """The compiled kernel (``kernel.py``), or None: numba missing or ``HARMONICS_NO_JIT=1``
    (read at every call, so a process can compare both paths).  Imported on first use: numba
    takes a while to import and is not needed by everything that imports the model."""
    global _KERNEL
    if os.environ.get("HARMONICS_NO_JIT") == "1":
        return None
    if _KERNEL is None:
        try:
            from . import kernel
            _KERNEL = kernel if kernel.AVAILABLE else False
        except ImportError:
            _KERNEL = False
    return _KERNEL or None


_WARM: Optional[float] = None


def warm_up() -> Optional[float]:
    """Compile (or load from numba's on-disk cache) the kernel once per process, so that the
    first decision does not pay it; returns the seconds the first call took (None without
    the kernel)."""
    global _WARM
    kern = _jit_kernel()
    if kern is None:
        return None
    if _WARM is None:
        _WARM = kern.warm_up()
    return _WARM


def simulate(jobs: Sequence[SimJob], cap: Mapping, max_events: Optional[int] = None,
             alloc_cache: Optional[dict] = None) -> List[float]:
    """Steady-state iteration time of every job (seconds; inf if starved).  See module doc.

    Runs the compiled kernel (``kernel.py``: the same algorithm and floating-point operations,
    the same results) when numba is there, the group has at most ``kernel.MAX_JOBS``
    communicating jobs and ``HARMONICS_NO_JIT`` is not "1"; ``_simulate_py`` otherwise.
    ``alloc_cache`` (see ``_simulate_py``) is used by the Python path only: the kernel
    allocates per call, which is cheaper than the lookups."""
    kern = _jit_kernel()
    if kern is None:
        return _simulate_py(jobs, cap, max_events, alloc_cache)
    comm = [j.bmax > 0 and (bool(j.links) or j.lam_max < INF) for j in jobs]
    idx = [j for j in range(len(jobs)) if comm[j]]
    if not idx or len(idx) > kern.MAX_JOBS:
        return _simulate_py(jobs, cap, max_events, alloc_cache)
    if max_events is None:
        max_events = 60 + 30 * len(idx)
    sub = [jobs[j] for j in idx]
    # the snapshot job: the longest isolated period (as in _simulate_py)
    ref = max(range(len(sub)), key=lambda i: isolated_sim_time(sub[i], cap))
    res = kern.simulate_group(sub, cap, max_events, ref)
    out = [jb.compute_s for jb in jobs]
    for k, j in enumerate(idx):
        out[j] = res[k]
    return out


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


# ---------------------------------------------------------------------------
# Independent groups + cache
# ---------------------------------------------------------------------------

def connected_groups(items: Sequence, links_of) -> List[list]:
    """Items that share a link, transitively (union-find); ``links_of(item)`` gives its links.
    Groups keep the items' order."""
    parent = {it: it for it in items}

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    owner: Dict = {}
    for it in items:
        for l in links_of(it):
            o = owner.get(l)
            if o is None:
                owner[l] = it
            else:
                ra, rb = find(o), find(it)
                if ra != rb:
                    parent[ra] = rb
    groups: Dict = {}
    for it in items:
        groups.setdefault(find(it), []).append(it)
    return list(groups.values())


def _components(jobs: Sequence[SimJob]) -> List[List[int]]:
    return connected_groups(range(len(jobs)), lambda j: jobs[j].links)


def _job_sig(jb: SimJob, cap: Mapping) -> tuple:
    return (jb.compute_s, jb.priority, jb.lam_max, jb.shift_s, jb.bmax,
            tuple(sorted((b, cap[l]) for l, b in zip(jb.links, jb.B))))


class Evaluator:
    """Evaluates groups of SimJobs with component splitting and a canonical-key cache."""

    def __init__(self, cap: Mapping, share_allocations: bool = False):
        """``share_allocations``: reuse rate allocations across the simulations of this
        evaluator (a search that evaluates many variants of one group; results equal to the
        plain evaluation up to float summation order).  Python path of ``simulate`` only."""
        self.cap = cap
        self.alloc_cache: Optional[dict] = {} if share_allocations else None
        self.cache: Dict[tuple, Tuple[float, ...]] = {}
        self.evaluations = 0       # simulations actually run
        self.lookups = 0

    def _component(self, comp: List[SimJob], budget: float = 1.0) -> List[float]:
        self.lookups += 1
        if len(comp) == 1:
            jb = comp[0]
            return [isolated_sim_time(jb, self.cap)]
        # strict priority depends only on the relative order of the classes: dense ranks
        ranks = {p: r for r, p in enumerate(sorted({jb.priority for jb in comp}))}
        comp = [jb if ranks[jb.priority] == jb.priority else
                SimJob(jb.compute_s, jb.links, jb.B, jb.bmax, ranks[jb.priority], jb.lam_max, jb.shift_s)
                for jb in comp]
        order = sorted(range(len(comp)), key=lambda i: _job_sig(comp[i], self.cap))
        relabel: Dict = {}
        parts = []
        for i in order:
            jb = comp[i]
            ls = sorted(zip(jb.links, jb.B), key=lambda lb: (lb[1], self.cap[lb[0]], str(lb[0])))
            items = []
            for l, b in ls:
                if l not in relabel:
                    relabel[l] = len(relabel)
                items.append((relabel[l], b))
            parts.append((jb.compute_s, jb.priority, jb.lam_max, jb.shift_s, jb.bmax, tuple(items)))
        capsig = tuple(self.cap[l] for l, _ in sorted(relabel.items(), key=lambda kv: kv[1]))
        key = (tuple(parts), capsig, budget)
        res = self.cache.get(key)
        if res is None:
            self.evaluations += 1
            ordered = [comp[i] for i in order]
            me = None
            if budget != 1.0:
                me = max(10, int(budget * (60 + 30 * sum(1 for jb in ordered if jb.bmax > 0))))
            res = tuple(simulate(ordered, self.cap, me, self.alloc_cache))
            self.cache[key] = res
        out = [0.0] * len(comp)
        for pos, i in enumerate(order):
            out[i] = res[pos]
        return out

    def times(self, jobs: Sequence[SimJob], budget: float = 1.0) -> List[float]:
        """Iteration times; ``budget`` < 1: a screening evaluation with that fraction of the
        model's event budget (cached separately; never a substitute for the model's figure)."""
        jobs = prune_private_links(jobs, self.cap)
        out = [0.0] * len(jobs)
        for comp in _components(jobs):
            res = self._component([jobs[i] for i in comp], budget)
            for i, r in zip(comp, res):
                out[i] = r
        return out


def prune_private_links(jobs: Sequence[SimJob], cap: Mapping) -> List[SimJob]:
    """Links used by one job only are a fixed bound on its rate: fold them into lam_max and
    drop them (exact; fewer links, more cache hits)."""
    seen: set = set()
    dup: set = set()
    for jb in jobs:
        for l in jb.links:
            if l in seen:
                dup.add(l)
            else:
                seen.add(l)
    private = seen - dup
    if not private:
        return list(jobs)
    out = []
    for jb in jobs:
        if private.isdisjoint(jb.links):
            out.append(jb)
            continue
        lam = jb.lam_max
        links, B = [], []
        for l, b in zip(jb.links, jb.B):
            if l not in private:
                links.append(l)
                B.append(b)
            else:
                lam = min(lam, cap[l] * jb.bmax / b)
        out.append(SimJob(jb.compute_s, tuple(links), tuple(B), jb.bmax, jb.priority, lam, jb.shift_s))
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


# ---------------------------------------------------------------------------
# Cluster-level API
# ---------------------------------------------------------------------------

def link_capacities(cluster) -> Dict[int, float]:
    """Link index -> capacity in bytes/s."""
    return {l.index: l.gbps * BYTES_PER_GBIT for l in cluster.links}


def job_link_bytes(js, cluster, spine: Optional[int] = None,
                   flow_spines: Optional[Mapping[str, int]] = None) -> Tuple[Dict[int, float], float]:
    """(link index -> bytes per iteration, bytes of the heaviest pair) for a job whose
    cross-rack pairs use ``spine`` (None: ECMP hash) unless ``flow_spines`` says otherwise."""
    use: Dict[int, float] = {}
    bmax = 0.0
    for (a, b), nbytes in js.pair_bytes.items():
        if nbytes <= 0 or a == b:
            continue
        sp = spine
        if flow_spines:
            sp = flow_spines.get(f"{a}>{b}", spine)
        for l in cluster.path(a, b, sp):
            use[l] = use.get(l, 0.0) + nbytes
        bmax = max(bmax, nbytes)
    return use, bmax


def isolated_comm_time(js, cluster) -> float:
    use, bmax = job_link_bytes(js, cluster)
    if not use:
        return 0.0
    return max(b / (cluster.links[l].gbps * BYTES_PER_GBIT) for l, b in use.items())


def isolated_iteration_time(js, cluster) -> float:
    """The job alone on the cluster, default (ECMP) paths: compute + comm on its slowest link."""
    return js.compute_s + isolated_comm_time(js, cluster)


class ContentionModel:
    """The model bound to one ClusterState: link usage per job and path choice (cached),
    decisions -> SimJobs -> predicted iteration times.  Policies build one per decide()."""

    def __init__(self, state, evaluator: Optional[Evaluator] = None):
        self.state = state
        self.cluster = state.cluster
        self.cap = link_capacities(self.cluster)
        self.ev = evaluator or Evaluator(self.cap)
        self.jobs = list(state.jobs)
        self.index = {j.name: i for i, j in enumerate(self.jobs)}
        self._use: Dict[tuple, Tuple[Dict[int, float], float]] = {}
        self._iso_comm: Dict[str, float] = {}

    # -- usage ------------------------------------------------------------
    def usage(self, name: str, spine: Optional[int] = None,
              flow_spines: Optional[Mapping[str, int]] = None) -> Tuple[Dict[int, float], float]:
        key = (name, spine, tuple(sorted(flow_spines.items())) if flow_spines else ())
        u = self._use.get(key)
        if u is None:
            js = self.jobs[self.index[name]]
            if not js.spans_racks:      # the spine is irrelevant inside a rack
                if (name, None, ()) in self._use:
                    u = self._use[(name, None, ())]
                else:
                    u = job_link_bytes(js, self.cluster)
            else:
                u = job_link_bytes(js, self.cluster, spine, flow_spines)
            self._use[key] = u
        return u

    def iso_comm(self, name: str) -> float:
        v = self._iso_comm.get(name)
        if v is None:
            use, _ = self.usage(name)
            v = max((b / self.cap[l] for l, b in use.items()), default=0.0)
            self._iso_comm[name] = v
        return v

    def iso_iter(self, name: str) -> float:
        js = self.jobs[self.index[name]]
        return js.iso_iter_s if js.iso_iter_s > 0 else js.compute_s + self.iso_comm(name)

    def sim_job(self, name: str, decision=None, links: Optional[set] = None,
                floor: bool = False) -> SimJob:
        """SimJob for ``name`` under ``decision``; ``links``: keep only these links (a rack's
        view); ``floor``: bound the job's progress by its global isolated pace (a rack's view
        of a job whose slowest link may lie elsewhere)."""
        js = self.jobs[self.index[name]]
        spine = decision.spine if decision is not None else None
        fs = decision.flow_spines if decision is not None else None
        use, bmax = self.usage(name, spine, fs)
        items = sorted(use.items())
        if links is not None:
            items = [(l, b) for l, b in items if l in links]
        lam_max = INF
        if decision is not None and decision.rate_caps_gbps:
            lidx = self.cluster.link_index
            for lid, g in decision.rate_caps_gbps.items():
                l = lidx.get(lid)
                if l is not None and l in use:
                    lam_max = min(lam_max, g * BYTES_PER_GBIT / (use[l] / bmax))
        if floor and bmax > 0:
            t = self.iso_comm(name)
            if t > 0:
                lam_max = min(lam_max, bmax / t)
        return SimJob(js.compute_s, tuple(l for l, _ in items), tuple(b for _, b in items), bmax,
                      decision.priority if decision is not None else 0, lam_max,
                      decision.shift_s if decision is not None else 0.0)

    # -- prediction -------------------------------------------------------
    def iteration_times(self, decisions: Optional[Mapping] = None,
                        names: Optional[Sequence[str]] = None) -> Dict[str, float]:
        decisions = decisions or {}
        names = list(names) if names is not None else [j.name for j in self.jobs]
        sims = [self.sim_job(n, decisions.get(n)) for n in names]
        return dict(zip(names, self.ev.times(sims)))

    def slowdowns(self, decisions: Optional[Mapping] = None,
                  names: Optional[Sequence[str]] = None) -> Dict[str, float]:
        it = self.iteration_times(decisions, names)
        return {n: _slowdown(t, self.iso_iter(n)) for n, t in it.items()}

    def mean_slowdown(self, decisions: Optional[Mapping] = None,
                      names: Optional[Sequence[str]] = None) -> float:
        sd = self.slowdowns(decisions, names)
        if not sd:
            return 1.0
        return sum(min(v, STARVED_SLOWDOWN) for v in sd.values()) / len(sd)


def _slowdown(t: float, iso: float) -> float:
    if iso <= 0:
        return 1.0
    return t / iso


@dataclass
class Prediction:
    iter_s: Dict[str, float]
    slowdown: Dict[str, float]

    @property
    def mean_slowdown(self) -> float:
        if not self.slowdown:
            return 1.0
        return sum(min(v, STARVED_SLOWDOWN) for v in self.slowdown.values()) / len(self.slowdown)


def predict(state, decisions: Optional[Mapping] = None) -> Prediction:
    """Predicted steady-state iteration time and slowdown (T / isolated T) of every job of
    ``state`` (a ClusterState) under ``decisions`` (job name -> Decision; missing: default)."""
    m = ContentionModel(state)
    it = m.iteration_times(decisions)
    return Prediction(it, {n: _slowdown(t, m.iso_iter(n)) for n, t in it.items()})


def link_loads(state, decisions: Optional[Mapping] = None,
               iter_s: Optional[Mapping[str, float]] = None) -> np.ndarray:
    """Mean load (Gb/s) the jobs put on every link (array indexed by link index) in steady
    state: sum over jobs of bytes per iteration on the link / iteration time.  ``iter_s``:
    iteration times to use (default: ``predict``)."""
    m = ContentionModel(state)
    decisions = decisions or {}
    if iter_s is None:
        iter_s = m.iteration_times(decisions)
    load = np.zeros(len(state.cluster.links))
    for js in state.jobs:
        d = decisions.get(js.name)
        use, _ = m.usage(js.name, d.spine if d else None, d.flow_spines if d else None)
        t = iter_s.get(js.name, INF)
        if not use or not (t > 0) or t == INF:
            continue
        ls = np.fromiter(use.keys(), dtype=np.int64, count=len(use))
        bs = np.fromiter(use.values(), dtype=float, count=len(use))
        np.add.at(load, ls, bs / t / BYTES_PER_GBIT)
    return load


# ---------------------------------------------------------------------------
# Estimation from measurements
# ---------------------------------------------------------------------------

@dataclass
class JobEstimate:
    period_s: Optional[float]        # None: no periodicity found in the epoch
    active_fraction: float           # fraction of time the job was sending
    pair_bytes: Dict[Tuple[str, str], float]   # bytes per iteration per host pair
    compute_s: Optional[float]       # period * (1 - active fraction): the silent gap
    iterations: float                # iterations seen in the epoch (epoch / period)


def estimate_period(series: Sequence[float], bin_s: float, min_corr: float = 0.3) -> Optional[float]:
    """Period (s) of a byte-count time series by autocorrelation: the first lag that is a
    local maximum of the autocorrelation with a value >= ``min_corr`` and >= 0.8 of the
    highest such maximum; refined by a parabola through the peak.  None if none is found."""
    x = np.asarray(series, dtype=float)
    n = len(x)
    if n < 4 or not np.any(x > 0):
        return None
    x = x - x.mean()
    var = float(np.dot(x, x))
    if var <= 0:
        return None
    size = 1 << int(math.ceil(math.log2(2 * n)))
    f = np.fft.rfft(x, size)
    ac = np.fft.irfft(f * np.conj(f), size)[:n]
    # unbiased normalisation (fewer overlapping samples at long lags)
    ac = ac / var * n / np.maximum(n - np.arange(n), 1)
    hi = max(2, int(n * 0.75))
    peaks = [k for k in range(1, hi - 1) if ac[k] >= ac[k - 1] and ac[k] > ac[k + 1] and ac[k] >= min_corr]
    if not peaks:
        return None
    best = max(ac[k] for k in peaks)
    k = next(p for p in peaks if ac[p] >= 0.8 * best)
    y0, y1, y2 = ac[k - 1], ac[k], ac[k + 1]
    den = y0 - 2 * y1 + y2
    off = 0.5 * (y0 - y2) / den if den != 0 else 0.0
    return (k + max(-0.5, min(0.5, off))) * bin_s


def estimate_job(series: Mapping[Tuple[str, str], Sequence[float]], bin_s: float,
                 active_threshold: float = 0.05) -> JobEstimate:
    """Estimate one job's profile from what the network saw during an epoch.

    Input ``series``: for every ordered host pair (src host, dst host) of the job, the bytes
    the pair sent in each of consecutive time bins of ``bin_s`` seconds (all series of equal
    length, covering the epoch; a pair that sent nothing may be omitted).  Bytes are real-
    cluster bytes (the caller undoes any emulation scaling).

    Output: ``period_s`` from the autocorrelation of the job's total bytes per bin;
    ``active_fraction`` = share of bins whose total exceeds ``active_threshold`` x the peak
    bin; ``pair_bytes`` = each pair's bytes in the epoch / iterations in the epoch (epoch /
    period; if no period is found: the whole epoch counts as one iteration);
    ``compute_s`` = period x (1 - active_fraction)."""
    if not series:
        return JobEstimate(None, 0.0, {}, None, 0.0)
    n = max(len(s) for s in series.values())
    total = np.zeros(n)
    for s in series.values():
        a = np.asarray(s, dtype=float)
        total[:len(a)] += a
    epoch = n * bin_s
    peak = float(total.max()) if n else 0.0
    active = float(np.mean(total > active_threshold * peak)) if peak > 0 else 0.0
    period = estimate_period(total, bin_s)
    iters = epoch / period if period else 1.0
    pair_bytes = {p: float(np.sum(s)) / iters for p, s in series.items() if float(np.sum(s)) > 0}
    compute = period * (1.0 - active) if period else None
    return JobEstimate(period, active, pair_bytes, compute, iters)


def estimate_from_measurements(measured: Mapping[str, Mapping[Tuple[str, str], Sequence[float]]],
                               bin_s: float, active_threshold: float = 0.05) -> Dict[str, JobEstimate]:
    """``measured``: job name -> {(src host, dst host): bytes per bin} (see ``estimate_job``)."""
    return {job: estimate_job(s, bin_s, active_threshold) for job, s in measured.items()}


def apply_estimates(state, estimates: Mapping[str, JobEstimate], update_profile: bool = True) -> None:
    """Write estimates into the ClusterState's JobStates: period_s and active_fraction always;
    with ``update_profile`` also pair_bytes and compute_s where the estimate has them."""
    for js in state.jobs:
        e = estimates.get(js.name)
        if e is None:
            continue
        js.period_s = e.period_s
        js.active_fraction = e.active_fraction
        if update_profile and e.period_s:
            if e.pair_bytes:
                js.pair_bytes = dict(e.pair_bytes)
            if e.compute_s is not None:
                js.compute_s = e.compute_s
            js.iso_iter_s = isolated_iteration_time(js, state.cluster)
