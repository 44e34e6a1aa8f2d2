"""The joint stage of a small component (after the proposal stage).

Racks linked by rack-spanning jobs form a component.  When a component holds at most
``joint_jobs`` jobs (and no group scored with the proxy), its racks send their rack-local
jobs' decisions up (``JointOffer``) and the Coordinator hands the whole component to its
lowest-numbered rack (``CoordinatorMessage.joint``): that rack's halo then covers every rack
of the component, so its view is the union of their views, the model itself for those jobs.
There it runs a coordinate descent over each job's class, spine, cap and shift phase (a move
accepted only if the component's summed slowdown falls) from three starts: the current plan,
fair sharing (every job in one class, ECMP, no cap, no shift) and the current classes with the
rack-spanning jobs spread over the spines; it keeps the best result.  The result is
never worse than fair sharing's in the model (the guard, exact for small components), and a
plan no single move improves."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
import json
from typing import Dict, List, Sequence

from ..common import Opt, make_decision, path_options, shiftable
from ..fluid import STARVED_SLOWDOWN, SimJob
from .messages import Assignment, ProposalReport, ViewCost
from .rackview import _with_priority


@dataclass
class JointOffer:
    """Rack -> Coordinator (joint stage): the decisions of this rack's rack-local jobs."""
    rack: int
    epoch: int
    round: int
    offer: List[Assignment] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, s: str) -> "JointOffer":
        d = json.loads(s)
        d["offer"] = [Assignment(**a) for a in d["offer"]]
        return cls(**d)


@dataclass
class JointReport:
    """Lead rack -> Coordinator: the component's refined plan (every job) and its summed
    slowdown before, after, and under fair sharing, in the component view."""
    rack: int
    epoch: int
    round: int
    plan: List[Assignment] = field(default_factory=list)
    before: float = 0.0
    after: float = 0.0
    fair: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, s: str) -> "JointReport":
        d = json.loads(s)
        d["plan"] = [Assignment(**a) for a in d["plan"]]
        return cls(**d)


