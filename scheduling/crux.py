"""Crux (SIGCOMM 2024): GPU-intensity based path selection and priority assignment, with
priority compression into the switches' few classes.

* GPU intensity I_j = W_j / t_j: W_j = GPUs x compute seconds per iteration (its compute work),
  t_j = max over links e of M_je / B_e (its communication time on its slowest link, alone).
* Path selection: jobs in decreasing I_j each take the least congested spine at that moment
  (congestion = highest utilisation on the path's links after adding the job's mean load).
* Priority P_j = k_j I_j.  The reference job r (most traffic) has k_r = 1.  For every other
  job, the two priority orders of the pair {j, r} are compared with the shared model on one
  common bottleneck (each job's isolated communication time t on it, its compute c), giving
  the GPU utilisation U(j over r) and U(r over j); rho_j = U(j over r) / U(r over j).  The
  published description gives no closed form for k_j, so ours is: k_j = rho_j, stretched
  just enough that P_j vs P_r follows the better order of the pair
  (k_j = rho_j * max(1, I_r/I_j) if rho_j > 1, rho_j * min(1, I_r/I_j) if rho_j < 1).
* Priority compression (``compress_priorities``): contention DAG (edge j1 -> j2 when they
  share a link, from higher to lower P, weight I_j1) cut into K levels with no backward edge,
  maximising the weight of the cut edges; m = 10 random topological orders (plus the P order),
  for each the dynamic programme f(i, k) = max_{j<i} f(j, k-1) + C[j][i].
"""
from __future__ import annotations

import itertools
import random
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .base import ClusterState, Decision, Decisions, Policy
from .common import Opt, has_comm, make_decision, spine_options
from .evaluate import simulate
from .fluid import SimJob
from .model import ContentionModel

Edge = Tuple[int, int, float]


# ---------------------------------------------------------------------------
# Priority compression
# ---------------------------------------------------------------------------

def cut_matrix(order: Sequence[int], edges: Sequence[Edge]) -> np.ndarray:
    """C[j][i] (0 <= j <= i <= n) = weight of the edges from the first j nodes of ``order``
    to the nodes at positions j..i-1 (0-based), i.e. from {a_1..a_j} to {a_{j+1}..a_i}."""
    n = len(order)
    pos = {v: p for p, v in enumerate(order)}
    D = np.zeros((n + 2, n + 2))
    for u, v, w in edges:
        pu, pv = pos[u], pos[v]
        if pu >= pv:
            continue  # not possible in a topological order; ignored
        # j in (pu, pv]  and  i in (pv, n]
        D[pu + 1, pv + 1] += w
        D[pv + 1, pv + 1] -= w
        D[pu + 1, n + 1] -= w
        D[pv + 1, n + 1] += w
    C = np.cumsum(np.cumsum(D, axis=0), axis=1)
    return C[:n + 1, :n + 1]


def best_cut_for_order(order: Sequence[int], edges: Sequence[Edge], K: int) -> Tuple[float, List[int]]:
    """DP over one topological order: split it into at most K contiguous levels maximising the
    cut weight.  Returns (weight, level of every node in ``order``'s index space)."""
    n = len(order)
    if n == 0:
        return 0.0, []
    C = cut_matrix(order, edges)
    NEG = -np.inf
    f = np.full((K + 1, n + 1), NEG)
    arg = np.zeros((K + 1, n + 1), dtype=int)
    f[0, 0] = 0.0
    jj = np.arange(n + 1)
    for k in range(1, K + 1):
        for i in range(1, n + 1):
            cand = f[k - 1, :i] + C[:i, i]
            j = int(np.argmax(cand))
            f[k, i] = cand[j]
            arg[k, i] = j
    k_best = int(np.argmax(f[1:, n])) + 1
    best = float(f[k_best, n])
    # backtrack
    bounds = []
    i, k = n, k_best
    while k > 0:
        j = arg[k, i]
        bounds.append((j, i))
        i, k = j, k - 1
    bounds.reverse()
    level = {}
    for lv, (a, b) in enumerate(bounds):
        for p in range(a, b):
            level[order[p]] = lv
    return best, [level[v] for v in sorted(level)]


def random_topological_order(n: int, edges: Sequence[Edge], rng: random.Random) -> List[int]:
    succ: Dict[int, List[int]] = {v: [] for v in range(n)}
    indeg = [0] * n
    for u, v, _ in edges:
        succ[u].append(v)
        indeg[v] += 1
    ready = [v for v in range(n) if indeg[v] == 0]
    out = []
    while ready:
        v = ready.pop(rng.randrange(len(ready)))
        out.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    if len(out) != n:
        raise ValueError("the contention graph has a cycle")
    return out


def all_topological_orders(n: int, edges: Sequence[Edge]):
    preds = [set() for _ in range(n)]
    for u, v, _ in edges:
        preds[v].add(u)
    for perm in itertools.permutations(range(n)):
        pos = {v: p for p, v in enumerate(perm)}
        if all(pos[u] < pos[v] for v in range(n) for u in preds[v]):
            yield list(perm)


