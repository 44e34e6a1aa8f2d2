"""Harmonics: a Local Scheduler per rack and a lightweight Global Coordinator.

See docs/harmonics.md for the design (problem of each tier, messages, complexity, epoch).

Decision space (the same as ``optimal``'s): per job a priority class (< num_classes), a spine
(None = ECMP hash, or one spine for all its cross-rack flows), a rate cap fraction from
``cap_fracs`` (applied to every link the job uses) and, for a job tied in a class with a link
neighbour, a start-time shift phase (``common.shiftable``).  Objective: mean slowdown under
the shared contention model.  Classes, spines and caps are chosen in rounds; a phase stage
then sets the shifts and tries the slowed jobs ("probes") tied with a neighbour at each phase;
a proposal stage last: racks exchange their boundary jobs (rack-local jobs that meet a
rack-spanning one) as ghosts, search joint class orders in these halo views, and the
Coordinator accepts the proposals the racks they touch judge best.

Tiers and what crosses between them (plain dataclasses, JSON-serialisable):
  LocalScheduler(r)  --RackSummary-->  GlobalCoordinator  --CoordinatorMessage-->  LocalScheduler(r)
  (proposal stage: --ProposalReport--> with GhostJob, Proposal and ViewCost rows)
A rack's view of the model contains only the links it owns (``Cluster.links_of_rack``); a
rack-spanning job is bounded there by its global isolated pace (its slowest link may lie
elsewhere).  Every rack-spanning job's decision is made once, by the Coordinator, and every
rack enforces that one decision.  The Coordinator compounds a rack-spanning job's slowdown over
its racks (independent blocking by each rack's local jobs multiplies; ``compound="product"``)
without evaluating the model.  Cost savers that keep the rack's search exact: equivalent
options evaluated once (free spines; classes with the same order relative to every link
neighbour), choices whose summed per-job lower bounds cannot beat the incumbent not evaluated
(``_lb``), memo per group, held solves reused when the held decisions did not change, the
evaluator's sub-problem cache kept across epochs (``incremental``); one approximate one:
rack-local moves screened on a third of the event budget, the best two evaluated in full.
Interaction groups of more than ``large_group`` jobs (fragmented placements: a whole rack in
one group) are not scored with the model but with a closed-form load proxy (``_proxy``);
the decisions of the jobs concerned say so in their reason.
"""
from __future__ import annotations

import itertools
import json

import numpy as np
import time
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .base import ClusterState, Decision, Decisions, Policy
from .common import (DEFAULT_CAP_FRACS, SHIFT_PHASES, Opt, has_comm, interaction_groups,
                     make_decision, path_options, potential_links, shiftable)
from .model import (BYTES_PER_GBIT, STARVED_SLOWDOWN, ContentionModel, Evaluator, SimJob,
                    isolated_sim_time, link_capacities)


# the closed-form proxy of large groups (LocalScheduler._proxy): a job's free fraction below
# the higher classes is floored at this (under saturated higher classes it is scored
# 1/PROXY_FREE_MIN slower); "product": the free fractions of its links multiply, "max": its
# worst link alone (the default; measured side by side in docs/harmonics.md)
PROXY_FREE_MIN = 0.05
PROXY_BLOCK = "max"
# relative slack of the lower bound of a job's slowdown (LocalScheduler._lb): the model
# detects a completion at 1e-9 of the remaining work, so an iteration may end a hair early
LB_MARGIN = 1e-6
USE_BOUND = True     # the lower-bound pruning of LocalScheduler._solve_group (exact)
# phase stage: a job slowed by more than this (its slowdown - 1) is also offered every class
# with every phase ("probe"): it may do better tied with a neighbour at another phase than
# below it (comm-heavy jobs that never fit in the higher job's gaps)
PROBE_MIN = 0.05
# proposal stage: a halo group is searched only if one of its jobs (a ghost included) is slowed
# by more than this in the halo view (the probe's threshold)
PROPOSE_MIN = PROBE_MIN
SCREEN_BOUND = True  # ... also before screening runs (changes which options reach the top)

# ---------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------

@dataclass
class OptionCost:
    """One alternative decision for a rack-spanning job, as one rack sees it."""
    priority: int
    spine: Optional[int]
    cap: float
    own: float        # the job's predicted slowdown on this rack's links
    local_others: float   # summed slowdown of the rack-local jobs that may share a link with it
    cross_others: Dict[str, float] = field(default_factory=dict)
    # slowdown of each other rack-spanning job that may share a link with it on this rack
    shift: int = 0    # start-time shift phase (common.shift_seconds)


@dataclass
class JobSummary:
    job: str
    preferred: int                 # index into options of the rack's preferred decision
    options: List[OptionCost]      # same order in every rack (priority, spine, cap, shift)
    uplink_gbps: float             # the job's mean demand on this rack's ToR-spine links
    compute_s: float = 0.0         # the job's compute per iteration (its profile)
    iso_s: float = 0.0             # its isolated iteration time (global, default paths)
    local_peers: int = 0           # rack-local jobs that may share one of its links here


@dataclass
class RackSummary:
    """Local Scheduler -> Coordinator, once per round."""
    rack: int
    epoch: int
    round: int
    jobs: List[JobSummary]         # rack-spanning jobs only
    uplink_demand_gbps: float      # aggregate demand of the rack's rack-spanning jobs
    local_jobs: int                # rack-local jobs (never described to the Coordinator)

    def to_json(self) -> str:
        """Compact wire form: each option is a row ``[priority, spine, cap, own, local_others,
        cross, shift]``, ``cross`` the values of ``cross_others`` in the order of the job's ``cross``
        list (every option of a job reports the same other jobs), or a dict if they differ."""
        jobs = []
        for j in self.jobs:
            cross = list(j.options[0].cross_others) if j.options else []
            rows = []
            for o in j.options:
                co = o.cross_others
                vals = [co[m] for m in cross] if list(co) == cross else co
                rows.append([o.priority, o.spine, o.cap, o.own, o.local_others, vals, o.shift])
            jobs.append({"job": j.job, "preferred": j.preferred, "uplink_gbps": j.uplink_gbps,
                         "compute_s": j.compute_s, "iso_s": j.iso_s,
                         "local_peers": j.local_peers, "cross": cross, "options": rows})
        return json.dumps({"rack": self.rack, "epoch": self.epoch, "round": self.round,
                           "uplink_demand_gbps": self.uplink_demand_gbps,
                           "local_jobs": self.local_jobs, "jobs": jobs})

    @classmethod
    def from_json(cls, s: str) -> "RackSummary":
        d = json.loads(s)
        jobs = []
        for j in d["jobs"]:
            cross = j["cross"]
            opts = [OptionCost(p, sp, c, own, lo,
                               dict(zip(cross, vals)) if isinstance(vals, list) else vals, sh)
                    for p, sp, c, own, lo, vals, sh in j["options"]]
            jobs.append(JobSummary(j["job"], j["preferred"], opts, j["uplink_gbps"],
                                   j["compute_s"], j["iso_s"], j["local_peers"]))
        d["jobs"] = jobs
        return cls(**d)


@dataclass
class Assignment:
    job: str
    priority: int
    spine: Optional[int]
    cap: float
    shift: int = 0

    @property
    def opt(self) -> Opt:
        return Opt(self.priority, self.spine, self.cap, self.shift)


@dataclass
class CoordinatorMessage:
    """Coordinator -> every Local Scheduler a job touches: the one decision of each
    rack-spanning job."""
    epoch: int
    round: int
    assignments: List[Assignment]
    probe: List[str] = field(default_factory=list)   # phase stage: jobs offered every class
    # proposal stage: the ghosts this rack's halo view holds, the other racks' proposals it
    # is asked to cost, the proposals accepted
    ghosts: List[GhostJob] = field(default_factory=list)
    proposals: List[Proposal] = field(default_factory=list)
    accepted: List[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, s: str) -> "CoordinatorMessage":
        d = json.loads(s)
        d["assignments"] = [Assignment(**a) for a in d["assignments"]]
        d["ghosts"] = [GhostJob(**g) for g in d.get("ghosts", [])]
        d["proposals"] = [_proposal(p) for p in d.get("proposals", [])]
        return cls(**d)


@dataclass
class GhostJob:
    """A rack-local job of one rack as the other racks' halo views hold it (proposal stage):
    its traffic on the links it may share with rack-spanning jobs there, its held class and
    shift, its bound (rate cap, global isolated pace).  ``meets``: those rack-spanning jobs
    (the Coordinator sends the ghost to their racks)."""
    job: str
    rack: int
    priority: int
    shift_s: float
    compute_s: float
    links: List[int]
    bytes: List[float]
    bmax: float
    lam_max: Optional[float]       # None: unbounded
    meets: List[str]
    iso_s: float = 0.0             # its isolated iteration time

    def sim(self, priority: Optional[int] = None, shift_s: Optional[float] = None) -> SimJob:
        return SimJob(self.compute_s, tuple(self.links), tuple(self.bytes), self.bmax,
                      self.priority if priority is None else priority,
                      float("inf") if self.lam_max is None else self.lam_max,
                      self.shift_s if shift_s is None else shift_s)


