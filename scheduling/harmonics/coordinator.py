"""Tier 2, the Global Coordinator: one decision per rack-spanning job from the racks'
summaries (it never evaluates the model)."""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ..fluid import STARVED_SLOWDOWN
from .compoundkernel import available as compound_jit_available, compound as compound_jit
from .messages import (Assignment, CoordinatorMessage, GhostJob, JobSummary, OptionList,
                       Proposal, ProposalReport, RackSummary, ViewCost)


class _Tables(NamedTuple):
    """One round's lookups by column id (``GlobalCoordinator._tables``)."""
    xid: Dict[Tuple[str, int], np.ndarray]   # (job, rack) -> its summary's cross ids there
    ci: np.ndarray                           # id -> (compute_s, iso_s)
    met: Dict[int, np.ndarray]               # rack -> id -> meets rack-local jobs there


class CrossIndex:
    """Column ids of the rack-spanning jobs the summaries name, one per job name, and each
    summary's ``cross`` list as ids.  A rack's groups change only where jobs come or go, so
    the same lists come back round after round and epoch after epoch: each is converted
    once (the policy keeps one index across epochs)."""

    def __init__(self):
        self.ids: Dict[str, int] = {}
        self.lists: Dict[tuple, np.ndarray] = {}

    def id(self, job: str) -> int:
        return self.ids.setdefault(job, len(self.ids))

    def of(self, cross: List[str]) -> np.ndarray:
        key = tuple(cross)
        ids = self.lists.get(key)
        if ids is None:
            known = self.ids      # ``id`` of each, inline
            ids = self.lists[key] = np.array([known.setdefault(m, len(known)) for m in cross],
                                             dtype=np.intp)
        return ids


