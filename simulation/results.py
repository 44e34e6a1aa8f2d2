"""What a simulated run returns (``SimResult``) and how it is built from the engine's state
at the end: the iteration rows, the per-job summary (``runs.summary``, the same figures as the
emulator's), the links' utilisation per time bin and the run's counters."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List

import numpy as np

from runs.summary import summary_row

from .config import GBPS_TO_BYTES


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


def build_result(rs, name: str, eng, iso: Dict[str, float], cfg) -> SimResult:
    """``rs``: the resolved scenario; ``eng``: the ``simulation.engine.Engine`` after its run;
    ``iso``: isolated iteration time by job (empty: slowdown nan); ``cfg``: its SimConfig."""
    iters: List[tuple] = []
    summary: List[dict] = []
    wu = max(0, cfg.warmup_iterations)
    phase_by_job = eng.phase.summary() if eng.phase is not None else {}
    for j in eng.jobs:
        a = j.arrival
        # times relative to the job's arrival, as the emulator's workers log them
        iters.extend((r[0], r[1], r[2], r[3] - a, r[4], r[5], r[6] - a) for r in j.records)
        summary.append(summary_row(j.name, name, j.records, wu, isolated_s=iso.get(j.name, math.nan),
                                   finished=j.finish is not None, origin=a,
                                   phase=phase_by_job.get(j.name)))
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
             "rate_update_s": eng.rate_update_s,
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
