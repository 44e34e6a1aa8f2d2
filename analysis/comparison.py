"""The report's tables: one row per policy (means over jobs, each also / fair and / limit),
one per (policy, job), and the packet-capture rows, from a loaded ``Report``."""
from __future__ import annotations

import math

import numpy as np

from .captures import capture_series
from .results import PolicyRun, Report
from .tables import finite, mean_finite, ratio

POLICY_COLS = ["policy", "status", "jobs", "jobs_finished", "mean_iter_s", "p99_iter_s",
               "mean_jct_s", "makespan_s", "mean_comm_s", "mean_slowdown",
               "mean_iter_vs_fair", "p99_iter_vs_fair", "jct_vs_fair", "comm_vs_fair",
               "slowdown_vs_fair", "decision_ms_mean", "decision_ms_max", "epochs",
               "mean_iter_vs_limit", "fidelity", "corun_iter_s", "corun_iter_vs_fair",
               "corun_slowdown", "corun_slowdown_vs_fair"]
JOB_COLS = ["policy", "job", "iterations", "mean_iter_s", "p99_iter_s", "mean_comm_s", "jct_s",
            "isolated_iter_s", "slowdown", "mean_iter_vs_fair", "corun_iter_s",
            "corun_iterations", "corun_iter_vs_fair", "corun_slowdown", "note"]
LIMIT_COLS = ["job", "isolated_s", "rho", "group", "limit_s"]
PCAP_JOB_COLS = ["policy", "link", "job", "trace_mb", "share", "peak_gbps", "dscp"]
PCAP_CHECK_COLS = ["policy", "link", "higher_job", "lower_job", "same_class", "epochs",
                   "epoch_seconds", "higher_mb_epochs", "lower_mb_epochs", "bins_both", "bin_s",
                   "higher_mb_both", "lower_mb_both", "higher_gbps_both", "lower_gbps_both",
                   "bins_higher_more", "verdict", "note"]
# metric -> its "/ fair" column
NORMALISED = {"mean_iter_s": "mean_iter_vs_fair", "p99_iter_s": "p99_iter_vs_fair",
              "mean_jct_s": "jct_vs_fair", "mean_comm_s": "comm_vs_fair",
              "mean_slowdown": "slowdown_vs_fair", "corun_iter_s": "corun_iter_vs_fair",
              "corun_slowdown": "corun_slowdown_vs_fair"}


def _all_or_nan(xs) -> float:
    """The mean, or nan unless every value is finite (a mean over the same jobs or none)."""
    return float(np.mean(xs)) if xs and all(finite(x) for x in xs) else math.nan


def _policy_row(run: PolicyRun) -> dict:
    js = list(run.jobs.values())
    fin = [j for j in js if j.finished]
    ms = run.decision_ms()
    return {"policy": run.policy, "status": run.status, "jobs": len(js), "jobs_finished": len(fin),
           "mean_iter_s": mean_finite(j.mean_iter_s for j in js),
           "p99_iter_s": mean_finite(j.p99_iter_s for j in js),
           # a time-bounded run's finished jobs are its short ones: no mean JCT
           "mean_jct_s": mean_finite(j.jct_s for j in fin) if run.stopped_s is None else math.nan,
           "mean_comm_s": mean_finite(j.mean_comm_s for j in js),
           "mean_slowdown": mean_finite(j.slowdown for j in js),
           # while its neighbours ran: a figure only when every job has one (the same jobs)
           "corun_iter_s": _all_or_nan([j.corun_iter_s for j in js]),
           "corun_slowdown": _all_or_nan([j.corun_slowdown for j in js]),
           "decision_ms_mean": float(ms.mean()) if len(ms) else math.nan,
           "decision_ms_max": float(ms.max()) if len(ms) else math.nan,
           "epochs": len(ms), "fidelity": run.fidelity}


