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

The parts: this module (the event loop, the jobs' state machine, ``simulate``),
``simulation.config`` (SimConfig and constants), ``simulation.jobs`` (steps and runtime
objects), ``simulation.rates`` (flow and rate state), ``simulation.control`` (the policy's
epochs and faults) and ``simulation.results`` (SimResult; per-job figures by ``runs.summary``).
"""
from __future__ import annotations

import heapq
import math
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from scheduling.classes import clamp_class
from workloads.cluster import Cluster
from workloads.scenario import ResolvedJob, ResolvedScenario

from .config import (_ARRIVE, _COLL_START, _COMPUTE_END, _EPOCH, _FAULT, _ITER_START, _POLL,
                     GBPS_TO_BYTES, SimConfig)
from .control import PolicyControl
from .jobs import _Coll, _Entity, _Job, compile_steps  # noqa: F401
from .rates import FlowRates
from .results import SimResult, build_result

__all__ = ["Engine", "SimConfig", "SimResult", "compile_steps", "isolated_times",
           "scenario_epoch_s", "simulate"]


# ---------------------------------------------------------------------------
# The engine: the event loop and the jobs' state machine; flows and rates in
# simulation.rates, the policy and faults in simulation.control
# ---------------------------------------------------------------------------

class Engine(FlowRates, PolicyControl):
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
        it_over = sys.maxsize if self.cfg.until_s is not None else self.cfg.iterations_override
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
        self.rate_update_s = 0.0                 # their CPU time (thread time)
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
        # each lower class's share of a link while a higher one is backlogged (0: strict priority)
        self.class_guarantee = float(cluster.spec.class_guarantee or 0.0)
        self._mixed_last = False                 # the last allocation had several classes
        self._setup_phasing()

    def _setup_phasing(self):
        """Compute-time noise and phase control (simulation.phasing), from the scenario's
        settings unless the config overrides them."""
        from workloads.jitter import ComputeNoise

        from .phasing import SimPhaseControl
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
        max_t = min((t for t in (self.cfg.max_time_s, self.cfg.until_s) if t is not None),
                    default=None)
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
                fin = self._finished(fslot)
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
    return build_result(rs, name, eng, iso, cfg)
