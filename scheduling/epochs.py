"""The per-epoch decision step, shared by the emulator's controller (and usable by any
back end): measurements in, the policy's decisions out, with a log record.

Pure Python (no os-ken): the controller feeds it the byte series it polled from the
switches; units are converted back to the trace's (bytes x bytes_scale, seconds /
time_scale) before the policy sees anything, so a policy decides on the same numbers
in the emulator and in the simulator.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

from scheduling.registry import get_policy
from scheduling.base import ClusterState, Decisions, decisions_from_json, job_state
from scheduling.classes import clamp_class
from scheduling.estimate import PairSeries, apply_estimates, estimate_from_measurements
from workloads.scenario import ResolvedScenario

Series = Mapping[Tuple[str, str], Sequence[float]]


class StaticPolicy:
    """Decisions read from a JSON file (job -> Decision fields) at every epoch: a fixed
    schedule to study by hand, and the enforcement tests' way to swap classes mid-run."""
    name = "static"
    uses_priorities = True
    uses_shifts = True

    def __init__(self, path: str):
        self.path = Path(path)

    def decide(self, state: ClusterState) -> Decisions:
        try:
            ds = decisions_from_json(self.path.read_text())
        except (OSError, ValueError):
            return {}
        names = {j.name for j in state.jobs}
        return {k: v for k, v in ds.items() if k in names}


def declared_inputs(state: ClusterState) -> tuple:
    """What a policy with ``pure_decisions`` decides on: the running jobs' declared fields (or
    their estimates, when profiles are estimated) and the classes; not the epoch, the time or
    the measured periods."""
    return (state.num_classes, tuple(
        (j.name, tuple(j.hosts), j.compute_s, j.iso_iter_s, j.gpus, tuple(sorted(j.pair_bytes.items())))
        for j in sorted(state.jobs, key=lambda j: j.name)))


class SameInputs:
    """A policy whose decisions are a function of ``declared_inputs`` alone (its class says so
    with ``pure_decisions = True``: optimal), asked again on the same inputs, answers with its
    last decisions at once instead of searching again. On the emulator an epoch's measured
    periods change nothing it decides on, so optimal's 30 s search would otherwise run again
    every epoch on the two cores that forward the packets."""

    def __init__(self, policy):
        self.policy = policy
        self._key = None
        self._last: Decisions = {}
        self.reused = 0

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def decide(self, state: ClusterState) -> Decisions:
        import copy

        key = declared_inputs(state)
        if key != self._key:
            self._last = dict(self.policy.decide(state))
            self._key = key
        else:
            self.reused += 1
        return copy.deepcopy(self._last)


def make_policy(name: str, **kw):
    if name == "static":
        return StaticPolicy(kw["path"])
    policy = get_policy(name, **kw)
    return SameInputs(policy) if getattr(policy, "pure_decisions", False) else policy


@dataclass
class EpochRecord:
    epoch: int
    time_s: float                  # emulated seconds since the run started
    decision_ms: float
    active_jobs: List[str]
    decisions: Dict[str, dict]
    estimates: Dict[str, dict] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)


class EpochDriver:
    def __init__(self, resolved: ResolvedScenario, policy, *, num_classes: int,
                 time_scale: float, bytes_scale: float, estimate_profiles: bool = False):
        self.rs = resolved
        self.policy = policy
        self.num_classes = num_classes
        self.time_scale = time_scale
        self.bytes_scale = bytes_scale
        self.estimate_profiles = estimate_profiles
        self.epoch = 0
        self._declared = {j.name: job_state(j, resolved.cluster) for j in resolved.jobs}
        self.last: Decisions = {}

    @property
    def declared(self):
        """job -> its JobState from the declared trace."""
        return self._declared

    def _scaled(self, series: Series) -> Series:
        """One job's series in the trace's bytes (x ``bytes_scale``); the simulator's
        ``PairSeries`` as one array product (the same products as on each float)."""
        if isinstance(series, PairSeries):
            return series.scaled(self.bytes_scale)
        return {p: [b * self.bytes_scale for b in s] for p, s in series.items()}

    def step(self, now_s: float, active: Set[str], measured: Mapping[str, Series],
             bin_s: float, iterations_left: Optional[Mapping[str, int]] = None
             ) -> Tuple[Decisions, EpochRecord]:
        """One epoch: ``measured`` = job -> {(src host, dst host): emulated bytes per bin of
        ``bin_s`` emulated seconds} over the last epoch; ``active`` = jobs running now;
        ``iterations_left``: job -> its iterations still to run, where the back end knows
        (``JobState.iterations_left``; the others stay None)."""
        import copy

        jobs = [copy.copy(self._declared[n]) for n in sorted(active) if n in self._declared]
        left = iterations_left or {}
        for j in jobs:
            j.iterations_left = left.get(j.name)
        state = ClusterState(self.rs.cluster, jobs, self.num_classes, epoch=self.epoch,
                             time_s=now_s / self.time_scale)
        trace = {job: self._scaled(series) for job, series in measured.items() if job in active}
        est = estimate_from_measurements(trace, bin_s / self.time_scale) if trace else {}
        apply_estimates(state, est, update_profile=self.estimate_profiles)
        t0 = time.perf_counter()
        decisions = dict(self.policy.decide(state))
        ms = (time.perf_counter() - t0) * 1000
        # the one rule of both back ends: a running job the policy left out keeps its last
        # decision (the switches keep its rules), and a class is clamped to the classes there are
        for name in active:
            if name not in decisions and name in self.last:
                decisions[name] = self.last[name]
        for d in decisions.values():
            d.priority = clamp_class(d.priority, self.num_classes)
        self.last = {k: v for k, v in decisions.items() if k in active}
        rec = EpochRecord(self.epoch, now_s, ms, sorted(active),
                          {k: v.to_dict() for k, v in sorted(decisions.items())},
                          {k: {"period_s": e.period_s, "active_fraction": e.active_fraction}
                           for k, e in est.items()})
        self.epoch += 1
        return decisions, rec