class JointStage:
    """Mixin of the Local Scheduler: the joint refinement of a small component."""

    def joint_refine(self, epoch: int, rnd: int, links: set, start: Dict[str, Opt],
                     cross: Sequence[str], model, state) -> JointReport:
        """``links``: the component's links (its racks'); ``start``: the current decision of
        every job of the component; ``cross``: its rack-spanning jobs; ``model`` and
        ``state``: this epoch's (a rack kept from an earlier epoch holds that epoch's, which
        may not know the component's other jobs)."""
        G = self.G
        jobs = sorted(start)
        iso = {n: model.iso_iter(n) for n in jobs}
        base: Dict[tuple, SimJob] = {}
        memo: Dict[tuple, float] = {}

        def sim(n: str, o: Opt) -> SimJob:
            key = (n, o.spine, o.cap)
            b = base.get(key)
            if b is None:
                b = base[key] = model.sim_job(n, make_decision(model, n, Opt(0, o.spine, o.cap)),
                                              links=links)
            return _with_priority(b, o.priority, o.shift * iso[n] / G if o.shift else 0.0)

        def norm(a: Dict[str, Opt]) -> Dict[str, Opt]:
            # a shift only for a job tied in its class with a link neighbour (common.shiftable)
            if not any(a[n].shift for n in jobs):
                return a
            ok = set(shiftable([a[n].priority for n in jobs],
                               [frozenset(sim(n, a[n]).links) for n in jobs]))
            return {n: (a[n] if not a[n].shift or i in ok else a[n]._replace(shift=0))
                    for i, n in enumerate(jobs)}

        def cost(a: Dict[str, Opt]) -> float:
            key = tuple(a[n] for n in jobs)
            v = memo.get(key)
            if v is None:
                self.evals += 1
                ts = model.ev.times([sim(n, a[n]) for n in jobs])
                v = memo[key] = sum(min(t / iso[n] if iso[n] > 0 else 1.0, STARVED_SLOWDOWN)
                                    for n, t in zip(jobs, ts))
            return v

        # every job is offered every path and cap here (the component view is exact: a cap
        # on a rack-spanning job no longer doubles what the racks must report)
        paths = {n: path_options(state, n, model, self.config.cap_fracs) for n in jobs}
        cur = norm(dict(start))
        before = cost(cur)
        fair = {n: Opt(0, None, 1.0, 0) for n in jobs}
        fair_c = cost(fair)
        # starts: the current plan, fair sharing, and the current classes with the
        # rack-spanning jobs spread over the spines (longest communication first, each on the
        # spine least used by the jobs already placed that share a rack with it)
        spread = dict(cur)
        placed: List[tuple] = []
        S = model.cluster.spec.spines
        for n in sorted(cross, key=lambda m: (-model.iso_comm(m), m)):
            if S <= 1 or not any(s is not None for s, _ in paths[n]):
                continue
            racks = set(model.jobs[model.index[n]].racks)
            load = [sum(t for m, s, t, rs in placed if s == x and rs & racks) for x in range(S)]
            x = min(range(S), key=lambda k: (load[k], k))
            spread[n] = spread[n]._replace(spine=x, shift=0)
            placed.append((n, x, model.iso_comm(n), racks))
        best, best_c = None, float("inf")
        for s0 in (cur, fair, norm(spread)):
            a, c = self._joint_descent(jobs, s0, cost(s0), paths, norm, cost, model)
            if c < best_c - 1e-9:
                best, best_c = a, c
        return JointReport(self.rack, epoch, rnd,
                           [Assignment(n, o.priority, o.spine, o.cap, o.shift)
                            for n, o in sorted(best.items())], before, best_c, fair_c)

    def _joint_descent(self, jobs, best, best_c, paths, norm, cost, model):
        """Coordinate descent from ``best``: each job's class, spine and cap with its shift
        held, then its shift phases; a move is accepted only if the summed slowdown falls."""
        for _ in range(self.config.max_passes):
            improved = False
            for n in jobs:
                keep = best[n]
                opts = [Opt(k, s, c, keep.shift) for k in self.classes(n, model)
                        for s, c in paths[n]]
                opts += [keep._replace(shift=p) for p in range(self.G) if p != keep.shift]
                for o in opts:
                    if o == keep:
                        continue
                    t = norm({**best, n: o})
                    c = cost(t)
                    if c < best_c - 1e-9:
                        best, best_c, improved = t, c, True
            if not improved:
                break
        return best, best_c

    # -- the guard over a component the joint stage does not take ------------------
    def fair_check(self, epoch: int, rnd: int) -> ProposalReport:
        """This rack's view cost (``ViewCost``) of its groups that hold a rack-spanning job,
        at the current decisions and with every job of those groups at fair sharing's (one
        class, ECMP, no cap, no shift): ``costs["guard"] = [current, fair]``."""
        a = self.assign
        fair = dict(a)
        cur, fv = ViewCost(0.0, {}), ViewCost(0.0, {})
        for g in self.groups:
            if not any(n in self._cross_set for n in g):
                continue
            fair.update({n: Opt(0, None, 1.0) for n in g})
            for vc, asg in ((cur, a), (fv, fair)):
                for n, v in zip(g, self._slowdowns(g, asg)):
                    if n in self._cross_set:
                        vc.cross[n] = v
                    else:
                        vc.local += v
        return ProposalReport(self.rack, epoch, rnd, costs={"guard": [cur, fv]})

    def adopt_fair(self) -> None:
        """The Coordinator found fair sharing better over the component: every job of this
        rack's groups that hold a rack-spanning job takes it."""
        for g in self.groups:
            if any(n in self._cross_set for n in g):
                self.assign.update({n: Opt(0, None, 1.0) for n in g})
