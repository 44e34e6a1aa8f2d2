"""Optimal scheduling: the joint optimum of the decision space under the shared model.

Decision space (the same one Harmonics searches, so the optimum bounds it): for every job a
priority class (at most ``num_classes`` levels), a spine (None = ECMP hash, or one of the
spines, for rack-spanning jobs) and a rate cap from ``cap_fracs`` (fraction of each link the
job uses).  Objective: mean slowdown (predicted iteration time / isolated iteration time).

Method: exhaustive enumeration.  Jobs that can never share a link (under any spine choice)
are independent, so each such group is enumerated on its own (exact: the objective is a sum
over groups).  Within a group, priorities are enumerated as weak orders (strict priority only
depends on relative order), times every job's (spine, cap) choice.  The search stops at
``time_limit_s``; ``proven_optimal`` is True only if every group was enumerated completely.
"""
from __future__ import annotations

import itertools
import time
from typing import Dict, List, Optional, Sequence, Tuple

from .base import ClusterState, Decision, Decisions, Policy
from .common import (DEFAULT_CAP_FRACS, Opt, has_comm, interaction_groups, make_decision,
                     path_options, potential_links, weak_orders)
from .model import STARVED_SLOWDOWN, ContentionModel, SimJob


def with_priority(b: SimJob, prio: int) -> SimJob:
    return SimJob(b.compute_s, b.links, b.B, b.bmax, prio, b.lam_max, b.shift_s)


class OptimalPolicy(Policy):
    name = "optimal"

    def __init__(self, time_limit_s: float = 30.0, cap_fracs: Sequence[float] = DEFAULT_CAP_FRACS,
                 include_ecmp: bool = True):
        self.time_limit_s = float(time_limit_s)
        self.cap_fracs = tuple(cap_fracs)
        self.include_ecmp = include_ecmp
        self.proven_optimal: Optional[bool] = None
        self.stats: Dict[str, float] = {}

    def space_size(self, state: ClusterState) -> int:
        """Number of joint assignments the exhaustive search would evaluate."""
        model = ContentionModel(state)
        names = [j.name for j in state.jobs if has_comm(model, j.name)]
        links_of = {n: potential_links(state, model, n) for n in names}
        total = 0
        for g in interaction_groups(names, links_of):
            n_orders = sum(1 for _ in weak_orders(len(g), state.num_classes)) if len(g) <= 8 else float("inf")
            p = 1
            for n in g:
                p *= len(path_options(state, n, model, self.cap_fracs, self.include_ecmp))
            total += n_orders * p
        return total

    def decide(self, state: ClusterState) -> Decisions:
        t0 = time.perf_counter()
        deadline = t0 + self.time_limit_s
        model = ContentionModel(state)
        names = [j.name for j in state.jobs if has_comm(model, j.name)]
        links_of = {n: potential_links(state, model, n) for n in names}
        groups = sorted(interaction_groups(names, links_of), key=len)
        best: Dict[str, Opt] = {}
        proven = True
        evaluated = 0
        for g in groups:
            opts, complete, n = self._search(state, model, g, deadline)
            best.update(opts)
            proven = proven and complete
            evaluated += n
        elapsed = time.perf_counter() - t0
        self.proven_optimal = proven
        self.stats = {"evaluated": evaluated, "groups": len(groups), "seconds": elapsed,
                      "simulations": model.ev.evaluations}
        why = (f"optimal: exhaustive search over {len(groups)} independent group(s), "
               f"{evaluated} assignments, proven_optimal={proven}"
               + ("" if proven else f" (time limit {self.time_limit_s:g} s hit: best found)"))
        out: Decisions = {}
        for j in state.jobs:
            if j.name in best:
                out[j.name] = make_decision(model, j.name, best[j.name], why)
            else:
                out[j.name] = Decision(job=j.name, priority=0, reason=why)
        return out

    def _search(self, state: ClusterState, model: ContentionModel, group: List[str],
                deadline: float) -> Tuple[Dict[str, Opt], bool, int]:
        K = max(1, state.num_classes)
        iso = [model.iso_iter(n) for n in group]
        popts = [path_options(state, n, model, self.cap_fracs, self.include_ecmp) for n in group]
        base: Dict[Tuple[int, Optional[int], float], SimJob] = {}

        def sim(i, spine, cap, prio):
            key = (i, spine, cap)
            b = base.get(key)
            if b is None:
                d = make_decision(model, group[i], Opt(0, spine, cap))
                b = model.sim_job(group[i], d)
                base[key] = b
            return with_priority(b, prio)

        def cost(prios, paths):
            sims = [sim(i, p[0], p[1], prios[i]) for i, p in enumerate(paths)]
            ts = model.ev.times(sims)
            return sum(min(t / s if s > 0 else 1.0, STARVED_SLOWDOWN) for t, s in zip(ts, iso))

        n = len(group)
        # incumbent: fair sharing (one class, ECMP or first path option, no cap)
        inc_paths = tuple(p[0] for p in popts)
        inc_prios = (0,) * n
        best_cost = cost(inc_prios, inc_paths)
        evaluated = 1
        complete = True
        for prios in weak_orders(n, K):
            for paths in itertools.product(*popts):
                if time.perf_counter() > deadline:
                    complete = False
                    break
                c = cost(prios, paths)
                evaluated += 1
                if c < best_cost - 1e-12:
                    best_cost, inc_prios, inc_paths = c, prios, paths
            if not complete:
                break
        return ({group[i]: Opt(inc_prios[i], inc_paths[i][0], inc_paths[i][1]) for i in range(n)},
                complete, evaluated)
