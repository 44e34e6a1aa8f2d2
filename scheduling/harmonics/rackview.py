"""Tier 1, the rack's view: the links a Local Scheduler owns, its jobs' options, and the
slowdowns of an interaction group under an assignment (the model, or the closed-form proxy
of large groups)."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..base import ClusterState
from ..common import Opt, interaction_groups, make_decision, path_options
from ..fluid import STARVED_SLOWDOWN, SimJob, isolated_sim_time
from ..model import ContentionModel
from .proxykernel import available as proxy_jit_available, score as proxy_jit_score
from .params import HarmonicsConfig
from .messages import GhostJob, RackSummary


def _with_priority(b: SimJob, prio: int, shift_s: float = 0.0) -> SimJob:
    return SimJob(b.compute_s, b.links, b.B, b.bmax, prio, b.lam_max, shift_s)


# the store's entry numbering the traffic signatures of its keys (``RackView._stored``)
_TRAFFIC_IDS = ("traffic ids",)


class RackView:
    """One rack's links, its jobs and its view of the model (model or closed-form proxy)."""

    def __init__(self, rack: int, state: ClusterState, model: ContentionModel, rack_links: set,
                 names: Sequence[str], pot: Dict[str, set], K: int, config: HarmonicsConfig,
                 store: Optional[dict] = None, limits: Optional[Dict[str, range]] = None):
        """``store``: this rack's job views kept across epochs (SimJobs and proxy rows per
        job inputs and path choice; the policy keeps one per rack of one cluster); ``limits``:
        the classes the epoch's class rules leave some jobs (``classes``)."""
        self.config = config
        self.limits = limits or {}
        self._store = store
        self.G = max(1, config.shift_phases)
        self.rack = rack
        self.state = state
        self.model = model
        self.links = rack_links
        self.K = K
        self.jobs = list(names)
        self.cross = [n for n in self.jobs if model.jobs[model.index[n]].spans_racks]
        self._cross_set = set(self.cross)
        self.local = [n for n in self.jobs if n not in self._cross_set]
        self.paths = {n: path_options(state, n, model, config.cap_fracs) for n in self.jobs}
        if not config.cross_caps:   # caps only for rack-local jobs (see docs/harmonics.md)
            self.paths = {n: ([(s, c) for s, c in p if c >= 1.0] if n in self._cross_set else p)
                          for n, p in self.paths.items()}
        self.options = {n: [Opt(k, s, c) for k in self.classes(n) for (s, c) in self.paths[n]]
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
        self._opt_rows: Dict[str, tuple] = {}  # a job's options: summary rows, wire form
        self._summary_cols: Dict[str, tuple] = {}   # a job's columns in its group's slowdowns
        self._inputs: Dict[str, tuple] = {}         # a job's inputs in the store's keys
        self._demand: Dict[tuple, float] = {}   # (job, spine) -> its ToR-spine demand here
        self._memo: Dict[tuple, Dict[tuple, List[float]]] = {}   # group -> options -> slowdowns
        self._solved: Dict[tuple, Dict[str, Opt]] = {}           # (group, fixed) -> solution
        self.evals = 0
        self.guarded = 0           # solves the guard turned to fair sharing
        self.proxy_evals = 0
        self.proxy_batches = 0
        self._prows: Dict[tuple, tuple] = {}
        self._garr: Dict[tuple, tuple] = {}
        self._gpos: Dict[tuple, Dict[str, int]] = {}
        self._gjit: Dict[tuple, tuple] = {}          # the compiled proxy's held assignments
        self._pidx: Dict[tuple, int] = {}            # (job, spine, cap) -> row of the table
        self._plist: List[tuple] = []
        self._ptab: Optional[tuple] = None
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

    def classes(self, n: str, model: Optional[ContentionModel] = None) -> range:
        """The classes job n is offered: the epoch's rules first (``limits``: the short-job
        and wide-order rules, ``classrules.class_limits``), else only the highest (0)
        for a *wide* job, one spanning more than ``config.wide_span`` racks (the wide-job
        rule, docs/harmonics.md): it crosses many racks' uplinks, so any class below the top
        makes it the straggler of every one of them; else all K.  ``model``: this epoch's
        (joint stage)."""
        r = self.limits.get(n)
        if r is not None:
            return range(min(r.start, self.K - 1), min(r.stop, self.K))
        m = model or self.model
        if self.config.is_wide(len(m.jobs[m.index[n]].racks)):
            return range(1)
        return range(self.K)

    def allowed(self, n: str, o: Opt) -> Opt:
        """o with its class moved into n's classes (a fair-sharing fallback of the guard
        puts every job in class 0, which the rules may not offer n)."""
        r = self.classes(n)
        if o.priority in r:
            return o
        return o._replace(priority=min(max(o.priority, r.start), r.stop - 1))

    def new_epoch(self) -> None:
        """Kept for another epoch (inputs unchanged): its caches stay, its counters restart."""
        self.evals = self.proxy_evals = self.proxy_batches = self.pruned = self.halo_evals = 0
        self.guarded = 0

    def _is_large(self, group: Sequence[str]) -> bool:
        """A group of more than ``large_group`` jobs is scored with the closed-form load
        proxy (``_proxy``) instead of the model (see docs/harmonics.md, complexity)."""
        return self.config.large_group > 0 and len(group) > self.config.large_group
    # -- the rack's view of the model ----------------------------------------
    def _stored(self, kind: str, n: str, o: Opt):
        """The key of n's view under o's path choice in the rack's store (its exact inputs:
        traffic, compute and isolated time), or None without a store.  The inputs are n's
        for the view's life (its model is the one it was built with): formed once per job,
        the traffic signature (every host and pair: hashing it was most of a look-up's
        cost) as its number in the store's table (``_TRAFFIC_IDS``, as long as the store)."""
        if self._store is None:
            return None
        k = self._inputs.get(n)
        if k is None:
            js = self.model.jobs[self.model.index[n]]
            k = self._inputs[n] = (self._traffic_id(n), js.compute_s, self.iso[n],
                                   n in self._cross_set)
        return (kind, n, k, o.spine, o.cap)

    def _traffic_id(self, n: str) -> int:
        """n's traffic signature's number in the store's table: signature -> number, and
        per job the last signature numbered (the model's own object: the racks of one epoch
        share it, so most look-ups are by identity, without hashing the signature)."""
        sig = self.model.traffic_sig(n)
        ids, last = self._store.setdefault(_TRAFFIC_IDS, ({}, {}))
        hit = last.get(n)
        if hit is not None and hit[0] is sig:
            return hit[1]
        i = ids.setdefault(sig, len(ids))
        last[n] = (sig, i)
        return i

    def _sim(self, n: str, o: Opt) -> SimJob:
        key = (n, o.spine, o.cap)
        b = self._base.get(key)
        if b is None:
            skey = self._stored("sim", n, o)
            b = self._store.get(skey) if skey is not None else None
            if b is None:
                d = make_decision(self.model, n, Opt(0, o.spine, o.cap))
                b = self.model.sim_job(n, d, links=self.links, floor=n in self.cross)
                if skey is not None:
                    self._store[skey] = b
            self._base[key] = b
        return _with_priority(b, o.priority, o.shift * self.iso[n] / self.G if o.shift else 0.0)

    def _lb(self, n: str, o: Opt) -> float:
        """A lower bound of n's slowdown under o in this rack's view, whatever the others do:
        its isolated time in the rack's view (caps and the global-pace floor included) / iso.
        Every iteration the model simulates takes at least that long (a job alone gets its
        highest rate), so the model's figure (an exact cycle's or the second-half mean) is
        at least the bound; completions are detected at 1e-9 of the remaining work, hence
        the relative margin ``config.lb_margin`` where the bound is used (``_solve_group``)."""
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
            res = self._proxy(group, a)[0].tolist()
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
        if row is None and self._store is not None:
            row = self._store.get(self._stored("row", n, o))
            if row is not None:
                self._prows[key] = row
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
            if self._store is not None:
                self._store[self._stored("row", n, o)] = row
        return row

    def _group_arrays(self, group: Sequence[str], a: Dict[str, Opt]) -> tuple:
        """The proxy's inputs for ``a`` (jobs x rack links: u, t; per job: floor, class,
        compute, iso) and the class loads (classes x links: sum of u), kept for the last
        assignments seen (a coordinate-descent move scores its candidates against the same
        held assignment)."""
        g = tuple(group)
        key = (g, tuple(a[m] for m in g))
        hit = self._garr.get(key)
        if hit is not None:
            return hit
        if g not in self._gpos:
            self._gpos[g] = {m: i for i, m in enumerate(g)}
        rows = [self._proxy_row(m, a[m]) for m in g]
        U = np.array([r[0] for r in rows])
        T = np.array([r[1] for r in rows])
        fl = np.array([r[2] for r in rows])
        P = np.array([a[m].priority for m in g], dtype=np.int64)
        c = np.array([r[3] for r in rows])
        iso = np.array([r[4] if r[4] > 0 else 1.0 for r in rows])
        load = np.zeros((self.K, U.shape[1]))
        np.add.at(load, P, U)
        if len(self._garr) > 64:
            self._garr.clear()
        res = self._garr[key] = (U, T, fl, P, c, iso, load)
        return res

    def _proxy(self, group: Sequence[str], a: Dict[str, Opt], n: Optional[str] = None,
               cands: Optional[Sequence[Opt]] = None,
               moves: Optional[Sequence[Tuple[str, Opt]]] = None) -> np.ndarray:
        """Closed-form slowdowns of a large group in this rack's view (no simulation), for
        the assignment ``a`` with n's option replaced by each of ``cands`` (one row each),
        or with one job's option replaced per row as in ``moves`` ((job, option) pairs);
        neither: ``a`` itself.  Job m occupies link e a fraction u_me = B_me / (C_e iso_m) of
        the time at its isolated pace.  On e, job j is blocked by the higher classes,
        H_e = sum of their u, and shares with its own class, E_e = sum of the others' u in it.
        With ``config.proxy_block="product"`` it progresses only while none of its links is blocked
        (``F_min = config.proxy_free_min``):
            F_j = prod_e max(1 - H_e, F_min)
            T_j = max(bmax_j / lam_max_j, max_e (B_je / C_e) * (1 + E_e)) / max(F_j, F_min)
        with ``"max"`` (the default) only its worst link counts:
            T_j = max(bmax_j / lam_max_j, max_e (B_je / C_e) * (1 + E_e) / max(1 - H_e, F_min));
        its slowdown is (compute_j + T_j) / iso_j, capped at STARVED_SLOWDOWN.  The inputs are
        the model's SimJobs (rack links, caps and the global-pace floor in lam_max).
        O(candidates x jobs x rack links) numpy work.  It depends on a job's class only through
        its order relative to the jobs sharing one of its links, and not on which unused spine
        a job takes: the option classes of ``_option_class`` stay exact for it."""
        if n is not None:
            moves = [(n, o) for o in cands]
        if self.config.proxy_block == "max" and proxy_jit_available() and self._lidx:
            return self._proxy_jit(group, a, moves)
        U, T, fl, P, c, iso, load = self._group_arrays(group, a)
        if not moves:
            Uc, Tc_, flc, Pc, loadc = U[None], T[None], fl[None], P[None], load[None]
        else:
            gp = self._gpos[tuple(group)]
            posv = np.array([gp[m] for m, _ in moves])
            rows = [self._proxy_row(m, o) for m, o in moves]
            O = len(moves)
            ar0 = np.arange(O)
            uo = np.array([r[0] for r in rows])
            po = np.array([o.priority for _, o in moves], dtype=np.int64)
            Uc = np.repeat(U[None], O, axis=0)
            Tc_ = np.repeat(T[None], O, axis=0)
            flc = np.repeat(fl[None], O, axis=0)
            Pc = np.repeat(P[None], O, axis=0)
            Uc[ar0, posv] = uo
            Tc_[ar0, posv] = [r[1] for r in rows]
            flc[ar0, posv] = [r[2] for r in rows]
            Pc[ar0, posv] = po
            # the class loads with the moved job's contribution in each candidate's class
            loadc = np.repeat(load[None], O, axis=0)
            loadc[ar0, P[posv]] -= U[posv]
            loadc[ar0, po] += uo
        O = len(Pc)
        prefix = np.concatenate([np.zeros_like(loadc[:, :1]), np.cumsum(loadc, axis=1)], axis=1)
        ar = np.arange(O)[:, None]
        H = prefix[ar, Pc]                       # O x J x L: load of the higher classes
        E = np.maximum(loadc[ar, Pc] - Uc, 0.0)  # the others of its class
        U, T, fl = Uc, Tc_, flc
        if self.config.proxy_block == "product":
            # it progresses only while none of its links is taken by a higher class: the free
            # fractions of its links multiply (blocking on different links is not aligned)
            free = np.where(T > 0, np.maximum(1.0 - H, self.config.proxy_free_min), 1.0).prod(axis=2)
            te = T * (1.0 + E)
            Tc = np.maximum(fl, te.max(axis=2)) / np.maximum(free, self.config.proxy_free_min)
        else:
            te = T * (1.0 + E) / np.maximum(1.0 - H, self.config.proxy_free_min)
            Tc = np.maximum(fl, te.max(axis=2))
        sd = np.minimum((c[None, :] + Tc) / iso[None, :], STARVED_SLOWDOWN)
        sd[fl < 0] = 1.0
        return sd

    def _prow_index(self, n: str, o: Opt) -> int:
        """n's proxy row under o (``_proxy_row``) as an index into the rack's table."""
        key = (n, o.spine, o.cap)
        i = self._pidx.get(key)
        if i is None:
            i = self._pidx[key] = len(self._plist)
            self._plist.append(self._proxy_row(n, o)[:3])
            self._ptab = None
        return i

    def _proxy_jit(self, group, a, moves) -> np.ndarray:
        """``_proxy`` ("max") on the compiled kernel (``proxykernel``): the same arithmetic in
        the same order, per candidate, on the rack's table of proxy rows."""
        g = tuple(group)
        key = (g, tuple(a[m] for m in g))
        held = self._gjit.get(key)
        if held is None:
            if g not in self._gpos:
                self._gpos[g] = {m: i for i, m in enumerate(g)}
                for m in g:              # the table holds every option of the group at once
                    for o in self.options.get(m, ()):
                        self._prow_index(m, o)
            rows = [self._proxy_row(m, a[m]) for m in g]
            held = (np.array([self._prow_index(m, a[m]) for m in g], dtype=np.int64),
                    np.array([a[m].priority for m in g], dtype=np.int64),
                    np.array([r[3] for r in rows]),
                    np.array([r[4] if r[4] > 0 else 1.0 for r in rows]))
            if len(self._gjit) > 64:
                self._gjit.clear()
            self._gjit[key] = held
        if moves:
            gp = self._gpos[g]
            pos = np.array([gp[m] for m, _ in moves], dtype=np.int64)
            oidx = np.array([self._prow_index(m, o) for m, o in moves], dtype=np.int64)
            po = np.array([o.priority for _, o in moves], dtype=np.int64)
        else:
            pos = np.full(1, -1, dtype=np.int64)
            oidx = po = np.zeros(1, dtype=np.int64)
        if self._ptab is None:
            self._ptab = tuple(np.array([r[k] for r in self._plist]) for k in range(3))
        return proxy_jit_score(*self._ptab, *held, pos, oidx, po, self.K,
                                 float(self.config.proxy_free_min), float(STARVED_SLOWDOWN))

    def _cost(self, group, a) -> float:
        """Rack objective: slowdowns of the group's jobs; a rack-spanning job's excess
        (slowdown - 1) is weighted by the number of racks it spans when ``span_weight``:
        delays it takes here shift its phase on its other racks, so they compound."""
        return self._group_cost(group, self._slowdowns(group, a))
