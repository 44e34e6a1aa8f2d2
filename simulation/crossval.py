"""Cross-validation: the same scenario and policy, emulated (real TCP on Mininet) and
simulated (fluid model), side by side.

  python -m simulation.crossval SCENARIO [--policy fair] [--runs 1] [--seeds N] [--out DIR]

Prints per-job mean iteration time (trace seconds) from both back ends and their ratio;
the last line is `worst emulated/simulated iteration-time ratio: <number>` (the ratio
farthest from 1).  Needs root and the emulation stack (./scripts/setup.sh).

Both back ends draw the same compute noise (``compute_jitter``, seeded by the scenario's
``seed``).  Where the policy leaves the jobs' offsets free (fair sharing of periodic jobs:
the offset is neutrally stable, docs/phase-control.md), one run's mean depends on where
the noise walked the offset, on either back end: ``--runs N`` emulates seeds seed ..
seed+N-1 and ``--seeds M`` (default: N) simulates seeds seed .. seed+M-1, and the ratio is
of the means over runs.  The run-to-run spread of each side is printed with them.

The emulated links are shaped on whole frames, so they carry the jobs' bytes at 95.6% of
their rate (TCP/IPv4/Ethernet headers, emulation.qos.TCP_PAYLOAD_PER_FRAME); by default the
simulated side's links get that payload rate, so that both carry the same bytes per second
(``--framing none``: the fluid model's full rate).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

from workloads.argtypes import positive_int


def _spread(values: List[float]) -> float:
    """Run-to-run coefficient of variation (0 for one run)."""
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else 0.0


def payload_cluster(sc, fraction: float):
    """The scenario with every link's rate times ``fraction`` (the payload its frames carry)."""
    c = sc.cluster
    return sc.model_copy(update={"cluster": c.model_copy(update={
        "host_link_gbps": c.host_link_gbps * fraction, "uplink_gbps": c.uplink_gbps * fraction})})


def crossval(scenario_path: str, policy: str, out: Path, quiet: bool = False,
             runs: int = 1, seeds: int = 0, framing: bool = True, iterations: int = 0) -> dict:
    """``iterations``: every job runs that many instead of the scenario's (0: as given)."""
    from emulation.qos import TCP_PAYLOAD_PER_FRAME
    from emulation.runner import run_emulation
    from simulation import SimConfig, simulate, write_results
    from simulation.__main__ import load_policy
    from workloads.scenario import load_scenario, resolve

    sc = load_scenario(scenario_path)
    if iterations:
        sc = sc.with_iterations(iterations)
    resolve(sc)                       # a bad scenario fails here, before any run
    seeds = seeds or runs
    payload = TCP_PAYLOAD_PER_FRAME if framing else 1.0

    def tag(kind: str, i: int, n: int) -> Path:
        return out / (kind if n == 1 else f"{kind}-{i + 1}")

    sim: Dict[str, List[float]] = {}
    for i in range(seeds):
        sci = payload_cluster(sc, payload).model_copy(update={"seed": sc.seed + i})
        res = simulate(resolve(sci), load_policy(policy), SimConfig(progress=False))
        if i == 0:                    # the first seed's files; the others enter the means
            write_results(res, out / "simulated")
        for job, row in res.summary_by_job().items():
            sim.setdefault(job, []).append(float(row["mean_iter_s"]))
    emu: Dict[str, List[float]] = {}
    verdicts = []
    for i in range(runs):
        sci = sc.model_copy(update={"seed": sc.seed + i})
        rows = run_emulation(sci, policy, tag("emulated", i, runs), isolated="analytical", quiet=quiet)
        info = json.loads((tag("emulated", i, runs) / "run.json").read_text())
        verdicts.append((info.get("fidelity") or {}).get("verdict", "?"))
        for job, row in rows.items():
            emu.setdefault(job, []).append(float(row["mean_iter_s"]))
    jobs = []
    for job in sorted(emu):
        e, s = statistics.mean(emu[job]), statistics.mean(sim.get(job, [math.nan]))
        jobs.append({"job": job, "emulated_s": e, "simulated_s": s,
                     "ratio": e / s if s > 0 else math.nan,
                     "emulated_runs": emu[job], "simulated_runs": sim.get(job, []),
                     "emulated_cv": _spread(emu[job]), "simulated_cv": _spread(sim.get(job, []))})
    result = {"scenario": sc.name, "policy": policy, "runs": runs, "seeds": seeds,
              "first_seed": sc.seed, "payload_fraction": payload, "fidelity": verdicts, "jobs": jobs}
    (out / "crossval.json").write_text(json.dumps(result, indent=1))
    return result


def worst_ratio(result: dict) -> float:
    return max((r["ratio"] for r in result["jobs"]),
               key=lambda x: abs(math.log(x)) if x > 0 else math.inf)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulation.crossval", description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--policy", default="fair")
    ap.add_argument("--runs", type=int, default=1, help="emulated runs (seeds seed .. seed+runs-1)")
    ap.add_argument("--seeds", type=int, default=0, help="simulated seeds (default: --runs)")
    ap.add_argument("--framing", choices=["tcp", "none"], default="tcp",
                    help="tcp (default): the simulated links carry payload at the emulated "
                         "frames' share of the rate (emulation.qos.TCP_PAYLOAD_PER_FRAME); "
                         "none: at the full rate")
    ap.add_argument("--iterations", type=positive_int, default=0, metavar="N",
                    help="every job runs N iterations instead of the scenario's (e.g. 55 for a "
                         "quicker look at pair-shared-spine)")
    ap.add_argument("--out", default=None, help="keep both runs here (default: a temporary folder)")
    a = ap.parse_args(argv)
    from workloads.scenario import ScenarioError

    if a.runs < 1 or a.seeds < 0:
        print("error: --runs must be at least 1 and --seeds at least 0", file=sys.stderr)
        return 2
    try:
        if a.out:
            out = Path(a.out)
            out.mkdir(parents=True, exist_ok=True)
            res = crossval(a.scenario, a.policy, out, runs=a.runs, seeds=a.seeds,
                               framing=a.framing == "tcp", iterations=a.iterations)
        else:
            with tempfile.TemporaryDirectory(prefix="crossval-") as d:
                res = crossval(a.scenario, a.policy, Path(d), runs=a.runs, seeds=a.seeds,
                               framing=a.framing == "tcp", iterations=a.iterations)
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    spread = res["runs"] > 1 or res["seeds"] > 1
    print(f"{'job':<12} {'emulated s':>11} {'simulated s':>12} {'emu/sim':>8}"
          + (f" {'emu cv':>7} {'sim cv':>7}" if spread else ""))
    for r in res["jobs"]:
        print(f"{r['job']:<12} {r['emulated_s']:11.4f} {r['simulated_s']:12.4f} {r['ratio']:8.3f}"
              + (f" {100 * r['emulated_cv']:6.1f}% {100 * r['simulated_cv']:6.1f}%" if spread else ""))
    if spread:
        print(f"(means over {res['runs']} emulated run(s) and {res['seeds']} simulated seed(s) "
              f"from seed {res['first_seed']})")
    print(f"simulated links carry payload at {100 * res['payload_fraction']:.1f}% of their rate; "
          "emulated run(s): " + "; ".join(res["fidelity"]))
    print(f"worst emulated/simulated iteration-time ratio: {worst_ratio(res):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
