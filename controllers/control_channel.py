"""The controller's side of the workers' job agents (no os-ken, no Mininet).

Down: the control file of each job (format in emulation/jobspec.py) carries the job's DSCP,
its decided start-time shift and the phase controller's corrections: one-time delays of an
iteration start that every rank applies at the same iteration.
Up: the telemetry file of each job (format in emulation/worker.py, ``TELEMETRY_HEADER``):
iteration starts and collective starts with wall-clock timestamps, tailed every epoch.

Every epoch ``ControlChannel.apply`` writes what the decisions changed.  Every counter poll
``ControlChannel.tick`` reads the telemetry and, when a decided job has started an iteration,
runs the phase controller (scheduling.phase) on the iteration starts seen so far
and orders its corrections: the loop closes once per iteration, not once per epoch.  Times
given to the phase controller are trace seconds since the controller started (wall /
time_scale).
"""
from __future__ import annotations

import os
import time
from collections import deque
from typing import Callable, Dict, List, Mapping, Optional

from scheduling.base import Decision, clamp_class
from scheduling.phase import (PhaseConfig, PhaseController, job_links, phase_inputs,
                                          phase_rows)
from emulation.jobspec import write_control
from emulation.qos import class_dscp

HISTORY = 16


class TelemetryTail:
    """Iteration starts of one job, read incrementally from its telemetry file."""

    def __init__(self, path: str):
        self.path = path
        self.pos = 0
        self.partial = b""
        self.starts: deque = deque(maxlen=HISTORY)   # (iteration, wall time)
        self.latest = -1

    def read(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except OSError:
            return
        self.pos += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        for ln in lines:
            parts = ln.decode("ascii", "replace").split(",")
            if len(parts) != 4 or parts[0] == "iteration":
                continue
            try:
                it, ev, ph, t = int(parts[0]), parts[1], int(parts[2]), float(parts[3])
            except ValueError:
                continue
            if ev == "iter":
                self.starts.append((it, t))
                self.latest = max(self.latest, it)


class ControlChannel:
    def __init__(self, control_dir: str, telemetry_dir: Optional[str], job_names, cluster,
                 time_scale: float, num_classes: int, phase: Optional[PhaseConfig],
                 origin: float, run_start: Optional[Callable[[], Optional[float]]] = None):
        self.control_dir = control_dir
        self.time_scale = float(time_scale)
        self.num_classes = num_classes
        self.cluster = cluster
        self.origin = origin
        self.run_start = run_start or (lambda: origin)
        self.tails = {n: TelemetryTail(os.path.join(telemetry_dir, f"{n}.csv"))
                      for n in job_names} if telemetry_dir else {}
        self.phase = PhaseController(phase) if phase is not None and telemetry_dir else None
        # job -> (seq, decided shift, at_iteration, dscp, amount last sent)
        self.state: Dict[str, tuple] = {}
        self.links: Dict[str, frozenset] = {}
        self.decisions: Dict[str, Decision] = {}
        self.declared: Mapping = {}
        self.latest: Dict[str, dict] = {}        # job -> its last measured phase
        self.samples: List[dict] = []            # phase rows since the last epoch record
        self.ordered: List[dict] = []            # corrections since the last epoch record

    def latest_iteration(self, job: str) -> int:
        t = self.tails.get(job)
        if t is None:
            return -1
        if t.latest < 0:
            t.read()
        return t.latest

    def _write(self, job: str, amount_s: float, seq: int, at: Optional[int], dscp: int) -> None:
        write_control(os.path.join(self.control_dir, f"{job}.json"), amount_s * self.time_scale,
                      seq, at_iteration=at, dscp=dscp)

    def apply(self, decisions: Mapping[str, Decision], started: Callable[[str], bool],
              declared: Mapping) -> dict:
        """An epoch: write the decisions' DSCP and new shifts (``declared``: job -> its
        declared JobState), then a phase-control tick.  Returns what to add to the epoch's
        record (JSON-ready): the latest measured phases, and the phase samples and
        corrections since the last epoch."""
        for job, d in decisions.items():
            seq, last, at, last_dscp, sent = self.state.get(job, (0, 0.0, None, None, 0.0))
            dscp = class_dscp(clamp_class(d.priority, self.num_classes), self.num_classes)
            new_shift = abs(d.shift_s - last) > 1e-6 and d.shift_s > 1e-9  # zero: no delay
            if new_shift:
                seq += 1
                sent = d.shift_s
                # every rank applies it before the same iteration: the first one if the job
                # has not started yet (pre-start epoch), else two after the last one started
                at = self.latest_iteration(job) + 2 if started(job) else 0
                if self.phase is not None:
                    self.phase.pending[job] = at
            if new_shift or dscp != last_dscp:
                self._write(job, sent, seq, at, dscp)
            self.state[job] = (seq, d.shift_s, at, dscp, sent)
        self.decisions, self.declared = dict(decisions), declared
        if self.phase is None:
            return {}
        self.tick()
        out = {"phase": self.latest, "phase_samples": self.samples, "corrections": self.ordered}
        self.samples, self.ordered = [], []
        return out if (self.latest or out["phase_samples"] or out["corrections"]) else {}

    def tick(self) -> None:
        """Read the telemetry; if a decided job started an iteration, measure its group's
        phases and order the corrections due (called every counter poll and every epoch)."""
        if self.phase is None or not self.decisions:
            return
        new = set()
        for n, tail in self.tails.items():
            before = tail.latest
            tail.read()
            if tail.latest != before and n in self.decisions:
                new.add(n)
        if not new:
            return
        decisions, declared = self.decisions, self.declared
        names = sorted(n for n in decisions if n in self.tails)
        starts, first = {}, {}
        for n in names:
            s = list(self.tails[n].starts)
            # consecutive iterations only (a gap would break the period estimate)
            while len(s) > 1 and s[-1][0] - s[0][0] != len(s) - 1:
                s.pop(0)
            starts[n] = [(t - self.origin) / self.time_scale for _, t in s]
            first[n] = s[0][0] if s else 0
        for n in names:
            if n not in self.links:
                self.links[n] = job_links(self.cluster, declared[n].pair_bytes if n in declared else {})
        step = self.phase.step(phase_inputs(names, starts, first, decisions, self.links,
                                            {n: declared[n].iso_iter_s for n in names if n in declared}),
                               only=new)
        now_s = (time.time() - (self.run_start() or self.origin)) / self.time_scale
        for c in step.corrections:
            seq, last, _, dscp, _ = self.state[c.job]
            # the next iteration if it is far enough away, else the one after
            at = max(c.at_iteration - 1, self._next_safe(c.job))
            seq += 1
            self._write(c.job, c.delay_s, seq, at, dscp)
            self.state[c.job] = (seq, last, at, dscp, c.delay_s)
            self.phase.ordered(c, at)
            d = c.to_dict()
            d.update(at_iteration=at, time_s=now_s)
            self.ordered.append(d)
        for n, ph in step.phases.items():
            self.latest[n] = ph.to_dict()
        self.samples.extend(phase_rows(0, now_s, step))

    def _next_safe(self, job: str) -> int:
        """The first iteration whose start the ranks have not reached yet with a margin: the
        next one if it is predicted (from the last period) more than 15% of a period away."""
        tail = self.tails[job]
        if len(tail.starts) >= 2:
            (i0, t0), (i1, t1) = tail.starts[-2], tail.starts[-1]
            period = (t1 - t0) / max(1, i1 - i0)
            if t1 + period - time.time() > 0.15 * period:
                return tail.latest + 1
        return tail.latest + 2
