"""The co-run figures (runs/summary.py ``corun_window`` / ``corun_mean``, the report's
`iter s, all running` column): a job's iterations while every job of the run was running."""
from __future__ import annotations

import copy
import csv
import math

import numpy as np
import yaml

from analysis.compare import run_compare
from runs.summary import corun_mean, corun_window
from conftest import REPO


def _rows(job, times):
    """Job-relative rows (job, worker, iteration, start, compute, comm, end), back to back."""
    out, t = [], 0.0
    for i, d in enumerate(times):
        out.append((job, "all", i, t, 0.0, 0.0, t + d))
        t += d
    return out


def test_the_window_runs_from_the_last_first_measured_iteration_to_the_first_end():
    # A: ten 1 s iterations from 0. B: five 2 s iterations (slowed while A runs), then five
    # of 1 s alone once A has ended at 10 s.
    a, b = _rows("A", [1.0] * 10), _rows("B", [2.0] * 5 + [1.0] * 5)
    w = corun_window({"A": a, "B": b}, {}, warmup=1)
    assert w == (2.0, 10.0)                  # B's iteration 1 starts at 2; A ends at 10
    ma, na = corun_mean(a, 0.0, w, warmup=1)
    mb, nb = corun_mean(b, 0.0, w, warmup=1)
    assert (ma, na) == (1.0, 8)              # A's iterations 2-9
    assert (mb, nb) == (2.0, 4)              # B's iterations 1-4: the contended ones
    plain_b = float(np.mean([r[6] - r[3] for r in b if r[2] >= 1]))
    assert abs(plain_b - 13.0 / 9.0) < 1e-12  # the plain mean mixes in the five alone


def test_arrivals_shift_each_jobs_times_and_a_late_job_shortens_the_window():
    a, b = _rows("A", [1.0] * 10), _rows("B", [1.0] * 10)
    w = corun_window({"A": a, "B": b}, {"B": 4.0}, warmup=1)
    assert w == (5.0, 10.0)                  # B's iteration 1 starts at 4 + 1; A ends at 10
    assert corun_mean(a, 0.0, w, warmup=1) == (1.0, 5)
    assert corun_mean(b, 4.0, w, warmup=1) == (1.0, 5)
    # too few iterations inside, or no common window at all: no figure
    assert math.isnan(corun_mean(b, 4.0, (5.0, 7.0), warmup=1)[0])
    w2 = corun_window({"A": a, "B": b}, {"B": 20.0}, warmup=1)
    assert w2[0] > w2[1] and math.isnan(corun_mean(a, 0.0, w2, warmup=1)[0])
    assert all(math.isnan(x) for x in corun_window({"A": a}, {}, warmup=1))


def test_strict_priority_on_the_pair_looks_better_than_it_is_in_the_plain_mean(tmp_path):
    """The simulator on pair-shared-spine: under Crux's strict priority the favoured job
    finishes its 55 iterations first and the other then runs alone, which the plain mean
    counts in; while both run, the other job is paced at two of the favoured one's periods,
    and Crux's ratio to fair sharing is more than 10 points higher than the plain mean's
    (simulator: 0.845 plain against 1.020 while both run)."""
    d = yaml.safe_load((REPO / "scenarios" / "pair-shared-spine.yaml").read_text())
    d = copy.deepcopy(d)
    d["backend"] = "simulation"
    for j in d["jobs"]:
        j["iterations"] = 55
    f = tmp_path / "pair-sim.yaml"
    f.write_text(yaml.safe_dump(d))
    out = tmp_path / "out"
    assert run_compare(str(f), "fair,crux", str(out), opts={"plots": False}, summary=False) == 0
    with open(out / "comparison.csv", newline="") as fh:
        pol = {r["policy"]: r for r in csv.DictReader(fh)}
    with open(out / "comparison_jobs.csv", newline="") as fh:
        jobs = {(r["policy"], r["job"]): r for r in csv.DictReader(fh)}
    plain, corun = float(pol["crux"]["mean_iter_vs_fair"]), float(pol["crux"]["corun_iter_vs_fair"])
    assert corun > plain + 0.10, (plain, corun)   # the alone tail flatters Crux by >10 points
    # the slowdown while both run: each job's co-run mean over its isolated time
    iso = {j: float(jobs["crux", j]["isolated_iter_s"]) for j in ("jobA", "jobB")}
    want = np.mean([float(jobs["crux", j]["corun_iter_s"]) / iso[j] for j in iso])
    assert abs(float(pol["crux"]["corun_slowdown"]) - want) < 1e-5 * want
    assert float(pol["crux"]["corun_slowdown_vs_fair"]) > float(pol["crux"]["slowdown_vs_fair"]) + 0.10
    # fair sharing keeps both jobs running to the end: its two figures agree
    assert abs(float(pol["fair"]["corun_iter_s"]) / float(pol["fair"]["mean_iter_s"]) - 1) < 0.03
    # the favoured job ran (almost) alone throughout; the other at two of its periods
    fav = min(("jobA", "jobB"), key=lambda j: float(jobs["crux", j]["corun_iter_s"]))
    other = "jobB" if fav == "jobA" else "jobA"
    ratio = float(jobs["crux", other]["corun_iter_s"]) / float(jobs["crux", fav]["corun_iter_s"])
    assert 1.8 < ratio < 2.2, ratio
    assert int(jobs["crux", other]["corun_iterations"]) < int(jobs["crux", other]["iterations"]) - 10
    md = (out / "comparison.md").read_text()
    assert "iter s, all running" in md and "slowdown, all running" in md


