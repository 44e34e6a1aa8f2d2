"""Command line: compare policies on a scenario, (re)generate the report of a results directory.

  python -m analysis compare SCENARIO [--policies fair,harmonics,...] [--out DIR] [--iterations N]
                             [--isolated measured|analytical] [--decision-timeout S] [--decision-budget S]
                             [--max-time S] [--until S] [--bin S] [--bench-csv FILE] [--no-plots]
  python -m analysis compare SCENARIO --runs N [the options above]   (N comparisons, 95% CIs)
  python -m analysis report DIR [--bin S] [--bench-csv FILE] [--no-plots]
  python -m analysis serve RUN_DIR [--port N]    (the live view of a finished run, 127.0.0.1)
  python -m analysis sweep SWEEP.yaml [--address auto|HOST:PORT] [--resume] [--max-parallel N]
                           [--out DIR] [--no-plots]      (a grid of runs on Ray; analysis/sweep.py)

Errors found before anything runs (bad scenario, unknown policy, bad options, a results
directory that cannot be read): one line on stderr, exit code 2, nothing written.
compare exits 1 if a policy failed (the report says which), 130 if interrupted.
See docs/experiments.md.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

from workloads.argtypes import positive_float, positive_int
from emulation.jobspec import WARMUP_ITERATIONS


class _Parser(argparse.ArgumentParser):
    def error(self, message):                 # one line, exit 2 (argparse prints usage too)
        self.exit(2, f"error: {message}\n")


REFERENCE_BENCH = Path(__file__).resolve().parent.parent / "results" / "reference" / "decision_time.csv"


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = _Parser(prog="python -m analysis", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    c = sub.add_parser("compare", help="run every policy on a scenario, then write the report")
    c.add_argument("scenario", help="scenario YAML (its `backend` picks emulator or simulator)")
    c.add_argument("--policies", default=None,
                   help="comma-separated (default: the scenario's `policies`)")
    c.add_argument("--out", default=None, help="results directory (default results/<scenario>/<time>)")
    c.add_argument("--iterations", type=positive_int, default=None, metavar="N",
                   help=f"every job runs N iterations instead of the scenario's (the first "
                        f"{WARMUP_ITERATIONS} are warm-up): a quick look, or a longer, more precise run")
    c.add_argument("--isolated", choices=["measured", "analytical"], default="measured",
                   help="emulator: where the isolated iteration time (slowdown) comes from")
    c.add_argument("--decision-timeout", type=positive_float, default=None, metavar="S",
                   help="simulator: drop a decision that takes more CPU seconds than this (then hold "
                        "the last ones; the deciding thread's CPU time, not wall time)")
    c.add_argument("--decision-budget", type=positive_float, default=None, metavar="S",
                   help="simulator: total CPU seconds a policy may spend deciding in one run (then "
                        "hold its last decisions; CPU time, not wall time)")
    c.add_argument("--max-time", type=positive_float, default=None, metavar="S",
                   help="simulator: stop at this trace time")
    c.add_argument("--until", type=positive_float, default=None, metavar="S",
                   help="simulator: a time-bounded run: every job iterates from its arrival "
                        "until trace time S, whatever its `iterations` (steady-state figures "
                        "for mixes of jobs of very different lengths)")
    c.add_argument("--run-timeout", type=positive_float, default=None, metavar="S",
                   help="simulator: run each policy in its own process and kill it after S "
                        "seconds of wall time (that run fails, the next one runs)")
    c.add_argument("--runs", type=positive_int, default=1, metavar="N",
                   help="run the whole comparison N times (DIR/run1 .. runN) and report each "
                        "figure as a mean with its 95%% confidence interval (DIR/repeats.md)")
    r = sub.add_parser("report", help="(re)generate the report from the files of a results directory")
    r.add_argument("dir")
    for p in (c, r):
        p.add_argument("--no-plots", action="store_true", help="tables only")
        p.add_argument("--bin", type=positive_float, default=None, metavar="S",
                       help="capture throughput bin, trace seconds (default: epoch / 10)")
        p.add_argument("--bench-csv", default=None, metavar="FILE",
                       help="decision times at other cluster sizes: CSV with gpus, policy, decision_ms "
                            "(compare's default: results/reference/decision_time.csv, written by "
                            "`python -m scheduling.bench --csv`; it is copied into DIR, where "
                            "report finds it)")
    from .serve import port_arg
    v = sub.add_parser("serve", help="serve the live view's page and API for a finished run (127.0.0.1)")
    v.add_argument("dir", help="one run's directory (emulated or simulated)")
    v.add_argument("--port", type=port_arg, default=0, help="port on 127.0.0.1 (default: a free one)")
    s = sub.add_parser("sweep", help="a grid of scenarios x policies x seeds on Ray (see docs/schema.md)")
    s.add_argument("sweep", help="sweep YAML, e.g. sweeps/oversubscription.yaml")
    s.add_argument("--address", default=None, metavar="auto|HOST:PORT",
                   help="join a running Ray cluster (default: start Ray on this machine)")
    s.add_argument("--resume", action="store_true",
                   help="continue the latest run of this sweep (or --out DIR): skip completed runs")
    s.add_argument("--max-parallel", type=positive_int, default=None, metavar="N",
                   help="at most N runs at a time (default: as many as the cluster's CPUs)")
    s.add_argument("--out", default=None, help="results directory (default results/sweeps/NAME/<time>)")
    s.add_argument("--no-plots", action="store_true", help="tables only")
    a = ap.parse_args(argv)
    if a.cmd == "serve":
        from .serve import cmd_serve
        return cmd_serve(a.dir, a.port)
    if a.cmd == "sweep":
        from .sweep import run_sweep
        return run_sweep(a.sweep, address=a.address, resume=a.resume, max_parallel=a.max_parallel,
                         out=a.out, plots=not a.no_plots, argv=argv[1:])
    if a.cmd == "compare" and a.bench_csv is None and REFERENCE_BENCH.is_file():
        a.bench_csv = str(REFERENCE_BENCH)   # copied into DIR: the report stays self-contained
    from .results import ReportError
    try:
        if a.cmd == "compare":
            from .compare import run_compare
            opts = {"isolated": a.isolated, "decision_timeout": a.decision_timeout,
                    "decision_budget": a.decision_budget,
                    "max_time": a.max_time, "until": a.until, "bin_s": a.bin, "bench_csv": a.bench_csv,
                    "plots": not a.no_plots}
            if a.iterations is not None:
                opts["iterations"] = a.iterations
            if a.run_timeout is not None:
                opts["run_timeout"] = a.run_timeout
            if a.runs > 1:
                from .repeats import run_repeats
                return run_repeats(a.scenario, a.policies, a.out, opts, a.runs, argv=argv[1:])
            return run_compare(a.scenario, a.policies, a.out, opts, argv=argv[1:])
        from .repeats import aggregate, is_repeats_dir
        if is_repeats_dir(a.dir):
            from .repeats import summary_text as repeats_text
            print(repeats_text(aggregate(a.dir, plots=not a.no_plots)))
            return 0
        from .markdown import summary_text
        from .report import generate_report
        rep = generate_report(a.dir, bin_s=a.bin, bench_csv=a.bench_csv, plots=not a.no_plots)
        print(summary_text(rep))
        return 0
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
