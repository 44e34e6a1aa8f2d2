"""Event-driven fluid (flow-level) simulator of training jobs sharing a leaf-spine network.

Model (documented choices; docs in simulation/README.md):

* A job runs ``iterations`` iterations back to back.  Its profile's phases are executed in
  order; a collective with ``overlap = o`` starts when a fraction ``1 - o`` of the compute
  phase just before it has elapsed, and the next phase waits for both.
* Collectives are decomposed with ``workloads.flows.collective_flows`` (the one definition of
  what each rank sends).  Flows between two ranks on the same host do not touch the network
  and take no time (unless ``SimConfig.intra_host_gbps`` is set: then they share a per-host
  virtual link of that rate).
* Ring-type collectives (allreduce, allgather, reducescatter) and pipelined broadcast chains
  are simulated as a *fluid with the whole ring's bytes*: each ring edge must move its
  ``Flow.bytes`` (2(n-1)/n*M for all-reduce), and all edges of one ring (one group) advance at
  one common rate -- the limit of 2(n-1) synchronised steps, where every step waits for the
  slowest edge.  The collective ends when all its groups have finished.
  All-to-all and send/recv flows are independent (each ends on its own; flows between the
  same two hosts are merged since they share a path and a fair share); the collective ends
  when its slowest flow does.
* Bandwidth: strict priority classes, per-job rate caps per link, and per-flow max-min
  fairness inside a class (``simulation.waterfill``).  Rates are recomputed only on events
  (a collective starts or ends, a flow group ends, decisions change, a link fails).
* The policy is called every epoch through the controller's own epoch step
  (``scheduling.epochs.EpochDriver``, see ``simulation.view``): declared job states, updated
  by the shared estimator from the bytes measured during the last epoch.  Its decisions
  (priority class, rate caps, spine / per-pair spines, start-time shift) are enforced from
  that instant on.  Paths of flows in flight are re-routed when a decision changes their
  spine (an SDN route change).  A shift is applied once per new value, as the controller does.
"""
from __future__ import annotations

import heapq
import json
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from scheduling.base import clamp_class
from workloads.cluster import Cluster, default_spine
from workloads.flows import collective_flows
from workloads.scenario import Collective, Compute, ResolvedJob, ResolvedScenario, groups_of

from .waterfill import waterfill, waterfill_update

GBPS_TO_BYTES = 1e9 / 8.0
COUPLED_OPS = ("allreduce", "allgather", "reducescatter", "broadcast")

# event kinds (ordering at equal times follows insertion order)
_ARRIVE, _COMPUTE_END, _COLL_START, _ITER_START, _EPOCH, _FAULT, _POLL = range(7)


@dataclass
class SimConfig:
    """Simulation settings (none of them is part of the scenario schema)."""
    epoch_s: Optional[float] = None          # policy epoch, trace seconds; None: emulation.epoch_s / time_scale
    bin_s: Optional[float] = None            # links.csv bin width; None: the epoch
    num_classes: int = 4                     # strict-priority classes the network enforces
    default_class: int = 0                   # class of a job the policy has not decided on
    decision_timeout_s: Optional[float] = None   # a decision slower than this is dropped
    max_timeouts: int = 1                    # after this many timed-out decisions the policy is no longer called
    decision_budget_s: Optional[float] = None  # total decision time after which the policy is no longer called
    max_time_s: Optional[float] = None       # stop at this trace time (jobs left unfinished)
    intra_host_gbps: Optional[float] = None  # None: same-host transfers are free
    isolated: bool = True                    # simulate every job alone for slowdown_vs_isolated
    measured_view: bool = True               # False: policies always see declared profiles
    estimate_profiles: bool = False          # estimates replace declared bytes/compute too (controller's option)
    progress: bool = False                   # progress lines on stderr
    iterations_override: Optional[int] = None
    warmup_iterations: int = 1               # left out of the means, as the emulator does
    poll_s: Optional[float] = None           # counter polling for the policy's view; None: epoch / 50
    compute_jitter: Optional[float] = None   # per-iteration compute jitter; None: the scenario's (simulation.compute_jitter)
    phase_control: Optional[object] = None   # True/False, or "observe" (measure, never correct); None: the scenario's


@dataclass
class SimResult:
    scenario: object                         # workloads.scenario.Scenario as run
    policy: str
    iterations: List[tuple]                  # (job, worker, iteration, start_s, compute_s, comm_s, end_s)
    summary: List[dict]
    link_bins: List[dict]                    # per-link utilisation per time bin
    decisions: List[dict]                    # one row per (epoch, job)
    epochs: List[dict]                       # one row per epoch: epoch, time_s, decision_ms, status
    stats: dict
    phase: List[dict] = field(default_factory=list)   # phase control: one row per epoch and held job

    def summary_by_job(self) -> Dict[str, dict]:
        return {r["job"]: r for r in self.summary}

    def iteration_times(self, job: str) -> List[float]:
        return [r[6] - r[3] for r in self.iterations if r[0] == job]


# ---------------------------------------------------------------------------
# Job templates: collectives -> entity templates (host pairs with multiplicities)
# ---------------------------------------------------------------------------

@dataclass
class _EntityTemplate:
    pairs: List[Tuple[Tuple[str, str], int]]     # network host pairs and how many flows each
    intra: List[Tuple[str, int]]                 # same-host flows per host
    bytes: float                                 # per flow


