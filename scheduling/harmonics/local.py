"""Tier 1, the Local Scheduler: its search plus the proposal stage (halo views holding the
neighbouring racks' boundary jobs as ghosts, joint class proposals and their costs)."""
from __future__ import annotations

import itertools
from typing import Dict, List, Optional, Sequence, Tuple

from ..common import Opt, interaction_groups, make_decision, shiftable
from ..fluid import STARVED_SLOWDOWN, SimJob
from .messages import Assignment, GhostJob, Proposal, ProposalReport, ViewCost
from .rackview import _with_priority
from .joint import JointStage
from .search import LocalSearch


class LocalScheduler(JointStage, LocalSearch):
    """Owns one rack's links; optimises the decisions of the jobs on them."""

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
        is slowed by more than ``config.propose_min`` and the group has at most ``limit`` class
        choices (the product of their classes, ``classes``): exhaustive, equivalent choices (``_halo_key``) evaluated
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
        ranges = [self.classes(n) for n in mine]
        size = 1
        for r in ranges:
            size *= len(r)
        if size <= limit and any(v > 1.0 + self.config.propose_min for v in sd):
            base = best_c = sum(sd)
            seen = set()
            t = dict(a)
            for ks in itertools.product(*ranges):
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
