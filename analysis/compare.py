"""Run every policy of a scenario on its back end, then write the report.

    python -m analysis compare SCENARIO [--policies fair,harmonics,...] [--out DIR]
                               [--iterations N]                      (both back ends)
                               [--isolated measured|analytical]       (emulator)
                               [--decision-timeout S] [--decision-budget S] [--max-time S]
                               [--until S] [--run-timeout S]          (simulator)

Policies default to the scenario's ``policies``.  Each runs into DIR/<policy>/ (DIR default
results/<scenario name>/<YYYYmmdd-HHMMSS>/): the emulator through
``emulation.runner.run_emulation`` (root, Mininet), the simulator through
``simulation.simulate`` + ``simulation.write_results`` (with --run-timeout: each policy in its
own process, ``python -m simulation run``, killed after that many seconds).  A policy that
fails is recorded (DIR/compare.json) and the next one runs.  --until S makes a time-bounded
run: every job iterates from its arrival until trace time S, whatever its ``iterations``, so
that no job's figures mix in iterations it ran after its neighbours had finished.
--iterations N runs every job N iterations instead of the scenario's (the first
``WARMUP_ITERATIONS`` are warm-up): a shorter look, or a longer and more precise run, of the
same scenario; DIR/scenario.yaml records the length that ran.
DIR/compare.json says what ran and how it went; then ``analysis.report.generate_report(DIR)``
writes the report and its summary is printed.

Everything that can be checked before running is: a bad scenario, an unknown policy, an
emulator scenario the emulator cannot hold, an emulator run without root, a simulator
option for an emulated scenario, or a non-empty --out all print one line and exit 2 with
nothing written.
"""
from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Dict, List, Optional

from runs.files import atomic_write_json
from workloads.scenario import Scenario, ScenarioError, dump_scenario, load_scenario, resolve


class CompareError(ValueError):
    """A problem found before anything runs.  str() is one line."""


def progress(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def known_policies(backend: str) -> List[str]:
    from scheduling.registry import POLICIES
    names = list(POLICIES)
    if backend == "simulation":
        names.append("none")       # the simulator's "no controller at all"
    return names


def parse_policies(arg: Optional[str], sc: Scenario) -> List[str]:
    pols = [p.strip() for p in arg.split(",")] if arg is not None else list(sc.policies)
    pols = [p for p in pols if p]
    if not pols:
        raise CompareError("--policies: no policy given" if arg is not None
                           else f"{sc.name}: the scenario lists no policies (use --policies)")
    known = known_policies(sc.backend)
    bad = [p for p in pols if p not in known]
    if bad:
        raise CompareError(f"unknown policy {bad[0]!r} for the {sc.backend} back end "
                           f"(known: {', '.join(known)})")
    dup = sorted({p for p in pols if pols.count(p) > 1})
    if dup:
        raise CompareError(f"policy {dup[0]!r} given twice")
    return pols


def preflight(sc: Scenario) -> None:
    """What would make every run fail: check it before anything runs."""
    rs = resolve(sc)
    if not rs.jobs:
        raise CompareError(f"{sc.name}: the scenario has no jobs to run")
    if sc.backend == "emulation":
        from emulation.topo import check_emulable
        check_emulable(rs.cluster, sc.emulation)
        if os.geteuid() != 0:
            raise CompareError("the emulator back end needs root (Mininet): run with sudo, "
                               "or set `backend: simulation` in the scenario")


def default_out(sc: Scenario) -> Path:
    return Path("results") / sc.name / time.strftime("%Y%m%d-%H%M%S")


def run_one_emulation(sc: Scenario, policy: str, out: Path, opts: dict) -> str:
    from emulation.runner import run_emulation
    rows = run_emulation(sc, policy, out, isolated=opts.get("isolated", "measured"))
    bad = [k for k, r in rows.items() if not math.isfinite(r.get("mean_iter_s", math.nan))]
    info = {}
    try:
        info = json.loads((out / "run.json").read_text())
    except (OSError, ValueError):
        pass
    verdict = (info.get("fidelity") or {}).get("verdict", "")
    if verdict.startswith("suspect"):
        progress(f"warning: {policy}: this run is {verdict}")
    if info.get("failures"):
        return "partial: " + "; ".join(info["failures"])[:300]
    return f"partial: no iterations for {', '.join(bad)}" if bad else "ok"


def run_one_simulation(sc: Scenario, policy: str, out: Path, opts: dict) -> str:
    from scheduling import get_policy
    from emulation.jobspec import WARMUP_ITERATIONS
    from simulation import SimConfig, simulate, write_results
    cfg = SimConfig(decision_timeout_s=opts.get("decision_timeout"), max_time_s=opts.get("max_time"),
                    until_s=opts.get("until"),
                    decision_budget_s=opts.get("decision_budget"), progress=False,
                    warmup_iterations=WARMUP_ITERATIONS)   # the emulator's warm-up rule
    pol = None if policy == "none" else get_policy(policy)      # none: no controller at all
    res = simulate(resolve(sc), pol, cfg, policy_name=policy)
    write_results(res, out, extra={"config": vars(cfg), "by": "python -m analysis compare"})
    return _simulation_status(res.stats, opts)


def run_one_simulation_process(sc: Scenario, policy: str, out: Path, opts: dict) -> str:
    """The simulator in its own process (``python -m simulation run``), killed after
    ``opts["run_timeout"]`` seconds of wall time (then this run fails and the next one runs).
    Used for the simulator when --run-timeout is given."""
    import subprocess
    from emulation.jobspec import WARMUP_ITERATIONS
    limit = float(opts["run_timeout"])
    cmd = [sys.executable, "-m", "simulation", "run", str(out.parent / "scenario.yaml"),
           "--policy", policy, "--out", str(out), "--quiet",
           "--warmup", str(WARMUP_ITERATIONS)]           # the emulator's warm-up rule, as in-process
    for key, flag in (("decision_timeout", "--decision-timeout"),
                      ("decision_budget", "--decision-budget"), ("max_time", "--max-time"),
                      ("until", "--until")):
        if opts.get(key) is not None:
            cmd += [flag, str(opts[key])]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"run killed after {limit:.0f} s (--run-timeout)") from None
    if p.returncode != 0:
        err = p.stderr.strip().splitlines()
        raise RuntimeError(err[-1] if err else f"python -m simulation run: exit {p.returncode}")
    return _simulation_status(json.loads((out / "run.json").read_text()).get("stats") or {}, opts)