def build_tables(rep: Report) -> None:
    sc = rep.scenario
    rows = []
    for run in rep.runs:
        r = _policy_row(run)
        js = list(run.jobs.values())
        ends = [sc.arrivals.get(j.job, 0.0) + j.jct_s for j in js]
        r["makespan_s"] = max(ends) if js and all(finite(x) for x in ends) else math.nan
        rows.append(r)
    fair = next((r for r in rows if r["policy"] == "fair" and r["jobs"]), None)
    for r in rows:
        for k, nk in NORMALISED.items():
            r[nk] = ratio(r[k], fair[k]) if fair else math.nan
    rep.policy_rows = rows
    _limit(rep)
    fair_run = rep.fair
    jrows = []
    for run in rep.runs:
        for j in run.jobs.values():
            fj = fair_run.jobs.get(j.job) if fair_run else None
            jrows.append({"policy": run.policy, "job": j.job, "iterations": j.iterations,
                          "mean_iter_s": j.mean_iter_s, "p99_iter_s": j.p99_iter_s,
                          "mean_comm_s": j.mean_comm_s, "jct_s": j.jct_s,
                          "isolated_iter_s": j.isolated_iter_s, "slowdown": j.slowdown,
                          "mean_iter_vs_fair": ratio(j.mean_iter_s, fj.mean_iter_s) if fj else math.nan,
                          "corun_iter_s": j.corun_iter_s, "corun_iterations": j.corun_iterations,
                          "corun_iter_vs_fair": ratio(j.corun_iter_s, fj.corun_iter_s) if fj else math.nan,
                          "corun_slowdown": j.corun_slowdown,
                          "note": "; ".join(j.notes)})
    rep.job_rows = jrows
    prow, crow = [], []
    for run in rep.runs:
        if run.kept_pcap is not None:
            prow += run.kept_pcap[0]
            crow += run.kept_pcap[1]
            continue
        if not run.bottleneck:
            continue
        an = run.captures[run.bottleneck]
        total = sum(j.bytes for j in an.jobs.values())
        _, gbps = capture_series(run, sc)
        for name, jt in an.jobs.items():
            prow.append({"policy": run.policy, "link": run.bottleneck, "job": name,
                         "trace_mb": jt.bytes * sc.bytes_scale / 1e6,
                         "share": jt.bytes / total if total else math.nan,
                         "peak_gbps": float(gbps[name].max()) if len(gbps[name]) else 0.0,
                         "dscp": " ".join(f"{k}:{v}" for k, v in sorted(jt.dscp.items()))})
        for c in run.checks:
            crow.append({"policy": run.policy, "link": c.link, "higher_job": c.higher,
                         "lower_job": c.lower, "same_class": c.same_class, "epochs": c.epochs,
                         "epoch_seconds": c.seconds, "higher_mb_epochs": c.higher_bytes / 1e6,
                         "lower_mb_epochs": c.lower_bytes / 1e6, "bins_both": c.bins,
                         "bin_s": c.bin_s, "higher_mb_both": c.higher_bytes_both / 1e6,
                         "lower_mb_both": c.lower_bytes_both / 1e6,
                         "higher_gbps_both": c.gbps("higher"), "lower_gbps_both": c.gbps("lower"),
                         "bins_higher_more": c.bins_higher_more, "verdict": c.verdict,
                         "note": c.note})
    rep.pcap_job_rows, rep.pcap_check_rows = prow, crow


def _limit(rep: Report) -> None:
    """The "limit" row (analysis/limit.py) and every policy's gap to it, over its jobs."""
    path = rep.dir / "scenario.yaml"
    if not path.exists():
        path = next((rep.dir / r.policy / "scenario.yaml" for r in rep.runs
                     if (rep.dir / r.policy / "scenario.yaml").exists()), path)
    iso = {}
    for run in ([rep.fair] if rep.fair else []) + rep.runs:
        for j in run.jobs.values():
            if finite(j.isolated_iter_s) and j.job not in iso:
                iso[j.job] = j.isolated_iter_s
    from .limit import job_limits
    payload = 1.0
    if any(r.backend == "emulation" for r in rep.runs):
        from emulation.qos import TCP_PAYLOAD_PER_FRAME
        payload = TCP_PAYLOAD_PER_FRAME
    lim = job_limits(path, iso, payload) if path.exists() else {}
    if not lim:
        return
    rep.limit_row = {"policy": "limit", "status": "bound", "jobs": len(lim),
                     "jobs_rows": [dict(v, job=n) for n, v in sorted(lim.items())],
                     "mean_iter_s": mean_finite(v["limit_s"] for v in lim.values()),
                     "mean_iter_vs_limit": 1.0}
    for r in rep.policy_rows:
        run = rep.run(r["policy"])
        names = [n for n in run.jobs if n in lim] if run else []
        r["mean_iter_vs_limit"] = (ratio(mean_finite(run.jobs[n].mean_iter_s for n in names),
                                          mean_finite(lim[n]["limit_s"] for n in names))
                                   if names else math.nan)

