"""The controller's epoch loop (only when the run names a policy): every ``epoch_s`` measure
(controllers/monitor.py), decide (scheduling.epochs.EpochDriver, the policy, in the
low-priority decision process of controllers/decider.py), apply (controllers/enforcer.py),
and append the epoch's record to the run's decisions.jsonl.

Before the run's clock starts, the loop first decides for the jobs that arrive at time 0
(``presolve``), on their declared traces, while the cluster is idle: their classes, paths,
caps and start-time shifts are in place for their first iteration whatever the policy's
search costs, as in the simulator, where simulated time stands still while a policy decides.
The runner waits for it (the status file's ``presolved``) before it sets the start time.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Callable, Dict, Optional

from os_ken.lib import hub

from runs.files import append_jsonl
from scheduling.base import Decision

from .enforcer import Enforcer
from .monitor import Monitor
from .state import JobTable

LOG = logging.getLogger("harmonics.controller")

# a job is decided this long (wall seconds) before its start (``EpochLoop.loop``)
PRESTART_S = 0.5


def next_prestart(starts: Dict[str, Optional[float]], prestarted, now: float,
                  lead: float = PRESTART_S) -> Optional[float]:
    """When to decide for the next job about to start (``starts``: job -> start time, None
    unknown yet; ``prestarted``: the jobs already decided before their start)."""
    best = None
    for name, t in starts.items():
        if name in prestarted or t is None or t <= now:
            continue
        best = t - lead if best is None else min(best, t - lead)
    return best


class EpochLoop:
    def __init__(self, config: dict, jobs: JobTable, monitor: Monitor, enforcer: Enforcer,
                 apply_decisions: Callable[[Dict[str, Decision]], None], origin: float,
                 run_start: Callable[[], Optional[float]]):
        from scheduling.base import job_state
        from workloads.scenario import load_scenario, resolve

        from .decider import Decider, build_driver

        self.config = config
        self.jobs = jobs
        self.monitor = monitor
        self.enforcer = enforcer
        self.apply_decisions = apply_decisions
        self.run_start = run_start
        self.epoch_s = monitor.epoch_s
        self.last_record: Optional[dict] = None
        self._prestarted: set = set()             # jobs decided before their start
        self.presolved: Optional[dict] = None     # the presolve's figures, once done
        rs = resolve(load_scenario(config["scenario_path"]))
        emu = rs.scenario.emulation
        self._arrive_at_0 = sorted(j.name for j in rs.jobs if j.spec.arrival_s <= 0)
        self.declared = {j.name: job_state(j, rs.cluster) for j in rs.jobs}
        # the policy decides in its own low-priority process (controllers/decider.py), or here
        # with ``decision_process: false``
        self.driver = (Decider(config, enforcer.num_classes) if config.get("decision_process", True)
                       else build_driver(config, enforcer.num_classes))
        if config.get("control_dir"):
            from scheduling.phase import PhaseConfig

            from .control_channel import ControlChannel
            pc = rs.scenario.phase_control
            enforcer.channel = ControlChannel(
                config["control_dir"], config.get("telemetry_dir"), list(jobs),
                monitor.cluster, emu.time_scale, enforcer.num_classes,
                PhaseConfig(gain=pc.gain, tolerance=pc.tolerance, hold=pc.hold) if pc.enabled else None,
                origin=origin, run_start=run_start)
            monitor.on_poll = enforcer.channel.tick

    def loop(self, stop) -> None:
        """Epochs every ``epoch_s``, plus one ``PRESTART_S`` before a job starts: that job's
        class and start-time shift are in place for its first iteration (as in the model and
        the simulator, which decide at a job's arrival), instead of a shift applied after it
        has already run an epoch in an arbitrary phase."""
        if self.config.get("presolve") and self.run_start() is None:
            self.presolve()         # not after a restart mid-run: the jobs run already
        nxt = time.time() + self.epoch_s
        while not stop.is_set():
            now = time.time()
            pre = next_prestart({n: self.jobs.start(n) for n in self.jobs}, self._prestarted, now)
            if pre is not None and pre < nxt:
                hub.sleep(max(0.0, pre - now))
                lead = PRESTART_S
            else:
                hub.sleep(max(0.0, nxt - now))
                nxt += self.epoch_s
                lead = 0.0
            try:
                self.run_epoch(lead)
            except Exception:
                LOG.exception("epoch failed")

    def presolve(self) -> None:
        """Decide for the jobs that arrive at time 0 before any of them starts (their start
        time is not set yet: the runner waits for ``presolved``)."""
        t0 = time.time()
        try:
            self._decide(0.0, set(self._arrive_at_0), {}, started=lambda job: False)
            self._prestarted.update(self._arrive_at_0)
        except Exception:
            LOG.exception("presolve failed")
        self.presolved = {"jobs": list(self._arrive_at_0), "wall_s": round(time.time() - t0, 3),
                          "decision_cpu_ms": getattr(self.driver, "last_cpu_ms", None)}

    def close(self) -> None:
        if hasattr(self.driver, "close"):
            self.driver.close()

    def run_epoch(self, lead: float = 0.0) -> None:
        """One epoch; ``lead`` > 0: a pre-start epoch, jobs starting within ``lead`` s count
        as active."""
        now = time.time()
        series = self.monitor.measure()
        active = self.jobs.active(now + lead)
        for name in active:
            if (self.jobs.start(name) or 0.0) > now:
                self._prestarted.add(name)
        started = self.run_start()
        if not active and (not self.enforcer.decisions or started is None or started > now):
            return      # nothing runs yet (presolved decisions stay) or any more
        self._decide(max(0.0, now - (started or now)), active, series)

    def _decide(self, now_s: float, active, series, started=None) -> None:
        decisions, rec = self.driver.step(now_s, active, series, self.monitor.poll_s)
        self.apply_decisions(decisions)
        phase = self.enforcer.apply_shifts(decisions, self.jobs.start, self.declared, started)
        rec_d = json.loads(rec.to_json())
        cpu = getattr(self.driver, "last_cpu_ms", None)
        if cpu is not None:
            rec_d["decision_cpu_ms"] = cpu
        rec_d["measured_mbps"] = self.monitor.job_rate_mbps
        rec_d.update(phase)
        self.last_record = rec_d
        path = self.config.get("decisions_log")
        if path:
            append_jsonl(path, rec_d)
