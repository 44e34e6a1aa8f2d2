"""Interleaved A/B runs of one scenario: which setting lowers the run-to-run spread?

    python -m emulation.abtest SCENARIO --side A:gso_max_bytes=16384 --side B:gso_max_bytes=65536 \
        [--pairs 3] [--policy fair] --out DIR

Each side is NAME:KEY=VALUE,...; a KEY is a scenario ``emulation`` field (gso_max_bytes,
capture, tcp_cc, bandwidth_scale, time_scale,
compute_jitter), ``iterations`` (every job's), ``stagger`` (job k of the scenario arrives k times
this many trace seconds after the first), or a host-tuning setting of
emulation.jobspec.TUNING_DEFAULTS (passed as HARMONICS_TUNING).  The runs alternate A B A B
..., so the machine's slow periods hit both sides alike; each run is a separate
``python -m emulation run`` under the machine-wide stack lock (taken per run, so other users
of the machine interleave).  The load average before each run and each run's fidelity
figures are recorded.  DIR/ab.json holds every run; the table printed at the end gives per
side the mean over runs of the jobs' mean iteration time, its run-to-run standard deviation
and coefficient of variation, and the CPU headroom and load seen.

``--length W:N`` (repeatable) re-reads the same runs' logs keeping iterations W..W+N-1 only:
the spread a shorter run or another warm-up would have had, with no extra run.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import yaml

from runs.logs import read_worker_log

from .jobspec import TUNING_DEFAULTS

LOCK = "/tmp/harmonics-stack.lock"
EMU_KEYS = ("gso_max_bytes", "capture", "tcp_cc", "bandwidth_scale", "time_scale", "compute_jitter")
FLOAT_KEYS = ("bandwidth_scale", "time_scale", "compute_jitter")


def parse_side(arg: str) -> dict:
    name, _, rest = arg.partition(":")
    if not name:
        raise SystemExit(f"error: --side {arg!r}: give NAME:KEY=VALUE,...")
    side = {"name": name, "emulation": {}, "iterations": None, "stagger": None, "tuning": {}}
    for item in filter(None, rest.split(",")):
        k, _, v = item.partition("=")
        if k in EMU_KEYS:
            side["emulation"][k] = ([v] if k == "capture" else None if v == "null"
                                    else int(v) if k == "gso_max_bytes"
                                    else float(v) if k in FLOAT_KEYS else v)
        elif k == "iterations":
            side["iterations"] = int(v)
        elif k == "stagger":
            side["stagger"] = float(v)
        elif k in TUNING_DEFAULTS:
            side["tuning"][k] = int(v)
        else:
            raise SystemExit(f"error: --side {arg!r}: unknown key {k!r}")
    return side


def scenario_for(base: dict, side: dict) -> dict:
    sc = json.loads(json.dumps(base))
    sc.setdefault("emulation", {}).update(side["emulation"])
    if side["iterations"]:
        for j in sc.get("jobs", []):
            j["iterations"] = side["iterations"]
    if side.get("stagger") is not None:
        for k, j in enumerate(sc.get("jobs", [])):
            j["arrival_s"] = round(k * side["stagger"], 9)
    sc["name"] = f"{sc['name']}-{side['name']}"
    return sc


def job_means(run_dir: Path, first: int, count: int = 0) -> Dict[str, float]:
    """Mean iteration time (emulated s) per job over iterations first..first+count-1 (all after
    ``first`` if count is 0)."""
    out = {}
    for log in sorted((run_dir / "logs").glob("*.csv")):
        rows = [r for r in read_worker_log(log) if r["status"] == "ok" and r["iteration"] >= first
                and (not count or r["iteration"] < first + count)]
        if rows:
            out[log.stem] = float(np.mean([r["end_s"] - r["start_s"] for r in rows]))
    return out


def spread(values: List[float]) -> dict:
    v = np.array([x for x in values if math.isfinite(x)])
    if len(v) < 2:
        return {"runs": len(v), "mean": float(v.mean()) if len(v) else math.nan, "std": math.nan, "cv": math.nan}
    return {"runs": len(v), "mean": float(v.mean()), "std": float(v.std(ddof=1)),
            "cv": float(v.std(ddof=1) / v.mean())}


def run_one(scenario: Path, side: dict, out: Path, policy: str) -> dict:
    env = dict(os.environ)
    env["HARMONICS_TUNING"] = ",".join(f"{k}={v}" for k, v in side["tuning"].items())
    load = os.getloadavg()[0]
    t0 = time.time()
    r = subprocess.run(["flock", LOCK, sys.executable, "-m", "emulation", "run", str(scenario),
                        "--policy", policy, "--isolated", "analytical", "--out", str(out)],
                       env=env, capture_output=True, text=True)
    rec = {"side": side["name"], "dir": str(out), "rc": r.returncode, "load_before": load,
           "wall_s": round(time.time() - t0, 1)}
    if r.returncode != 0:
        rec["error"] = r.stderr.strip()[-300:]
        return rec
    info = json.loads((out / "run.json").read_text())
    fid = info.get("fidelity", {})
    rec["verdict"] = fid.get("verdict")
    rec["cpu"] = fid.get("figures", {}).get("cpu", {})
    rec["link_rate_min"] = fid.get("figures", {}).get("link_rate_min")
    rec["retransmit"] = fid.get("figures", {}).get("retransmit")
    return rec


def table(recs: List[dict], sides: List[dict], first: int, count: int, ts: float) -> List[str]:
    """One line per side; iteration times in trace seconds (each side's own ``time_scale``,
    else the scenario's ``ts``)."""
    L = []
    for side in sides:
        s = side["name"]
        ts_side = float(side["emulation"].get("time_scale", ts))
        rs = [r for r in recs if r["side"] == s and r["rc"] == 0]
        per_run = []
        for r in rs:
            m = job_means(Path(r["dir"]), first, count)
            per_run.append(float(np.mean(list(m.values()))) / ts_side if m else math.nan)
        st = spread(per_run)
        head = [r["cpu"].get("headroom_median", math.nan) for r in rs if r.get("cpu")]
        load = [r["load_before"] for r in rs]
        L.append(f"{s:<14} runs {st['runs']}  mean iter {1000 * st['mean']:7.2f} ms  run-to-run std "
                 f"{1000 * st['std']:6.2f} ms  cv {100 * st['cv']:5.2f}%  runs: "
                 + " ".join(f"{1000 * x:.1f}" for x in per_run)
                 + f"  | headroom median {100 * np.mean(head) if head else math.nan:.0f}%  load "
                 f"{np.mean(load) if load else math.nan:.2f}  suspect "
                 f"{sum(1 for r in rs if str(r.get('verdict', '')).startswith('suspect'))}")
    return L


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m emulation.abtest", description=__doc__.split("\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("--side", action="append", required=True)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--policy", default="fair")
    ap.add_argument("--out", required=True)
    ap.add_argument("--warmup", type=int, default=5, help="iterations left out of the means")
    ap.add_argument("--length", action="append", default=[], help="W:N re-reads (see above)")
    ap.add_argument("--report-only", action="store_true", help="re-read DIR/ab.json, run nothing")
    a = ap.parse_args(argv)
    out = Path(a.out)
    sides = [parse_side(s) for s in a.side]
    base = yaml.safe_load(Path(a.scenario).read_text())
    ts = float(base.get("emulation", {}).get("time_scale", 1.0))
    abf = out / "ab.json"
    if a.report_only:
        recs = json.loads(abf.read_text())["runs"]
    else:
        out.mkdir(parents=True, exist_ok=True)
        recs = []
        for s in sides:
            (out / f"{s['name']}.yaml").write_text(yaml.safe_dump(scenario_for(base, s), sort_keys=False))
        for k in range(a.pairs):
            for s in sides:
                rd = out / f"{s['name']}-{k + 1}"
                rec = run_one(out / f"{s['name']}.yaml", s, rd, a.policy)
                recs.append(rec)
                abf.write_text(json.dumps({"scenario": a.scenario, "sides": sides, "runs": recs}, indent=1))
                print(f"[{k + 1}/{a.pairs}] {s['name']}: rc {rec['rc']} load {rec['load_before']:.2f} "
                      f"{rec.get('verdict', rec.get('error', ''))[:80]}", file=sys.stderr, flush=True)
    print(f"{a.scenario}: policy {a.policy}, warm-up {a.warmup}, trace ms")
    print("\n".join(table(recs, sides, a.warmup, 0, ts)))
    for spec in a.length:
        w, _, n = spec.partition(":")
        print(f"-- iterations {w}..{int(w) + int(n) - 1} only:")
        print("\n".join(table(recs, sides, int(w), int(n), ts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
