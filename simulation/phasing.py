"""The simulator's side of phase control and compute noise (the engine calls these hooks).

* ``ComputeNoise``: per-iteration compute-time jitter, a factor (1 + N(0, sigma)) drawn once
  per iteration and job and applied to every compute phase of that iteration.  One seeded
  stream per job (the scenario's seed and the job's index), so adding a job does not change
  the others' draws.  sigma = 0 draws nothing: the engine is then exactly the noiseless one.
* ``SimPhaseControl``: the pure controller (``scheduling.phase``) fed with the
  simulated iteration starts at every counter poll after a job started an iteration (as the
  emulator's controller reads its telemetry); its corrections become one-time delays of the
  job's next iteration start, exactly as the emulator's workers apply them.
"""
from __future__ import annotations

from collections import deque
from typing import Dict, List

from scheduling.phase import (PhaseConfig, PhaseController, job_links, phase_inputs,
                                          phase_rows, phase_summary)
from workloads.flows import host_pair_bytes

HISTORY = 16          # iteration starts kept per job for the controller


class SimPhaseControl:
    def __init__(self, engine, config: PhaseConfig):
        self.eng = engine
        self.ctl = PhaseController(config)
        self.starts: Dict[str, deque] = {j.name: deque(maxlen=HISTORY) for j in engine.jobs}
        self.first: Dict[str, int] = {j.name: 0 for j in engine.jobs}
        self._links: Dict[str, frozenset] = {}
        self.rows: List[dict] = []
        self.new: set = set()                 # jobs that started an iteration since the last tick

    def iteration_started(self, job) -> None:
        s = self.starts[job.name]
        if len(s) == s.maxlen:
            self.first[job.name] += 1
        s.append(self.eng.now)
        self.new.add(job.name)

    def shift_ordered(self, job) -> None:
        """A new decided shift was queued for the job's next iteration."""
        self.ctl.pending[job.name] = job.it + 1

    def links(self, job) -> frozenset:
        if job.name not in self._links:
            self._links[job.name] = job_links(self.eng.cluster, host_pair_bytes(job.rj))
        return self._links[job.name]

    def tick(self, epoch_no: int) -> None:
        """After new iteration starts (called at every counter poll and epoch): measure the
        groups of the jobs that started an iteration and order their corrections."""
        if not self.new:
            return
        new, self.new = self.new, set()
        active = [j for j in self.eng.jobs if j.arrived and not j.done and j.decision is not None]
        if not active:
            return
        decisions = {j.name: j.decision for j in active}
        names = sorted(decisions)
        by_name = {j.name: j for j in active}
        declared = self.eng.driver.declared if self.eng.driver is not None else {}
        inputs = phase_inputs(names, self.starts, self.first, decisions,
                              {n: self.links(by_name[n]) for n in names},
                              {n: declared[n].iso_iter_s for n in names if n in declared})
        step = self.ctl.step(inputs, only=new)
        for c in step.corrections:
            j = by_name[c.job]
            j.pending_shift += c.delay_s
            self.ctl.ordered(c, j.it + 1)
        self.rows.extend(phase_rows(epoch_no, self.eng.now, step))

    def summary(self) -> dict:
        return phase_summary(self.rows)
