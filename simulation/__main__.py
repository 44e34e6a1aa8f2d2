"""Command line of the flow-level simulator.

  python -m simulation run SCENARIO --policy P [--set KEY=VALUE ...] --out DIR [options]
  python -m simulation generate OUT.yaml --topology lingjun|leaf-spine [options]

``run`` writes the emulator's result files plus links.csv, decisions.csv and run.json (see
simulation.output).  A bad scenario, an unknown policy or bad options: one line on stderr,
exit code 2, nothing written.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

from workloads.argtypes import class_share, positive_float, positive_int
from workloads.scenario import ScenarioError, load_scenario, resolve


class UsageError(Exception):
    pass


def load_policy(name: str, **kw):
    """A policy object by registry name; 'none' = no controller (the network's own max-min
    sharing, which is also what 'fair' decides)."""
    if name == "none":
        return None
    try:
        from scheduling import get_policy
    except ImportError as e:  # pragma: no cover - registry missing
        raise UsageError(f"policy registry unavailable ({e}); use --policy none") from None
    try:
        return get_policy(name, **kw)
    except KeyError as e:
        raise UsageError(str(e.args[0]) if e.args else str(e)) from None
    except TypeError as e:
        raise UsageError(f"policy {name!r}: {e}") from None


def _setting(v: str):
    """KEY=VALUE, the value read as a YAML scalar (0 -> int, 0.5 -> float, false -> bool)."""
    import yaml
    key, sep, val = v.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"{v!r}: expected KEY=VALUE")
    try:
        return key, yaml.safe_load(val)
    except yaml.YAMLError:
        return key, val


def _arrival_kind(v: str) -> str:
    if v in ("none", "poisson", "openb") or (v.startswith("csv:") and len(v) > 4):
        return v
    raise argparse.ArgumentTypeError(f"{v!r}: expected none, poisson, openb or csv:FILE")


def _config(a):
    from .engine import SimConfig
    return SimConfig(epoch_s=a.epoch, bin_s=a.bin, num_classes=a.classes,
                     decision_timeout_s=a.decision_timeout, decision_budget_s=a.decision_budget,
                     max_time_s=a.max_time, until_s=a.until,
                     intra_host_gbps=a.intra_host_gbps, isolated=not a.no_isolated,
                     measured_view=not a.declared_view, progress=not a.quiet, poll_s=a.poll,
                     estimate_profiles=a.estimate_profiles, warmup_iterations=a.warmup)


def add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epoch", type=positive_float, default=None, metavar="S",
                   help="policy epoch in trace seconds (default: emulation.epoch_s / time_scale)")
    p.add_argument("--poll", type=positive_float, default=None, metavar="S",
                   help="counter polling interval for the policy's view (default: epoch / 50)")
    p.add_argument("--bin", type=positive_float, default=None, metavar="S",
                   help="links.csv time bin (default: the epoch)")
    p.add_argument("--classes", type=int, default=4, help="strict-priority classes (default 4)")
    p.add_argument("--decision-timeout", type=positive_float, default=None, metavar="S",
                   help="drop a decision that takes more CPU seconds (the deciding thread's, not wall "
                        "time); the policy is then no longer called")
    p.add_argument("--decision-budget", type=positive_float, default=None, metavar="S",
                   help="total decision CPU time after which the policy is no longer called")
    p.add_argument("--max-time", type=positive_float, default=None, metavar="S",
                   help="stop at this trace time")
    p.add_argument("--until", type=positive_float, default=None, metavar="S",
                   help="time-bounded run: every job iterates until this trace time, whatever "
                        "its `iterations`")
    p.add_argument("--intra-host-gbps", type=positive_float, default=None,
                   help="rate of same-host transfers (default: free)")
    p.add_argument("--no-isolated", action="store_true",
                   help="skip the isolated runs (slowdown_vs_isolated = nan)")
    p.add_argument("--declared-view", action="store_true",
                   help="policies see declared profiles only (no estimation from counters)")
    p.add_argument("--estimate-profiles", action="store_true",
                   help="estimates also replace declared pair bytes and compute time "
                        "(the controller's estimate_profiles option)")
    p.add_argument("--warmup", type=int, default=1, metavar="N",
                   help="first iterations of each job left out of summary.csv's means (default 1; "
                        "python -m analysis compare uses the emulator's rule)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def cmd_run(a) -> int:
    from .engine import simulate
    from .output import write_results
    sc = load_scenario(a.scenario)
    rs = resolve(sc)
    if a.classes < 1:
        raise UsageError("--classes must be >= 1")
    if a.warmup < 0:
        raise UsageError("--warmup must be >= 0")
    settings = dict(a.set or [])
    policy = load_policy(a.policy, **settings)
    cfg = _config(a)
    res = simulate(rs, policy, cfg, policy_name=a.policy)
    extra = {"config": vars(cfg)}
    if settings:
        extra["policy_settings"] = settings
    out = write_results(res, Path(a.out), extra=extra)
    if not a.quiet:
        st = res.stats
        print(f"[sim] {sc.name} / {a.policy}: {st['jobs_finished']}/{st['jobs']} jobs, "
              f"{st['events']} events in {st['wall_s']:.2f} s wall, simulated {st['sim_time_s']:.2f} s "
              f"-> {out}", file=sys.stderr)
    return 0


def cmd_generate(a, argv=None) -> int:
    from .topology import leaf_spine, lingjun_cluster
    from .workload import generate, write_scenario
    from workloads.scenario import check_cluster_size
    try:
        if a.topology == "lingjun":
            spec = lingjun_cluster(gpus_per_host=a.gpus_per_host, host_link_gbps=a.host_link_gbps,
                                   uplink_gbps=a.uplink_gbps or 400.0,
                                   class_guarantee=a.class_guarantee)
        else:
            check_cluster_size(a.racks * a.hosts_per_rack, a.gpus_per_host, a.spines)
            spec = leaf_spine(a.racks, a.hosts_per_rack, a.spines, gpus_per_host=a.gpus_per_host,
                              host_link_gbps=a.host_link_gbps, uplink_gbps=a.uplink_gbps,
                              oversubscription=a.oversubscription,
                              class_guarantee=a.class_guarantee)
    except ValueError as e:   # pydantic's ValidationError included
        raise UsageError(" ".join(str(e).split("\n")[:2])) from None
    name = a.name or Path(a.out).stem
    trace = None
    if a.arrivals not in ("none", "poisson"):
        from .arrivals import load
        trace, _ = load(a.arrivals, a.arrival_columns or "", a.arrival_time_unit, a.arrival_min_gpus)
        print(trace.summary(), file=sys.stderr)
    elif a.arrival_columns or a.arrival_time_unit or a.arrival_trace_gpus:
        raise UsageError("--arrival-columns, --arrival-time-unit and --arrival-trace-gpus need "
                         "--arrivals csv:FILE (or openb)")
    mean = a.mean_interarrival
    if mean is None and (a.arrivals in ("poisson", "openb")):
        mean = 1.0
    sc = generate(spec, a.jobs, iterations=a.iterations, seed=a.seed, placement=a.placement,
                  arrival=a.arrivals, mean_interarrival_s=mean, name=name,
                  epoch_s=a.epoch, use_zoo=not a.synthetic, trace=trace,
                  trace_gpus=a.arrival_trace_gpus)
    cmd = "python -m simulation generate " + " ".join(sys.argv[2:] if argv is None else argv[1:])
    write_scenario(sc, Path(a.out), header=f"Generated by: {cmd}")
    print(f"wrote {a.out}: {len(sc.jobs)} jobs on {spec.racks} racks", file=sys.stderr)
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's own status); --help still shows usage
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: Optional[List[str]] = None) -> int:
    ap = _Parser(prog="python -m simulation", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    r = sub.add_parser("run", help="simulate one scenario under one policy")
    r.add_argument("scenario")
    r.add_argument("--policy", default="fair", help="fair, optimal, crux, cassini, harmonics, none")
    r.add_argument("--set", type=_setting, action="append", metavar="KEY=VALUE",
                   help="a setting of the policy, e.g. --set wide_order=0 for harmonics (its "
                        "settings: scheduling/harmonics/params.py); repeatable, kept in run.json")
    r.add_argument("--out", required=True, help="result directory")
    add_run_options(r)
    g = sub.add_parser("generate", help="write a large simulated scenario")
    g.add_argument("out")
    g.add_argument("--topology", choices=["lingjun", "leaf-spine"], default="leaf-spine")
    g.add_argument("--racks", type=positive_int, default=32)
    g.add_argument("--hosts-per-rack", type=positive_int, default=8)
    g.add_argument("--spines", type=positive_int, default=4)
    g.add_argument("--gpus-per-host", type=positive_int, default=8)
    g.add_argument("--host-link-gbps", type=positive_float, default=200.0)
    g.add_argument("--uplink-gbps", type=positive_float, default=None)
    g.add_argument("--oversubscription", type=positive_float, default=2.0)
    g.add_argument("--class-guarantee", type=class_share, default=None, metavar="F",
                   help="share of a link each lower priority class keeps (cluster.class_guarantee, 0-0.25)")
    g.add_argument("--jobs", type=positive_int, default=100)
    g.add_argument("--iterations", type=positive_int, default=100)
    g.add_argument("--placement", choices=["packed", "first-fit", "fragmented"], default="first-fit")
    g.add_argument("--arrivals", type=_arrival_kind, default="none", metavar="KIND",
                   help="none, poisson, openb, or csv:FILE (any cluster trace; docs/schema.md)")
    g.add_argument("--mean-interarrival", type=positive_float, default=None, metavar="S",
                   help="mean gap between arrivals (poisson, openb: default 1; csv: default "
                        "keeps the trace's arrival rate per GPU)")
    g.add_argument("--arrival-columns", default=None, metavar="ROLE=COL,...",
                   help="trace columns: start, end, duration, gpus, gpu_share, name "
                        "(e.g. start=creation_time,end=deletion_time,gpus=gpu_request)")
    g.add_argument("--arrival-time-unit", choices=["s", "ms", "us", "ns", "min", "h"], default=None,
                   help="unit of the trace's numeric times (default: detected)")
    g.add_argument("--arrival-min-gpus", type=int, default=1, metavar="N",
                   help="skip trace jobs asking for fewer GPUs (default 1)")
    g.add_argument("--arrival-trace-gpus", type=positive_float, default=None, metavar="N",
                   help="GPUs of the trace's cluster (default: its peak demand)")
    g.add_argument("--epoch", type=positive_float, default=2.0, metavar="S")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--name", default=None)
    g.add_argument("--synthetic", action="store_true", help="synthetic profiles, not the zoo")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "generate" and a.arrival_min_gpus < 1:
            raise UsageError("--arrival-min-gpus must be at least 1")
        if a.cmd == "run":
            return cmd_run(a)
        return cmd_generate(a, argv)
    except (ScenarioError, UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
