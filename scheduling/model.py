"""The shared contention model bound to a cluster state: every policy scores its decisions
with it, the simulator and the controller use its predictions (``predict``, ``link_loads``).
The model itself (a fluid model of periodic synchronous jobs) is described in ``fluid.py``;
groups are evaluated by ``evaluate.py``, link bytes counted by ``links.py``, profiles
estimated from measurements by ``estimate.py``.

Pure Python + numpy (the event simulation runs compiled when numba is installed: ``kernel.py``);
no Mininet, no os-ken."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from .evaluate import Evaluator
from .fluid import BYTES_PER_GBIT, INF, STARVED_SLOWDOWN, SimJob
from .links import job_link_bytes, link_capacities


# the shared usage cache's entry numbering the traffic signatures (``traffic_ids``)
_TRAFFIC_IDS = ("traffic ids",)
_ISO_COMM = "iso comm"        # its entries of ``iso_comm`` (key: this, a traffic signature)


class ContentionModel:
    """The model bound to one ClusterState: link usage per job and path choice (cached),
    decisions -> SimJobs -> predicted iteration times.  Policies build one per decide()."""

    def __init__(self, state, evaluator: Optional[Evaluator] = None,
                 usage_cache: Optional[dict] = None):
        """``usage_cache``: link usage kept across the models of one cluster (a policy's
        epochs), keyed by a job's hosts and bytes per pair (exact) and the path choice."""
        self.state = state
        self._shared = usage_cache
        self._sig: Dict[str, tuple] = {}
        self._tid: Dict[str, int] = {}          # job -> ``traffic_id``
        self._tids: Optional[dict] = None       # ``traffic_ids``
        self.cluster = state.cluster
        self.cap = link_capacities(self.cluster)
        self.ev = evaluator or Evaluator(self.cap)
        self.jobs = list(state.jobs)
        self.index = {j.name: i for i, j in enumerate(self.jobs)}
        self._use: Dict[tuple, Tuple[Dict[int, float], float]] = {}
        self._iso_comm: Dict[str, float] = {}

    # -- usage ------------------------------------------------------------
    def usage(self, name: str, spine: Optional[int] = None,
              flow_spines: Optional[Mapping[str, int]] = None) -> Tuple[Dict[int, float], float]:
        key = (name, spine, tuple(sorted(flow_spines.items())) if flow_spines else ())
        u = self._use.get(key)
        if u is None:
            js = self.jobs[self.index[name]]
            if not js.spans_racks:      # the spine is irrelevant inside a rack
                spine, flow_spines = None, None
            path = key[1:] if js.spans_racks else (None, ())
            u = self._use.get((name,) + path)
            skey = (self.traffic_sig(name),) + path if self._shared is not None else None
            if u is None and skey is not None:
                u = self._shared.get(skey)
            if u is None:
                u = job_link_bytes(js, self.cluster, spine, flow_spines)
                if skey is not None:
                    self._shared[skey] = u
            self._use[key] = u
        return u

    def traffic_sig(self, name: str) -> tuple:
        """What a job's link usage depends on (exactly): its hosts and bytes per pair."""
        sig = self._sig.get(name)
        if sig is None:
            js = self.jobs[self.index[name]]
            sig = self._sig[name] = (tuple(js.hosts), tuple(sorted(js.pair_bytes.items())))
        return sig

    def traffic_ids(self) -> Optional[dict]:
        """The shared usage cache's numbering of traffic signatures (``traffic_id``), or None
        without a shared cache."""
        if self._tids is None and self._shared is not None:
            self._tids = self._shared.setdefault(_TRAFFIC_IDS, {})
        return self._tids

    def traffic_id(self, name: str) -> Optional[int]:
        """A job's traffic signature as its number in ``traffic_ids`` (the same number for the
        same signature as long as the shared cache lives), formed once per job; None without
        a shared cache."""
        i = self._tid.get(name)
        if i is None:
            ids = self.traffic_ids()
            if ids is None:
                return None
            i = self._tid[name] = ids.setdefault(self.traffic_sig(name), len(ids))
        return i

    def iso_comm(self, name: str) -> float:
        """A job's isolated communication time on its default paths (its most loaded link's
        bytes over its capacity), kept in the shared usage cache under its traffic
        signature: a function of that signature and the capacities only."""
        v = self._iso_comm.get(name)
        if v is None:
            skey = (_ISO_COMM, self.traffic_sig(name)) if self._shared is not None else None
            v = self._shared.get(skey) if skey is not None else None
            if v is None:
                use, _ = self.usage(name)
                v = max((b / self.cap[l] for l, b in use.items()), default=0.0)
                if skey is not None:
                    self._shared[skey] = v
            self._iso_comm[name] = v
        return v

    def iso_iter(self, name: str) -> float:
        js = self.jobs[self.index[name]]
        return js.iso_iter_s if js.iso_iter_s > 0 else js.compute_s + self.iso_comm(name)

    def sim_job(self, name: str, decision=None, links: Optional[set] = None,
                floor: bool = False) -> SimJob:
        """SimJob for ``name`` under ``decision``; ``links``: keep only these links (a rack's
        view); ``floor``: bound the job's progress by its global isolated pace (a rack's view
        of a job whose slowest link may lie elsewhere)."""
        js = self.jobs[self.index[name]]
        spine = decision.spine if decision is not None else None
        fs = decision.flow_spines if decision is not None else None
        use, bmax = self.usage(name, spine, fs)
        items = sorted(use.items())
        if links is not None:
            items = [(l, b) for l, b in items if l in links]
        lam_max = INF
        if decision is not None and decision.rate_caps_gbps:
            lidx = self.cluster.link_index
            for lid, g in decision.rate_caps_gbps.items():
                l = lidx.get(lid)
                if l is not None and l in use:
                    lam_max = min(lam_max, g * BYTES_PER_GBIT / (use[l] / bmax))
        if floor and bmax > 0:
            t = self.iso_comm(name)
            if t > 0:
                lam_max = min(lam_max, bmax / t)
        return SimJob(js.compute_s, tuple(l for l, _ in items), tuple(b for _, b in items), bmax,
                      decision.priority if decision is not None else 0, lam_max,
                      decision.shift_s if decision is not None else 0.0)

    # -- prediction -------------------------------------------------------
    def iteration_times(self, decisions: Optional[Mapping] = None,
                        names: Optional[Sequence[str]] = None) -> Dict[str, float]:
        decisions = decisions or {}
        names = list(names) if names is not None else [j.name for j in self.jobs]
        sims = [self.sim_job(n, decisions.get(n)) for n in names]
        return dict(zip(names, self.ev.times(sims)))

    def slowdowns(self, decisions: Optional[Mapping] = None,
                  names: Optional[Sequence[str]] = None) -> Dict[str, float]:
        it = self.iteration_times(decisions, names)
        return {n: _slowdown(t, self.iso_iter(n)) for n, t in it.items()}

    def mean_slowdown(self, decisions: Optional[Mapping] = None,
                      names: Optional[Sequence[str]] = None) -> float:
        sd = self.slowdowns(decisions, names)
        if not sd:
            return 1.0
        return sum(min(v, STARVED_SLOWDOWN) for v in sd.values()) / len(sd)


