"""Every policy on one scenario, side by side.

  python -m simulation.compare SCENARIO [--policies fair,optimal,crux,cassini,harmonics]
                               [--out DIR] [--decision-timeout 10] [--run-timeout 1200]

Each policy runs in its own process (``python -m simulation run``), results in DIR/<policy>/.
A decision slower than --decision-timeout is dropped and the policy is not called again
(the run goes on with its last decisions); so is a policy whose decisions add up to more than
--decision-budget seconds; a run longer than --run-timeout is killed and reported as such.  Table columns:

  mean iter s   mean over jobs of the job's mean iteration time
  p99 iter s    mean over jobs of the job's p99 iteration time
  mean JCT s    mean job completion time (arrival to last iteration end)
  slowdown      mean over jobs of mean iteration time / isolated iteration time; p99 of it
  decision ms   mean and max decision time per epoch; epochs; status
"""
from __future__ import annotations

import argparse
import csv
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from scheduling.registry import POLICY_NAMES

DEFAULT_POLICIES = list(POLICY_NAMES)


def _read(path: Path) -> List[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def summarize(dirpath: Path) -> Dict[str, object]:
    summ = _read(dirpath / "summary.csv")
    dec = _read(dirpath / "decisions.csv")
    mi = np.array([_num(r["mean_iter_s"]) for r in summ])
    p99 = np.array([_num(r["p99_iter_s"]) for r in summ])
    jct = np.array([_num(r["jct_s"]) for r in summ])
    sd = np.array([_num(r["slowdown_vs_isolated"]) for r in summ])
    epochs: Dict[str, dict] = {}
    for r in dec:
        epochs.setdefault(r["epoch"], r)
    ms = np.array([_num(r["decision_ms"]) for r in epochs.values()
                   if r["status"] not in ("disabled", "no policy")])
    statuses = [r["status"] for r in epochs.values()]
    timeouts = sum(1 for s in statuses if s.startswith("timeout"))
    status = "ok" if not timeouts else f"{timeouts} decision timeout(s), then held"
    if any("budget spent" in s for s in statuses):
        called = sum(1 for s in statuses if s not in ("disabled", "no policy", "controller down"))
        status = f"decision budget spent after {called} epochs, then held"
    unfinished = int(np.sum(np.isnan(jct)))
    if unfinished:
        status += f"; {unfinished} jobs unfinished"

    def m(a):
        a = a[~np.isnan(a)]
        return float(a.mean()) if len(a) else math.nan

    return {"mean_iter_s": m(mi), "p99_iter_s": m(p99), "mean_jct_s": m(jct),
            "mean_slowdown": m(sd),
            "p99_slowdown": float(np.percentile(sd[~np.isnan(sd)], 99)) if np.any(~np.isnan(sd)) else math.nan,
            "decision_ms_mean": float(ms.mean()) if len(ms) else math.nan,
            "decision_ms_max": float(ms.max()) if len(ms) else math.nan,
            "epochs": len(epochs), "status": status}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulation.compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    ap.add_argument("--out", default=None, help="default: results/sim-compare-<scenario name>")
    ap.add_argument("--decision-timeout", type=float, default=10.0, metavar="S")
    ap.add_argument("--decision-budget", type=float, default=120.0, metavar="S",
                    help="total decision time per run after which the policy is no longer called")
    ap.add_argument("--run-timeout", type=float, default=1200.0, metavar="S")
    ap.add_argument("--epoch", type=float, default=None, metavar="S")
    ap.add_argument("--max-time", type=float, default=None, metavar="S")
    a = ap.parse_args(argv)
    from workloads.scenario import ScenarioError, load_scenario
    try:
        sc = load_scenario(a.scenario)
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(a.out or f"results/sim-compare-{sc.name}")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for pol in [p.strip() for p in a.policies.split(",") if p.strip()]:
        cmd = [sys.executable, "-m", "simulation", "run", a.scenario, "--policy", pol,
               "--out", str(out / pol), "--decision-timeout", str(a.decision_timeout),
               "--decision-budget", str(a.decision_budget), "--quiet"]
        if a.epoch:
            cmd += ["--epoch", str(a.epoch)]
        if a.max_time:
            cmd += ["--max-time", str(a.max_time)]
        print(f"[compare] {pol} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.run_timeout)
            wall = time.perf_counter() - t0
        except subprocess.TimeoutExpired:
            rows.append({"policy": pol, "status": f"run killed after {a.run_timeout:.0f} s"})
            continue
        if p.returncode != 0:
            msg = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
            rows.append({"policy": pol, "status": f"failed: {msg}"})
            continue
        r = summarize(out / pol)
        r["policy"] = pol
        r["wall_s"] = wall
        rows.append(r)
    cols = ["policy", "mean_iter_s", "p99_iter_s", "mean_jct_s", "mean_slowdown", "p99_slowdown",
            "decision_ms_mean", "decision_ms_max", "epochs", "wall_s", "status"]
    with open(out / "compare.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow([r.get(c, "") for c in cols])
    print(f"{sc.name}: {len(sc.jobs)} jobs")
    print(f"{'policy':<10} {'mean iter s':>11} {'p99 iter s':>10} {'mean JCT s':>10} {'slowdown':>8} "
          f"{'p99 sd':>7} {'dec ms':>9} {'max ms':>9} {'epochs':>6} {'wall s':>7}  status")
    for r in rows:
        if "mean_iter_s" not in r:
            print(f"{r['policy']:<10} {'-':>11} {'-':>10} {'-':>10} {'-':>8} {'-':>7} {'-':>9} {'-':>9} "
                  f"{'-':>6} {'-':>7}  {r['status']}")
            continue
        print(f"{r['policy']:<10} {r['mean_iter_s']:11.4f} {r['p99_iter_s']:10.4f} {r['mean_jct_s']:10.2f} "
              f"{r['mean_slowdown']:8.3f} {r['p99_slowdown']:7.3f} {r['decision_ms_mean']:9.2f} "
              f"{r['decision_ms_max']:9.2f} {r['epochs']:>6} {r['wall_s']:7.1f}  {r['status']}")
    print(f"(results in {out}; table in {out / 'compare.csv'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
