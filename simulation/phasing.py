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
from dataclasses import dataclass
from typing import Dict, List, Optional

from scheduling.phase import (JobPhaseInput, PhaseConfig, PhaseController, job_links,
                              phase_inputs, phase_rows, phase_summary)
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
        self._running: Optional[_Running] = None
        # job -> its phase input (None: fewer than two starts); None: to build for all
        self._inputs: Optional[Dict[str, Optional[JobPhaseInput]]] = None

    def iteration_started(self, job) -> None:
        s = self.starts[job.name]
        if len(s) == s.maxlen:
            self.first[job.name] += 1
        s.append(self.eng.now)
        self.new.add(job.name)

    def shift_ordered(self, job) -> None:
        """A new decided shift was queued for the job's next iteration."""
        self.ctl.pending[job.name] = job.it + 1

    def decisions_changed(self) -> None:
        """The engine's epoch (or a controller restart) may have set or cleared decisions:
        the running jobs and their inputs are looked at afresh at the next tick."""
        self._running = None

    def links(self, job) -> frozenset:
        if job.name not in self._links:
            self._links[job.name] = job_links(self.eng.cluster, host_pair_bytes(job.rj))
        return self._links[job.name]

    def _view(self) -> "_Running":
        """The running jobs with a decision and what the controller's inputs take of them.
        A tick comes at every counter poll, 50 an epoch, with ~1,000 jobs on the large runs;
        between two epochs the only change to this is a job finishing (decisions change at
        an epoch or a controller restart: ``decisions_changed``), so it is kept until then,
        less the jobs that finish, and so is each job's input until the job starts an
        iteration."""
        run, eng = self._running, self.eng
        if run is None:
            active = [j for j in eng.jobs if j.arrived and not j.done and j.decision is not None]
            decisions = {j.name: j.decision for j in active}
            names = sorted(decisions)
            by_name = {j.name: j for j in active}
            declared = eng.driver.declared if eng.driver is not None else {}
            links = {n: self.links(by_name[n]) for n in names}
            periods = {n: declared[n].iso_iter_s for n in names if n in declared}
            run = self._running = _Running(eng.jobs_done, names, by_name, decisions, links, periods)
            self._inputs = None
        elif run.jobs_done != eng.jobs_done:
            run.jobs_done = eng.jobs_done
            gone = {n for n in run.names if run.by_name[n].done}
            run.names = [n for n in run.names if n not in gone]
            for n in gone:
                for d in (run.by_name, run.decisions, run.links, run.periods, self._inputs or {}):
                    d.pop(n, None)
        return run

    def _input(self, run: "_Running", name: str) -> Optional[JobPhaseInput]:
        got = phase_inputs([name], self.starts, self.first, run.decisions, run.links, run.periods)
        return got[0] if got else None

    def tick(self, epoch_no: int) -> None:
        """After new iteration starts (called at every counter poll and epoch): measure the
        groups of the jobs that started an iteration and order their corrections."""
        if not self.new:
            return
        new, self.new = self.new, set()
        run = self._view()
        if not run.names:
            return
        if self._inputs is None:
            self._inputs = {n: self._input(run, n) for n in run.names}
        else:
            for n in new:
                if n in run.decisions:
                    self._inputs[n] = self._input(run, n)
        # the inputs as ``phase_inputs`` lists them: in name order, jobs with two starts
        inputs = [x for x in map(self._inputs.__getitem__, run.names) if x is not None]
        step = self.ctl.step(inputs, only=new)
        for c in step.corrections:
            j = run.by_name[c.job]
            j.pending_shift += c.delay_s
            self.ctl.ordered(c, j.it + 1)
        self.rows.extend(phase_rows(epoch_no, self.eng.now, step))

    def summary(self) -> dict:
        return phase_summary(self.rows)


@dataclass
class _Running:
    """``SimPhaseControl._view``: the running jobs with a decision (``names`` in order)."""
    jobs_done: int                         # the engine's count when this was taken
    names: List[str]
    by_name: Dict[str, object]
    decisions: Dict[str, object]
    links: Dict[str, frozenset]
    periods: Dict[str, float]              # the declared (isolated) iteration times