@dataclass
class _Step:
    compute_s: float
    coll: Optional[List[_EntityTemplate]]        # None: no collective in this step
    overlap: float = 0.0


def _collective_templates(c: Collective, rj: ResolvedJob) -> List[_EntityTemplate]:
    n = len(rj.workers)
    hosts = [w.host for w in rj.workers]
    flows = collective_flows(c, n)
    if not flows:
        return []
    out: List[_EntityTemplate] = []
    if c.op in COUPLED_OPS:
        group_of = {}
        for gi, grp in enumerate(groups_of(c.group, n)):
            for r in grp:
                group_of[r] = gi
        by_group: Dict[int, List] = {}
        for f in flows:
            by_group.setdefault(group_of[f.src], []).append(f)
        for gi in sorted(by_group):
            fl = by_group[gi]
            pairs: Dict[Tuple[str, str], int] = {}
            intra: Dict[str, int] = {}
            for f in fl:
                a, b = hosts[f.src], hosts[f.dst]
                if a == b:
                    intra[a] = intra.get(a, 0) + 1
                else:
                    pairs[(a, b)] = pairs.get((a, b), 0) + 1
            # every edge of one ring carries the same bytes
            out.append(_EntityTemplate(sorted(pairs.items()), sorted(intra.items()), fl[0].bytes))
    else:
        # independent flows; merge those with the same host pair and size
        merged: Dict[Tuple[str, str, float], int] = {}
        for f in flows:
            key = (hosts[f.src], hosts[f.dst], f.bytes)
            merged[key] = merged.get(key, 0) + 1
        for (a, b, by), cnt in sorted(merged.items()):
            if a == b:
                out.append(_EntityTemplate([], [(a, cnt)], by))
            else:
                out.append(_EntityTemplate([((a, b), cnt)], [], by))
    return out


def compile_steps(rj: ResolvedJob) -> List[_Step]:
    steps: List[_Step] = []
    pending_compute: Optional[float] = None
    for p in rj.profile.phases:
        if isinstance(p, Compute):
            if pending_compute is not None:
                steps.append(_Step(pending_compute, None))
            pending_compute = p.seconds
        else:
            tpl = _collective_templates(p, rj)
            if pending_compute is not None:
                steps.append(_Step(pending_compute, tpl, p.overlap))
                pending_compute = None
            else:
                steps.append(_Step(0.0, tpl, 0.0))
    if pending_compute is not None:
        steps.append(_Step(pending_compute, None))
    return steps


# ---------------------------------------------------------------------------
# Runtime objects
# ---------------------------------------------------------------------------

class _Coll:
    __slots__ = ("job", "start", "left")

    def __init__(self, job, start, left):
        self.job = job
        self.start = start
        self.left = left


class _Job:
    def __init__(self, idx: int, rj: ResolvedJob, iterations: int, cluster: Cluster):
        self.idx = idx
        self.rj = rj
        self.name = rj.name
        self.steps = compile_steps(rj)
        self.iterations = iterations
        self.arrival = float(rj.spec.arrival_s)
        self.compute_per_iter = sum(s.compute_s for s in self.steps)
        self.cf = 1.0                        # this iteration's compute-time factor (jitter)
        self.it = 0
        self.step = 0
        self.waiting = 0
        self.iter_start = 0.0
        self.iter_comm = 0.0
        self.arrived = False
        self.done = False
        self.finish = None
        self.records: List[tuple] = []
        self.decision = None
        self.cls = 0
        self.pending_shift = 0.0
        self.last_shift = 0.0
        self.shift_total = 0.0
        self.colls: List[_Coll] = []
        self.slots: set = set()
        # measurement over the current epoch
        self.m_pairs: Dict[Tuple[str, str], float] = {}
        self.route_sig = None
        self.sig_version = -1


class _Entity:
    __slots__ = ("job", "coll", "tpl", "slot", "sent_mark")

    def __init__(self, job, coll, tpl, slot):
        self.job = job
        self.coll = coll
        self.tpl = tpl
        self.slot = slot
        self.sent_mark = 0.0


# ---------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------