class GlobalCoordinator:
    """Picks one decision per rack-spanning job from the racks' summaries."""

    def __init__(self, spines: int, tol: float = 1e-6, compound: str = "product",
                 index: Optional[CrossIndex] = None):
        """``index``: the column ids to use (``CrossIndex``; kept by the caller across
        epochs), else a new one."""
        self.compound = compound
        self.spines = spines
        self.tol = tol
        self.job_racks: Dict[str, List[int]] = {}   # rack-spanning job -> its racks (round 1)
        self.index = index if index is not None else CrossIndex()

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

    def _totals(self, entries: List[JobSummary], racks: Sequence[int], tab: "_Tables"
                ) -> List[float]:
        if self.compound == "product":
            return self._totals_product(entries, racks, tab)
        return self._totals_max(entries)

    @staticmethod
    def _product_vec(V: np.ndarray, peers: np.ndarray, compute_s, iso_s) -> np.ndarray:
        """``_product`` over arrays: ``V`` racks x ... (NaN: not reported by that rack),
        ``peers`` (broadcast like V) True where the job meets rack-local jobs in that rack,
        ``compute_s`` / ``iso_s`` broadcast against V's trailing axes.  The same arithmetic
        per element (up to the order of the product over racks)."""
        seen = ~np.isnan(V)
        worst = np.where(seen, V, -np.inf).max(axis=0)
        c = np.asarray(compute_s, dtype=float)
        iso = np.asarray(iso_s, dtype=float)
        t0 = iso - c
        with np.errstate(divide="ignore", invalid="ignore"):
            fac = np.where(seen & peers, np.maximum(1.0, (V * iso - c) / t0), 1.0)
            res = np.minimum(STARVED_SLOWDOWN, np.maximum(worst, (c + t0 * fac.prod(axis=0)) / iso))
        plain = (t0 <= 0) | (iso <= 0) | (worst >= STARVED_SLOWDOWN)
        return np.where(plain, worst, res)

    @classmethod
    def _product_cols(cls, V: np.ndarray, peers: np.ndarray, compute_s: np.ndarray,
                      iso_s: np.ndarray) -> np.ndarray:
        """``_product_vec`` of racks x options x jobs ``V`` with ``peers`` racks x jobs and
        ``compute_s`` / ``iso_s`` per job, on the compiled kernel (``compoundkernel``: the
        same arithmetic in the same order) when it is available."""
        if compound_jit_available():
            return compound_jit(np.ascontiguousarray(V, dtype=float),
                                np.ascontiguousarray(peers, dtype=np.bool_),
                                np.ascontiguousarray(compute_s, dtype=float),
                                np.ascontiguousarray(iso_s, dtype=float), float(STARVED_SLOWDOWN))
        return cls._product_vec(V, peers[:, None, :], compute_s, iso_s)

    def _tables(self, summaries: Sequence[RackSummary], info: Dict[str, Tuple[float, float]],
                peers: Dict[Tuple[str, int], int]) -> "_Tables":
        """One round's lookups for ``_views`` by column id, built once for all the jobs of
        the round instead of once per job: each summary's cross ids, each job's (compute,
        iso) (0.0 where no rack reported it) and, per rack, whether a job meets rack-local
        jobs there (False where that rack did not report it).  Every id a round's summaries
        name is below the tables' length."""
        index = self.index
        xid = {(js.job, s.rack): index.of(js.cross) for s in summaries for js in s.jobs}
        cols = [index.id(j) for j in info]
        n = len(index.ids)
        ci = np.zeros((n, 2))
        if info:
            ci[cols] = list(info.values())
        met: Dict[int, np.ndarray] = {s.rack: np.zeros(n, dtype=bool) for s in summaries}
        for (j, r), p in peers.items():
            met[r][index.ids[j]] = p > 0
        return _Tables(xid, ci, met)

    @staticmethod
    def _views(entries: List[JobSummary], ids: List[np.ndarray],
               ci: Optional[np.ndarray] = None, met: Optional[List[np.ndarray]] = None):
        """The other rack-spanning jobs reported with a job's options, as arrays: their
        slowdowns racks x options x jobs (NaN where a rack did not report one), whether they
        meet rack-local jobs there (racks x jobs), their compute and isolated times.
        ``ids``: each entry's ``cross`` as column ids (``CrossIndex``); ``ci``: (compute,
        iso) by id; ``met``: per entry, by id, whether a job meets rack-local jobs in the
        entry's rack (``_tables``; None: zeros, False).  The jobs' columns are in the order
        they are first named (entries in order), so the sums over them keep their order."""
        O = len(entries[0].options)
        g = np.concatenate(ids) if ids else np.zeros(0, dtype=np.intp)
        if not len(g):
            return (np.full((len(entries), O, 0), np.nan), np.zeros((len(entries), 0), dtype=bool),
                    np.zeros(0), np.zeros(0))
        ks = np.repeat(np.arange(len(entries)), [len(i) for i in ids])
        u, first, inv = np.unique(g, return_index=True, return_inverse=True)
        order = np.argsort(first)            # first-named first
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        cs = rank[inv.reshape(-1)]
        cols = u[order]
        V = np.full((len(entries), O, len(cols)), np.nan)
        P = np.zeros((len(entries), len(cols)), dtype=bool)
        V[ks, :, cs] = np.hstack([e.cross_costs for e, i in zip(entries, ids) if len(i)]).T
        if met is not None:
            P[ks, cs] = np.concatenate([m[i] for m, i in zip(met, ids)])
        if ci is None:
            return V, P, np.zeros(len(cols)), np.zeros(len(cols))
        return V, P, ci[cols, 0], ci[cols, 1]

    def _totals_product(self, entries: List[JobSummary], racks: Sequence[int], tab: "_Tables"
                        ) -> List[float]:
        """Like ``_totals_max`` but a rack-spanning job's slowdown compounds over its racks
        (``_product``) instead of being its worst rack's; every option at once
        (``_product_cols``)."""
        me = entries[0]
        cm = [e.costs() for e in entries]
        own = np.array([c[:, 0] for c in cm])                                     # racks x O
        tot = np.array([c[:, 1] for c in cm]).sum(axis=0)
        mp = np.array([e.local_peers > 0 for e in entries])[:, None]
        tot = tot + self._product_cols(own[:, :, None], mp, np.array([float(me.compute_s)]),
                                       np.array([float(me.iso_s)]))[:, 0]
        ids = [tab.xid[(e.job, r)] for r, e in zip(racks, entries)]
        V, P, c, iso = self._views(entries, ids, tab.ci, [tab.met[r] for r in racks])
        if V.shape[2]:
            tot = tot + self._product_cols(V, P, c, iso).sum(axis=1)
        return tot.tolist()

    def _totals_max(self, entries: List[JobSummary]) -> List[float]:
        """Summed cost of every option: rack-local jobs count once per rack (they live in one
        rack); a rack-spanning job counts once, at its worst rack (it moves at the pace of its
        slowest link) - the job itself and every other rack-spanning job reported."""
        cm = [e.costs() for e in entries]
        own = np.array([c[:, 0] for c in cm])
        tot = np.array([c[:, 1] for c in cm]).sum(axis=0)
        V, _, _, _ = self._views(entries, [self.index.of(e.cross) for e in entries])
        if self.compound == "sum":   # excess delays add up along the job's racks
            tot = tot + 1.0 + (own - 1.0).sum(axis=0)
            tot = tot + (1.0 + np.nansum(V - 1.0, axis=0)).sum(axis=1)
        else:                         # the job moves at the pace of its worst rack
            tot = tot + own.max(axis=0)
            tot = tot + np.where(np.isnan(V), -np.inf, V).max(axis=0).sum(axis=1)
        return tot.tolist()

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
            row = (a.priority, a.spine, a.cap, a.shift)
            i = (opts.find(row) if isinstance(opts, OptionList) else
                 next((k for k, o in enumerate(opts) if (o.priority, o.spine, o.cap, o.shift)
                       == row), None))
            if i is None:
                continue
            v = self._product([(e.options[i].own, e.local_peers) for e in entries],
                              entries[0].compute_s, entries[0].iso_s)
            if v > 1.0 + threshold:
                out.append(j)
        return out

    def components(self) -> List[List[int]]:
        """Racks linked by rack-spanning jobs (as the last round-1 summaries named them),
        each component sorted; racks with none are not listed."""
        parent: Dict[int, int] = {}

        def find(r):
            while parent.setdefault(r, r) != r:
                parent[r] = parent[parent[r]]
                r = parent[r]
            return r
        for racks in self.job_racks.values():
            for r in racks[1:]:
                parent[find(r)] = find(racks[0])
            if racks:
                find(racks[0])
        comps: Dict[int, List[int]] = {}
        for r in sorted(parent):
            comps.setdefault(find(r), []).append(r)
        return sorted(comps.values())

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
                   current: Optional[Dict[str, Assignment]] = None, warm: bool = False
                   ) -> CoordinatorMessage:
        """Round 1 (``current`` None): each rack-spanning job's least summed cost (``_pick``);
        later rounds: one descent step around ``current`` (``_descent``).  ``warm``: round 1
        of an incremental epoch, ``current`` the last epoch's decisions: the jobs it does not
        hold are picked as in a cold round 1, the others start the descent (jobs of ``current``
        no rack reported are kept)."""
        per_job: Dict[str, List[Tuple[int, JobSummary]]] = {}
        info: Dict[str, Tuple[float, float]] = {}
        peers: Dict[Tuple[str, int], int] = {}
        for s in summaries:
            for js in s.jobs:
                per_job.setdefault(js.job, []).append((s.rack, js))
                info[js.job] = (js.compute_s, js.iso_s)
                peers[(js.job, s.rack)] = js.local_peers
        tab = self._tables(summaries, info, peers) if self.compound == "product" else None
        if current is None or warm:
            self.job_racks = {j: [r for r, _ in lst] for j, lst in per_job.items()}
        if current is None:
            return CoordinatorMessage(epoch, rnd, self._pick(per_job, list(per_job), tab))
        fresh: List[str] = []
        if warm:
            fresh = [j for j in per_job if j not in current]
        if fresh:
            current.update({a.job: a for a in self._pick(per_job, fresh, tab)})
        return self._descent(per_job, tab, current, set(fresh), epoch, rnd)

    def _pick(self, per_job: Dict[str, List[Tuple[int, JobSummary]]], jobs: Sequence[str],
              tab: "_Tables") -> List[Assignment]:
        """Round 1: least summed cost; near-ties go to the least loaded spine (this is how
        the spine links are shared among the rack-spanning demand)."""
        out: List[Assignment] = []
        spine_load: Dict[Tuple[int, int], float] = {}
        order = sorted(jobs, key=lambda j: (-sum(e.uplink_gbps for _, e in per_job[j]), j))
        for j in order:
            entries = [e for _, e in per_job[j]]
            racks = [r for r, _ in per_job[j]]
            tot = self._totals(entries, racks, tab)
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
        return out

    def _descent(self, per_job, tab, current: Dict[str, Assignment], skip: set,
                 epoch: int, rnd: int) -> CoordinatorMessage:
        """Later rounds: block coordinate descent around the consistent assignment; at most
        one job moves per rack per round, so every accepted move's summed cost is exact in
        the racks' views (``skip``: jobs just picked, whose summaries were not around it)."""
        out: List[Assignment] = []
        gains = []
        for j, lst in per_job.items():
            if j in skip:
                continue
            entries = [e for _, e in lst]
            tot = self._totals(entries, [r for r, _ in lst], tab)
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