def _simulation_status(st: dict, opts: dict) -> str:
    """'ok'; 'ok: <how it stopped>' (--until or --max-time reached with jobs running, as
    asked; the report's wording, analysis.results.stop_note); or 'partial: ...' (jobs left
    unfinished otherwise, e.g. a failed link they needed)."""
    from .results import stop_note, stop_time
    left = st.get("jobs", 0) - st.get("jobs_finished", 0)
    if left <= 0:
        return "ok"
    stopped, bounded = stop_time({"stats": st, "config": {"until_s": opts.get("until"),
                                                          "max_time_s": opts.get("max_time")}})
    if stopped is None:
        return f"partial: {left} of {st['jobs']} jobs unfinished"
    return f"ok: {stop_note(stopped, bounded, left)}"


def run_status(detail: str) -> str:
    """A runner's returned detail as a run record's status: 'ok' or 'partial'."""
    return "ok" if detail.startswith("ok") else "partial"


RUNNERS: Dict[str, Callable[[Scenario, str, Path, dict], str]] = {
    "emulation": run_one_emulation,
    "simulation": run_one_simulation,
}


# compare.json and the other records of a results directory: written atomically (runs.files)
write_json = atomic_write_json


def command_line(argv: Optional[List[str]], default: List[str]) -> str:
    """The compare command as the user typed it (``default``: its arguments if argv is None)."""
    return "python -m analysis compare " + " ".join(shlex.quote(a) for a in (argv or default))


def _write_state(out: Path, state: dict) -> None:
    write_json(out / "compare.json", state)


# options that only the simulator has (compare rejects them for an emulated scenario)
SIMULATOR_ONLY = (("decision_timeout", "--decision-timeout"), ("decision_budget", "--decision-budget"),
                  ("max_time", "--max-time"), ("until", "--until"), ("run_timeout", "--run-timeout"))