def test_link_neighbours_are_the_jobs_on_a_shared_link_group():
    from analysis.limit import link_neighbours
    nb = link_neighbours(REPO / "scenarios" / "four-racks.yaml")
    # the rack-local ring shares host NICs with dp-b and the MoE job, and no uplink
    assert nb["local"] == {"dp-b", "moe"}
    assert "local" not in nb["dp-a"] and nb["dp-a"] >= {"dp-b", "dp-c"}
    assert all(n in nb[m] for n, ms in nb.items() for m in ms)       # symmetric
    assert link_neighbours(REPO / "nowhere.yaml") == {}


def test_each_job_is_windowed_with_its_own_neighbours(tmp_path):
    """A job's window closes when the first of *its* neighbours ends: a short job that shares
    nothing with it does not cut it; a job that shares nothing keeps its plain mean."""
    from analysis.results import JobResult, PolicyRun, ScenarioInfo, _corun
    a, b = _rows("A", [2.0] * 5), _rows("B", [2.0] * 5 + [1.0] * 10)    # B alone after A ends
    c = _rows("C", [0.5] * 8)                                          # short, shares nothing
    run = PolicyRun("p", tmp_path, iterations=a + b + c, warmup=1)
    for n, rows in (("A", a), ("B", b), ("C", c)):
        run.jobs[n] = JobResult(n, mean_iter_s=float(np.mean([r[6] - r[3] for r in rows if r[2] >= 1])))
    sc = ScenarioInfo()
    sc.__dict__["_neighbours"] = {"A": {"B"}, "B": {"A"}, "C": set()}
    _corun(run, sc)
    assert (run.jobs["B"].corun_iter_s, run.jobs["B"].corun_iterations) == (2.0, 4)
    assert (run.jobs["A"].corun_iter_s, run.jobs["A"].corun_iterations) == (2.0, 4)
    assert run.jobs["C"].corun_iter_s == run.jobs["C"].mean_iter_s == 0.5
    # without neighbours (an unresolvable scenario) every job is windowed with all: C's end
    # at 4 s leaves A and B too few iterations
    sc2 = ScenarioInfo()
    sc2.__dict__["_neighbours"] = {}
    _corun(run, sc2)
    assert math.isnan(run.jobs["A"].corun_iter_s) and math.isnan(run.jobs["B"].corun_iter_s)


def test_the_series_verdict_gives_the_co_run_ratio_beside_the_plain_one(tmp_path):
    """repeats.md's verdict line: Crux's plain mean is not different from fair's, while every
    job's neighbours run it is longer; a policy without co-run figures gets no clause."""
    import json
    from analysis.report import POLICY_COLS
    from analysis.repeats import aggregate
    d = tmp_path / "rep"
    d.mkdir()
    (d / "repeats.json").write_text(json.dumps({"scenario": "x", "runs": 3, "command": "c"}))
    for k, (plain, corun) in enumerate([(0.95, 1.15), (1.02, 1.21), (0.99, 1.18)], 1):
        rd = d / f"run{k}"
        rd.mkdir()
        rows = [{"policy": "fair", "status": "ok", "mean_iter_s": 0.05, "mean_iter_vs_fair": 1.0,
                 "corun_iter_vs_fair": 1.0},
                {"policy": "crux", "status": "ok", "mean_iter_s": 0.05 * plain,
                 "mean_iter_vs_fair": plain, "corun_iter_vs_fair": corun},
                {"policy": "cassini", "status": "ok", "mean_iter_s": 0.045, "mean_iter_vs_fair": 0.9}]
        with open(rd / "comparison.csv", "w", newline="") as f:
            w = csv.DictWriter(f, POLICY_COLS, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
    aggregate(d, plots=False)
    lines = {l.split(":")[0][2:]: l for l in (d / "repeats.md").read_text().splitlines()
             if l.startswith("- ")}
    assert "not different from fair's at the 95% level" in lines["crux"]
    assert "while every job's link neighbours run 1.180x" in lines["crux"]
    assert lines["crux"].endswith("longer than fair's")
    assert "neighbours" not in lines["cassini"]