@dataclass
class Proposal:
    """A rack's joint decision for one of its halo groups: the new decisions of the group's
    rack-spanning jobs (all of them, changed or not) and of its rack-local jobs that other
    racks hold as ghosts (``GhostJob``; job, class, shift in seconds)."""
    rack: int
    index: int
    assignments: List[Assignment]
    ghosts: List[Tuple[str, int, float]] = field(default_factory=list)

    @property
    def pid(self) -> str:
        return f"{self.rack}:{self.index}"


@dataclass
class ViewCost:
    """A rack's halo-view cost of one joint assignment: the summed slowdown of its rack-local
    jobs and each rack-spanning job's slowdown (only groups with a rack-spanning job)."""
    local: float
    cross: Dict[str, float] = field(default_factory=dict)


@dataclass
class ProposalReport:
    """Local Scheduler -> Coordinator in the proposal stage: its boundary (ghosts), or its
    proposals, and for every proposal it made or was asked about (``costs``, by
    ``Proposal.pid``) the halo-view cost before and after it, over the halo groups it
    touches."""
    rack: int
    epoch: int
    round: int
    boundary: List[GhostJob] = field(default_factory=list)
    proposals: List[Proposal] = field(default_factory=list)
    costs: Dict[str, List[ViewCost]] = field(default_factory=dict)   # [before, after]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, s: str) -> "ProposalReport":
        d = json.loads(s)
        d["boundary"] = [GhostJob(**g) for g in d["boundary"]]
        d["proposals"] = [_proposal(p) for p in d["proposals"]]
        d["costs"] = {k: [ViewCost(**x) for x in v] for k, v in d["costs"].items()}
        return cls(**d)


def _proposal(p: dict) -> Proposal:
    return Proposal(p["rack"], p["index"], [Assignment(**a) for a in p["assignments"]],
                    [tuple(g) for g in p["ghosts"]])


# ---------------------------------------------------------------------------
# Local Scheduler
# ---------------------------------------------------------------------------

def _with_priority(b: SimJob, prio: int, shift_s: float = 0.0) -> SimJob:
    return SimJob(b.compute_s, b.links, b.B, b.bmax, prio, b.lam_max, shift_s)


