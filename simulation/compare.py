"""Every policy on one simulated scenario, side by side: kept as a short form of
``python -m analysis compare`` (the one place that runs policies and compares them).

  python -m simulation.compare SCENARIO [--policies fair,optimal,crux,cassini,harmonics]
                               [--out DIR] [--decision-timeout 10] [--decision-budget 120]
                               [--run-timeout 1200] [--max-time S] [--until S]

runs ``python -m analysis compare SCENARIO --run-timeout ...`` with these defaults: each
policy in its own process (``python -m simulation run``), killed after --run-timeout seconds;
a decision slower than --decision-timeout is dropped and the policy is not called again, so
is a policy whose decisions add up to more than --decision-budget seconds.  DIR (default
results/sim-compare-<scenario file name>/<time>) gets compare's report: comparison.csv,
comparison.md, with compare's warm-up rule (the emulator's).  Run in a process of its own, so that the simulator never imports the
analysis package.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

from scheduling.registry import POLICY_NAMES

DEFAULT_POLICIES = list(POLICY_NAMES)


def compare_command(a: argparse.Namespace) -> List[str]:
    """The ``python -m analysis compare`` command line of these arguments."""
    out = a.out or str(Path("results") / f"sim-compare-{Path(a.scenario).stem}"
                       / time.strftime("%Y%m%d-%H%M%S"))
    cmd = [sys.executable, "-m", "analysis", "compare", a.scenario, "--policies", a.policies,
           "--out", out, "--decision-timeout", str(a.decision_timeout),
           "--decision-budget", str(a.decision_budget), "--run-timeout", str(a.run_timeout)]
    if a.max_time:
        cmd += ["--max-time", str(a.max_time)]
    if a.until:
        cmd += ["--until", str(a.until)]
    if a.no_plots:
        cmd.append("--no-plots")
    return cmd


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulation.compare",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    ap.add_argument("--out", default=None,
                    help="default: results/sim-compare-<scenario file name>/<time>")
    ap.add_argument("--decision-timeout", type=float, default=10.0, metavar="S",
                    help="drop a decision that takes more CPU seconds (not wall time)")
    ap.add_argument("--decision-budget", type=float, default=120.0, metavar="S",
                    help="total decision CPU time per run after which the policy is no longer called")
    ap.add_argument("--run-timeout", type=float, default=1200.0, metavar="S")
    ap.add_argument("--max-time", type=float, default=None, metavar="S")
    ap.add_argument("--until", type=float, default=None, metavar="S",
                    help="time-bounded run: every job iterates until this trace time")
    ap.add_argument("--no-plots", action="store_true", help="tables only")
    a = ap.parse_args(argv)
    return subprocess.run(compare_command(a)).returncode


if __name__ == "__main__":
    sys.exit(main())
