"""Tier 1, the Local Scheduler's search: interaction groups solved exhaustively or by
coordinate descent, the phase stage's shifts, and the summaries sent to the Coordinator."""
from __future__ import annotations

import itertools
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..common import Opt, shiftable
from ..fluid import BYTES_PER_GBIT
from .messages import JobSummary, OptionList, RackSummary, pack_options
from .rackview import RackView


class LocalSearch(RackView):
    """A rack's optimisation of the decisions of the jobs on its links."""

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
            cl = self.classes(n)
            a[n] = Opt(cl[min(rank, len(cl) - 1)], s, 1.0)

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
                for o, sd in zip(todo, self._proxy(group, a, n, todo).tolist()):
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
        if not self.config.span_weight:
            return sum(sd)
        return sum(1.0 + (v - 1.0) * self.span[m] for m, v in zip(group, sd))

    def _solve_group(self, group: List[str], free: List[str], a: Dict[str, Opt]) -> None:
        if not free:
            return
        combos = 1
        for n in free:
            combos *= len(self.options[n])
            if combos > self.config.exhaustive_limit:
                break
        bound = self.config.use_bound and not self._is_large(group) and not self.config.span_weight
        if bound:
            held_lb = sum(self._lb(n, a[n]) for n in group if n not in free)
        if combos <= self.config.exhaustive_limit:
            best, best_c = None, float("inf")
            for choice in itertools.product(*[self.options[n] for n in free]):
                for n, o in zip(free, choice):
                    a[n] = o
                if bound:
                    # early abandon: even alone every job would cost at least its bound, so
                    # a choice whose summed bounds reach the incumbent cannot replace it
                    lb = (held_lb + sum(self._lb(n, o) for n, o in zip(free, choice))) \
                        * (1.0 - self.config.lb_margin)
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
                    if (rest + self._lb(n, o)) * (1.0 - self.config.lb_margin) >= cur0 - 1e-9:
                        self.pruned += 1
                        return True
                    return False
            if self.config.screen < 1.0 and n not in self._cross_set and not self._is_large(group):
                # screening: every option on a short run, the best few on the full model
                # (options the bound excludes are not screened: they cannot be accepted)
                quick = sorted(((self._group_cost(group, sd), i, o) for i, (o, sd) in
                                enumerate(list(self._each_option(
                                    n, group, a, skip=keep, budget=self.config.screen,
                                    prune=prune if self.config.screen_bound else None)))))
                for _, _, o in quick[:self.config.screen_keep]:
                    if prune is not None and prune(o):
                        continue
                    a[n] = o
                    c = self._cost(group, a)
                    a[n] = keep
                    yield o, c
            elif self._is_large(group):
                # the proxy scores all of n's other options in one batch (options equivalent
                # to the held one score the same: never accepted)
                cands = [o for o in self.options[n] if o != keep]
                self.proxy_evals += len(cands)
                self.proxy_batches += 1
                for o, sd in zip(cands, self._proxy(group, a, n, cands).tolist()):
                    yield o, self._group_cost(group, sd)
            else:
                for o, sd in list(self._each_option(n, group, a, skip=keep, prune=prune)):
                    yield o, self._group_cost(group, sd)
        self._descend(a, free, self._cost(group, a), moves)

    def _descend(self, a: Dict[str, Opt], movable: Sequence[str], cur: float, moves) -> float:
        """Coordinate descent: each movable job in turn takes its best alternative, the others
        held (``moves(n, held option, current cost)`` yields (option, group cost)); a move is
        accepted only if the cost falls; at most ``max_passes`` passes.  Returns the cost."""
        for _ in range(self.config.max_passes):
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
                a[free[0]] = Opt(self.classes(free[0])[0], self.paths[free[0]][0][0], 1.0)
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
                if self.config.guard and not self._is_large(g):
                    # the guard: never an assignment this view scores worse than fair
                    # sharing for the free jobs (one class, ECMP, no cap, no shift); not on
                    # the proxy, whose verdict on ECMP is not to be trusted (docs)
                    fair = dict(sub)
                    fair.update({n: Opt(0, None, 1.0) for n in free})
                    if self._cost(g, fair) < self._cost(g, sub) - 1e-9:
                        sub = fair
                        self.guarded += 1
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
            probe = {n for n, v in zip(g, sd) if n in locals_g and v > 1.0 + self.config.probe_min}
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
        classes = self.classes(n) if probe else [keep.priority]
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
                        probe: Sequence[str] = (), only: Optional[set] = None) -> RackSummary:
        """Like ``summarise`` for the phase stage: the rack-spanning jobs the Coordinator
        probes (every class at every phase, ``_phase_options``) and those that may take a
        shift in this rack's view (the held decision at each phase); an option outside the
        decision space here is reported at phase 0's costs (``_phase_norm``); ``only``: of
        these rack-spanning jobs only (a warm epoch's movable jobs)."""
        a = self.assign
        a.update(fixed)
        out = []
        for n in (self.cross if only is None else [m for m in self.cross if m in only]):
            g = self.groups[self.group_of[n]]
            probed = n in probe
            if self._is_large(g) or not (probed or n in self._shiftable(g, a)):
                continue
            keep = a[n]
            rows = []
            cands = self._phase_options(n, keep, probed)
            for o in cands:
                a[n] = self._phase_norm(n, o, g, a)
                rows.append(self._slowdowns(g, a))
                a[n] = keep
            out.append(self._job_summary(n, g, cands, rows, cands.index(keep), 0.0))
        return RackSummary(self.rack, epoch, rnd, out, 0.0, len(self.local))

    def _job_summary(self, n: str, g: Sequence[str], opts: Sequence[Opt], rows,
                     preferred: int, demand: float) -> JobSummary:
        """Rack-spanning job n's alternatives ``opts`` as this rack sees them, from the
        slowdowns of its group ``g`` under each (``rows``: options x jobs of g): its own, the
        rack-local jobs' sum, each other rack-spanning job's (``JobSummary.cross_costs``)."""
        sd = np.asarray(rows, dtype=float).reshape(len(opts), len(g))
        cols = self._summary_cols.get(n)
        if cols is None:    # g is always n's group (fixed for the view's life)
            gi = self.group_of[n]
            gcols = self._summary_cols.get(gi)
            if gcols is None:   # the group's rack-local and rack-spanning columns
                gcols = self._summary_cols[gi] = (
                    np.array([i for i, m in enumerate(g) if m not in self._cross_set],
                             dtype=np.intp),
                    [i for i, m in enumerate(g) if m in self._cross_set])
            pos = list(g).index(n)
            crs = [i for i in gcols[1] if i != pos]
            # the costs' columns (own, its copy where the rack-local sum goes, the others),
            # the rack-local ones, the others' names, n's compute
            cols = self._summary_cols[n] = (
                np.array([pos, pos] + crs, dtype=np.intp), gcols[0], [g[i] for i in crs],
                self.model.jobs[self.model.index[n]].compute_s)
        take, loc, names, compute_s = cols
        m = sd[:, take]                              # JobSummary.costs()
        m[:, 1] = sd[:, loc].sum(axis=1) if len(loc) else 0.0
        if opts is self.options[n]:
            hit = self._opt_rows[n]
        else:
            rows = [(o.priority, o.spine, o.cap, o.shift) for o in opts]
            hit = (rows, pack_options(rows))
        return JobSummary(n, preferred, OptionList(hit[0], m, hit[1]), demand, compute_s,
                          self.iso[n], self.local_peers[n], names, m[:, 2:], m)

    # -- messages ----------------------------------------------------------
    def _uplink_demand(self, n: str, spine: Optional[int]) -> float:
        """n's mean demand (Gb/s) on this rack's ToR-spine links through ``spine``, kept in
        the store across epochs (its inputs: n's traffic and isolated time, the spine)."""
        skey = self._stored("demand", n, Opt(0, spine, 1.0))
        demand = self._store.get(skey) if skey is not None else None
        if demand is None:
            if self._updown is None:
                cl = self.model.cluster
                self._updown = {l for l in self.links if cl.links[l].kind in ("uplink", "downlink")}
            use, _ = self.model.usage(n, spine)
            up = sum(b for l, b in use.items() if l in self._updown)
            demand = up / BYTES_PER_GBIT / self.iso[n] if self.iso[n] > 0 else 0.0
            if skey is not None:
                self._store[skey] = demand
        return demand

    def summarise(self, epoch: int, rnd: int, around: Optional[Dict[str, Opt]] = None,
                  only: Optional[Sequence[str]] = None) -> RackSummary:
        """Cost of every alternative of each rack-spanning job, others held at the rack's
        preferred decisions (round 1: ``around`` None, the rack solves everything itself)
        or at the current consistent assignment (later rounds); ``only``: of these
        rack-spanning jobs only (an incremental epoch's movable jobs)."""
        a = dict(self.solve() if around is None else {n: around[n] for n in self.jobs})
        self.assign = a
        if only is not None:
            only = set(only)
        cross = self.cross if only is None else [n for n in self.cross if n in only]
        key = (tuple(a[n] for n in self.jobs), None if only is None else tuple(cross))
        hit = self._summaries.get(key)
        if hit is not None:       # nothing on this rack changed since that summary
            return RackSummary(self.rack, epoch, rnd, hit.jobs, hit.uplink_demand_gbps, hit.local_jobs)
        out = []
        total_demand = 0.0
        # large groups: every option of every rack-spanning job of the group in one proxy batch
        # (equivalent options included: cheaper than finding the classes)
        batch: Dict[str, np.ndarray] = {}
        for gi, g in enumerate(self.large):
            ck = (gi, tuple(n for n in g if n in cross))
            mv = self._moves.get(ck)
            if mv is None:      # the same jobs move: the same moves (and their arrays)
                mv = self._moves[ck] = [(n, o) for n in ck[1] for o in self.options[n]]
            if mv:
                step = max(1, self.config.proxy_chunk)
                sd = self._proxy_moves(g, a, mv, ck)
                self.proxy_evals += len(mv)
                self.proxy_batches += -(-len(mv) // step)
                k = 0
                for n in g:
                    if n in cross:
                        batch[n] = sd[k:k + len(self.options[n])]
                        k += len(self.options[n])
        for n in cross:
            g = self.groups[self.group_of[n]]
            keep = a[n]
            opts = self.options[n]
            if n in batch:
                rows = batch[n]
            else:
                pairs = list(self._each_option(n, g, a))
                assert [o for o, _ in pairs] == opts
                rows = [sd for _, sd in pairs]
            demand = self._demand.get((n, keep.spine))
            if demand is None:
                demand = self._uplink_demand(n, keep.spine)
                self._demand[(n, keep.spine)] = demand
            total_demand += demand
            out.append(self._job_summary(n, g, opts, rows, opts.index(self.allowed(n, keep)),
                                         demand))
        res = RackSummary(self.rack, epoch, rnd, out, total_demand, len(self.local))
        self._summaries[key] = res
        return res