def compress_priorities(n: int, edges: Sequence[Edge], K: int, m: int = 10, seed: int = 0,
                        orders: Optional[Sequence[Sequence[int]]] = None,
                        exhaustive: bool = False) -> Tuple[List[int], float]:
    """Crux's priority compression.  Nodes 0..n-1, ``edges`` (u, v, w): u has higher priority
    than v and they contend, weight w.  Returns (level of each node, 0 = highest; cut weight).
    Orders tried: ``orders`` if given, else every topological order if ``exhaustive``, else
    ``m`` random topological orders (plus the identity order when it is topological)."""
    if n == 0:
        return [], 0.0
    K = max(1, K)
    if orders is None:
        if exhaustive:
            orders = list(all_topological_orders(n, edges))
        else:
            rng = random.Random(seed)
            orders = [random_topological_order(n, edges, rng) for _ in range(m)]
            ident = list(range(n))
            if all(u < v for u, v, _ in edges):
                orders.append(ident)
    best_w, best_lv = -1.0, [0] * n
    for o in orders:
        w, lv = best_cut_for_order(o, edges, K)
        if w > best_w + 1e-12:
            best_w, best_lv = w, lv
    return best_lv, max(best_w, 0.0)


def cut_weight(levels: Sequence[int], edges: Sequence[Edge]) -> Optional[float]:
    """Weight of the cut edges of a level assignment; None if an edge goes backwards."""
    w = 0.0
    for u, v, x in edges:
        if levels[u] > levels[v]:
            return None
        if levels[u] < levels[v]:
            w += x
    return w


# ---------------------------------------------------------------------------
# The policy
# ---------------------------------------------------------------------------

def pair_utilisation(c: Sequence[float], t: Sequence[float], gpus: Sequence[int],
                     first: int) -> float:
    """GPU utilisation of two jobs (compute c, isolated communication time t on one common
    bottleneck) when job ``first`` has strict priority, under the shared model."""
    sims = [SimJob(c[i], ("L",), (t[i],), t[i], 0 if i == first else 1) for i in range(2)]
    T = simulate(sims, {"L": 1.0})
    num = sum(g * ci / Ti for g, ci, Ti in zip(gpus, c, T) if Ti > 0 and Ti != float("inf"))
    return num / max(1, sum(gpus))


class CruxPolicy(Policy):
    name = "crux"

    def __init__(self, m: int = 10, seed: int = 0):
        self.m = m
        self.seed = seed
        self.stats: Dict[str, float] = {}

    def decide(self, state: ClusterState) -> Decisions:
        model = ContentionModel(state)
        cl = state.cluster
        names = [j.name for j in state.jobs if has_comm(model, j.name)]
        js = {j.name: j for j in state.jobs}
        W = {n: js[n].gpus * js[n].compute_s for n in names}
        t = {n: model.iso_comm(n) for n in names}
        I = {n: (W[n] / t[n] if t[n] > 0 else 0.0) for n in names}
        # --- path selection, decreasing intensity
        load = np.zeros(len(cl.links))
        cap = np.array([l.gbps for l in cl.links])
        spine: Dict[str, Optional[int]] = {}
        for n in sorted(names, key=lambda x: (-I[x], x)):
            iso = model.iso_iter(n)
            best = None
            for s in spine_options(state, n, model, include_ecmp=False):
                use, _ = model.usage(n, s)
                ls = np.fromiter(use.keys(), dtype=np.int64, count=len(use))
                rate = np.fromiter(use.values(), dtype=float, count=len(use)) * 8 / 1e9 / iso
                cong = float(np.max((load[ls] + rate) / cap[ls]))
                if best is None or cong < best[0] - 1e-12:
                    best = (cong, s, ls, rate)
            _, s, ls, rate = best
            spine[n] = s
            np.add.at(load, ls, rate)
        # --- priorities P = k I
        traffic = {n: sum(model.usage(n, spine[n])[0].values()) for n in names}
        P: Dict[str, float] = {}
        if names:
            ref = max(names, key=lambda x: (traffic[x], x))
            for n in names:
                if n == ref:
                    P[n] = I[n]
                    continue
                c2 = (js[n].compute_s, js[ref].compute_s)
                t2 = (t[n], t[ref])
                g2 = (js[n].gpus, js[ref].gpus)
                u_j = pair_utilisation(c2, t2, g2, first=0)
                u_r = pair_utilisation(c2, t2, g2, first=1)
                rho = u_j / u_r if u_r > 0 else 1.0
                ratio = I[ref] / I[n] if I[n] > 0 else 1.0
                if rho > 1 + 1e-9:
                    k = rho * max(1.0, ratio)
                elif rho < 1 - 1e-9:
                    k = rho * min(1.0, ratio)
                else:
                    k = 1.0
                P[n] = k * I[n]
        # --- contention DAG and compression
        order = sorted(names, key=lambda x: (-P[x], x))
        idx = {n: i for i, n in enumerate(order)}
        link_jobs: Dict[int, List[int]] = {}
        for n in order:
            for l in model.usage(n, spine[n])[0]:
                link_jobs.setdefault(l, []).append(idx[n])
        pairs = set()
        for js_on in link_jobs.values():
            if len(js_on) > 1:
                for a, b in itertools.combinations(sorted(js_on), 2):
                    pairs.add((a, b))
        edges = [(a, b, I[order[a]]) for a, b in sorted(pairs)]
        levels, w = compress_priorities(len(order), edges, max(1, state.num_classes),
                                        m=self.m, seed=self.seed)
        self.stats = {"jobs": len(names), "edges": len(edges), "cut_weight": w}
        out: Decisions = {}
        for j in state.jobs:
            if j.name in idx:
                lv = levels[idx[j.name]]
                why = (f"crux: I={I[j.name]:.3g} P={P[j.name]:.3g} class {lv} "
                       f"spine {spine[j.name]}")
                out[j.name] = make_decision(model, j.name, Opt(lv, spine[j.name], 1.0), why)
            else:
                out[j.name] = Decision(job=j.name, reason="crux: no network traffic")
        return out
