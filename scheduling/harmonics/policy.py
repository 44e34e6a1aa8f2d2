"""The Harmonics policy: runs the Local Schedulers and the Coordinator through the rounds, the
phase stage and the proposal stage of one epoch."""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Dict, List, Optional, Tuple

from ..base import ClusterState, Decision, Decisions, Policy
from ..common import Opt, has_comm, make_decision, potential_links
from ..evaluate import Evaluator
from ..links import link_capacities
from ..model import ContentionModel
from .compoundkernel import warm_up as compound_warm_up
from .proxykernel import warm_up as proxy_warm_up
from .params import DEFAULT, HarmonicsConfig
from .classrules import class_limits
from .coordinator import CrossIndex, GlobalCoordinator
from .joint import JointOffer
from .local import LocalScheduler
from .messages import Assignment, CoordinatorMessage, ProposalReport


class HarmonicsPolicy(Policy):
    name = "harmonics"

    def __init__(self, config: Optional[HarmonicsConfig] = None, **settings):
        """``config`` (default: ``HarmonicsConfig()``) with ``settings`` replacing some of its
        fields (``get_policy("harmonics", shift_phases=1)``)."""
        self.config = replace(config or DEFAULT, **settings)
        proxy_warm_up()     # the compiled proxy and compounding, loaded before any decision
        compound_warm_up()
        self._joint_cache: Dict[tuple, object] = {}
        # (job, inputs) -> (has traffic, potential links, their racks)
        self._links_cache: Dict[tuple, tuple] = {}
        self._rack_map: Optional[tuple] = None  # (cluster spec, rack -> links, link -> rack)
        self._usage: Dict[tuple, tuple] = {}    # the model's link usage, kept across epochs
        self._usage_cap = None                  # ... of the cluster with these capacities
        self._stores: Dict[int, dict] = {}      # rack -> its job views (RackView._store)
        self._index = CrossIndex()              # the Coordinator's column ids, across epochs
        self._jfps: Dict[str, tuple] = {}        # the last epoch's ``_job_fps``
        self._prev: Optional[tuple] = None   # (cap, K), rack -> (inputs, LocalScheduler), current
        self.stats: Dict[str, float] = {}
        self.messages: List[str] = []   # the last epoch's messages (JSON), for inspection
        self._last: Optional[Tuple[tuple, Decisions]] = None
        # a warm descent that had not settled: (its movable jobs, epochs it went on so far)
        self._carry: Optional[Tuple[set, int]] = None
        self.cache_limit = 200_000       # sub-problems kept at most (then a fresh cache)
        self.store_limit = 20_000        # link usages, and each rack's job views, kept at most
        self._ev: Optional[Evaluator] = None
        self.rack_views: Dict[int, Dict[str, Opt]] = {}

    @staticmethod
    def _fingerprint(state: ClusterState) -> tuple:
        def q(x):  # 2% buckets: estimates jitter from epoch to epoch
            return 0 if x <= 0 else round(50 * __import__("math").log(x))
        return (state.num_classes, tuple(sorted(
            (j.name, tuple(j.hosts), q(j.compute_s),
             tuple(sorted((p, q(b)) for p, b in j.pair_bytes.items()))) for j in state.jobs)))

    def _joint(self, locs: Dict[int, LocalScheduler], current: Dict[str, Assignment],
               coord: GlobalCoordinator, epoch: int, rnd: int, phase, jfp: Dict[str, tuple],
               model, state) -> Tuple[int, int]:
        """The joint stage (``joint.py``): every component of racks linked by rack-spanning
        jobs with at most ``joint_jobs`` jobs and no proxy-scored group is refined by its
        lowest rack in the component view; the plan is adopted if it lowers the component's
        summed slowdown there.  ``current`` is updated in place.  Returns (components
        refined, components whose plan changed)."""
        comps = coord.components()
        done = changed = 0
        for comp in comps:
            comp = [r for r in comp if r in locs]
            jobs = sorted({n for r in comp for n in locs[r].jobs})
            if (len(jobs) < 2 or len(jobs) > self.config.joint_jobs
                    or any(locs[r].large for r in comp)):
                if (self.config.guard and not any(locs[r].large for r in comp)
                        and self._guard(locs, comp, current, coord, epoch, rnd, phase)):
                    changed += 1
                continue
            offers = phase(lambda L: JointOffer(L.rack, epoch, rnd, [
                Assignment(n, o.priority, o.spine, o.cap, o.shift)
                for n, o in sorted(L.assign.items()) if n in L.local]), comp)
            offers = [self._post(x) for _, x in sorted(offers.items())]
            start = {a.job: a for x in offers for a in x.offer}
            start.update({j: current[j] for j in jobs if j in current})
            lead = min(comp)
            ask = self._post(CoordinatorMessage(epoch, rnd, [start[j] for j in jobs], joint=comp))
            links = set().union(*(locs[r].links for r in comp))
            cross = [j for j in jobs if j in current]
            # a component whose jobs' inputs and plan did not change since an earlier epoch
            # gets the same refinement (incremental epochs)
            key = (tuple((j, jfp.get(j)) for j in jobs), tuple(a.opt for a in ask.assignments))
            rep = self._joint_cache.get(key)
            if rep is None:
                rep = phase(lambda L: L.joint_refine(epoch, rnd, links,
                                                     {a.job: a.opt for a in ask.assignments},
                                                     cross, model, state), [lead])[lead]
                if len(self._joint_cache) > 4096:
                    self._joint_cache.clear()
                self._joint_cache[key] = rep
            rep = self._post(rep)
            done += 1
            if rep.after < rep.before - 1e-9:
                changed += 1
                plan = {a.job: a for a in rep.plan}
                msg = self._post(CoordinatorMessage(epoch, rnd, list(plan.values())))
                for a in msg.assignments:
                    if a.job in current:
                        current[a.job] = a
                for r in comp:
                    L = locs[r]
                    L.assign.update({a.job: a.opt for a in msg.assignments if a.job in L.assign})
        return done, changed

    def _guard(self, locs, comp: List[int], current: Dict[str, Assignment],
               coord: GlobalCoordinator, epoch: int, rnd: int, phase) -> bool:
        """The Coordinator's guard over a component the joint stage does not take: its racks
        report their views' cost at the current plan and at fair sharing (``fair_check``);
        if fair sharing's total (``_view_total``: rack-local jobs once, a rack-spanning job
        at its worst rack) is lower, every rack-spanning job of the component goes to fair
        sharing and the racks put the jobs of those groups there too."""
        reps = phase(lambda L: L.fair_check(epoch, rnd), [r for r in comp if locs[r].cross])
        reps = [self._post(x) for _, x in sorted(reps.items())]
        if not reps:
            return False
        before = coord._view_total([x.costs["guard"][0] for x in reps])
        after = coord._view_total([x.costs["guard"][1] for x in reps])
        if not after < before - coord.tol * max(1.0, before):
            return False
        jobs = sorted({j for x in reps for j in x.costs["guard"][0].cross})
        msg = self._post(CoordinatorMessage(epoch, rnd, [Assignment(j, 0, None, 1.0, 0)
                                                         for j in jobs]))
        for a in msg.assignments:
            current[a.job] = a
        phase(lambda L: L.adopt_fair(), comp)
        self.guarded_components += 1
        return True

    def _racks(self, state, model, K: int, names, pot, job_racks, prev, jfp, limits) -> tuple:
        """The Local Schedulers of this epoch (rack -> scheduler), each rack's inputs and how
        many racks were kept from the last epoch (``job_racks``: the racks of each job's
        potential links, ``_traffic``)."""
        rack_links = self._rack_links(state.cluster)[0]
        rack_jobs: Dict[int, List[str]] = {}
        for n in names:
            for r in job_racks[n]:
                rack_jobs.setdefault(r, []).append(n)
        # incremental epochs: a rack whose inputs (its jobs and their profiles, in the reuse
        # fingerprint's 2% buckets) did not change keeps its Local Scheduler and every cache
        # of it (summaries, solves); warm start: the Coordinator starts from the last
        # epoch's decisions of the rack-spanning jobs that are still there
        locs: Dict[int, LocalScheduler] = {}
        fps: Dict[int, tuple] = {}
        reused = 0
        for r in sorted(rack_jobs):
            fps[r] = tuple((n, jfp[n]) for n in rack_jobs[r])
            old = prev[1].get(r) if prev is not None else None
            if old is not None and old[0] == fps[r]:
                locs[r] = old[1]
                locs[r].new_epoch()
                locs[r].limits = limits   # its own jobs' are in fps (the joint stage reads others')
                reused += 1
                continue
            locs[r] = LocalScheduler(r, state, model, rack_links[r], rack_jobs[r], pot, K,
                                     self.config, self._store(r), limits)
        return locs, fps, reused

    def _phase_stage(self, locs, current, coord, epoch: int, last_rnd: int, sums, phase,
                     at_coord, cross_racks, movable=None) -> tuple:
        """The phase stage (docs/harmonics.md); ``movable``: a warm epoch's movable jobs,
        the only rack-spanning jobs whose phases are summarised and moved (the others keep
        their shifts).  Returns (current, phase rounds)."""
        if movable is not None:
            cross_racks = [r for r in cross_racks if not movable.isdisjoint(locs[r].cross)]
        # phase stage: start-time shifts of the jobs tied in a class with a link neighbour,
        # every class, spine and cap held; racks shift their rack-local jobs, the Coordinator
        # the rack-spanning ones from the racks' costs of each phase (same descent as above)
        phase_rounds = 0
        probe: List[str] = []
        if self.config.shift_phases > 1 and current:
            # the Coordinator names the rack-spanning jobs the phase stage probes (their
            # slowdown compounded over the last round's views)
            probe = at_coord(lambda: self._post(CoordinatorMessage(
                epoch, last_rnd, list(current.values()),
                coord.slowed(sums, current, self.config.probe_min))).probe)
        while self.config.shift_phases > 1:
            fixed = {j: a.opt for j, a in (current or {}).items()}
            phase(lambda L: L.phase_solve({n: fixed[n] for n in L.cross}), list(locs))
            limit = self.config.max_rounds if movable is None else self.config.warm_phase_rounds
            if not cross_racks or phase_rounds >= limit:
                break
            phase_rounds += 1
            rnd = last_rnd + phase_rounds
            sums = phase(lambda L: L.phase_summarise(epoch, rnd, {n: fixed[n] for n in L.cross},
                                                     probe, movable), cross_racks)
            sums = [self._post(s) for _, s in sorted(sums.items()) if s.jobs]
            if not sums:
                break
            msg = at_coord(lambda: self._post(coord.coordinate(sums, epoch, rnd, current)))
            new = {a.job: a for a in msg.assignments}
            changed = any(new[j] != current[j] for j in new)
            current = new
            if not changed:
                break
        return current, phase_rounds

    def _decisions(self, state, model, locs, final: Dict[str, Opt], current) -> Decisions:
        """The epoch's Decision per job, with its reason."""
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
                why += f", shift phase {o.shift}/{self.config.shift_phases}"
            if j.name in proxied:
                why += (f"; group > {self.config.large_group} jobs in rack(s) "
                        f"{','.join(map(str, proxied[j.name]))}: scored with the closed-form "
                        f"load proxy, not the model")
            out[j.name] = make_decision(model, j.name, o, why)
        return out

    def _proposal_stage(self, locs, current, coord, epoch: int, rnd0: int, phase, at_coord,
                        cross_racks) -> tuple:
        """The proposal stage: racks exchange their boundary jobs (ghosts), each searches its
        halo groups jointly, the other racks cost the proposals, the Coordinator accepts the
        best (after the phase stage, whose rack views would otherwise undo its joint moves).
        Returns (current, rounds, proposals accepted)."""
        prop_rounds, accepted = 0, 0
        for _ in range(self.config.max_rounds if self.config.propose and cross_racks and current else 0):
            prop_rounds += 1
            rnd = rnd0 + prop_rounds
            fixed = {j: a.opt for j, a in current.items()}
            for L in locs.values():
                L.assign.update({n: fixed[n] for n in L.cross})
            reps = phase(lambda L: ProposalReport(L.rack, epoch, rnd, boundary=L.boundary()),
                         list(locs))
            reps = [self._post(x) for _, x in sorted(reps.items()) if x.boundary]
            routed = at_coord(lambda: coord.route_ghosts(reps))
            # only racks that hold ghosts propose (elsewhere the halo view is the rack view)
            msgs = {r: self._post(CoordinatorMessage(epoch, rnd, [], ghosts=gs))
                    for r, gs in sorted(routed.items()) if r in locs}
            reps = phase(lambda L: (L.set_halo(msgs[L.rack].ghosts),
                                    L.propose(epoch, rnd, self.config.exhaustive_limit))[1],
                         sorted(msgs))
            reps = [self._post(x) for _, x in sorted(reps.items()) if x.proposals]
            if not reps:
                break
            routed = at_coord(lambda: coord.route_proposals(reps))
            asks = {r: self._post(CoordinatorMessage(epoch, rnd, [], proposals=ps))
                    for r, ps in routed.items()}
            costs = phase(lambda L: (L.rack in msgs or L.set_halo([]),
                                     L.cost_proposals(epoch, rnd, asks[L.rack].proposals))[1],
                          sorted(asks))
            costs = [self._post(x) for _, x in sorted(costs.items())]
            msg = at_coord(lambda: self._post(self._arbitrated(coord, reps + costs, current,
                                                               epoch, rnd)))
            current = {a.job: a for a in msg.assignments}
            fixed = {j: a.opt for j, a in current.items()}
            phase(lambda L: L.adopt(fixed, msg.accepted), list(locs))
            accepted += len(msg.accepted)
            if not msg.accepted:
                break
        return current, prop_rounds, accepted

    @staticmethod
    def _arbitrated(coord, reports, current, epoch: int, rnd: int) -> CoordinatorMessage:
        new, acc = coord.arbitrate(reports, current)
        return CoordinatorMessage(epoch, rnd, list(new.values()), accepted=acc)

    @staticmethod
    def _fingerprint_of(state: ClusterState, jfp: Dict[str, tuple]) -> tuple:
        """``_fingerprint`` from the jobs' ``_job_fp`` (the same tuple: a job's entry is its
        name and its ``_job_fp``)."""
        return (state.num_classes, tuple(sorted((n,) + v for n, v in jfp.items())))

    def _job_fps(self, state: ClusterState) -> Dict[str, tuple]:
        """Every job's ``_job_fp``, as the last epoch's object where it is equal: the later
        comparisons of fingerprints and of the racks' inputs then stop at identity instead of
        walking every pair of every job (the values, hence every comparison, are the same)."""
        last = self._jfps
        out = {}
        for j in state.jobs:
            v = self._job_fp(j)
            o = last.get(j.name)
            out[j.name] = o if o is not None and o == v else v
        self._jfps = out
        return out

    @staticmethod
    def _job_fp(j) -> tuple:
        """A job's inputs in the reuse fingerprint's 2% buckets."""
        def q(x):
            return 0 if x <= 0 else round(50 * math.log(x))
        return (tuple(j.hosts), q(j.compute_s), tuple(sorted((p, q(b)) for p, b in j.pair_bytes.items())))

    def _rack_links(self, cl) -> tuple:
        """(rack -> the links it owns, link -> its rack): ``links_of_rack`` for every rack,
        in one pass, kept for the cluster."""
        kept = self._rack_map
        if kept is None or kept[0] != cl.spec:
            tor_rack = {t: r for r, t in enumerate(cl.tors)}
            rack_links: Dict[int, set] = {r: set() for r in range(cl.spec.racks)}
            for l in cl.links:
                for end in (l.src, l.dst):
                    r = tor_rack.get(end)
                    if r is not None:
                        rack_links[r].add(l.index)
            link_rack = {l: r for r, ls in rack_links.items() for l in ls}
            kept = self._rack_map = (cl.spec, rack_links, link_rack)
        return kept[1], kept[2]

    def _traffic(self, state, model, jfp, fresh: bool) -> tuple:
        """The jobs with network traffic, each one's potential links and the racks that own
        one of them.  They depend on a job's inputs only (hosts, bytes per pair): kept
        across the epochs of one cluster (``fresh``: a new one)."""
        if fresh:
            self._links_cache = {}
        lc = self._links_cache
        link_rack = None
        for j in state.jobs:
            if (j.name, jfp[j.name]) not in lc:
                comm = has_comm(model, j.name)
                pot = potential_links(state, model, j.name) if comm else set()
                if link_rack is None:
                    link_rack = self._rack_links(state.cluster)[1]
                lc[(j.name, jfp[j.name])] = (comm, pot, sorted({link_rack[l] for l in pot}))
        if len(lc) > 4 * len(state.jobs) + 64:
            keep = {(j.name, jfp[j.name]) for j in state.jobs}
            self._links_cache = lc = {k: v for k, v in lc.items() if k in keep}
        names = [j.name for j in state.jobs if lc[(j.name, jfp[j.name])][0]]
        return names, {n: lc[(n, jfp[n])][1] for n in names}, \
            {n: lc[(n, jfp[n])][2] for n in names}

    @staticmethod
    def _around(L: LocalScheduler, cur: Dict[str, Opt]) -> Dict[str, Opt]:
        """A rack's assignment around the Coordinator's: its own decisions with the
        rack-spanning ones replaced; a new rack in a warm epoch first solves its jobs with
        the Coordinator's held (its preferences for the jobs that are not held yet)."""
        if any(n not in L.assign for n in L.jobs):
            L.solve({n: cur[n] for n in L.cross if n in cur})
        return {**L.assign, **{n: cur[n] for n in L.cross if n in cur}}

    def decide(self, state: ClusterState) -> Decisions:
        jfp = fp = None
        if self.config.reuse:     # the fingerprint from the jobs' own (``_job_fps``)
            jfp = self._job_fps(state)
            fp = self._fingerprint_of(state, jfp)
        if (self.config.reuse and self._last is not None and self._last[0] == fp
                and self._carry is None):
            self.stats = dict(self.stats, reused=1)
            return {k: Decision.from_dict(v.to_dict()) for k, v in self._last[1].items()}
        out = self._decide(state, jfp)
        if self.config.reuse:
            self._last = (fp, out)
        return out

    def _store(self, r: int) -> Optional[dict]:
        """Rack r's job views kept across epochs (``RackView._store``; None: not
        incremental); a fresh one beyond ``store_limit`` entries."""
        if not self.config.incremental:
            return None
        st = self._stores.get(r)
        if st is None or len(st) > self.store_limit:
            st = self._stores[r] = {}
        return st

    def _evaluator(self, cl) -> Evaluator:
        """The model evaluator, kept across epochs (``incremental``): its results are keyed by
        the canonical sub-problem (jobs, links relabelled, capacities), so a sub-problem whose
        inputs did not change is not simulated again; a new cluster starts a new one."""
        cap = link_capacities(cl)
        ev = self._ev
        if (not self.config.incremental or ev is None or ev.cap != cap
                or len(ev.cache) > self.cache_limit):
            ev = Evaluator(cap, share_allocations=True)
        if self.config.incremental:
            self._ev = ev
        return ev

    def _post(self, msg):
        if not self.config.wire:
            return msg
        s = msg.to_json()
        self.messages.append(s)
        return type(msg).from_json(s)

    def _coordinator(self, cl) -> GlobalCoordinator:
        """This epoch's Coordinator, with the column ids kept across epochs (a fresh set
        beyond ``store_limit`` lists)."""
        if len(self._index.lists) > self.store_limit:
            self._index = CrossIndex()
        return GlobalCoordinator(cl.spec.spines, compound=self.config.compound, index=self._index)

    def _model(self, state: ClusterState) -> ContentionModel:
        """This epoch's model: the evaluator and the link usages kept across the epochs of
        one cluster (``incremental``; the racks' job views are dropped with them)."""
        cl = state.cluster
        ev = self._evaluator(cl)
        if not self.config.incremental or self._usage_cap != (cl.spec, ev.cap) \
                or len(self._usage) > self.store_limit:
            self._usage = {}
            self._stores = {}
            self._usage_cap = (cl.spec, ev.cap)
        return ContentionModel(state, ev, self._usage)

    def _warm_start(self, model, names, locs, fps, prev) -> tuple:
        """A warm epoch's start: only the rack-spanning jobs of the racks whose inputs changed
        (a job arrived, left or changed there) move, and new ones, and those of a carried
        descent; the others hold the last decisions (the unchanged racks' caches answer
        their held solves).  Returns (prev with the movable jobs shift-free and uncapped,
        movable, whether inputs changed, whether a descent is carried)."""
        cross_now = {n for n in names if model.jobs[model.index[n]].spans_racks}
        dirty = [r for r in locs if prev[1].get(r, (None,))[0] != fps[r]]
        movable = {n for r in dirty for n in locs[r].cross}
        movable |= {n for n in cross_now if n not in prev[2]}
        news = bool(movable)      # inputs changed: a new descent starts
        carried = self._carry is not None
        if carried:       # the last epoch's descent goes on (``carry_epochs``)
            movable |= self._carry[0] & cross_now
        # the rounds choose shift-free, uncapped decisions for the jobs that move (the
        # phase and joint stages set shifts and caps again); the others keep theirs
        prev = (prev[0], prev[1], {j: (Assignment(j, a.priority, a.spine, 1.0, 0)
                                       if j in movable else a)
                                   for j, a in prev[2].items() if j in cross_now})
        return prev, movable, news, carried

    def _decide(self, state: ClusterState, jfp: Optional[Dict[str, tuple]] = None) -> Decisions:
        """One epoch's decisions; ``jfp``: the jobs' ``_job_fp`` if already formed."""
        t_start = time.thread_time()
        self.messages = []
        cl = state.cluster
        K = max(1, state.num_classes)
        model = self._model(state)
        prev = self._prev if (self.config.incremental and self._prev is not None
                              and self._prev[0] == (model.ev.cap, K)) else None
        if jfp is None:
            jfp = self._job_fps(state)
        names, pot, job_racks = self._traffic(state, model, jfp, fresh=prev is None)
        limits, n_short, n_low = class_limits(self.config, model, names, pot, K)
        if limits:    # a job's classes under the rules are one of its inputs (rack reuse)
            jfp = {k: v + ((limits[k].start, limits[k].stop) if k in limits else None,)
                   for k, v in jfp.items()}
        locs, fps, reused = self._racks(state, model, K, names, pot, job_racks, prev, jfp, limits)
        warm = prev is not None and self.config.warm and bool(prev[2])
        movable: Optional[set] = None
        carried = news = False
        if warm:
            prev, movable, news, carried = self._warm_start(model, names, locs, fps, prev)
        coord = self._coordinator(cl)
        epoch = state.epoch
        crit = 0.0     # critical path if racks ran in parallel: max over racks per phase (CPU)
        t_setup = time.thread_time() - t_start
        crit += t_setup

        def phase(fn, racks):
            nonlocal crit
            worst, res = 0.0, {}
            for r in racks:
                t0 = time.thread_time()
                res[r] = fn(locs[r])
                worst = max(worst, time.thread_time() - t0)
            crit += worst
            return res

        def at_coord(fn):
            nonlocal crit
            t0 = time.thread_time()
            res = fn()
            crit += time.thread_time() - t0
            return res

        cross_racks = [r for r in locs if locs[r].cross]
        current: Optional[Dict[str, Assignment]] = dict(prev[2]) if warm else None
        rounds = 0
        for rnd in range(1, (self.config.warm_rounds if warm else self.config.max_rounds) + 1):
            rounds = rnd
            if current is None:
                sums = phase(lambda L: L.summarise(epoch, rnd), cross_racks)
            else:
                cur_opts = {j: a.opt for j, a in current.items()}
                racks = (cross_racks if movable is None else
                         [r for r in cross_racks if not movable.isdisjoint(locs[r].cross)])
                sums = phase(lambda L: L.summarise(epoch, rnd, self._around(L, cur_opts),
                                                   only=movable), racks)
            sums = [self._post(s) for _, s in sorted(sums.items())]
            t0 = time.thread_time()
            msg = self._post(coord.coordinate(sums, epoch, rnd, current, warm=warm and rnd == 1))
            crit += time.thread_time() - t0
            new = {a.job: a for a in msg.assignments}
            changed = current is None or any(new[j] != current.get(j) for j in new)
            current = new
            fixed = {j: a.opt for j, a in current.items()}
            # every Local Scheduler re-solves its rack-local jobs with the cross-rack ones fixed
            phase(lambda L: L.solve({n: fixed[n] for n in L.cross}), list(locs))
            if not changed or not cross_racks:
                break
        last_rnd = rounds               # message round numbers go on from here
        # a warm descent still moving jobs at its last round goes on in the next epochs
        # (one round each), however the inputs change; ``carry_epochs`` epochs at most
        n_carry = (self._carry[1] + 1) if carried and not news else 1
        self._carry = ((movable, n_carry) if warm and changed and cross_racks
                       and rounds == self.config.warm_rounds
                       and n_carry <= self.config.carry_epochs else None)
        current, phase_rounds = self._phase_stage(locs, current, coord, epoch, last_rnd, sums,
                                                  phase, at_coord, cross_racks,
                                                  movable if warm else None)
        t_prop = time.thread_time()     # the proposal stage
        current, prop_rounds, accepted = self._proposal_stage(
            locs, current, coord, epoch, last_rnd + phase_rounds, phase, at_coord, cross_racks)
        t_prop = time.thread_time() - t_prop
        self.guarded_components = 0
        joint = self._joint(locs, current, coord, epoch, last_rnd + phase_rounds + prop_rounds + 1,
                            phase, jfp, model, state) if current and self.config.joint_jobs > 0 else (0, 0)
        final: Dict[str, Opt] = {}
        for r, L in locs.items():
            for n in L.local:
                final[n] = L.assign[n]
        if current:
            for j, a in current.items():
                final[j] = a.opt
        # what every Local Scheduler enforces at the end (tests check the consistency)
        self.rack_views = {r: dict(L.assign) for r, L in locs.items()}
        if self.config.incremental:
            self._prev = ((model.ev.cap, K), {r: (fps[r], L) for r, L in locs.items()},
                          dict(current or {}))
        elapsed = time.thread_time() - t_start
        self.stats = {"seconds": elapsed, "critical_path_s": crit, "rounds": rounds,
                      "phase_rounds": phase_rounds, "proposal_rounds": prop_rounds,
                      "proposal_s": t_prop,
                      "proposals_accepted": accepted,
                      "joint_components": joint[0], "joint_improved": joint[1],
                      "guarded": sum(L.guarded for L in locs.values()),
                      "guarded_components": self.guarded_components,
                      "halo_evals": sum(L.halo_evals for L in locs.values()),
                      "shifted": sum(1 for o in final.values() if o.shift),
                      "racks": len(locs), "cross_jobs": len(current or {}),
                      "local_evals": sum(L.evals for L in locs.values()),
                      "proxy_evals": sum(L.proxy_evals for L in locs.values()),
                      "proxy_groups": sum(len(L.large) for L in locs.values()),
                      "proxy_batches": sum(L.proxy_batches for L in locs.values()),
                      "pruned": sum(L.pruned for L in locs.values()),
                      "simulations": model.ev.evaluations, "reused": 0,
                      "racks_reused": reused, "warm": int(warm),
                      "carried": int(carried), "short_jobs": n_short,
                      "wide_low": n_low}
        return self._decisions(state, model, locs, final, current)