class Engine:
    def __init__(self, cluster: Cluster, jobs: Sequence[ResolvedJob], policy=None,
                 config: Optional[SimConfig] = None, scenario=None, policy_name: str = "none",
                 epoch_s: float = 1.0, faults: Sequence[dict] = ()):
        self.cluster = cluster
        self.cfg = config or SimConfig()
        self.policy = policy
        self.policy_name = policy_name
        self.scenario = scenario
        self.epoch_s = float(epoch_s)
        self.bin_s = float(self.cfg.bin_s or self.epoch_s)
        it_over = self.cfg.iterations_override
        self.jobs = [_Job(i, rj, it_over or rj.spec.iterations, cluster) for i, rj in enumerate(jobs)]
        self.job_by_name = {j.name: j for j in self.jobs}
        self.L = len(cluster.links)
        self.host_index = {h: i for i, h in enumerate(cluster.hosts)}
        base = np.array([l.gbps * GBPS_TO_BYTES for l in cluster.links], dtype=float)
        self.base_cap = base
        self.link_up = np.ones(self.L, dtype=bool)
        nv = (self.cfg.intra_host_gbps or 0.0) * GBPS_TO_BYTES
        self.nv_base = self.L
        self.cap_base_len = self.L + len(cluster.hosts)
        self.capacity = np.concatenate([base, np.full(len(cluster.hosts), nv)])
        self.cap_index: Dict[Tuple[int, int], int] = {}
        self.cap_by_job: Dict[int, tuple] = {}       # job -> ((link, cap constraint), ...)
        self.route_version = 0                        # bumped when decisions / link states change
        self._inc_cache: Dict[int, tuple] = {}        # id(template) -> (route signature, cols, vals)
        self._path_cache: Dict[Tuple[str, str, int], List[int]] = {}
        # entity pool
        n0 = 256
        self.rem = np.zeros(n0)
        self.total = np.zeros(n0)
        self.rate = np.zeros(n0)
        self.alive = np.zeros(n0, dtype=bool)
        self.ent: List[Optional[_Entity]] = [None] * n0
        self.ent_cols: List[Optional[np.ndarray]] = [None] * n0
        self.ent_vals: List[Optional[np.ndarray]] = [None] * n0
        self.free_slots = list(range(n0 - 1, -1, -1))
        self.dirty = True
        # changes since the last allocation, for the incremental update (waterfill_update)
        self.full_recompute = True               # capacities, routes or classes changed
        self.added_slots: set = set()
        self.removed_changes: List[Tuple[float, int]] = []
        self.incremental_updates = 0
        self._asm = None                         # (slots, rows, cols, vals) of the last allocation
        self.load = np.zeros(self.L)
        # time, events
        self.now = 0.0
        self.heap: list = []
        self.seq = 0
        self.events = 0
        self.rate_updates = 0
        # outputs
        self.bins: Dict[int, np.ndarray] = {}
        self.epoch_rows: List[dict] = []
        self.decision_rows: List[dict] = []
        self.timeouts = 0
        self.policy_disabled = False
        self.epoch_no = 0
        self.last_epoch_t = 0.0
        self.faults = list(faults)
        self.jobs_done = 0
        # counters polled for the policy's view (see simulation.view)
        from .view import POLLS_PER_EPOCH
        self.polls_per_epoch = POLLS_PER_EPOCH
        if self.cfg.poll_s:
            self.polls_per_epoch = max(1, int(round(self.epoch_s / self.cfg.poll_s)))
        self.poll_s = self.epoch_s / self.polls_per_epoch
        self.polling = policy is not None and self.cfg.measured_view
        self.driver = None
        self.controller_down_until = -1.0
        self.decision_total_s = 0.0
        self.job_rate = np.zeros(len(self.jobs))
        self.job_cum = np.zeros(len(self.jobs))
        self.job_cum_mark = np.zeros(len(self.jobs))
        self.poll_rows: List[np.ndarray] = []
        self.nflows = np.zeros(n0)
        self.slot_job = np.zeros(n0, dtype=np.int64)
        self.slot_len = np.zeros(n0, dtype=np.int64)
        self.job_cls = np.zeros(len(self.jobs), dtype=np.int64)
        self._setup_phasing()

    def _setup_phasing(self):
        """Compute-time noise and phase control (simulation.phasing), from the scenario's
        settings unless the config overrides them."""
        from .phasing import ComputeNoise, SimPhaseControl
        from scheduling.phase import PhaseConfig
        sc = self.scenario
        sigma = self.cfg.compute_jitter
        if sigma is None:
            sigma = sc.simulation.compute_jitter if sc is not None else 0.0
        self.noise = ComputeNoise(sigma, sc.seed if sc is not None else 0)
        on = self.cfg.phase_control
        pc = sc.phase_control if sc is not None else None
        hold = pc.hold if pc is not None else True
        if on is None:
            on = pc.enabled if pc is not None else False
        elif on == "observe":
            on, hold = True, False
        self.phase = None
        if on and self.policy is not None:
            kw = {"gain": pc.gain, "tolerance": pc.tolerance} if pc is not None else {}
            self.phase = SimPhaseControl(self, PhaseConfig(hold=hold, **kw))

    # -- event queue --------------------------------------------------------
    def push(self, t: float, kind: int, arg=None):
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, arg))

    # -- paths / incidence --------------------------------------------------
    def _spine_for(self, job: _Job, a: str, b: str) -> int:
        d = job.decision
        s = None
        if d is not None:
            s = d.spine_for(a, b)
        nsp = self.cluster.spec.spines
        if s is None or not (0 <= int(s) < nsp):
            s = default_spine(a, b, nsp)
        s = int(s)
        if not self.link_up.all():
            # a failed link: fall back to the next spine whose links are up (ECMP reconvergence)
            for k in range(nsp):
                cand = (s + k) % nsp
                if all(self.link_up[i] for i in self._path(a, b, cand)):
                    return cand
        return s

    def _path(self, a: str, b: str, spine: int) -> List[int]:
        key = (a, b, spine)
        p = self._path_cache.get(key)
        if p is None:
            p = self.cluster.path(a, b, spine)
            self._path_cache[key] = p
        return p

    def _route_sig(self, job: _Job) -> tuple:
        """Everything a job's incidence depends on besides its templates (cached per job and
        route version)."""
        if job.sig_version != self.route_version:
            d = job.decision
            job.route_sig = (None if d is None else d.spine,
                             tuple(sorted(d.flow_spines.items())) if d is not None and d.flow_spines else (),
                             self.cap_by_job.get(job.idx, ()), self.link_up.tobytes())
            job.sig_version = self.route_version
        return job.route_sig

    def _incidence(self, job: _Job, tpl: _EntityTemplate) -> Tuple[np.ndarray, np.ndarray]:
        sig = self._route_sig(job)
        hit = self._inc_cache.get(id(tpl))
        if hit is not None and hit[0] == sig:
            return hit[1], hit[2]
        cols, vals = self._incidence_uncached(job, tpl)
        self._inc_cache[id(tpl)] = (sig, cols, vals)
        return cols, vals

    def _incidence_uncached(self, job: _Job, tpl: _EntityTemplate) -> Tuple[np.ndarray, np.ndarray]:
        acc: Dict[int, float] = {}
        cross = self.cluster.spec.racks > 1
        for (a, b), cnt in tpl.pairs:
            sp = self._spine_for(job, a, b) if cross and self.cluster.host_rack[a] != self.cluster.host_rack[b] else 0
            for li in self._path(a, b, sp):
                acc[li] = acc.get(li, 0.0) + cnt
        if self.cfg.intra_host_gbps:
            for h, cnt in tpl.intra:
                k = self.nv_base + self.host_index[h]
                acc[k] = acc.get(k, 0.0) + cnt
        if self.cap_index:
            for li, cnt in list(acc.items()):
                ci = self.cap_index.get((job.idx, li))
                if ci is not None:
                    acc[ci] = acc.get(ci, 0.0) + cnt
        if not acc:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        keys = sorted(acc)
        return np.array(keys, dtype=np.int64), np.array([acc[k] for k in keys], dtype=float)

    # -- entity pool --------------------------------------------------------
    def _grow(self):
        n = len(self.rem)
        m = n * 2
        for name in ("rem", "total", "rate", "nflows", "slot_job", "slot_len"):
            arr = getattr(self, name)
            new = np.zeros(m, dtype=arr.dtype)
            new[:n] = arr
            setattr(self, name, new)
        al = np.zeros(m, dtype=bool)
        al[:n] = self.alive
        self.alive = al
        self.ent += [None] * n
        self.ent_cols += [None] * n
        self.ent_vals += [None] * n
        self.free_slots = list(range(m - 1, n - 1, -1)) + self.free_slots

    def _add_entity(self, job: _Job, coll: _Coll, tpl: _EntityTemplate) -> bool:
        cols, vals = self._incidence(job, tpl)
        if len(cols) == 0:
            return False          # nothing on the network: takes no time
        if not self.free_slots:
            self._grow()
        s = self.free_slots.pop()
        e = _Entity(job, coll, tpl, s)
        self.ent[s] = e
        self.ent_cols[s] = cols
        self.ent_vals[s] = vals
        self.rem[s] = tpl.bytes
        self.total[s] = tpl.bytes
        self.rate[s] = 0.0
        self.nflows[s] = sum(c for _, c in tpl.pairs)
        self.slot_job[s] = job.idx
        self.slot_len[s] = len(cols)
        self.alive[s] = True
        job.slots.add(s)
        self.added_slots.add(s)
        self.dirty = True
        return True

    def _flush_progress(self, e: _Entity):
        s = e.slot
        sent = self.total[s] - self.rem[s]
        d = sent - e.sent_mark
        if d > 0:
            mp = e.job.m_pairs
            for pair, cnt in e.tpl.pairs:
                mp[pair] = mp.get(pair, 0.0) + d * cnt
        e.sent_mark = sent

    def _remove_entity(self, s: int):
        e = self.ent[s]
        if s in self.added_slots:
            self.added_slots.discard(s)      # never had a rate: nothing to undo
        else:
            self.removed_changes.append((float(self.rate[s]), int(self.job_cls[e.job.idx])))
        self.rem[s] = 0.0
        self._flush_progress(e)
        self.alive[s] = False
        self.rate[s] = 0.0
        self.ent[s] = None
        self.ent_cols[s] = None
        self.ent_vals[s] = None
        self.free_slots.append(s)
        e.job.slots.discard(s)
        self.dirty = True
        return e

    # -- rates -------------------------------------------------------------
    def _recompute(self):
        self.rate_updates += 1
        full = self.full_recompute
        added, removed = self.added_slots, self.removed_changes
        self.full_recompute = False
        self.added_slots = set()
        self.removed_changes = []
        ec, ev = self.ent_cols, self.ent_vals
        asm = self._asm
        if full or asm is None:
            # entities in slot order, incidence rebuilt from the per-entity arrays
            full = True
            idx = np.flatnonzero(self.alive)
            n_new = 0
            if len(idx):
                il = idx.tolist()
                rows = np.repeat(np.arange(len(idx)), self.slot_len[idx])
                cols = np.concatenate([ec[s] for s in il])
                vals = np.concatenate([ev[s] for s in il])
        else:
            # the previous incidence minus the entities gone, plus the new ones at the end
            # (a slot freed and reused since then counts as gone and new)
            p_idx, p_rows, p_cols, p_vals = asm
            keep = self.alive[p_idx]
            new_sl = sorted(added)
            n_new = len(new_sl)
            if n_new:
                ns = np.array(new_sl, dtype=np.int64)
                stale = np.isin(p_idx, ns)
                keep &= ~stale
            pos = np.cumsum(keep) - 1
            kn = keep[p_rows]
            n_keep = int(pos[-1]) + 1 if len(pos) else 0
            idx = p_idx[keep]
            rows, cols, vals = pos[p_rows[kn]], p_cols[kn], p_vals[kn]
            if n_new:
                idx = np.concatenate([idx, ns])
                rows = np.concatenate([rows, np.repeat(np.arange(n_keep, n_keep + n_new),
                                                       self.slot_len[ns])])
                cols = np.concatenate([cols] + [ec[s] for s in new_sl])
                vals = np.concatenate([vals] + [ev[s] for s in new_sl])
        self.active_idx = idx
        if len(idx) == 0:
            self._asm = None
            self.load = np.zeros(self.L)
            self.job_rate = np.zeros(len(self.jobs))
            self.dirty = False
            return
        self._asm = (idx, rows, cols, vals)
        jix = self.slot_job[idx]
        classes = self.job_cls[jix]
        if full:
            r = waterfill(len(idx), classes, rows, cols, vals, self.capacity)
        else:
            # only entities added / removed since the last allocation: reuse it where max-min
            # fairness says it cannot have changed (exact, see waterfill_update)
            is_new = np.zeros(len(idx), dtype=bool)
            if n_new:
                is_new[len(idx) - n_new:] = True
            r = waterfill_update(len(idx), classes, rows, cols, vals, self.capacity,
                                 self.rate[idx], is_new, removed)
            self.incremental_updates += 1
        r[~np.isfinite(r)] = 0.0
        self.rate[idx] = r
        real = cols < self.L
        self.load = np.bincount(cols[real], weights=r[rows[real]] * vals[real], minlength=self.L)
        if self.polling:
            self.job_rate = np.bincount(jix, weights=r * self.nflows[idx], minlength=len(self.jobs))
        self.dirty = False

    def _next_completion(self) -> Tuple[float, int]:
        idx = self.active_idx
        if len(idx) == 0:
            return math.inf, -1
        r = self.rate[idx]
        pos = r > 0
        if not pos.any():
            return math.inf, -1
        t = np.full(len(idx), math.inf)
        t[pos] = self.rem[idx][pos] / r[pos]
        k = int(np.argmin(t))
        return self.now + float(t[k]), int(idx[k])

    def _advance(self, t: float):
        dt = t - self.now
        if dt <= 0:
            return
        idx = self.active_idx
        if len(idx):
            self.rem[idx] -= self.rate[idx] * dt
            if self.polling:
                self.job_cum += self.job_rate * dt
        if self.load.any():
            b0 = int(self.now // self.bin_s)
            t0 = self.now
            while True:
                bend = (b0 + 1) * self.bin_s
                seg = min(t, bend) - t0
                if seg > 0:
                    acc = self.bins.get(b0)
                    if acc is None:
                        acc = self.bins[b0] = np.zeros(self.L)
                    acc += self.load * seg
                if t <= bend:
                    break
                t0 = bend
                b0 += 1
        self.now = t

    # -- job state machine ---------------------------------------------------
    def _start_iteration(self, job: _Job):
        job.iter_start = self.now
        job.cf = self.noise.factor(job.idx)
        if self.phase is not None:
            self.phase.iteration_started(job)
        job.iter_comm = 0.0
        job.step = 0
        self._start_step(job)

    def _start_step(self, job: _Job):
        while True:
            if job.step >= len(job.steps):
                self._end_iteration(job)
                return
            st = job.steps[job.step]
            job.waiting = 0
            if st.compute_s > 0:
                job.waiting += 1
                self.push(self.now + st.compute_s * job.cf, _COMPUTE_END, job.idx)
            if st.coll is not None:
                delay = (1.0 - st.overlap) * st.compute_s * job.cf
                if delay > 0:
                    job.waiting += 1
                    self.push(self.now + delay, _COLL_START, job.idx)
                elif self._launch(job):
                    job.waiting += 1
            if job.waiting > 0:
                return
            job.step += 1

    def _step_part_done(self, job: _Job):
        job.waiting -= 1
        if job.waiting == 0:
            job.step += 1
            self._start_step(job)

    def _launch(self, job: _Job) -> bool:
        """Start the current step's collective; False if it has nothing on the network
        (then it is already over)."""
        st = job.steps[job.step]
        coll = _Coll(job, self.now, 0)
        for tpl in st.coll:
            if self._add_entity(job, coll, tpl):
                coll.left += 1
        if coll.left == 0:
            return False
        job.colls.append(coll)
        return True

    def _collective_done(self, coll: _Coll):
        job = coll.job
        job.colls.remove(coll)
        job.iter_comm += self.now - coll.start
        self._step_part_done(job)

    def _end_iteration(self, job: _Job):
        job.records.append((job.name, "all", job.it, job.iter_start, job.compute_per_iter * job.cf,
                            job.iter_comm, self.now))
        job.it += 1
        if job.it >= job.iterations:
            job.done = True
            job.finish = self.now
            self.jobs_done += 1
            return
        if job.pending_shift > 0:
            sh = job.pending_shift
            job.pending_shift = 0.0
            job.shift_total += sh
            self.push(self.now + sh, _ITER_START, job.idx)
            return
        self._start_iteration(job)

    # -- policy --------------------------------------------------------------
    def _poll(self):
        self.poll_rows.append(self.job_cum - self.job_cum_mark)
        self.job_cum_mark = self.job_cum.copy()
        if self.phase is not None and not self.policy_disabled and self.now >= self.controller_down_until:
            self.phase.tick(self.epoch_no)

    def _epoch(self):
        from .view import DecisionTimeout, measured_series
        t = self.now
        for s in np.flatnonzero(self.alive):
            self._flush_progress(self.ent[s])
        if self.polling and self.epoch_no > 0:
            self._poll()
        active = [j for j in self.jobs if j.arrived and not j.done]
        status = "ok"
        ms = 0.0
        decisions = None
        if t < self.controller_down_until:
            status = "controller down"
        elif self.policy is not None and not self.policy_disabled and active:
            if self.driver is None:
                from .view import make_driver
                self.driver = make_driver(self)
            measured = measured_series(self, active)
            t0 = time.perf_counter()
            try:
                decisions, rec = self.driver.step(t, {j.name for j in active}, measured, self.poll_s)
                ms = rec.decision_ms
            except DecisionTimeout:
                self.driver.epoch += 1
                ms = (time.perf_counter() - t0) * 1e3
                decisions = None
                status = "timeout"
            lim = self.cfg.decision_timeout_s
            if lim is not None and ms > lim * 1e3 and status == "ok":
                status = "timeout"       # finished, but too late: dropped all the same
                decisions = None
            if status == "timeout":
                self.timeouts += 1
                if self.timeouts >= self.cfg.max_timeouts:
                    self.policy_disabled = True
                    status = "timeout; policy no longer called"
            self.decision_total_s += ms / 1e3
            budget = self.cfg.decision_budget_s
            if budget is not None and self.decision_total_s > budget and not self.policy_disabled:
                self.policy_disabled = True
                status += "; decision budget spent, policy no longer called"
        elif self.policy_disabled:
            status = "disabled"
        elif self.policy is None:
            status = "no policy"
        # reset measurements
        for j in self.jobs:
            j.m_pairs = {}
        self.poll_rows = []
        self.job_cum_mark = self.job_cum.copy()
        self.epoch_rows.append({"epoch": self.epoch_no, "time_s": t, "decision_ms": ms,
                                "jobs": len(active), "status": status})
        if decisions is not None:
            self._apply(decisions, active)
        if self.phase is not None and not self.policy_disabled and t >= self.controller_down_until:
            self.phase.tick(self.epoch_no)
        self.epoch_no += 1
        if self.jobs_done < len(self.jobs):
            if self.polling:
                for k in range(1, self.polls_per_epoch):
                    self.push(t + k * self.poll_s, _POLL)
            self.push(t + self.epoch_s, _EPOCH)

    def _apply(self, decisions, active):
        """Enforce this epoch's decisions.  A job the policy left out keeps its previous
        decision (class, caps, paths), as the switches keep their rules."""
        old_cls = self.job_cls.copy()
        old_cap = self.capacity
        for j in self.jobs:
            d = decisions.get(j.name) if j.arrived and not j.done else None
            if d is None:
                continue
            j.decision = d
            j.cls = clamp_class(d.priority, self.cfg.num_classes)
            self.job_cls[j.idx] = j.cls
            # a shift is applied once per new value (as the controller does)
            sh = float(d.shift_s or 0.0)
            if abs(sh - j.last_shift) > 1e-9:
                j.last_shift = sh
                if sh > 0:
                    j.pending_shift = sh
                    if self.phase is not None:
                        self.phase.shift_ordered(j)
            self.decision_rows.append({
                "epoch": self.epoch_no, "time_s": self.now, "job": j.name,
                "priority": j.cls, "spine": "" if d.spine is None else d.spine,
                "flow_spines": json.dumps(d.flow_spines, sort_keys=True) if d.flow_spines else "",
                "rate_caps_gbps": json.dumps(d.rate_caps_gbps, sort_keys=True) if d.rate_caps_gbps else "",
                "shift_s": d.shift_s or 0.0, "reason": d.reason or ""})
        caps: List[float] = []
        self.cap_index = {}
        cap_by_job: Dict[int, list] = {}
        for j in self.jobs:
            d = j.decision
            if d is None or j.done or not d.rate_caps_gbps:
                continue
            for lid, g in sorted(d.rate_caps_gbps.items()):
                li = self.cluster.link_index.get(lid)
                if li is None or g is None:
                    continue
                self.cap_index[(j.idx, li)] = self.cap_base_len + len(caps)
                cap_by_job.setdefault(j.idx, []).append((li, self.cap_base_len + len(caps)))
                caps.append(max(float(g), 1e-6) * GBPS_TO_BYTES)
        self.cap_by_job = {k: tuple(v) for k, v in cap_by_job.items()}
        self.capacity = np.concatenate([self.capacity[:self.cap_base_len], np.array(caps, dtype=float)])
        self.route_version += 1
        # the same classes, capacities and routes as before (e.g. a policy that keeps its
        # decisions): the allocation stands, and the next update may stay incremental
        same = (np.array_equal(old_cls, self.job_cls) and len(old_cap) == len(self.capacity)
                and np.array_equal(old_cap, self.capacity))
        self._reroute_all(keep_if_same=same)

    def _reroute_all(self, keep_if_same: bool = False):
        changed = not keep_if_same
        for s in np.flatnonzero(self.alive):
            e = self.ent[s]
            c, v = self._incidence(e.job, e.tpl)
            oc, ov = self.ent_cols[s], self.ent_vals[s]
            if not changed and not (c is oc and v is ov) and not (
                    np.array_equal(c, oc) and np.array_equal(v, ov)):
                changed = True
            self.ent_cols[s], self.ent_vals[s] = c, v
            self.slot_len[s] = len(c)
        if changed:
            self.dirty = True
            self.full_recompute = True

    # -- faults ----------------------------------------------------------------
    def _fault(self, ev):
        """Scenario events (``workloads.scenario.Event``), as the emulator fires them:
        link-down/up takes a ToR-spine link ("tor0-sp1", both directions) down or up; flows
        move to the next spine whose path is up (ECMP reconvergence).  controller-restart:
        the controller is gone for ``down_s`` emulated seconds (no epochs) and comes back
        without its decisions (default class, ECMP paths) until its next epoch."""
        kind = ev.kind
        if kind in ("link-down", "link-up"):
            tor, sp = ev.link.split("-")
            up = kind == "link-up"
            for lid in (f"{tor}>{sp}", f"{sp}>{tor}"):
                li = self.cluster.link_index.get(lid)
                if li is None:
                    continue
                self.link_up[li] = up
                self.capacity[li] = self.base_cap[li] if up else 0.0
            self.route_version += 1
            self._reroute_all()
        elif kind == "controller-restart":
            em = self.scenario.emulation if self.scenario is not None else None
            ts = float(em.time_scale) if em is not None else 1.0
            self.controller_down_until = self.now + float(ev.down_s) / ts
            self.driver = None
            for j in self.jobs:
                j.decision = None
                j.cls = clamp_class(self.cfg.default_class, self.cfg.num_classes)
                self.job_cls[j.idx] = j.cls
                j.last_shift = 0.0
            self.cap_index = {}
            self.cap_by_job = {}
            self.capacity = self.capacity[:self.cap_base_len].copy()
            self.route_version += 1
            self._reroute_all()

    # -- main loop -------------------------------------------------------------
    def run(self) -> None:
        for j in self.jobs:
            j.cls = clamp_class(self.cfg.default_class, self.cfg.num_classes)
            self.job_cls[j.idx] = j.cls
            self.push(j.arrival, _ARRIVE, j.idx)
        for ev in self.faults:
            self.push(float(ev.at_s), _FAULT, ev)
        if self.policy is not None:
            self.push(0.0, _EPOCH)
        self.active_idx = np.zeros(0, dtype=np.int64)
        wall0 = time.perf_counter()
        last_report = wall0
        max_t = self.cfg.max_time_s
        eps = 1e-12
        while True:
            if self.dirty:
                self._recompute()
            t_heap = self.heap[0][0] if self.heap else math.inf
            t_fluid, fslot = self._next_completion()
            t_next = min(t_heap, t_fluid)
            if t_next == math.inf:
                if self.jobs_done < len(self.jobs):
                    raise RuntimeError(f"simulation stalled at t={self.now:.6f} s with "
                                       f"{len(self.jobs) - self.jobs_done} jobs unfinished")
                break
            if max_t is not None and t_next > max_t:
                self._advance(max_t)
                break
            self._advance(t_next)
            # flow groups that finished
            if t_fluid <= t_next:
                idx = self.active_idx
                tol = 1e-9 * self.total[idx] + 1e-6
                fin = idx[self.rem[idx] <= tol]
                if fslot >= 0 and fslot not in set(fin.tolist()):
                    fin = np.append(fin, fslot)
                colls_done = []
                for s in sorted(fin.tolist()):
                    e = self._remove_entity(s)
                    self.events += 1
                    e.coll.left -= 1
                    if e.coll.left == 0:
                        colls_done.append(e.coll)
                for c in colls_done:
                    self._collective_done(c)
            while self.heap and self.heap[0][0] <= self.now + eps:
                _, _, kind, arg = heapq.heappop(self.heap)
                if kind != _POLL:
                    self.events += 1
                if kind == _COMPUTE_END:
                    self._step_part_done(self.jobs[arg])
                elif kind == _COLL_START:
                    j = self.jobs[arg]
                    if not self._launch(j):
                        self._step_part_done(j)
                elif kind == _ARRIVE:
                    j = self.jobs[arg]
                    j.arrived = True
                    self._start_iteration(j)
                elif kind == _ITER_START:
                    self._start_iteration(self.jobs[arg])
                elif kind == _EPOCH:
                    if self.jobs_done < len(self.jobs):
                        self._epoch()
                elif kind == _POLL:
                    self._poll()
                elif kind == _FAULT:
                    self._fault(arg)
            if self.jobs_done >= len(self.jobs):
                break
            if self.cfg.progress:
                w = time.perf_counter()
                if w - last_report > 2.0:
                    last_report = w
                    print(f"[sim {self.policy_name}] t={self.now:.2f}s  events={self.events}  "
                          f"jobs done {self.jobs_done}/{len(self.jobs)}  wall {w - wall0:.1f}s",
                          file=sys.stderr, flush=True)
        self.wall_s = time.perf_counter() - wall0


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------

def scenario_epoch_s(rs: ResolvedScenario, cfg: SimConfig) -> float:
    if cfg.epoch_s is not None:
        return float(cfg.epoch_s)
    em = rs.scenario.emulation
    return float(em.epoch_s) / float(em.time_scale)


def isolated_times(cluster: Cluster, jobs: Sequence[ResolvedJob], cfg: SimConfig) -> Dict[str, float]:
    """Iteration time of every job alone on the cluster (default ECMP routes, no policy),
    simulated with the same engine: the steady-state (second) iteration."""
    out: Dict[str, float] = {}
    cache: Dict = {}
    for rj in jobs:
        key = (rj.profile.model_dump_json(), tuple(rj.hosts))
        if key not in cache:
            iso_cfg = SimConfig(intra_host_gbps=cfg.intra_host_gbps, isolated=False,
                                iterations_override=min(2, rj.spec.iterations))
            spec = rj.spec.model_copy(update={"arrival_s": 0.0})
            eng = Engine(cluster, [ResolvedJob(spec, rj.profile, rj.workers)], None, iso_cfg)
            eng.run()
            rec = eng.jobs[0].records[-1]
            cache[key] = rec[6] - rec[3]
        out[rj.name] = cache[key]
    return out


def simulate(rs: ResolvedScenario, policy=None, config: Optional[SimConfig] = None,
             policy_name: Optional[str] = None) -> SimResult:
    """Simulate a resolved scenario under ``policy`` (a ``scheduling.base.Policy``
    instance, or None for the network's own max-min sharing with no controller)."""
    cfg = config or SimConfig()
    name = policy_name or (getattr(policy, "name", None) if policy is not None else "none") or "?"
    epoch = scenario_epoch_s(rs, cfg)
    eng = Engine(rs.cluster, rs.jobs, policy, cfg, scenario=rs.scenario, policy_name=name,
                 epoch_s=epoch, faults=rs.scenario.events)
    eng.run()
    iso = isolated_times(rs.cluster, rs.jobs, cfg) if cfg.isolated else {}
    iters: List[tuple] = []
    summary: List[dict] = []
    wu = max(0, cfg.warmup_iterations)
    phase_by_job = eng.phase.summary() if eng.phase is not None else {}
    for j in eng.jobs:
        a = j.arrival
        # times relative to the job's arrival, as the emulator's workers log them
        iters.extend((r[0], r[1], r[2], r[3] - a, r[4], r[5], r[6] - a) for r in j.records)
        recs = j.records[wu:] if len(j.records) > wu else j.records
        its = np.array([r[6] - r[3] for r in recs]) if recs else np.zeros(0)
        comm = np.array([r[5] for r in recs]) if recs else np.zeros(0)
        mean_it = float(its.mean()) if len(its) else math.nan
        summary.append({
            "job": j.name, "policy": name, "iterations": len(j.records),
            "mean_iter_s": mean_it,
            "p99_iter_s": float(np.percentile(its, 99)) if len(its) else math.nan,
            "mean_comm_s": float(comm.mean()) if len(comm) else math.nan,
            "jct_s": (j.finish - j.arrival) if j.finish is not None else math.nan,
            "slowdown_vs_isolated": (mean_it / iso[j.name]) if j.name in iso and iso[j.name] > 0
            else math.nan,
        })
        ps = phase_by_job.get(j.name, {})
        pe = ps.get("phase_error")
        summary[-1]["phase_error"] = math.nan if pe is None else pe
        summary[-1]["corrections"] = ps.get("corrections", 0)
    link_bins = []
    links = rs.cluster.links
    for b in sorted(eng.bins):
        acc = eng.bins[b]
        t0 = b * eng.bin_s
        t1 = min((b + 1) * eng.bin_s, eng.now) if b == max(eng.bins) else (b + 1) * eng.bin_s
        width = max(t1 - t0, 1e-12)
        for li in np.flatnonzero(acc):
            l = links[li]
            gbps = acc[li] / width / GBPS_TO_BYTES
            link_bins.append({"bin": b, "start_s": t0, "end_s": t1, "link": l.id, "kind": l.kind,
                              "capacity_gbps": l.gbps, "mean_gbps": gbps,
                              "utilisation": gbps / l.gbps})
    stats = {"events": eng.events, "rate_updates": eng.rate_updates,
             "incremental_updates": eng.incremental_updates,
             "wall_s": eng.wall_s, "sim_time_s": eng.now, "epochs": eng.epoch_no,
             "timeouts": eng.timeouts, "decision_total_s": eng.decision_total_s,
             "policy_disabled": eng.policy_disabled, "jobs": len(eng.jobs), "gpus": rs.cluster.num_gpus,
             "jobs_finished": eng.jobs_done}
    if eng.phase is not None:
        stats["phase_control"] = True
        stats["correction_total_s"] = sum(eng.phase.ctl.total_delay_s.values())
    return SimResult(rs.scenario, name, iters, summary, link_bins, eng.decision_rows,
                     eng.epoch_rows, stats, eng.phase.rows if eng.phase is not None else [])