def check_compare(scenario_path, policies: Optional[str], out: Optional[str], opts: dict,
                  runners: dict, default=None):
    """Everything ``compare`` checks before it writes anything: (scenario, policies, DIR).
    Raises ScenarioError or CompareError (one line).  ``default``: DIR when --out is not
    given (default_out)."""
    sc = load_scenario(scenario_path)
    if opts.get("iterations") is not None:
        from emulation.jobspec import WARMUP_ITERATIONS
        if opts["iterations"] <= WARMUP_ITERATIONS:
            raise CompareError(f"--iterations {opts['iterations']}: give more than the "
                               f"{WARMUP_ITERATIONS} warm-up iterations every summary leaves out")
        sc = sc.with_iterations(opts["iterations"])
    pols = parse_policies(policies, sc)
    if sc.backend != "simulation":
        given = [flag for key, flag in SIMULATOR_ONLY if opts.get(key) is not None]
        if given:
            raise CompareError(f"{', '.join(given)}: simulator option(s), and {scenario_path} "
                               f"runs on the {sc.backend} back end")
    if runners[sc.backend] in (RUNNERS[sc.backend], run_one_simulation_process):
        preflight(sc)
    if opts.get("bench_csv") and not Path(opts["bench_csv"]).is_file():
        raise CompareError(f"--bench-csv: {opts['bench_csv']}: no such file")
    d = Path(out) if out else (default or default_out)(sc)
    if d.exists() and (not d.is_dir() or any(d.iterdir())):
        raise CompareError(f"--out: {d} exists and is not empty")
    return sc, pols, d


def run_compare(scenario_path, policies: Optional[str] = None, out: Optional[str] = None,
                opts: Optional[dict] = None, runners: Optional[dict] = None,
                argv: Optional[List[str]] = None, summary: bool = True) -> int:
    """The compare command (see the module docstring).  ``runners`` replaces the back ends'
    run functions (backend -> f(scenario, policy, out_dir, opts) -> status), for tests.
    ``summary`` False: the report is written but its table not printed."""
    from .markdown import summary_text
    from .report import BENCH_COPY, generate_report
    from .results import ReportError
    opts = opts or {}
    runners = {**RUNNERS, **(runners or {})}
    if opts.get("run_timeout") and runners["simulation"] is run_one_simulation:
        runners["simulation"] = run_one_simulation_process   # one process per policy, killed at the limit
    try:
        sc, pols, d = check_compare(scenario_path, policies, out, opts, runners)
    except (ScenarioError, CompareError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    d.mkdir(parents=True, exist_ok=True)
    (d / "scenario.yaml").write_text(dump_scenario(sc))
    cmd = command_line(argv, [str(scenario_path)])
    state = {"scenario": sc.name, "scenario_path": str(scenario_path), "backend": sc.backend,
             "policies": pols, "command": cmd, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
             "options": opts, "runs": {p: {"status": "pending"} for p in pols}}
    _write_state(d, state)
    progress(f"{sc.name}: {len(pols)} policies on the {sc.backend} back end -> {d}")
    interrupted = False
    for i, p in enumerate(pols, 1):
        progress(f"[{i}/{len(pols)}] {p} ...")
        t0 = time.time()
        rec = state["runs"][p] = {"status": "running"}
        _write_state(d, state)
        try:
            status = runners[sc.backend](sc, p, d / p, opts)
            rec.update(status=run_status(status), detail=status)
        except KeyboardInterrupt:
            rec.update(status="interrupted", error="interrupted (Ctrl-C)")
            interrupted = True
        except Exception as e:                     # noqa: BLE001 - recorded, the next one runs
            msg = " ".join(f"{type(e).__name__}: {e}".split())
            rec.update(status="failed", error=msg[:500],
                       traceback=traceback.format_exc(limit=8)[-3000:])
        rec["wall_s"] = round(time.time() - t0, 2)
        _write_state(d, state)
        line = f"[{i}/{len(pols)}] {p} {rec['status']} in {rec['wall_s']:.1f} s"
        why = rec.get("error") or rec.get("detail", "ok")
        if why != "ok":
            line += f": {why[4:] if why.startswith('ok: ') else why}"
        progress(line)
        if interrupted:
            for q in pols[i:]:
                state["runs"][q] = {"status": "interrupted", "error": "not run (interrupted)"}
            break
    state["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    _write_state(d, state)
    bench = opts.get("bench_csv")
    if bench:
        shutil.copyfile(bench, d / BENCH_COPY)
    try:
        rep = generate_report(d, bin_s=opts.get("bin_s"), bench_csv=d / BENCH_COPY if bench else None,
                              plots=opts.get("plots", True))
    except ReportError as e:
        print(f"error: report: {e}", file=sys.stderr)
        return 1
    if summary:
        print(summary_text(rep))
    suspect = [r.policy for r in rep.runs if r.fidelity.startswith("suspect")]
    if suspect:
        progress(f"warning: {len(suspect)} run(s) suspect ({', '.join(suspect)}): see the fidelity "
                 f"lines at the top of {d / 'comparison.md'}")
    if interrupted:
        return 130
    return 0 if all(r["status"] == "ok" for r in state["runs"].values()) else 1
