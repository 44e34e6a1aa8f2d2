"""Evaluating groups of SimJobs: ``simulate`` (the compiled kernel when numba is there, the
pure-Python ``fluid._simulate_py`` otherwise), and the ``Evaluator`` that splits jobs into
independent groups (no shared link) and caches them under a canonical key, so repeated
sub-problems (same shapes in many racks) cost one evaluation."""
from __future__ import annotations

import itertools
import os
from collections import Counter
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .fluid import INF, SimJob, _simulate_py, isolated_sim_time

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
            import scheduling.kernel as kernel   # (not `from . import`: no edge to the package)
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



# ---------------------------------------------------------------------------
# Independent groups + cache
# ---------------------------------------------------------------------------

def connected_groups(items: Sequence, links_of) -> List[list]:
    """Items that share a link, transitively; ``links_of(item)`` gives its links.  Groups
    keep the items' order (``_index_groups`` on the items' positions)."""
    items = list(items)
    return [[items[i] for i in g] for g in _index_groups([links_of(it) for it in items])]


def _index_groups(link_lists: Sequence) -> List[List[int]]:
    """Union-find of positions ``0..n-1`` by shared links (``link_lists[i]``: position i's
    links); the groups in order of their first member, each in increasing order."""
    parent = list(range(len(link_lists)))
    owner: Dict = {}
    for j, links in enumerate(link_lists):
        for l in links:
            o = owner.setdefault(l, j)
            if o != j:
                ra, rb = _root(parent, o), _root(parent, j)
                if ra != rb:
                    parent[ra] = rb
    groups: Dict[int, List[int]] = {}
    for j in range(len(link_lists)):
        groups.setdefault(_root(parent, j), []).append(j)
    return list(groups.values())


def _root(parent, a):
    """Union-find's root of ``a``, halving the path."""
    while parent[a] != a:
        parent[a] = parent[parent[a]]
        a = parent[a]
    return a


def _components(jobs: Sequence[SimJob]) -> List[List[int]]:
    """The jobs' indices grouped by shared links (``_index_groups``)."""
    return _index_groups([jb.links for jb in jobs])


EXACT_LIMIT = 100_000      # ``Evaluator.exact`` entries kept at most (then a fresh one)


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
        # components as given (every field, links by key, in order) -> their times: what the
        # canonical key gives them (its results never change), without forming it again
        self.exact: Dict[tuple, Tuple[float, ...]] = {}

    def _component(self, comp: List[SimJob], budget: float = 1.0) -> List[float]:
        self.lookups += 1
        if len(comp) == 1:
            jb = comp[0]
            return [isolated_sim_time(jb, self.cap)]
        ekey = (budget,) + tuple([(jb.compute_s, jb.priority, jb.lam_max, jb.shift_s, jb.bmax,
                                   jb.links, jb.B) for jb in comp])
        hit = self.exact.get(ekey)
        if hit is not None:
            return list(hit)
        out = self._canonical(comp, budget)
        if len(self.exact) >= EXACT_LIMIT:
            self.exact.clear()
        self.exact[ekey] = tuple(out)
        return out

    def _canonical(self, comp: List[SimJob], budget: float) -> List[float]:
        """``_component`` of several jobs by the canonical key: classes as dense ranks, jobs
        and links in a canonical order, links relabelled."""
        # strict priority depends only on the relative order of the classes: dense ranks
        ranks = {p: r for r, p in enumerate(sorted({jb.priority for jb in comp}))}
        comp = [jb if ranks[jb.priority] == jb.priority else
                SimJob(jb.compute_s, jb.links, jb.B, jb.bmax, ranks[jb.priority], jb.lam_max, jb.shift_s)
                for jb in comp]
        cap = self.cap
        # each job's links in the order of (bytes, capacity, name), ties in zip order: the
        # relabelling's order, and on (bytes, capacity) the sorted pairs of its signature
        # (the jobs' order: compute, class, bound, shift, bmax, those pairs)
        srt = [sorted([(b, cap[l], str(l), k, l) for k, (l, b) in enumerate(zip(jb.links, jb.B))])
               for jb in comp]
        sigs = [(jb.compute_s, jb.priority, jb.lam_max, jb.shift_s, jb.bmax,
                 tuple([(x[0], x[1]) for x in ls])) for jb, ls in zip(comp, srt)]
        order = sorted(range(len(comp)), key=sigs.__getitem__)
        relabel: Dict = {}
        parts = []
        for i in order:
            items = []
            for x in srt[i]:
                r = relabel.get(x[4])
                if r is None:
                    r = relabel[x[4]] = len(relabel)
                items.append((r, x[0]))
            parts.append(sigs[i][:5] + (tuple(items),))
        capsig = tuple([cap[l] for l in relabel])     # in label order (insertion order)
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
    uses = Counter(itertools.chain.from_iterable([jb.links for jb in jobs]))
    private = {l for l, c in uses.items() if c == 1}
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