class LocalScheduler:
    """Owns one rack's links; optimises the decisions of the jobs on them."""

    def __init__(self, rack: int, state: ClusterState, model: ContentionModel, rack_links: set,
                 names: Sequence[str], pot: Dict[str, set], K: int, cap_fracs: Sequence[float],
                 exhaustive_limit: int = 256, max_passes: int = 3, span_weight: bool = False,
                 cross_caps: bool = False, screen: float = 1.0, screen_keep: int = 2,
                 large_group: int = 8, shift_phases: int = SHIFT_PHASES):
        self.large_group = large_group
        self.G = max(1, shift_phases)
        self.screen = screen
        self.screen_keep = screen_keep
        self.rack = rack
        self.span_weight = span_weight
        self.state = state
        self.model = model
        self.links = rack_links
        self.K = K
        self.exhaustive_limit = exhaustive_limit
        self.max_passes = max_passes
        self.jobs = list(names)
        self.cross = [n for n in self.jobs if model.jobs[model.index[n]].spans_racks]
        self._cross_set = set(self.cross)
        self.local = [n for n in self.jobs if n not in self._cross_set]
        self.paths = {n: path_options(state, n, model, cap_fracs) for n in self.jobs}
        if not cross_caps:   # caps only for rack-local jobs (see docs/harmonics.md)
            self.paths = {n: ([(s, c) for s, c in p if c >= 1.0] if n in self._cross_set else p)
                          for n, p in self.paths.items()}
        self.options = {n: [Opt(k, s, c) for k in range(K) for (s, c) in self.paths[n]]
                        for n in self.jobs}
        # the two links of each spine in this rack (uplink, downlink): spines whose links no
        # other job of the group uses are interchangeable in this rack's view
        cl = model.cluster
        tor = cl.tors[rack]
        self.spine_links = {s: {cl.link_index.get(f"{tor}>{sp}"), cl.link_index.get(f"{sp}>{tor}")}
                            for s, sp in enumerate(cl.spines)}
        self.iso = {n: model.iso_iter(n) for n in self.jobs}
        self.span = {n: len(model.jobs[model.index[n]].racks) for n in self.jobs}
        self.groups = interaction_groups(self.jobs, {n: pot[n] & rack_links for n in self.jobs})
        self.group_of = {n: gi for gi, g in enumerate(self.groups) for n in g}
        mine = {n: pot[n] & rack_links for n in self.jobs}
        self.local_peers = {n: sum(1 for m in self.local if not mine[n].isdisjoint(mine[m]))
                            for n in self.cross}
        self._base: Dict[Tuple[str, Optional[int], float], SimJob] = {}
        self._links: Dict[Tuple[str, Optional[int], float], frozenset] = {}
        self.assign: Dict[str, Opt] = {}
        self._summaries: Dict[tuple, RackSummary] = {}
        self._memo: Dict[tuple, Dict[tuple, List[float]]] = {}   # group -> options -> slowdowns
        self._solved: Dict[tuple, Dict[str, Opt]] = {}           # (group, fixed) -> solution
        self.evals = 0
        self.proxy_evals = 0
        self.proxy_batches = 0
        self._prows: Dict[tuple, tuple] = {}
        self._lbs: Dict[tuple, float] = {}
        self.pruned = 0            # evaluations skipped by the lower bound (``_lb``)
        self._lidx = {l: i for i, l in enumerate(sorted(rack_links))}
        self.large = [g for g in self.groups if self._is_large(g)]
        # proposal stage: the halo view (ghosts of the other racks' boundary jobs)
        self.pot = pot
        self.ghosts: Dict[str, GhostJob] = {}
        self._halo_set = False
        self.halo_links: set = set()
        self.halo_groups: List[Tuple[List[str], List[str]]] = []
        self._hbase: Dict[tuple, SimJob] = {}
        self._hmemo: Dict[tuple, Dict[tuple, List[float]]] = {}
        self._proposed: Dict[int, Dict[str, Opt]] = {}
        self._propcache: Dict[tuple, Optional[Tuple[Opt, ...]]] = {}
        self.halo_evals = 0

    def _is_large(self, group: Sequence[str]) -> bool:
        """A group of more than ``large_group`` jobs is scored with the closed-form load
        proxy (``_proxy``) instead of the model (see docs/harmonics.md, complexity)."""
        return self.large_group > 0 and len(group) > self.large_group
    # -- the rack's view of the model ----------------------------------------
    def _sim(self, n: str, o: Opt) -> SimJob:
        key = (n, o.spine, o.cap)
        b = self._base.get(key)
        if b is None:
            d = make_decision(self.model, n, Opt(0, o.spine, o.cap))
            b = self.model.sim_job(n, d, links=self.links, floor=n in self.cross)
            self._base[key] = b
        return _with_priority(b, o.priority, o.shift * self.iso[n] / self.G if o.shift else 0.0)

    def _lb(self, n: str, o: Opt) -> float:
        """A lower bound of n's slowdown under o in this rack's view, whatever the others do:
        its isolated time in the rack's view (caps and the global-pace floor included) / iso.
        Every iteration the model simulates takes at least that long (a job alone gets its
        highest rate), so the model's figure (an exact cycle's or the second-half mean) is
        at least the bound; completions are detected at 1e-9 of the remaining work, hence
        the relative margin ``LB_MARGIN`` where the bound is used (``_solve_group``)."""
        key = (n, o.spine, o.cap)
        v = self._lbs.get(key)
        if v is None:
            iso = self.iso[n]
            v = (min(isolated_sim_time(self._sim(n, o), self.model.ev.cap) / iso,
                     STARVED_SLOWDOWN) if iso > 0 else 1.0)
            self._lbs[key] = v
        return v

    def _slowdowns(self, group: Sequence[str], a: Dict[str, Opt], budget: float = 1.0) -> List[float]:
        large = self._is_large(group)
        if large:
            budget = 0.0          # one memo per group for the proxy (no screening runs)
        key = tuple(a[n] for n in group)
        memo = self._memo.setdefault((tuple(group), budget), {})
        hit = memo.get(key)
        if hit is not None:
            return hit
        if large:
            self.proxy_evals += 1
            res = self._proxy(group, a)[0]
            memo[key] = res
            return res
        self.evals += 1
        ts = self.model.ev.times([self._sim(n, a[n]) for n in group], budget)
        res = [min(t / self.iso[n] if self.iso[n] > 0 else 1.0, STARVED_SLOWDOWN)
               for n, t in zip(group, ts)]
        memo[key] = res
        return res

    def _proxy_row(self, n: str, o: Opt) -> tuple:
        """(u, t, floor, compute, iso) of n under o in this rack's view, u and t over the rack's
        links: u_e = B_e / (C_e * iso) (its share of e's time at its isolated pace), t_e = B_e / C_e;
        floor = bmax / lam_max (caps and the global-pace floor).  The same SimJob as the model's."""
        key = (n, o.spine, o.cap)
        row = self._prows.get(key)
        if row is None:
            sj = self._sim(n, o)
            cap = self.model.ev.cap
            iso = self.iso[n]
            L = len(self._lidx)
            u = np.zeros(L)
            t = np.zeros(L)
            if iso > 0 and sj.bmax > 0:
                for l, b in zip(sj.links, sj.B):
                    i = self._lidx[l]
                    t[i] = b / cap[l]
                    u[i] = t[i] / iso
                fl = sj.bmax / sj.lam_max if sj.lam_max < float("inf") else 0.0
                row = (u, t, fl, sj.compute_s, iso)
            else:
                row = (u, t, -1.0, sj.compute_s, iso)     # no traffic here: slowdown 1
            self._prows[key] = row
        return row

    def _proxy(self, group: Sequence[str], a: Dict[str, Opt], n: Optional[str] = None,
               cands: Optional[Sequence[Opt]] = None) -> List[List[float]]:
        """Closed-form slowdowns of a large group in this rack's view (no simulation), for
        the assignment ``a`` with n's option replaced by each of ``cands`` (one row each;
        n None: ``a`` itself).  Job m occupies link e a fraction u_me = B_me / (C_e iso_m) of
        the time at its isolated pace.  On e, job j is blocked by the higher classes,
        H_e = sum of their u, and shares with its own class, E_e = sum of the others' u in it.
        With ``PROXY_BLOCK="product"`` it progresses only while none of its links is blocked:
            F_j = prod_e max(1 - H_e, PROXY_FREE_MIN)
            T_j = max(bmax_j / lam_max_j, max_e (B_je / C_e) * (1 + E_e)) / max(F_j, PROXY_FREE_MIN)
        with ``"max"`` (the default) only its worst link counts:
            T_j = max(bmax_j / lam_max_j, max_e (B_je / C_e) * (1 + E_e) / max(1 - H_e, PROXY_FREE_MIN));
        its slowdown is (compute_j + T_j) / iso_j, capped at STARVED_SLOWDOWN.  The inputs are
        the model's SimJobs (rack links, caps and the global-pace floor in lam_max).
        O(candidates x jobs x rack links) numpy work.  It depends on a job's class only through
        its order relative to the jobs sharing one of its links, and not on which unused spine
        a job takes: the option classes of ``_option_class`` stay exact for it."""
        if n is None:
            n, cands = group[0], [a[group[0]]]
        pos = list(group).index(n)
        rows = [self._proxy_row(m, a[m]) for m in group]
        O = len(cands)
        U = np.empty((O, len(group), len(self._lidx)))
        T = np.empty_like(U)
        U[:] = np.stack([r[0] for r in rows])
        T[:] = np.stack([r[1] for r in rows])
        P = np.empty((O, len(group)), dtype=np.int64)
        P[:] = [a[m].priority for m in group]
        fl = np.empty((O, len(group)))
        fl[:] = [r[2] for r in rows]
        for i, o in enumerate(cands):
            r = self._proxy_row(n, o)
            U[i, pos], T[i, pos], fl[i, pos], P[i, pos] = r[0], r[1], r[2], o.priority
        c = np.array([r[3] for r in rows])
        iso = np.array([r[4] if r[4] > 0 else 1.0 for r in rows])
        K = self.K
        onehot = (P[:, :, None] == np.arange(K)[None, None, :])        # O x J x K
        load = np.einsum("ojk,ojl->okl", onehot.astype(float), U)      # O x K x L
        prefix = np.concatenate([np.zeros_like(load[:, :1]), np.cumsum(load, axis=1)], axis=1)
        ar = np.arange(O)[:, None]
        H = prefix[ar, P]                      # O x J x L: load of the higher classes
        E = np.maximum(load[ar, P] - U, 0.0)   # the others of its class
        if PROXY_BLOCK == "product":
            # it progresses only while none of its links is taken by a higher class: the free
            # fractions of its links multiply (blocking on different links is not aligned)
            free = np.where(T > 0, np.maximum(1.0 - H, PROXY_FREE_MIN), 1.0).prod(axis=2)
            te = T * (1.0 + E)
            Tc = np.maximum(fl, te.max(axis=2)) / np.maximum(free, PROXY_FREE_MIN)
        else:
            te = T * (1.0 + E) / np.maximum(1.0 - H, PROXY_FREE_MIN)
            Tc = np.maximum(fl, te.max(axis=2))
        sd = np.minimum((c[None, :] + Tc) / iso[None, :], STARVED_SLOWDOWN)
        sd[fl < 0] = 1.0
        return sd.tolist()

    def _cost(self, group, a) -> float:
        """Rack objective: slowdowns of the group's jobs; a rack-spanning job's excess
        (slowdown - 1) is weighted by the number of racks it spans when ``span_weight``:
        delays it takes here shift its phase on its other racks, so they compound."""
        return self._group_cost(group, self._slowdowns(group, a))

    # -- optimisation over one interaction group ---------------------------
    def _initial(self, free: Sequence[str], a: Dict[str, Opt]) -> None:
        """Shortest communication first gets the higher class; spines balanced greedily."""
        order = sorted(free, key=lambda n: (self.model.iso_comm(n), n))
        spine_load: Dict[Optional[int], float] = {}
        for n, o in a.items():
            spine_load[o.spine] = spine_load.get(o.spine, 0.0) + 1.0
        for rank, n in enumerate(order):
            spines = [s for s, _ in self.paths[n]]
            cands = [s for s in dict.fromkeys(spines) if s is not None] or [None]
            s = min(cands, key=lambda x: (spine_load.get(x, 0.0), -1 if x is None else x))
            spine_load[s] = spine_load.get(s, 0.0) + 1.0
            a[n] = Opt(min(rank, self.K - 1), s, 1.0)

    def _option_class(self, n: str, o: Opt, group: Sequence[str], a: Dict[str, Opt],
                      others: Optional[list] = None, paths: Optional[dict] = None) -> tuple:
        """Options of n that are equivalent in this rack's view share a class (exactly: the
        model gives the same iteration times):
        - a spine whose rack links no other job of the group uses is as good as any other
          such spine;
        - strict priority acts per link: the rates depend on n's class only through its order
          (above / equal / below) relative to the jobs that share one of its links, so classes
          with the same order relative to each of those neighbours are equivalent."""
        spine = o.spine
        if others is None:
            others = [(m, self._linkset(m, a[m])) for m in group if m != n]
        if paths is not None:     # the same (spine, cap) with the same others: reuse
            hit = paths.get((o.spine, o.cap))
            if hit is not None:
                p = o.priority
                return (tuple((p > q) - (p < q) for q in hit[1]), hit[0], o.cap, o.shift)
        if spine is not None:
            sl = self.spine_links[spine]
            if all(sl.isdisjoint(ls) for _, ls in others):
                spine = "free"
        mine = self._linkset(n, o)
        p = o.priority
        prios = [a[m].priority for m, ls in others if not mine.isdisjoint(ls)]
        if paths is not None:
            paths[(o.spine, o.cap)] = (spine, prios)
        rel = tuple((p > q) - (p < q) for q in prios)
        return (rel, spine, o.cap, o.shift)

    def _linkset(self, n: str, o: Opt) -> frozenset:
        key = (n, o.spine, o.cap)
        ls = self._links.get(key)
        if ls is None:
            ls = self._links[key] = frozenset(self._sim(n, o).links)
        return ls

    def _each_option(self, n: str, group: Sequence[str], a: Dict[str, Opt], skip=None,
                     budget: float = 1.0, prune=None):
        """(option, slowdowns of the group) for every option of n, one evaluation per class;
        ``prune(o)`` True: o is skipped (not evaluated, not yielded)."""
        done: Dict[tuple, List[float]] = {}
        keep = a[n]
        others = [(m, self._linkset(m, a[m])) for m in group if m != n]   # held: fixed
        paths: dict = {}
        cls: Dict[Opt, tuple] = {}

        def klass(o):
            k = cls.get(o)
            if k is None:
                k = cls[o] = self._option_class(n, o, group, a, others, paths)
            return k
        same = klass(skip) if skip is not None else None
        if self._is_large(group):
            # the proxy scores all of n's remaining option classes in one batch
            memo = self._memo.setdefault((tuple(group), 0.0), {})
            reps: Dict[tuple, Opt] = {}
            for o in self.options[n]:
                if o != skip:
                    k = klass(o)
                    if k != same:
                        reps.setdefault(k, o)
            pos = list(group).index(n)
            base_key = [a[m] for m in group]
            todo = []
            for o in reps.values():
                base_key[pos] = o
                if tuple(base_key) not in memo:
                    todo.append(o)
            if todo:
                self.proxy_evals += len(todo)
                self.proxy_batches += 1
                for o, sd in zip(todo, self._proxy(group, a, n, todo)):
                    base_key[pos] = o
                    memo[tuple(base_key)] = sd
        for o in self.options[n]:
            if o == skip:
                continue
            k = klass(o)
            if k == same:         # equivalent to the held option: the same costs, no move
                continue
            if k not in done:
                if prune is not None and prune(o):
                    continue
                a[n] = o
                done[k] = self._slowdowns(group, a, budget)
            yield o, done[k]
        a[n] = keep

    def _group_cost(self, group, sd) -> float:
        if not self.span_weight:
            return sum(sd)
        return sum(1.0 + (v - 1.0) * self.span[m] for m, v in zip(group, sd))

    def _solve_group(self, group: List[str], free: List[str], a: Dict[str, Opt]) -> None:
        if not free:
            return
        combos = 1
        for n in free:
            combos *= len(self.options[n])
            if combos > self.exhaustive_limit:
                break
        bound = USE_BOUND and not self._is_large(group) and not self.span_weight
        if bound:
            held_lb = sum(self._lb(n, a[n]) for n in group if n not in free)
        if combos <= self.exhaustive_limit:
            best, best_c = None, float("inf")
            for choice in itertools.product(*[self.options[n] for n in free]):
                for n, o in zip(free, choice):
                    a[n] = o
                if bound:
                    # early abandon: even alone every job would cost at least its bound, so
                    # a choice whose summed bounds reach the incumbent cannot replace it
                    lb = (held_lb + sum(self._lb(n, o) for n, o in zip(free, choice))) \
                        * (1.0 - LB_MARGIN)
                    if best is not None and lb >= best_c - 1e-12:
                        self.pruned += 1
                        continue
                c = self._cost(group, a)
                if c < best_c - 1e-12:
                    best, best_c = choice, c
            for n, o in zip(free, best):
                a[n] = o
            return
        self._initial(free, a)

        def moves(n, keep, cur0):
            prune = None
            if bound:
                rest = sum(self._lb(m, a[m]) for m in group if m != n)

                def prune(o):
                    # the same bound as the exhaustive search's: a move is accepted only
                    # below the held cost
                    if (rest + self._lb(n, o)) * (1.0 - LB_MARGIN) >= cur0 - 1e-9:
                        self.pruned += 1
                        return True
                    return False
            if self.screen < 1.0 and n not in self._cross_set and not self._is_large(group):
                # screening: every option on a short run, the best few on the full model
                # (options the bound excludes are not screened: they cannot be accepted)
                quick = sorted(((self._group_cost(group, sd), i, o) for i, (o, sd) in
                                enumerate(list(self._each_option(
                                    n, group, a, skip=keep, budget=self.screen,
                                    prune=prune if SCREEN_BOUND else None)))))
                for _, _, o in quick[:self.screen_keep]:
                    if prune is not None and prune(o):
                        continue
                    a[n] = o
                    c = self._cost(group, a)
                    a[n] = keep
                    yield o, c
            else:
                for o, sd in list(self._each_option(n, group, a, skip=keep, prune=prune)):
                    yield o, self._group_cost(group, sd)
        self._descend(a, free, self._cost(group, a), moves)

    def _descend(self, a: Dict[str, Opt], movable: Sequence[str], cur: float, moves) -> float:
        """Coordinate descent: each movable job in turn takes its best alternative, the others
        held (``moves(n, held option, current cost)`` yields (option, group cost)); a move is
        accepted only if the cost falls; at most ``max_passes`` passes.  Returns the cost."""
        for _ in range(self.max_passes):
            improved = False
            for n in movable:
                keep = a[n]
                best_o, best_c = keep, cur
                for o, c in moves(n, keep, cur):
                    if c < best_c - 1e-9:
                        best_o, best_c = o, c
                a[n] = best_o
                if best_o != keep:
                    cur, improved = best_c, True
            if not improved:
                break
        return cur

    @staticmethod
    def _canon(opts: List[Opt], relabel: bool) -> tuple:
        """Held decisions up to a relabelling of the spines: in a rack's view the spines are
        interchangeable (same links, same capacities) unless a held job uses the ECMP hash,
        which pins its flows to particular spines, or a free job chooses a spine
        (``relabel`` False).  Priorities stay absolute: the free jobs choose among the same
        K classes."""
        if not relabel or any(o.spine is None for o in opts):
            return tuple(opts)
        lab: Dict[int, int] = {}
        return tuple((o.priority, lab.setdefault(o.spine, len(lab)), o.cap, o.shift) for o in opts)

    def solve(self, fixed: Optional[Dict[str, Opt]] = None) -> Dict[str, Opt]:
        """Best decisions for the rack's jobs with ``fixed`` ones held (rack view)."""
        fixed = fixed or {}
        a: Dict[str, Opt] = {}
        for gi, g in enumerate(self.groups):
            for n in g:
                if n in fixed:
                    a[n] = fixed[n]
            free = [n for n in g if n not in fixed]
            if len(g) == 1 and free:
                a[free[0]] = Opt(0, self.paths[free[0]][0][0], 1.0)
                continue
            # a group whose held decisions did not change keeps its solution (incremental
            # rounds and epochs); a free solve whose decisions for the now-held jobs equal
            # the held ones is a solution of the held problem too
            held = [n for n in g if n in fixed]
            relabel = not any(n in self._cross_set for n in free)   # free jobs use no spine
            key = (gi, tuple(held), self._canon([fixed[n] for n in held], relabel))
            sol = self._solved.get(key)
            if sol is None:
                sub: Dict[str, Opt] = {n: fixed[n] for n in held}
                self._solve_group(g, free, sub)
                sol = {n: sub[n] for n in free}
                self._solved[key] = sol
                if not held:   # a free solve is also a solution with its cross decisions held
                    crossed = [n for n in g if n in self._cross_set]
                    if crossed and len(crossed) < len(g):
                        k2 = (gi, tuple(crossed), self._canon([sub[n] for n in crossed], True))
                        self._solved.setdefault(k2, {n: sub[n] for n in g if n not in crossed})
            a.update(sol)
        self.assign = a
        return a

    # -- start-time shifts (the phase stage) ---------------------------------
    def _shiftable(self, group: Sequence[str], a: Dict[str, Opt]) -> List[str]:
        """The group's jobs that may take a shift in this rack's view (``common.shiftable``)."""
        return [group[i] for i in shiftable([a[n].priority for n in group],
                                            [self._linkset(n, a[n]) for n in group])]

    def phase_solve(self, fixed: Dict[str, Opt]) -> Dict[str, Opt]:
        """Shift phases of the rack-local jobs, the rack-spanning ones held at ``fixed`` and
        every class, spine and cap held: coordinate descent over each shiftable job's phases
        (a move is accepted only if the group's cost falls).  Groups scored with the proxy
        are left at phase 0 (the proxy has no notion of timing)."""
        a = self.assign
        a.update(fixed)
        for g in self.groups:
            if len(g) < 2 or self._is_large(g):
                continue
            locals_g = [n for n in g if n not in self._cross_set]
            sd = self._slowdowns(g, a)
            probe = {n for n, v in zip(g, sd) if n in locals_g and v > 1.0 + PROBE_MIN}
            movable = [n for n in locals_g
                       if n in probe or n in self._shiftable(g, a)]
            if not movable:
                continue

            def moves(n, keep, cur0, g=g, probe=probe):
                seen = {self._phase_norm(n, keep, g, a)}
                for o in self._phase_options(n, keep, n in probe):
                    o = self._phase_norm(n, o, g, a)
                    if o not in seen:
                        seen.add(o)
                        a[n] = o
                        c = self._cost(g, a)
                        a[n] = keep
                        yield o, c
            self._descend(a, movable, self._group_cost(g, sd), moves)
        return a

    def _phase_options(self, n: str, keep: Opt, probe: bool) -> List[Opt]:
        """The phase stage's alternatives of n: its held decision at every phase, and for a
        probed job every other class at every phase but 0 (the rounds chose its class among
        the shift-free ones already); phase-major order, so that ties go to the smaller
        shift; spine and cap stay held."""
        classes = range(self.K) if probe else [keep.priority]
        return [keep._replace(priority=k, shift=p) for p in range(self.G) for k in classes
                if p or k == keep.priority]

    def _phase_norm(self, n: str, o: Opt, g: Sequence[str], a: Dict[str, Opt]) -> Opt:
        """o, or o at phase 0 if n may not take a shift there (no link neighbour of its class
        in this rack's view): outside the decision space, it stands for phase 0."""
        if not o.shift:
            return o
        keep = a[n]
        a[n] = o
        ok = n in self._shiftable(g, a)
        a[n] = keep
        return o if ok else o._replace(shift=0)

    def phase_summarise(self, epoch: int, rnd: int, fixed: Dict[str, Opt],
                        probe: Sequence[str] = ()) -> RackSummary:
        """Like ``summarise`` for the phase stage: the rack-spanning jobs the Coordinator
        probes (every class at every phase, ``_phase_options``) and those that may take a
        shift in this rack's view (the held decision at each phase); an option outside the
        decision space here is reported at phase 0's costs (``_phase_norm``)."""
        a = self.assign
        a.update(fixed)
        out = []
        for n in self.cross:
            g = self.groups[self.group_of[n]]
            probed = n in probe
            if self._is_large(g) or not (probed or n in self._shiftable(g, a)):
                continue
            keep = a[n]
            opts = []
            cands = self._phase_options(n, keep, probed)
            for o in cands:
                a[n] = self._phase_norm(n, o, g, a)
                sd = self._slowdowns(g, a)
                a[n] = keep
                opts.append(self._option_cost(n, g, o, sd))
            out.append(self._job_summary(n, cands.index(keep), opts, 0.0))
        return RackSummary(self.rack, epoch, rnd, out, 0.0, len(self.local))

    def _option_cost(self, n: str, g: Sequence[str], o: Opt, sd: Sequence[float]) -> OptionCost:
        """Alternative o of rack-spanning job n as this rack sees it, from the slowdowns
        ``sd`` of its group ``g``: its own, the rack-local jobs' sum, each other
        rack-spanning job's."""
        cross = self._cross_set
        return OptionCost(o.priority, o.spine, o.cap, sd[g.index(n)],
                          sum(v for m, v in zip(g, sd) if m not in cross),
                          {m: v for m, v in zip(g, sd) if m != n and m in cross}, o.shift)

    def _job_summary(self, n: str, preferred: int, opts: List[OptionCost],
                     demand: float) -> JobSummary:
        return JobSummary(n, preferred, opts, demand,
                          self.model.jobs[self.model.index[n]].compute_s, self.iso[n],
                          self.local_peers[n])

    # -- the proposal stage: halo views and joint proposals --------------------
    def boundary(self) -> List[GhostJob]:
        """This rack's boundary jobs as ghosts for the other racks' halo views: each rack-local
        job that may share a link with a rack-spanning job here, restricted to those links,
        at its held decision, bounded by its cap and its isolated pace (its other links)."""
        if not self.cross:
            return []
        reach = {m: self.pot[m] & self.links for m in self.cross}
        shared = set().union(*reach.values())
        out = []
        for n in self.local:
            if self._is_large(self.groups[self.group_of[n]]):
                continue
            o = self.assign[n]
            sj = self._sim(n, o)
            keep = [(l, b) for l, b in zip(sj.links, sj.B) if l in shared]
            if not keep or sj.bmax <= 0:
                continue
            ls = {l for l, _ in keep}
            lam = sj.lam_max
            t = self.model.iso_comm(n)
            if t > 0:
                lam = min(lam, sj.bmax / t)
            out.append(GhostJob(n, self.rack, o.priority, sj.shift_s, sj.compute_s,
                                [l for l, _ in keep], [b for _, b in keep], sj.bmax,
                                None if lam == float("inf") else lam,
                                [m for m in self.cross if not reach[m].isdisjoint(ls)],
                                self.iso[n]))
        return out

    def set_halo(self, ghosts: Sequence[GhostJob]) -> None:
        """The halo view: this rack's links, plus the links where its rack-spanning jobs meet
        the other racks' boundary jobs (``ghosts``, held at their racks' decisions).  Halo
        groups: this rack's jobs and the ghosts that may share a link there, transitively;
        only groups with a rack-spanning job (and not scored with the proxy) take part."""
        mine = {g.job: g for g in ghosts if g.rack != self.rack
                and any(not self.pot[m].isdisjoint(g.links) for m in self.cross)}
        if self._halo_set and mine == self.ghosts:
            return         # the same halo view as in the last proposal round: keep its caches
        self._halo_set = True
        self.ghosts = mine
        self.halo_links = set().union(*(set(g.links) for g in self.ghosts.values())) \
            if self.ghosts else set()
        view = self.links | self.halo_links
        links_of = {n: self.pot[n] & view for n in self.jobs}
        links_of.update({g: set(gh.links) for g, gh in self.ghosts.items()})
        self.halo_groups = []
        for g in interaction_groups(self.jobs + sorted(self.ghosts), links_of):
            mine = [n for n in g if n not in self.ghosts]
            if any(n in self._cross_set for n in mine) and not any(
                    self._is_large(self.groups[self.group_of[n]]) for n in mine):
                self.halo_groups.append((mine, [n for n in g if n in self.ghosts]))
        self._hbase = {}
        self._hmemo = {}
        self._proposed = {}

    def _hsim(self, n: str, o: Opt) -> SimJob:
        """n under o in the halo view: a rack-spanning job also has its traffic on the halo
        links (its other racks' links where ghosts are), still bounded by its global pace."""
        if n not in self._cross_set or not self.halo_links:
            return self._sim(n, o)
        key = (n, o.spine, o.cap)
        b = self._hbase.get(key)
        if b is None:
            d = make_decision(self.model, n, Opt(0, o.spine, o.cap))
            b = self._hbase[key] = self.model.sim_job(n, d, links=self.links | self.halo_links,
                                                      floor=True)
        return _with_priority(b, o.priority, o.shift * self.iso[n] / self.G if o.shift else 0.0)

    def _halo_slowdowns(self, mine: Sequence[str], ghosts: Sequence[str], a: Dict[str, Opt],
                        over: Optional[Dict[str, Tuple[int, float]]] = None) -> List[float]:
        """Slowdowns of ``mine`` and then of the ghosts in the halo view; ``over``: ghosts'
        (class, shift) replaced, as in another rack's proposal."""
        ov = tuple(sorted((g, v) for g, v in (over or {}).items() if g in ghosts))
        key = (tuple(a[n] for n in mine), ov)
        memo = self._hmemo.setdefault((tuple(mine), tuple(ghosts)), {})
        hit = memo.get(key)
        if hit is not None:
            return hit
        self.halo_evals += 1
        ovd = dict(ov)
        sims = [self._hsim(n, a[n]) for n in mine] + [
            self.ghosts[g].sim(*ovd[g]) if g in ovd else self.ghosts[g].sim() for g in ghosts]
        ts = self.model.ev.times(sims)
        isos = [self.iso[n] for n in mine] + [self.ghosts[g].iso_s for g in ghosts]
        res = [min(t / i if i > 0 else 1.0, STARVED_SLOWDOWN) for i, t in zip(isos, ts)]
        memo[key] = res
        return res

    def _view_cost(self, a: Dict[str, Opt], touched: set, over=None) -> ViewCost:
        """The halo-view cost of ``a`` over the halo groups holding a ``touched`` job (of
        this rack, or a ghost)."""
        vc = ViewCost(0.0, {})
        for mine, gh in self.halo_groups:
            if touched.isdisjoint(mine) and touched.isdisjoint(gh):
                continue
            for n, v in zip(mine, self._halo_slowdowns(mine, gh, a, over)):
                if n in self._cross_set:
                    vc.cross[n] = v
                else:
                    vc.local += v
        return vc

    def _halo_key(self, mine: Sequence[str], ghosts: Sequence[str], choice: Sequence[Opt]):
        """Choices of a halo group that are exactly equivalent share a key: the same paths
        and caps, and the same order (above / equal / below) of every pair of jobs that
        share a link (ghosts included, at their held classes): strict priority acts per link."""
        ls = [frozenset(self._hsim(n, o).links) for n, o in zip(mine, choice)]
        gl = [frozenset(self.ghosts[g].links) for g in ghosts]
        gp = [self.ghosts[g].priority for g in ghosts]
        rel = []
        for i, o in enumerate(choice):
            for j in range(i + 1, len(choice)):
                if not ls[i].isdisjoint(ls[j]):
                    rel.append((i, j, (o.priority > choice[j].priority) - (o.priority < choice[j].priority)))
            for j, g in enumerate(gl):
                if not ls[i].isdisjoint(g):
                    rel.append((i, -1 - j, (o.priority > gp[j]) - (o.priority < gp[j])))
        return (tuple((o.spine, o.cap, o.shift) for o in choice), tuple(rel))

    def _shift_norm(self, mine: Sequence[str], ghosts: Sequence[str],
                    choice: Sequence[Opt]) -> Tuple[Opt, ...]:
        """A held shift stays only while its job may take one (``common.shiftable``: tied in
        a class with a link neighbour, ghosts included); otherwise phase 0."""
        ls = [frozenset(self._hsim(n, o).links) for n, o in zip(mine, choice)]
        ls += [frozenset(self.ghosts[g].links) for g in ghosts]
        ok = set(shiftable([o.priority for o in choice] + [self.ghosts[g].priority for g in ghosts],
                           ls))
        return tuple(o if not o.shift or i in ok else o._replace(shift=0)
                     for i, o in enumerate(choice))

    def _propose_group(self, mine: List[str], gh: List[str], a: Dict[str, Opt],
                       limit: int) -> Optional[Tuple[Opt, ...]]:
        """The best joint class choice of a halo group's jobs in the halo view, or None if
        none beats the current one.  Searched only where a job of the group (a ghost included)
        is slowed by more than ``PROPOSE_MIN`` and the group has at most ``limit`` class
        choices (``K ** jobs``): exhaustive, equivalent choices (``_halo_key``) evaluated
        once; spines, caps and shifts held (a shift only while its job stays tied,
        ``_shift_norm``).  The objective counts the ghosts' slowdowns too: this rack's
        estimate of what a choice costs its neighbours (the reported costs hold this rack's
        jobs only)."""
        keep = tuple(a[n] for n in mine)
        gkey = tuple((g, x.priority, x.shift_s, x.compute_s, tuple(x.links), tuple(x.bytes),
                      x.lam_max) for g in gh for x in (self.ghosts[g],))
        ck = (tuple(mine), keep, gkey)
        if ck in self._propcache:
            return self._propcache[ck]
        best = None
        sd = self._halo_slowdowns(mine, gh, a)
        if self.K ** len(mine) <= limit and any(v > 1.0 + PROPOSE_MIN for v in sd):
            base = best_c = sum(sd)
            seen = set()
            t = dict(a)
            for ks in itertools.product(range(self.K), repeat=len(mine)):
                choice = tuple(o._replace(priority=k) for k, o in zip(ks, keep))
                if any(o.shift for o in choice):
                    choice = self._shift_norm(mine, gh, choice)
                k = self._halo_key(mine, gh, choice)
                if k in seen:
                    continue
                seen.add(k)
                t.update(zip(mine, choice))
                c = sum(self._halo_slowdowns(mine, gh, t))
                if c < best_c - 1e-9 * max(1.0, base):
                    best, best_c = choice, c
        self._propcache[ck] = best
        return best

    def propose(self, epoch: int, rnd: int, limit: int) -> ProposalReport:
        """For each halo group holding a ghost: the best joint class choice of its jobs in the
        halo view (``_propose_group``); proposed if it changes a rack-spanning job.  Reports,
        for each proposal, the halo-view cost of its groups before and after (this rack's
        rack-local jobs at the proposal's decisions)."""
        a = self.assign
        props: List[Proposal] = []
        costs: Dict[str, ViewCost] = {}
        for mine, gh in self.halo_groups:
            if not gh:
                continue       # the halo view is the rack view: the rounds searched it
            best = self._propose_group(mine, gh, a, limit)
            if best is None or all(o == a[n] for n, o in zip(mine, best) if n in self._cross_set):
                continue
            sol = dict(zip(mine, best))
            p = Proposal(self.rack, len(props),
                         [Assignment(n, o.priority, o.spine, o.cap, o.shift)
                          for n, o in sol.items() if n in self._cross_set],
                         [(n, o.priority, self._sim(n, o).shift_s) for n, o in sol.items()
                          if n not in self._cross_set])
            self._proposed[p.index] = sol
            props.append(p)
            costs[p.pid] = [self._view_cost(a, set(mine)), self._view_cost({**a, **sol}, set(mine))]
        return ProposalReport(self.rack, epoch, rnd, proposals=props, costs=costs)

    def cost_proposals(self, epoch: int, rnd: int, props: Sequence[Proposal]) -> ProposalReport:
        """This rack's halo-view cost of other racks' proposals: their rack-spanning jobs at
        the proposed decisions, their ghosts at the proposed classes, this rack's own
        rack-local jobs held."""
        costs = {}
        for p in props:
            t = dict(self.assign)
            t.update({x.job: x.opt for x in p.assignments if x.job in t})
            over = {g: (k, sh) for g, k, sh in p.ghosts if g in self.ghosts}
            touched = {x.job for x in p.assignments} | set(over)
            costs[p.pid] = [self._view_cost(self.assign, touched), self._view_cost(t, touched, over)]
        return ProposalReport(self.rack, epoch, rnd, costs=costs)

    def adopt(self, fixed: Dict[str, Opt], accepted: Sequence[str]) -> None:
        """The Coordinator's answer: the rack-spanning jobs' decisions, and this rack's
        rack-local jobs at its accepted proposal's decisions."""
        for pid in accepted:
            r, i = pid.split(":")
            if int(r) == self.rack:
                self.assign.update(self._proposed[int(i)])
        self.assign.update({n: fixed[n] for n in self.cross if n in fixed})

    # -- messages ----------------------------------------------------------
    def summarise(self, epoch: int, rnd: int, around: Optional[Dict[str, Opt]] = None) -> RackSummary:
        """Cost of every alternative of each rack-spanning job, others held at the rack's
        preferred decisions (round 1: ``around`` None, the rack solves everything itself)
        or at the current consistent assignment (later rounds)."""
        a = dict(self.solve() if around is None else {n: around[n] for n in self.jobs})
        self.assign = a
        key = tuple(a[n] for n in self.jobs)
        hit = self._summaries.get(key)
        if hit is not None:       # nothing on this rack changed since that summary
            return RackSummary(self.rack, epoch, rnd, hit.jobs, hit.uplink_demand_gbps, hit.local_jobs)
        out = []
        total_demand = 0.0
        for n in self.cross:
            g = self.groups[self.group_of[n]]
            keep = a[n]
            opts = [self._option_cost(n, g, o, sd) for o, sd in list(self._each_option(n, g, a))]
            use, _ = self.model.usage(n, keep.spine)
            up = sum(b for l, b in use.items() if l in self.links
                     and self.model.cluster.links[l].kind in ("uplink", "downlink"))
            demand = up / BYTES_PER_GBIT / self.iso[n] if self.iso[n] > 0 else 0.0
            total_demand += demand
            out.append(self._job_summary(n, self.options[n].index(keep), opts, demand))
        res = RackSummary(self.rack, epoch, rnd, out, total_demand, len(self.local))
        self._summaries[key] = res
        return res


