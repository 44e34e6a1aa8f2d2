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
from .proxykernel import (available as proxy_jit_available, score_sparse as proxy_jit_score,
                          sparsity)
from .params import HarmonicsConfig
from .messages import GhostJob, RackSummary, pack_options


def _with_priority(b: SimJob, prio: int, shift_s: float = 0.0) -> SimJob:
    return SimJob(b.compute_s, b.links, b.B, b.bmax, prio, b.lam_max, shift_s)


# the store's entry numbering the traffic signatures of its keys (``RackView._traffic_id``:
# the model's table, or the store's own)
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
        self._offer_paths(state)
        # the two links of each spine in this rack (uplink, downlink): spines whose links no
        # other job of the group uses are interchangeable in this rack's view
        cl = model.cluster
        tor = cl.tors[rack]
        self.spine_links = {s: {cl.link_index.get(f"{tor}>{sp}"), cl.link_index.get(f"{sp}>{tor}")}
                            for s, sp in enumerate(cl.spines)}
        self.iso = {n: model.iso_iter(n) for n in self.jobs}
        self.span = {n: len(model.jobs[model.index[n]].racks) for n in self.jobs}
        mine = {n: pot[n] & rack_links for n in self.jobs}
        self.groups = interaction_groups(self.jobs, mine)
        self.group_of = {n: gi for gi, g in enumerate(self.groups) for n in g}
        self.local_peers = {n: sum(1 for m in self.local if not mine[n].isdisjoint(mine[m]))
                            for n in self.cross}
        self._base: Dict[Tuple[str, Optional[int], float], SimJob] = {}
        self._sims: Dict[Tuple[str, Opt], SimJob] = {}
        self._links: Dict[Tuple[str, Optional[int], float], frozenset] = {}
        self.assign: Dict[str, Opt] = {}
        self._summaries: Dict[tuple, RackSummary] = {}
        # a job's (by name) and a group's (by index) columns in the group's slowdowns
        self._summary_cols: Dict[object, tuple] = {}
        self._updown: Optional[set] = None       # the rack's ToR-spine links (``summarise``)
        self._inputs: Dict[str, tuple] = {}         # a job's inputs in the store's keys
        self._demand: Dict[tuple, float] = {}   # (job, spine) -> its ToR-spine demand here
        self._memo: Dict[tuple, Dict[tuple, List[float]]] = {}   # group -> options -> slowdowns
        self._solved: Dict[tuple, Dict[str, Opt]] = {}           # (group, fixed) -> solution
        self.evals = 0
        self.guarded = 0           # solves the guard turned to fair sharing
        self.proxy_evals = 0
        self.proxy_batches = 0
        self._prows: Dict[tuple, tuple] = {}
        self._rowblk: Dict[str, dict] = {}           # job -> its proxy rows by (spine, cap)
        self._garr: Dict[tuple, tuple] = {}
        self._gpos: Dict[tuple, Dict[str, int]] = {}
        self._gjit: Dict[tuple, tuple] = {}          # the compiled proxy's held assignments
        # the compiled proxy's table of proxy rows (u, t, floor): blocks of rows, each job's
        # paths (``_prow_job``: job -> (first row, (spine, cap) -> row in its block)) and
        # single rows (``_pidx``: (job, spine, cap) -> row)
        self._pjob: Dict[str, tuple] = {}
        self._pidx: Dict[tuple, int] = {}
        self._pblocks: List[tuple] = []
        self._prows_n = 0
        self._marr: Dict[tuple, tuple] = {}          # moves' arrays by the caller's key
        self._moves: Dict[tuple, list] = {}          # ``summarise``'s proxy moves
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

    def _offer_paths(self, state: ClusterState) -> None:
        """Each job's paths (spine, cap) and options (class x path).  The paths depend only on
        whether the job spans racks (``path_options``): one list per kind, shared.  Jobs with
        the same classes and paths share one options list, with its summary rows and wire
        form (``_opt_rows``), kept in the store across epochs."""
        kinds: Dict[bool, list] = {}
        self.paths = {}
        for n in self.jobs:
            spans = n in self._cross_set
            p = kinds.get(spans)
            if p is None:
                p = path_options(state, n, self.model, self.config.cap_fracs)
                if spans and not self.config.cross_caps:   # caps only for rack-local jobs
                    p = [(s, c) for s, c in p if c >= 1.0]     # (see docs/harmonics.md)
                kinds[spans] = p
            self.paths[n] = p
        offers: Dict[tuple, tuple] = {}
        self.options = {}
        self._opt_rows: Dict[str, tuple] = {}  # a job's options: summary rows, wire form
        for n in self.jobs:
            r, p = self.classes(n), self.paths[n]
            key = (r.start, r.stop, id(p))
            hit = offers.get(key)
            if hit is None:
                skey = ("offer", r.start, r.stop, tuple(p))
                hit = self._store.get(skey) if self._store is not None else None
                if hit is None:
                    opts = [Opt(k, s, c) for k in r for (s, c) in p]
                    rows = [(o.priority, o.spine, o.cap, o.shift) for o in opts]
                    hit = (opts, (rows, pack_options(rows)))
                    if self._store is not None:
                        self._store[skey] = hit
                offers[key] = hit
            self.options[n], self._opt_rows[n] = hit

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
        return (kind, n, self._input_key(n), o.spine, o.cap)

    def _input_key(self, n: str) -> tuple:
        """n's inputs in the store's keys (``_stored``), formed once per job."""
        k = self._inputs.get(n)
        if k is None:
            js = self.model.jobs[self.model.index[n]]
            k = self._inputs[n] = (self._traffic_id(n), js.compute_s, self.iso[n],
                                   n in self._cross_set)
        return k

    def _traffic_id(self, n: str) -> int:
        """n's traffic signature's number: the model's (``traffic_id``, kept with its shared
        usage cache: one hashing of a signature per epoch, not one per rack; a store numbered
        against another table starts afresh), else the store's table: signature -> number,
        and per job the last signature numbered (the model's own object: the racks of one
        epoch share it, so most look-ups are by identity, without hashing the signature)."""
        shared = self.model.traffic_ids()
        if shared is not None:
            if self._store.get(_TRAFFIC_IDS) is not shared:
                self._store.clear()
                self._store[_TRAFFIC_IDS] = shared
            return self.model.traffic_id(n)
        sig = self.model.traffic_sig(n)
        ids, last = self._store.setdefault(_TRAFFIC_IDS, ({}, {}))
        hit = last.get(n)
        if hit is not None and hit[0] is sig:
            return hit[1]
        i = ids.setdefault(sig, len(ids))
        last[n] = (sig, i)
        return i

    def _sim(self, n: str, o: Opt) -> SimJob:
        """n's SimJob under o in this rack's view (SimJobs are never changed: one per option)."""
        sj = self._sims.get((n, o))
        if sj is None:
            sj = self._sims[(n, o)] = self._sim_new(n, o)
        return sj

    def _sim_new(self, n: str, o: Opt) -> SimJob:
        b = self._base_sim(n, o)
        return _with_priority(b, o.priority, o.shift * self.iso[n] / self.G if o.shift else 0.0)

    def _base_sim(self, n: str, o: Opt) -> SimJob:
        """n's SimJob under o's path choice, class 0 and no shift (``_sim`` sets them)."""
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
        return b

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
        if row is not None:
            return row
        blk = self._row_block(n)
        row = blk.get(key[1:])
        if row is None:
            row = blk[key[1:]] = self._new_row(n, o)
        self._prows[key] = row
        return row

    def _row_block(self, n: str) -> dict:
        """n's proxy rows by (spine, cap), kept in the store (one look-up per job)."""
        blk = self._rowblk.get(n)
        if blk is None:
            blk = self._rowblk[n] = ({} if self._store is None else
                                     self._store.setdefault(("rows", n, self._input_key(n)), {}))
        return blk

    def _new_row(self, n: str, o: Opt) -> tuple:
        """``_proxy_row`` computed."""
        sj = self._base_sim(n, o)      # (its class and shift play no part here)
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
            return (u, t, fl, sj.compute_s, iso)
        return (u, t, -1.0, sj.compute_s, iso)     # no traffic here: slowdown 1

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

    def _proxy_moves(self, group: Sequence[str], a: Dict[str, Opt],
                     moves: Sequence[Tuple[str, Opt]], mkey: tuple) -> np.ndarray:
        """``_proxy`` of every move of ``moves`` (one row each, in order; ``mkey`` as there):
        the compiled proxy in one call (it scores each candidate on its own: the rows of
        batches), else the numpy expression in batches of ``config.proxy_chunk`` moves."""
        if self.config.proxy_block == "max" and proxy_jit_available() and self._lidx:
            return self._proxy_jit(group, a, moves, mkey)
        step = max(1, self.config.proxy_chunk)
        return np.concatenate([self._proxy(group, a, moves=moves[i:i + step])
                               for i in range(0, len(moves), step)])

    def _prow_index(self, n: str, o: Opt) -> int:
        """n's proxy row under o (``_proxy_row``) as an index into the rack's table: in n's
        block (``_prow_job``), else a row of its own."""
        pj = self._pjob.get(n)
        if pj is not None:
            k = pj[1].get((o.spine, o.cap))
            if k is not None:
                return pj[0] + k
        key = (n, o.spine, o.cap)
        i = self._pidx.get(key)
        if i is None:
            r = self._proxy_row(n, o)
            i = self._pidx[key] = self._ptab_add((r[0][None], r[1][None], np.array([r[2]])))
        return i

    def _ptab_add(self, block: tuple) -> int:
        """A block of rows (u, t, floor arrays) at the end of the rack's table; returns the
        index of its first row."""
        i = self._prows_n
        self._pblocks.append(block)
        self._prows_n += len(block[2])
        self._ptab = None
        return i

    def _prow_job(self, m: str) -> None:
        """Every path of m's options in the rack's table, as one block: the job's rows
        stacked once per store (``_row_block``), in path order."""
        if m in self._pjob or not self.options.get(m):
            return
        blk = self._row_block(m)
        skey = ("stack", tuple(dict.fromkeys(self.paths[m])))   # the options' paths, in order
        st = blk.get(skey)
        if st is None:
            rows = []
            for sc in skey[1]:
                row = blk.get(sc)
                if row is None:
                    row = blk[sc] = self._new_row(m, Opt(0, *sc))
                rows.append(row)
            st = blk[skey] = ({sc: k for k, sc in enumerate(skey[1])},
                              tuple(np.array([r[k] for r in rows]) for k in range(3)))
        self._pjob[m] = (self._ptab_add(st[1]), st[0])

    def _move_arrays(self, g: tuple, moves: Sequence[Tuple[str, Opt]]) -> tuple:
        """``moves`` as the compiled proxy reads them: each moved job's position in g, its
        option's row of the rack's table and its class."""
        gp = self._gpos[g]
        return (np.array([gp[m] for m, _ in moves], dtype=np.int64),
                np.array([self._prow_index(m, o) for m, o in moves], dtype=np.int64),
                np.array([o.priority for _, o in moves], dtype=np.int64))

    def _proxy_jit(self, group, a, moves, mkey=None) -> np.ndarray:
        """``_proxy`` ("max") on the compiled kernel (``proxykernel``): the same arithmetic in
        the same order, per candidate, on the rack's table of proxy rows; ``mkey``: the
        caller's name of ``moves`` (the same key, the same moves), their arrays kept."""
        g = tuple(group)
        key = (g, tuple(a[m] for m in g))
        held = self._gjit.get(key)
        if held is None:
            if g not in self._gpos:
                self._gpos[g] = {m: i for i, m in enumerate(g)}
                for m in g:     # the table holds every path of the group's options at once
                    self._prow_job(m)
            rows = [self._proxy_row(m, a[m]) for m in g]
            held = (np.array([self._prow_index(m, a[m]) for m in g], dtype=np.int64),
                    np.array([a[m].priority for m in g], dtype=np.int64),
                    np.array([r[3] for r in rows]),
                    np.array([r[4] if r[4] > 0 else 1.0 for r in rows]))
            if len(self._gjit) > 64:
                self._gjit.clear()
            self._gjit[key] = held
        if moves:
            marr = self._marr.get(mkey) if mkey is not None else None
            if marr is None:
                marr = self._move_arrays(g, moves)
                if mkey is not None:
                    self._marr[mkey] = marr
            pos, oidx, po = marr
        else:
            pos = np.full(1, -1, dtype=np.int64)
            oidx = po = np.zeros(1, dtype=np.int64)
        if self._ptab is None:     # the table, and the links each row uses
            tab = tuple(np.concatenate([b[k] for b in self._pblocks]) for k in range(3))
            self._ptab = tab + sparsity(tab[0], tab[1])
        return proxy_jit_score(*self._ptab, *held, pos, oidx, po, self.K,
                                 float(self.config.proxy_free_min), float(STARVED_SLOWDOWN))

    def _cost(self, group, a) -> float:
        """Rack objective: slowdowns of the group's jobs; a rack-spanning job's excess
        (slowdown - 1) is weighted by the number of racks it spans when ``span_weight``:
        delays it takes here shift its phase on its other racks, so they compound."""
        return self._group_cost(group, self._slowdowns(group, a))
