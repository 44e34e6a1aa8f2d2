"""Result files of a simulated run (the emulator's files plus links.csv and decisions.csv).

  DIR/scenario.yaml     the scenario as run
  DIR/iterations.csv    job, worker, iteration, start_s, compute_s, comm_s, end_s
                        (worker = 'all': the simulator records the job, not each rank;
                        times relative to the job's arrival, as the emulator's workers log)
  DIR/summary.csv       job, policy, iterations, mean_iter_s, p99_iter_s, mean_comm_s,
                        jct_s, slowdown_vs_isolated, phase_error, corrections
  DIR/links.csv         bin, start_s, end_s, link, kind, capacity_gbps, mean_gbps, utilisation
                        (absolute trace time; links that carried traffic in the bin only)
  DIR/decisions.csv     epoch, time_s, decision_ms, status, jobs, job, priority, spine,
                        flow_spines, rate_caps_gbps, shift_s, reason (one row per epoch and
                        decided job; an epoch without decisions has one row with job empty)
  DIR/phase.csv         phase control: one row per epoch and job of a held group
                        (scheduling.phase.PHASE_COLS)
  DIR/run.json          settings and counters (events, wall time, events/s)

Everything is written into a temporary sibling directory and renamed into place at the
end: DIR is either complete or untouched.
"""
from __future__ import annotations

import csv
import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from runs.files import replace_dir
from runs.summary import summary_csv_text
from scheduling.phase import write_phase_csv
from workloads.scenario import dump_scenario

DECISION_COLS = ["epoch", "time_s", "decision_ms", "status", "jobs", "job", "priority", "spine",
                 "flow_spines", "rate_caps_gbps", "shift_s", "reason"]
LINK_COLS = ["bin", "start_s", "end_s", "link", "kind", "capacity_gbps", "mean_gbps", "utilisation"]


def _f(x) -> str:
    if isinstance(x, float):
        return "nan" if math.isnan(x) else f"{x:.6f}"
    return str(x)


def write_results(result, out: Path, extra: Optional[dict] = None) -> Path:
    out = Path(out)
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=parent))
    try:
        (tmp / "scenario.yaml").write_text(dump_scenario(result.scenario))
        with open(tmp / "iterations.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["job", "worker", "iteration", "start_s", "compute_s", "comm_s", "end_s"])
            for r in result.iterations:
                w.writerow([r[0], r[1], r[2]] + [f"{x:.6f}" for x in r[3:]])
        (tmp / "summary.csv").write_text(summary_csv_text(result.summary))
        if result.phase:
            write_phase_csv(tmp / "phase.csv", result.phase)
        with open(tmp / "links.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(LINK_COLS)
            for r in result.link_bins:
                w.writerow([_f(r[c]) for c in LINK_COLS])
        with open(tmp / "decisions.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(DECISION_COLS)
            by_epoch = {}
            for d in result.decisions:
                by_epoch.setdefault(d["epoch"], []).append(d)
            for e in result.epochs:
                base = [e["epoch"], f"{e['time_s']:.6f}", f"{e['decision_ms']:.3f}", e["status"],
                        e["jobs"]]
                ds = by_epoch.get(e["epoch"], [])
                if not ds:
                    w.writerow(base + [""] * 7)
                for d in ds:
                    w.writerow(base + [d["job"], d["priority"], d["spine"], d["flow_spines"],
                                       d["rate_caps_gbps"], _f(float(d["shift_s"])), d["reason"]])
        run = {"policy": result.policy, "stats": result.stats}
        if extra:
            run.update(extra)
        (tmp / "run.json").write_text(json.dumps(run, indent=2, sort_keys=True, default=str) + "\n")
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