# ---------------------------------------------------------------------------
# Global Coordinator
# ---------------------------------------------------------------------------

class GlobalCoordinator:
    """Picks one decision per rack-spanning job from the racks' summaries."""

    def __init__(self, spines: int, tol: float = 1e-6, compound: str = "product"):
        self.compound = compound
        self.spines = spines
        self.tol = tol
        self.job_racks: Dict[str, List[int]] = {}   # rack-spanning job -> its racks (round 1)

    @staticmethod
    def _product(views: Sequence[Tuple[float, int]], compute_s: float, iso_s: float) -> float:
        """A rack-spanning job's slowdown from its slowdowns ``own_r`` in the views of its
        racks (with ``local_peers_r``, the rack-local jobs it meets there).
        In rack r its communication is stretched from the isolated T0 = iso - compute to
        T_r = own_r * iso - compute (blocked a fraction 1 - T0/T_r of the time).  Blocking by
        a rack's own rack-local jobs is independent of the other racks' (their phases are not
        aligned), and the job progresses only when no rack blocks it: the unblocked fractions
        multiply, T = T0 * prod_r (T_r / T0) over the racks with local peers.  Blocking by
        rack-spanning jobs is seen by every rack the pair shares (the same flows, the same
        moments), so it is not multiplied: the result is at least the worst single rack."""
        worst = max(v for v, _ in views)
        t0 = iso_s - compute_s
        if t0 <= 0 or iso_s <= 0 or worst >= STARVED_SLOWDOWN:
            return worst
        f = 1.0
        for v, peers in views:
            if peers:
                f *= max(1.0, (v * iso_s - compute_s) / t0)
        return min(STARVED_SLOWDOWN, max(worst, (compute_s + t0 * f) / iso_s))

    def _totals(self, entries: List[JobSummary], racks: Sequence[int],
                info: Dict[str, Tuple[float, float]], peers: Dict[Tuple[str, int], int]
                ) -> List[float]:
        if self.compound == "product":
            return self._totals_product(entries, racks, info, peers)
        return self._totals_max(entries)

    def _totals_product(self, entries: List[JobSummary], racks: Sequence[int],
                        info: Dict[str, Tuple[float, float]], peers: Dict[Tuple[str, int], int]
                        ) -> List[float]:
        """Like ``_totals_max`` but a rack-spanning job's slowdown compounds over its racks
        (``_product``) instead of being its worst rack's."""
        n = len(entries[0].options)
        me = entries[0]
        out = []
        for i in range(n):
            tot = sum(e.options[i].local_others for e in entries)
            tot += self._product([(e.options[i].own, e.local_peers) for e in entries],
                                 me.compute_s, me.iso_s)
            views: Dict[str, List[Tuple[float, int]]] = {}
            for r, e in zip(racks, entries):
                for m, v in e.options[i].cross_others.items():
                    views.setdefault(m, []).append((v, peers.get((m, r), 0)))
            for m, vs in views.items():
                c, iso = info.get(m, (0.0, 0.0))
                tot += self._product(vs, c, iso)
            out.append(tot)
        return out

    def _totals_max(self, entries: List[JobSummary]) -> List[float]:
        """Summed cost of every option: rack-local jobs count once per rack (they live in one
        rack); a rack-spanning job counts once, at its worst rack (it moves at the pace of its
        slowest link) - the job itself and every other rack-spanning job reported."""
        n = len(entries[0].options)
        out = []
        for i in range(n):
            tot = sum(e.options[i].local_others for e in entries)
            if self.compound == "sum":   # excess delays add up along the job's racks
                tot += 1.0 + sum(e.options[i].own - 1.0 for e in entries)
            else:                         # the job moves at the pace of its worst rack
                tot += max(e.options[i].own for e in entries)
            worst: Dict[str, float] = {}
            for e in entries:
                for m, v in e.options[i].cross_others.items():
                    if self.compound == "sum":
                        worst[m] = worst.get(m, 1.0) + v - 1.0
                    elif v > worst.get(m, 0.0):
                        worst[m] = v
            out.append(tot + sum(worst.values()))
        return out

    def slowed(self, summaries: Sequence[RackSummary], current: Dict[str, Assignment],
               threshold: float) -> List[str]:
        """The rack-spanning jobs whose slowdown, compounded over their racks' views at the
        current assignment, exceeds 1 + threshold: the phase stage probes them."""
        per_job: Dict[str, List[JobSummary]] = {}
        for s in summaries:
            for js in s.jobs:
                per_job.setdefault(js.job, []).append(js)
        out = []
        for j, entries in sorted(per_job.items()):
            a = current.get(j)
            if a is None:
                continue
            opts = entries[0].options
            i = next((k for k, o in enumerate(opts) if (o.priority, o.spine, o.cap, o.shift)
                      == (a.priority, a.spine, a.cap, a.shift)), None)
            if i is None:
                continue
            v = self._product([(e.options[i].own, e.local_peers) for e in entries],
                              entries[0].compute_s, entries[0].iso_s)
            if v > 1.0 + threshold:
                out.append(j)
        return out

    # -- proposal stage ------------------------------------------------------
    def route_ghosts(self, reports: Sequence[ProposalReport]) -> Dict[int, List[GhostJob]]:
        """Each boundary job goes to the racks of the rack-spanning jobs it meets (as the
        rounds' summaries named them), its own rack excepted."""
        out: Dict[int, List[GhostJob]] = {}
        for rep in reports:
            for g in rep.boundary:
                for r in sorted({r for m in g.meets for r in self.job_racks.get(m, ())}):
                    if r != g.rack:
                        out.setdefault(r, []).append(g)
        return out

    def route_proposals(self, reports: Sequence[ProposalReport]) -> Dict[int, List[Proposal]]:
        """Each proposal goes to the other racks of its rack-spanning jobs."""
        out: Dict[int, List[Proposal]] = {}
        for rep in reports:
            for p in rep.proposals:
                for r in sorted({r for x in p.assignments for r in self.job_racks.get(x.job, ())}):
                    if r != p.rack:
                        out.setdefault(r, []).append(p)
        return out

    @staticmethod
    def _view_total(views: Sequence[ViewCost]) -> float:
        """Summed slowdown over the racks' halo views: rack-local jobs once (their rack), a
        rack-spanning job once, at its worst rack (each halo view already holds the job's
        blocking in its other racks, as ghosts: compounding would count it twice)."""
        tot = sum(v.local for v in views)
        worst: Dict[str, float] = {}
        for v in views:
            for j, x in v.cross.items():
                if x > worst.get(j, 0.0):
                    worst[j] = x
        return tot + sum(worst.values())

    def arbitrate(self, reports: Sequence[ProposalReport], current: Dict[str, Assignment]
                  ) -> Tuple[Dict[str, Assignment], List[str]]:
        """Accept proposals in decreasing gain (``_view_total`` before minus after, over the
        halo groups they touch in every rack they touch), at most one per rack, so that every
        accepted gain is exact in the racks' views.  Returns the new assignment and the
        accepted proposals."""
        props: Dict[str, Proposal] = {}
        views: Dict[str, Dict[int, List[ViewCost]]] = {}
        for rep in reports:
            for p in rep.proposals:
                props[p.pid] = p
            for pid, vc in rep.costs.items():
                views.setdefault(pid, {})[rep.rack] = vc
        gains = []
        for pid, p in props.items():
            vs = views.get(pid, {})
            b = self._view_total([v[0] for v in vs.values()])
            gain = b - self._view_total([v[1] for v in vs.values()])
            if gain > self.tol * max(1.0, abs(b)):
                gains.append((gain, pid, sorted(vs)))
        locked, accepted = set(), []
        new = dict(current)
        for gain, pid, racks in sorted(gains, key=lambda g: (-g[0], g[1])):
            if any(r in locked for r in racks):
                continue
            locked.update(racks)
            accepted.append(pid)
            for x in props[pid].assignments:
                new[x.job] = x
        return new, accepted

    def coordinate(self, summaries: Sequence[RackSummary], epoch: int, rnd: int,
                   current: Optional[Dict[str, Assignment]] = None) -> CoordinatorMessage:
        per_job: Dict[str, List[Tuple[int, JobSummary]]] = {}
        info: Dict[str, Tuple[float, float]] = {}
        peers: Dict[Tuple[str, int], int] = {}
        for s in summaries:
            for js in s.jobs:
                per_job.setdefault(js.job, []).append((s.rack, js))
                info[js.job] = (js.compute_s, js.iso_s)
                peers[(js.job, s.rack)] = js.local_peers
        if current is None:
            self.job_racks = {j: [r for r, _ in lst] for j, lst in per_job.items()}
        out: List[Assignment] = []
        if current is None:
            # round 1: least summed cost; near-ties go to the least loaded spine (this is how
            # the spine links are shared among the rack-spanning demand)
            spine_load: Dict[Tuple[int, int], float] = {}
            order = sorted(per_job, key=lambda j: (-sum(e.uplink_gbps for _, e in per_job[j]), j))
            for j in order:
                entries = [e for _, e in per_job[j]]
                racks = [r for r, _ in per_job[j]]
                tot = self._totals(entries, racks, info, peers)
                lo = min(tot)
                cands = [i for i, v in enumerate(tot) if v <= lo + self.tol * max(1.0, abs(lo))]
                opts = entries[0].options

                def load_of(i):
                    s = opts[i].spine
                    if s is None:
                        return max(sum(spine_load.get((r, x), 0.0) for x in range(self.spines))
                                   / max(1, self.spines) for r in racks)
                    return max(spine_load.get((r, s), 0.0) for r in racks)

                pref = entries[0].preferred
                i = min(cands, key=lambda i: (load_of(i), i != pref, i))
                o = opts[i]
                demand = max(e.uplink_gbps for e in entries)
                for r in racks:
                    if o.spine is None:
                        for x in range(self.spines):
                            spine_load[(r, x)] = spine_load.get((r, x), 0.0) + demand / self.spines
                    else:
                        spine_load[(r, o.spine)] = spine_load.get((r, o.spine), 0.0) + demand
                out.append(Assignment(j, o.priority, o.spine, o.cap, o.shift))
            return CoordinatorMessage(epoch, rnd, out)
        # later rounds: block coordinate descent around the consistent assignment; at most one
        # job moves per rack per round, so every accepted move's summed cost is exact in the
        # racks' views
        gains = []
        for j, lst in per_job.items():
            entries = [e for _, e in lst]
            tot = self._totals(entries, [r for r, _ in lst], info, peers)
            cur_i = entries[0].preferred
            best_i = min(range(len(tot)), key=lambda i: (tot[i], i != cur_i))
            gain = tot[cur_i] - tot[best_i]
            if gain > self.tol * max(1.0, abs(tot[cur_i])):
                gains.append((gain, j, best_i, [r for r, _ in lst]))
        locked = set()
        moved = {}
        for gain, j, i, racks in sorted(gains, key=lambda g: (-g[0], g[1])):
            if any(r in locked for r in racks):
                continue
            locked.update(racks)
            o = per_job[j][0][1].options[i]
            moved[j] = Assignment(j, o.priority, o.spine, o.cap, o.shift)
        for j in current:     # jobs no rack reported (phase stage: not shiftable) are kept
            out.append(moved.get(j, current[j]))
        return CoordinatorMessage(epoch, rnd, out)