def _slowdown(t: float, iso: float) -> float:
    if iso <= 0:
        return 1.0
    return t / iso


@dataclass
class Prediction:
    iter_s: Dict[str, float]
    slowdown: Dict[str, float]

    @property
    def mean_slowdown(self) -> float:
        if not self.slowdown:
            return 1.0
        return sum(min(v, STARVED_SLOWDOWN) for v in self.slowdown.values()) / len(self.slowdown)


def predict(state, decisions: Optional[Mapping] = None) -> Prediction:
    """Predicted steady-state iteration time and slowdown (T / isolated T) of every job of
    ``state`` (a ClusterState) under ``decisions`` (job name -> Decision; missing: default)."""
    m = ContentionModel(state)
    it = m.iteration_times(decisions)
    return Prediction(it, {n: _slowdown(t, m.iso_iter(n)) for n, t in it.items()})


def link_loads(state, decisions: Optional[Mapping] = None,
               iter_s: Optional[Mapping[str, float]] = None) -> np.ndarray:
    """Mean load (Gb/s) the jobs put on every link (array indexed by link index) in steady
    state: sum over jobs of bytes per iteration on the link / iteration time.  ``iter_s``:
    iteration times to use (default: ``predict``)."""
    m = ContentionModel(state)
    decisions = decisions or {}
    if iter_s is None:
        iter_s = m.iteration_times(decisions)
    load = np.zeros(len(state.cluster.links))
    for js in state.jobs:
        d = decisions.get(js.name)
        use, _ = m.usage(js.name, d.spine if d else None, d.flow_spines if d else None)
        t = iter_s.get(js.name, INF)
        if not use or not (t > 0) or t == INF:
            continue
        ls = np.fromiter(use.keys(), dtype=np.int64, count=len(use))
        bs = np.fromiter(use.values(), dtype=float, count=len(use))
        np.add.at(load, ls, bs / t / BYTES_PER_GBIT)
    return load
