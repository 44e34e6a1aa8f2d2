"""Cross-validation: the same scenario and policy, emulated (real TCP on Mininet) and
simulated (fluid model), side by side.

  python -m simulation.crossval SCENARIO [--policy fair] [--out DIR]

Prints per-job mean iteration time (trace seconds) from both back ends and their ratio;
the last line is `worst emulated/simulated iteration-time ratio: <number>` (the ratio
farthest from 1).  Needs root and the emulation stack (./scripts/setup.sh).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path


def crossval(scenario_path: str, policy: str, out: Path, quiet: bool = False) -> dict:
    from emulation.runner import run_emulation
    from simulation import SimConfig, simulate, write_results
    from simulation.__main__ import load_policy
    from workloads.scenario import load_scenario, resolve

    sc = load_scenario(scenario_path)
    rs = resolve(sc)
    sim = simulate(rs, load_policy(policy), SimConfig(progress=False))
    write_results(sim, out / "simulated")
    sim_rows = sim.summary_by_job()
    emu_rows = run_emulation(sc, policy, out / "emulated", isolated="analytical", quiet=quiet)
    rows = []
    for job in sorted(emu_rows):
        e = emu_rows[job]["mean_iter_s"]
        s = float(sim_rows[job]["mean_iter_s"])
        rows.append({"job": job, "emulated_s": e, "simulated_s": s,
                     "ratio": e / s if s > 0 else math.nan})
    res = {"scenario": sc.name, "policy": policy, "jobs": rows}
    (out / "crossval.json").write_text(json.dumps(res, indent=1))
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulation.crossval", description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--policy", default="fair")
    ap.add_argument("--out", default=None, help="keep both runs here (default: a temporary folder)")
    a = ap.parse_args(argv)
    from workloads.scenario import ScenarioError

    try:
        if a.out:
            out = Path(a.out)
            out.mkdir(parents=True, exist_ok=True)
            res = crossval(a.scenario, a.policy, out)
        else:
            with tempfile.TemporaryDirectory(prefix="crossval-") as d:
                res = crossval(a.scenario, a.policy, Path(d))
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{'job':<12} {'emulated s':>11} {'simulated s':>12} {'emu/sim':>8}")
    for r in res["jobs"]:
        print(f"{r['job']:<12} {r['emulated_s']:11.4f} {r['simulated_s']:12.4f} {r['ratio']:8.3f}")
    worst = max((r["ratio"] for r in res["jobs"]), key=lambda x: abs(math.log(x)) if x > 0 else math.inf)
    print(f"worst emulated/simulated iteration-time ratio: {worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
