"""Optimal scheduling: the joint optimum of the decision space under the shared model.

Decision space (the same one Harmonics searches, so the optimum bounds it): for every job a
priority class (at most ``num_classes`` levels), a spine (None = ECMP hash, or one of the
spines, for rack-spanning jobs), a rate cap from ``cap_fracs`` (fraction of each link the
job uses) and, for a job that shares its class with another job on one of its links
(``common.shiftable``), a start-time shift phase (``common.SHIFT_PHASES`` phases of its
isolated iteration time; the grid contains CASSINI's interleavings of the standard cases).
Objective: mean slowdown (predicted iteration time / isolated iteration time).

Method: exhaustive enumeration.  Jobs that can never share a link (under any spine choice)
are independent, so each such group is enumerated on its own (exact: the objective is a sum
over groups).  Within a group: every (spine, cap) choice of its jobs, times the priorities as
weak orders (strict priority only depends on relative order) of which only one per distinct
order of the pairs of jobs that share a link is evaluated (the same rates at every instant),
times the shift phases of the jobs tied in a class (enumerated after every shift-free
assignment: a shift is chosen only if it strictly beats them all).  A (spine, cap) choice
whose summed per-job lower bounds (each job alone on its links) reach the incumbent is
skipped (exact).
The search stops at ``time_limit_s``; ``proven_optimal`` is True only if every group was
enumerated completely.
"""
from __future__ import annotations

import itertools
import time
from typing import Dict, List, Optional, Sequence, Tuple

from .base import ClusterState, Decision, Decisions, Policy
from .common import (DEFAULT_CAP_FRACS, SHIFT_PHASES, Opt, has_comm, interaction_groups,
                     make_decision, path_options, potential_links, shiftable, weak_orders)
from .fluid import STARVED_SLOWDOWN, SimJob, isolated_sim_time
from .model import ContentionModel

# relative slack of the lower bound (the model detects a completion at 1e-9 of the work)
LB_MARGIN = 1e-6


class OptimalPolicy(Policy):
    name = "optimal"
    # decide() reads the jobs' declared fields and the classes only (scheduling.epochs.SameInputs)
    pure_decisions = True

    def __init__(self, time_limit_s: float = 30.0, cap_fracs: Sequence[float] = DEFAULT_CAP_FRACS,
                 include_ecmp: bool = True, shift_phases: int = SHIFT_PHASES):
        self.time_limit_s = float(time_limit_s)
        self.shift_phases = shift_phases
        self.pruned = 0
        self.cap_fracs = tuple(cap_fracs)
        self.include_ecmp = include_ecmp
        self.proven_optimal: Optional[bool] = None
        self.stats: Dict[str, float] = {}

    def decide(self, state: ClusterState) -> Decisions:
        t0 = time.perf_counter()
        deadline = t0 + self.time_limit_s
        model = ContentionModel(state)
        names = [j.name for j in state.jobs if has_comm(model, j.name)]
        links_of = {n: potential_links(state, model, n) for n in names}
        groups = sorted(interaction_groups(names, links_of), key=len)
        best: Dict[str, Opt] = {}
        self.pruned = 0
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
                      "simulations": model.ev.evaluations, "pruned": self.pruned}
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
        G = max(1, self.shift_phases)
        iso = [model.iso_iter(n) for n in group]
        popts = [path_options(state, n, model, self.cap_fracs, self.include_ecmp) for n in group]
        base: Dict[Tuple[int, Optional[int], float], SimJob] = {}
        lbs: Dict[Tuple[int, Optional[int], float], float] = {}

        def sim0(i, spine, cap):
            key = (i, spine, cap)
            b = base.get(key)
            if b is None:
                d = make_decision(model, group[i], Opt(0, spine, cap))
                b = base[key] = model.sim_job(group[i], d)
                # lower bound of its slowdown whatever the others do: alone on its links
                lbs[key] = (min(isolated_sim_time(b, model.ev.cap) / iso[i], STARVED_SLOWDOWN)
                            if iso[i] > 0 else 1.0)
            return b

        def cost(prios, paths, shifts):
            sims = []
            for i, p in enumerate(paths):
                b = sim0(i, p[0], p[1])
                sims.append(SimJob(b.compute_s, b.links, b.B, b.bmax, prios[i], b.lam_max,
                                   shifts[i] * iso[i] / G if shifts[i] else 0.0))
            ts = model.ev.times(sims)
            return sum(min(t / s if s > 0 else 1.0, STARVED_SLOWDOWN) for t, s in zip(ts, iso))

        n = len(group)
        zeros = (0,) * n
        # incumbent: fair sharing (one class, ECMP or first path option, no cap, no shift)
        inc = (zeros, tuple(p[0] for p in popts), zeros)
        best_cost = cost(*inc)
        evaluated = 1

        def consider(prios, paths, shifts):
            nonlocal best_cost, inc, evaluated
            c = cost(prios, paths, shifts)
            evaluated += 1
            if c < best_cost - 1e-12:
                best_cost, inc = c, (prios, paths, shifts)

        orders = list(weak_orders(n, K))
        # first every shift-free assignment, then the shifted ones: a shift is chosen only if
        # it beats every assignment without one (on the emulator a shift is the weaker lever:
        # the phases it sets drift, priorities act at every packet)
        for shifted in (False, True):
            if shifted and G <= 1:
                break
            for paths in itertools.product(*popts):
                if time.perf_counter() > deadline:
                    return self._result(group, inc), False, evaluated
                for i, p in enumerate(paths):
                    sim0(i, p[0], p[1])
                # exact early abandon: every job costs at least its slowdown alone
                lb = sum(lbs[(i, p[0], p[1])] for i, p in enumerate(paths))
                if lb * (1.0 - LB_MARGIN) >= best_cost - 1e-12:
                    self.pruned += 1
                    continue
                links = [frozenset(base[(i, p[0], p[1])].links) for i, p in enumerate(paths)]
                pairs = [(i, j) for i in range(n) for j in range(i + 1, n)
                         if not links[i].isdisjoint(links[j])]
                seen = set()
                for prios in orders:
                    # strict priority acts per link: orders that agree on every pair of jobs
                    # sharing a link give the same rates at every instant
                    rel = tuple((prios[i] > prios[j]) - (prios[i] < prios[j]) for i, j in pairs)
                    if rel in seen:
                        continue
                    seen.add(rel)
                    if time.perf_counter() > deadline:
                        return self._result(group, inc), False, evaluated
                    if not shifted:
                        consider(prios, paths, zeros)
                        continue
                    # shifts of the jobs that share their class with another job on one of
                    # their links (every phase combination, jointly; the others at 0)
                    tied = shiftable(prios, links)
                    for ks in itertools.product(range(G), repeat=len(tied)):
                        if not any(ks):
                            continue
                        if time.perf_counter() > deadline:
                            return self._result(group, inc), False, evaluated
                        shifts = list(zeros)
                        for i, k in zip(tied, ks):
                            shifts[i] = k
                        consider(prios, paths, tuple(shifts))
        return self._result(group, inc), True, evaluated

    @staticmethod
    def _result(group: List[str], inc) -> Dict[str, Opt]:
        prios, paths, shifts = inc
        return {group[i]: Opt(prios[i], paths[i][0], paths[i][1], shifts[i])
                for i in range(len(group))}
