"""CASSINI (NSDI 2024): time shifts that interleave the jobs' communication phases.

* Every job's iteration (isolated time T_j: compute c_j, then communication) is a circle; on
  a link e shared by several jobs, the unified circle has the perimeter of the LCM of their
  (rounded) iteration times, cut into angles of ``unit`` seconds.  Job j's demand on e is its
  isolated rate on e (B_je / t_j) during [c_j, T_j) of every one of its iterations.
* ``compatibility``: 1 - sum_a max(0, sum_j d_j(a - s_j) - C) / (angles * C);
  ``best_link_shifts``: the shifts (first job fixed at 0) that maximise it - exhaustive when
  the combinations are few, otherwise greedy + coordinate descent.
* Affinity graph (jobs - links, edges carrying the per-link shifts): traversed from a root
  job (shift 0) in decreasing order of link contention, turning per-link shifts into one
  shift per job; a job reached again through a loop keeps its first shift.
Decisions are shifts only: one class, no caps, default paths.
"""
from __future__ import annotations

import heapq
import itertools
import math
from functools import reduce
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .base import ClusterState, Decision, Decisions, Policy
from .common import has_comm
from .model import ContentionModel


def circle_units(periods: Sequence[float], angles_per_period: int = 24,
                 max_angles: int = 2048) -> Tuple[float, List[int], int]:
    """Discretisation of the unified circle: (unit seconds, each period in units, perimeter in
    units = LCM).  Coarsens the unit until the LCM fits ``max_angles``; if it never does, the
    periods are rounded to divisors of the longest one (CASSINI rounds the same way)."""
    tmin = min(periods)
    unit = tmin / angles_per_period
    while True:
        r = [max(1, int(round(p / unit))) for p in periods]
        L = reduce(lambda a, b: a * b // math.gcd(a, b), r, 1)
        if L <= max_angles:
            return unit, r, L
        if tmin / unit <= 6:
            break
        unit *= 1.5
    rmax = max(r)
    r = [max(1, rmax // max(1, int(round(rmax / x)))) for x in r]
    L = reduce(lambda a, b: a * b // math.gcd(a, b), r, 1)
    if L > max_angles:
        r = [rmax] * len(r)
        L = rmax
    return unit, r, L


def demand_profile(period_u: int, comm_start_u: float, rate: float, L: int) -> np.ndarray:
    """A job's demand on the unified circle of L angles: ``rate`` during [comm_start, period)
    of each of its L / period_u iterations (partial angles weighted by their overlap)."""
    one = np.zeros(period_u)
    a = np.arange(period_u)
    cs = min(max(comm_start_u, 0.0), float(period_u))
    one = np.clip(a + 1 - cs, 0.0, 1.0) * rate
    return np.tile(one, max(1, L // period_u))[:L]


def compatibility(profiles: np.ndarray, shifts: Sequence[int], capacity: float) -> float:
    """The unified-circle compatibility score of jobs (rows of ``profiles``, one per job, L
    angles each) rotated by ``shifts`` (angles) on a link of ``capacity``."""
    L = profiles.shape[1]
    tot = np.zeros(L)
    for p, s in zip(profiles, shifts):
        tot += np.roll(p, int(s))
    excess = np.maximum(0.0, tot - capacity).sum()
    return 1.0 - excess / (L * capacity)


def best_link_shifts(profiles: np.ndarray, periods_u: Sequence[int], capacity: float,
                     exhaustive_limit: int = 20000) -> Tuple[List[int], float]:
    """Shifts (angles; job 0 fixed at 0, job j searched in [0, period_j)) maximising the
    compatibility score.  Exhaustive (vectorised over the last job's shift) when the number
    of combinations is at most ``exhaustive_limit``; else greedy then coordinate descent."""
    J, L = profiles.shape
    if J <= 1:
        return [0] * J, compatibility(profiles, [0] * J, capacity)
    rolls = [np.stack([np.roll(profiles[j], s) for s in range(periods_u[j])]) for j in range(J)]
    combos = 1
    for j in range(1, J):
        combos *= periods_u[j]

    def score_rows(tot_rows):
        return 1.0 - np.maximum(0.0, tot_rows - capacity).sum(axis=1) / (L * capacity)

    if combos <= exhaustive_limit:
        best_s, best = None, -np.inf
        last = rolls[J - 1]
        for head in itertools.product(*[range(periods_u[j]) for j in range(1, J - 1)]):
            base = profiles[0].copy()
            for j, s in zip(range(1, J - 1), head):
                base = base + rolls[j][s]
            sc = score_rows(base[None, :] + last)
            k = int(np.argmax(sc))
            if sc[k] > best + 1e-12:
                best, best_s = float(sc[k]), [0, *head, k]
        return best_s, best
    # greedy: add jobs one at a time (largest demand first), then coordinate descent
    order = sorted(range(1, J), key=lambda j: -profiles[j].sum())
    shifts = [0] * J
    tot = profiles[0].copy()
    for j in order:
        sc = score_rows(tot[None, :] + rolls[j])
        shifts[j] = int(np.argmax(sc))
        tot = tot + rolls[j][shifts[j]]
    for _ in range(3):
        changed = False
        for j in range(1, J):
            rest = tot - rolls[j][shifts[j]]
            sc = score_rows(rest[None, :] + rolls[j])
            k = int(np.argmax(sc))
            if sc[k] > sc[shifts[j]] + 1e-12:
                shifts[j], changed = k, True
            tot = rest + rolls[j][shifts[j]]
        if not changed:
            break
    return shifts, compatibility(profiles, shifts, capacity)


class CassiniPolicy(Policy):
    name = "cassini"
    uses_priorities = False
    uses_shifts = True

    def __init__(self, angles_per_period: int = 24, max_angles: int = 2048,
                 exhaustive_limit: int = 20000):
        self.angles_per_period = angles_per_period
        self.max_angles = max_angles
        self.exhaustive_limit = exhaustive_limit
        self.stats: Dict[str, float] = {}

    def decide(self, state: ClusterState) -> Decisions:
        model = ContentionModel(state)
        names = [j.name for j in state.jobs if has_comm(model, j.name)]
        js = {j.name: j for j in state.jobs}
        T = {n: model.iso_iter(n) for n in names}
        tc = {n: model.iso_comm(n) for n in names}
        # jobs per link (default paths), with their isolated rate there (bytes/s)
        on_link: Dict[int, List[Tuple[str, float]]] = {}
        for n in names:
            use, _ = model.usage(n)
            for l, b in use.items():
                on_link.setdefault(l, []).append((n, b / tc[n]))
        # per-link best shifts (identical link problems solved once)
        link_shift: Dict[int, Dict[str, float]] = {}
        link_weight: Dict[int, float] = {}
        solved: Dict[tuple, Tuple[List[int], float, float]] = {}
        for l, lst in on_link.items():
            if len(lst) < 2:
                continue
            C = model.cap[l]
            if sum(r for _, r in lst) <= C * (1 + 1e-9):
                continue      # never oversubscribed: nothing to interleave
            lst = sorted(lst)
            key = (tuple((T[n], js[n].compute_s, r) for n, r in lst), C)
            if key not in solved:
                unit, pu, L = circle_units([T[n] for n, _ in lst], self.angles_per_period,
                                           self.max_angles)
                prof = np.stack([demand_profile(p, js[n].compute_s / unit * p / (T[n] / unit), r, L)
                                 for (n, r), p in zip(lst, pu)])
                s, score = best_link_shifts(prof, pu, C, self.exhaustive_limit)
                zero = compatibility(prof, [0] * len(lst), C)
                solved[key] = (s, unit, score - zero)
            s, unit, gain = solved[key]
            link_shift[l] = {n: si * unit for (n, _), si in zip(lst, s)}
            link_weight[l] = sum(r for _, r in lst) / C
        # affinity graph traversal
        job_links: Dict[str, List[int]] = {}
        for l in link_shift:
            for n in link_shift[l]:
                job_links.setdefault(n, []).append(l)
        shift: Dict[str, float] = {}
        done_links = set()
        roots = sorted(job_links, key=lambda n: (-sum(link_weight[l] for l in job_links[n]), n))
        for root in roots:
            if root in shift:
                continue
            shift[root] = 0.0
            heap: List[Tuple[float, int, str]] = []
            for l in job_links[root]:
                heapq.heappush(heap, (-link_weight[l], l, root))
            while heap:
                _, l, via = heapq.heappop(heap)
                if l in done_links:
                    continue
                done_links.add(l)
                offset = shift[via] - link_shift[l][via]
                for n, s in link_shift[l].items():
                    if n in shift:
                        continue
                    shift[n] = offset + s
                    for l2 in job_links[n]:
                        if l2 not in done_links:
                            heapq.heappush(heap, (-link_weight[l2], l2, n))
        self.stats = {"links_scored": len(solved), "jobs_shifted": len(shift)}
        out: Decisions = {}
        for j in state.jobs:
            sh = shift.get(j.name, 0.0)
            if j.name in T and T[j.name] > 0:
                sh = sh % T[j.name]
            out[j.name] = Decision(job=j.name, priority=0, shift_s=float(sh),
                                   reason=f"cassini: shift {sh:.4g} s")
        return out