# ---------------------------------------------------------------------------
# The policy
# ---------------------------------------------------------------------------

class HarmonicsPolicy(Policy):
    name = "harmonics"

    def __init__(self, cap_fracs: Sequence[float] = DEFAULT_CAP_FRACS, max_rounds: int = 3,
                 exhaustive_limit: int = 256, max_passes: int = 3, wire: bool = True,
                 reuse: bool = True, span_weight: bool = False, compound: str = "product",
                 cross_caps: bool = False, incremental: bool = True, screen: float = 1 / 3,
                 screen_keep: int = 2, large_group: int = 8, shift_phases: int = SHIFT_PHASES,
                 propose: bool = True):
        self.propose = propose            # the proposal stage (halo views, joint proposals)
        self.large_group = large_group   # groups larger than this: closed-form proxy
        self.shift_phases = shift_phases  # 1: no phase stage (no start-time shifts)
        self.screen = screen
        self.screen_keep = screen_keep
        self.cross_caps = cross_caps
        self.span_weight = span_weight
        self.compound = compound
        self.cap_fracs = tuple(cap_fracs)
        self.max_rounds = max_rounds
        self.exhaustive_limit = exhaustive_limit
        self.max_passes = max_passes
        self.wire = wire            # messages really cross as JSON (the tier boundary)
        self.reuse = reuse          # unchanged state at an epoch boundary: keep the decisions
        self.stats: Dict[str, float] = {}
        self.messages: List[str] = []   # the last epoch's messages (JSON), for inspection
        self._last: Optional[Tuple[tuple, Decisions]] = None
        self.incremental = incremental   # keep the evaluator's sub-problem cache across epochs
        self.cache_limit = 200_000       # sub-problems kept at most (then a fresh cache)
        self._ev: Optional[Evaluator] = None
        self.rack_views: Dict[int, Dict[str, Opt]] = {}

    @staticmethod
    def _fingerprint(state: ClusterState) -> tuple:
        def q(x):  # 2% buckets: estimates jitter from epoch to epoch
            return 0 if x <= 0 else round(50 * __import__("math").log(x))
        return (state.num_classes, tuple(sorted(
            (j.name, tuple(j.hosts), q(j.compute_s),
             tuple(sorted((p, q(b)) for p, b in j.pair_bytes.items()))) for j in state.jobs)))

    def decide(self, state: ClusterState) -> Decisions:
        fp = self._fingerprint(state) if self.reuse else None
        if self.reuse and self._last is not None and self._last[0] == fp:
            self.stats = dict(self.stats, reused=1)
            return {k: Decision.from_dict(v.to_dict()) for k, v in self._last[1].items()}
        out = self._decide(state)
        if self.reuse:
            self._last = (fp, out)
        return out

    def _evaluator(self, cl) -> Evaluator:
        """The model evaluator, kept across epochs (``incremental``): its results are keyed by
        the canonical sub-problem (jobs, links relabelled, capacities), so a sub-problem whose
        inputs did not change is not simulated again; a new cluster starts a new one."""
        cap = link_capacities(cl)
        ev = self._ev
        if (not self.incremental or ev is None or ev.cap != cap
                or len(ev.cache) > self.cache_limit):
            ev = Evaluator(cap, share_allocations=True)
        if self.incremental:
            self._ev = ev
        return ev

    def _post(self, msg):
        if not self.wire:
            return msg
        s = msg.to_json()
        self.messages.append(s)
        return type(msg).from_json(s)

    def _decide(self, state: ClusterState) -> Decisions:
        t_start = time.perf_counter()
        self.messages = []
        cl = state.cluster
        K = max(1, state.num_classes)
        model = ContentionModel(state, self._evaluator(cl))
        names = [j.name for j in state.jobs if has_comm(model, j.name)]
        pot = {n: potential_links(state, model, n) for n in names}
        # the links each rack owns (links_of_rack for every rack, in one pass)
        tor_rack = {t: r for r, t in enumerate(cl.tors)}
        rack_links: Dict[int, set] = {r: set() for r in range(cl.spec.racks)}
        for l in cl.links:
            for end in (l.src, l.dst):
                r = tor_rack.get(end)
                if r is not None:
                    rack_links[r].add(l.index)
        link_rack = {l: r for r, ls in rack_links.items() for l in ls}
        rack_jobs: Dict[int, List[str]] = {}
        for n in names:
            for r in sorted({link_rack[l] for l in pot[n]}):
                rack_jobs.setdefault(r, []).append(n)
        locs = {r: LocalScheduler(r, state, model, rack_links[r], rack_jobs[r], pot, K,
                                  self.cap_fracs, self.exhaustive_limit, self.max_passes,
                                  self.span_weight, self.cross_caps, self.screen,
                                  self.screen_keep, self.large_group, self.shift_phases)
                for r in sorted(rack_jobs)}
        coord = GlobalCoordinator(cl.spec.spines, compound=self.compound)
        epoch = state.epoch
        crit = 0.0     # critical path if racks ran in parallel: max over racks per phase
        t_setup = time.perf_counter() - t_start
        crit += t_setup

        def phase(fn, racks):
            nonlocal crit
            worst, res = 0.0, {}
            for r in racks:
                t0 = time.perf_counter()
                res[r] = fn(locs[r])
                worst = max(worst, time.perf_counter() - t0)
            crit += worst
            return res

        cross_racks = [r for r in locs if locs[r].cross]
        current: Optional[Dict[str, Assignment]] = None
        rounds = 0
        for rnd in range(1, self.max_rounds + 1):
            rounds = rnd
            if current is None:
                sums = phase(lambda L: L.summarise(epoch, rnd), cross_racks)
            else:
                cur_opts = {j: a.opt for j, a in current.items()}
                sums = phase(lambda L: L.summarise(epoch, rnd, {**L.assign, **cur_opts}), cross_racks)
            sums = [self._post(s) for _, s in sorted(sums.items())]
            t0 = time.perf_counter()
            msg = self._post(coord.coordinate(sums, epoch, rnd, current))
            crit += time.perf_counter() - t0
            new = {a.job: a for a in msg.assignments}
            changed = current is None or any(new[j] != current[j] for j in new)
            current = new
            fixed = {j: a.opt for j, a in current.items()}
            # every Local Scheduler re-solves its rack-local jobs with the cross-rack ones fixed
            phase(lambda L: L.solve({n: fixed[n] for n in L.cross}), list(locs))
            if not changed or not cross_racks:
                break
        last_rnd = rounds               # message round numbers go on from here
        # phase stage: start-time shifts of the jobs tied in a class with a link neighbour,
        # every class, spine and cap held; racks shift their rack-local jobs, the Coordinator
        # the rack-spanning ones from the racks' costs of each phase (same descent as above)
        phase_rounds = 0
        probe: List[str] = []
        if self.shift_phases > 1 and current:
            # the Coordinator names the rack-spanning jobs the phase stage probes (their
            # slowdown compounded over the last round's views)
            t0 = time.perf_counter()
            probe = self._post(CoordinatorMessage(epoch, last_rnd, list(current.values()),
                                                  coord.slowed(sums, current, PROBE_MIN))).probe
            crit += time.perf_counter() - t0
        while self.shift_phases > 1:
            fixed = {j: a.opt for j, a in (current or {}).items()}
            phase(lambda L: L.phase_solve({n: fixed[n] for n in L.cross}), list(locs))
            if not cross_racks or phase_rounds >= self.max_rounds:
                break
            phase_rounds += 1
            rnd = last_rnd + phase_rounds
            sums = phase(lambda L: L.phase_summarise(epoch, rnd, {n: fixed[n] for n in L.cross},
                                                     probe), cross_racks)
            sums = [self._post(s) for _, s in sorted(sums.items()) if s.jobs]
            if not sums:
                break
            t0 = time.perf_counter()
            msg = self._post(coord.coordinate(sums, epoch, rnd, current))
            crit += time.perf_counter() - t0
            new = {a.job: a for a in msg.assignments}
            changed = any(new[j] != current[j] for j in new)
            current = new
            if not changed:
                break
        # proposal stage: racks exchange their boundary jobs (ghosts), each searches its halo
        # groups jointly, the other racks cost the proposals, the Coordinator accepts the best
        # (after the phase stage, whose rack views would otherwise undo its joint moves)
        t_prop = time.perf_counter()
        prop_rounds, accepted = 0, 0
        for _ in range(self.max_rounds if self.propose and cross_racks and current else 0):
            prop_rounds += 1
            rnd = last_rnd + phase_rounds + prop_rounds
            fixed = {j: a.opt for j, a in current.items()}
            for L in locs.values():
                L.assign.update({n: fixed[n] for n in L.cross})
            reps = phase(lambda L: ProposalReport(L.rack, epoch, rnd, boundary=L.boundary()),
                         list(locs))
            reps = [self._post(x) for _, x in sorted(reps.items()) if x.boundary]
            t0 = time.perf_counter()
            routed = coord.route_ghosts(reps)
            crit += time.perf_counter() - t0
            # only racks that hold ghosts propose (elsewhere the halo view is the rack view)
            msgs = {r: self._post(CoordinatorMessage(epoch, rnd, [], ghosts=gs))
                    for r, gs in sorted(routed.items()) if r in locs}
            reps = phase(lambda L: (L.set_halo(msgs[L.rack].ghosts),
                                    L.propose(epoch, rnd, self.exhaustive_limit))[1],
                         sorted(msgs))
            reps = [self._post(x) for _, x in sorted(reps.items()) if x.proposals]
            if not reps:
                break
            t0 = time.perf_counter()
            routed = coord.route_proposals(reps)
            crit += time.perf_counter() - t0
            asks = {r: self._post(CoordinatorMessage(epoch, rnd, [], proposals=ps))
                    for r, ps in routed.items()}
            costs = phase(lambda L: (L.rack in msgs or L.set_halo([]),
                                     L.cost_proposals(epoch, rnd, asks[L.rack].proposals))[1],
                          sorted(asks))
            costs = [self._post(x) for _, x in sorted(costs.items())]
            t0 = time.perf_counter()
            new, acc = coord.arbitrate(reps + costs, current)
            msg = self._post(CoordinatorMessage(epoch, rnd, list(new.values()), accepted=acc))
            crit += time.perf_counter() - t0
            current = {a.job: a for a in msg.assignments}
            fixed = {j: a.opt for j, a in current.items()}
            phase(lambda L: L.adopt(fixed, msg.accepted), list(locs))
            accepted += len(msg.accepted)
            if not msg.accepted:
                break
        t_prop = time.perf_counter() - t_prop
        final: Dict[str, Opt] = {}
        for r, L in locs.items():
            for n in L.local:
                final[n] = L.assign[n]
        if current:
            for j, a in current.items():
                final[j] = a.opt
        # what every Local Scheduler enforces at the end (tests check the consistency)
        self.rack_views = {r: dict(L.assign) for r, L in locs.items()}
        elapsed = time.perf_counter() - t_start
        self.stats = {"seconds": elapsed, "critical_path_s": crit, "rounds": rounds,
                      "phase_rounds": phase_rounds, "proposal_rounds": prop_rounds,
                      "proposal_s": t_prop,
                      "proposals_accepted": accepted,
                      "halo_evals": sum(L.halo_evals for L in locs.values()),
                      "shifted": sum(1 for o in final.values() if o.shift),
                      "racks": len(locs), "cross_jobs": len(current or {}),
                      "local_evals": sum(L.evals for L in locs.values()),
                      "proxy_evals": sum(L.proxy_evals for L in locs.values()),
                      "proxy_groups": sum(len(L.large) for L in locs.values()),
                      "proxy_batches": sum(L.proxy_batches for L in locs.values()),
                      "pruned": sum(L.pruned for L in locs.values()),
                      "simulations": model.ev.evaluations, "reused": 0}
        # jobs scored with the closed-form proxy in at least one rack (said in the reason)
        proxied: Dict[str, List[int]] = {}
        for r, L in locs.items():
            for g in L.large:
                for n in g:
                    proxied.setdefault(n, []).append(r)
        out: Decisions = {}
        for j in state.jobs:
            o = final.get(j.name)
            if o is None:
                out[j.name] = Decision(job=j.name, reason="harmonics: no network traffic")
                continue
            tier = "coordinator" if j.name in (current or {}) else f"local scheduler of rack {j.racks[0]}"
            why = f"harmonics: {tier}, class {o.priority}, spine {o.spine}, cap {o.cap:g}"
            if o.shift:
                why += f", shift phase {o.shift}/{self.shift_phases}"
            if j.name in proxied:
                why += (f"; group > {self.large_group} jobs in rack(s) "
                        f"{','.join(map(str, proxied[j.name]))}: scored with the closed-form "
                        f"load proxy, not the model")
            out[j.name] = make_decision(model, j.name, o, why)
        return out
