"""What the report reads: a results directory's scenario and, per policy, its jobs'
iteration times, the controller's epochs and the captures (see ``analysis.report`` for the
files and the conventions).  Loading only: the tables are built in ``analysis.comparison``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import yaml

from runs.summary import corun_mean, corun_window, job_summary, steady_from

from .captures import PcapCheck, load_captures, priority_check
from .tables import finite, fmt_s, num, policy_order, ratio, read_csv

WARMUP_ITERATIONS = 1          # results that do not record their warm-up used this
RESULT_FILES = ("summary.csv", "iterations.csv", "run.json", "decisions.jsonl", "decisions.csv")


class ReportError(RuntimeError):
    """The directory cannot be reported on.  str() is one line."""



# ---------------------------------------------------------------------------
# the scenario
# ---------------------------------------------------------------------------

@dataclass
class ScenarioInfo:
    name: str = "?"
    description: str = ""
    backend: str = "?"
    time_scale: float = 1.0
    bandwidth_scale: float = 1000.0
    epoch_s: float = 1.0                   # emulated seconds (the scenario's emulation.epoch_s)
    racks: int = 0
    hosts: int = 0
    spines: int = 0
    gpus: int = 0
    uplink_gbps: float = math.nan
    host_link_gbps: float = math.nan
    class_guarantee: Optional[float] = None   # cluster.class_guarantee (None: the back end's own)
    arrivals: Dict[str, float] = field(default_factory=dict)     # trace s
    iterations: Dict[str, int] = field(default_factory=dict)
    path: Optional[Path] = None

    @property
    def bytes_scale(self) -> float:
        return self.bandwidth_scale / self.time_scale

    def neighbours(self) -> Dict[str, set]:
        """job -> the jobs sharing one of its link groups (analysis.limit.link_neighbours,
        computed once); {} when the scenario cannot be resolved."""
        if "_neighbours" not in self.__dict__:
            from .limit import link_neighbours
            self.__dict__["_neighbours"] = link_neighbours(self.path) if self.path else {}
        return self.__dict__["_neighbours"]


def read_scenario_info(path: Path) -> ScenarioInfo:
    """The few scenario fields the report needs, read from the YAML as run (no validation:
    a report must not depend on the schema of the day)."""
    try:
        d = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ReportError(f"{path}: cannot read the scenario ({e})") from None
    if not isinstance(d, dict):
        raise ReportError(f"{path}: not a scenario (no mapping at the top level)")
    emu = d.get("emulation") or {}
    cl = d.get("cluster") or {}
    hpr = cl.get("hosts_per_rack", 0)
    racks = int(cl.get("racks", 0) or 0)
    hosts = sum(hpr) if isinstance(hpr, list) else racks * int(hpr or 0)
    jobs = [j for j in d.get("jobs") or [] if isinstance(j, dict) and "name" in j]
    return ScenarioInfo(
        name=str(d.get("name", "?")), description=" ".join(str(d.get("description", "")).split()),
        backend=str(d.get("backend", "emulation")),
        time_scale=float(emu.get("time_scale", 1.0)),
        bandwidth_scale=float(emu.get("bandwidth_scale", 1000.0)),
        epoch_s=float(emu.get("epoch_s", 1.0)),
        racks=racks, hosts=hosts, spines=int(cl.get("spines", 1) or 1),
        gpus=hosts * int(cl.get("gpus_per_host", 1) or 1),
        uplink_gbps=num(cl.get("uplink_gbps")), host_link_gbps=num(cl.get("host_link_gbps")),
        class_guarantee=None if cl.get("class_guarantee") is None else num(cl.get("class_guarantee")),
        arrivals={j["name"]: float(j.get("arrival_s", 0.0) or 0.0) for j in jobs},
        iterations={j["name"]: int(j["iterations"]) for j in jobs if "iterations" in j},
        path=Path(path))


# ---------------------------------------------------------------------------
# one policy's run
# ---------------------------------------------------------------------------

@dataclass
class JobResult:
    job: str
    iterations: int = 0
    mean_iter_s: float = math.nan
    p99_iter_s: float = math.nan
    mean_comm_s: float = math.nan
    jct_s: float = math.nan
    isolated_iter_s: float = math.nan
    slowdown: float = math.nan
    finished: bool = True
    notes: List[str] = field(default_factory=list)
    corun_iter_s: float = math.nan       # mean iteration while its link neighbours ran (_corun)
    corun_iterations: int = 0

    @property
    def corun_slowdown(self) -> float:
        return ratio(self.corun_iter_s, self.isolated_iter_s)


@dataclass
class Epoch:
    epoch: int
    time_s: float                  # trace seconds since the run's start
    decision_ms: float
    status: str
    active: List[str]
    priority: Dict[str, int]       # job -> class of the jobs the policy decided on



@dataclass
class PolicyRun:
    policy: str
    path: Path
    status: str = "ok"
    failed: bool = False
    backend: str = "?"
    jobs: Dict[str, JobResult] = field(default_factory=dict)
    # (job, worker, iteration, start_s, compute_s, comm_s, end_s) as in iterations.csv
    iterations: List[tuple] = field(default_factory=list)
    epochs: List[Epoch] = field(default_factory=list)
    captures: Dict[str, object] = field(default_factory=dict)   # link -> PcapAnalysis
    bottleneck: Optional[str] = None
    capture_note: str = ""
    pcap_t0: Optional[float] = None
    checks: List[PcapCheck] = field(default_factory=list)
    # captures pruned (committed references): the rows an earlier report drew from them,
    # (pcap_jobs rows, pcap_check rows) with their figures typed
    kept_pcap: Optional[Tuple[List[dict], List[dict]]] = None
    links: List[dict] = field(default_factory=list)             # simulator's links.csv
    notes: List[str] = field(default_factory=list)
    warmup: int = WARMUP_ITERATIONS                             # iterations left out per job
    fidelity: str = ""                                          # emulator: the run's verdict
    stopped_s: Optional[float] = None     # the simulator stopped here with jobs running (--max-time, --until)
    time_bounded: bool = False            # --until: every job iterated until stopped_s

    @property
    def has_results(self) -> bool:
        return bool(self.jobs)

    def decision_ms(self) -> np.ndarray:
        return np.array([e.decision_ms for e in self.epochs if finite(e.decision_ms)])

    def iteration_times(self, job: Optional[str] = None, warmup: bool = False) -> np.ndarray:
        return np.array([r[6] - r[3] for r in self.iterations
                         if (job is None or r[0] == job) and (warmup or r[2] >= self.steady_from(r[0]))])

    def steady_from(self, job: str) -> int:
        """First iteration a job's means count: after the warm-up, unless the job ran no more
        iterations than the warm-up (then all count)."""
        cache = self.__dict__.setdefault("_steady", {})
        if job not in cache:
            cache[job] = steady_from(len({r[2] for r in self.iterations if r[0] == job}), self.warmup)
        return cache[job]


def _load_iterations(path: Path) -> List[tuple]:
    out = []
    for r in read_csv(path):
        try:
            out.append((r["job"], r["worker"], int(r["iteration"]), float(r["start_s"]),
                        float(r["compute_s"]), float(r["comm_s"]), float(r["end_s"])))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def _job_results(run: PolicyRun, sc: ScenarioInfo, summary: Dict[str, dict],
                 isolated: Dict[str, float]) -> None:
    names = list(dict.fromkeys([r[0] for r in run.iterations] + list(summary)))
    for name in names:
        jr = JobResult(name)
        rows = [r for r in run.iterations if r[0] == name]
        srow = summary.get(name, {})
        iso = isolated.get(name, math.nan)
        if not finite(iso):
            iso = ratio(num(srow.get("mean_iter_s")), num(srow.get("slowdown_vs_isolated")))
        jr.isolated_iter_s = iso
        if rows:                                     # the figures of the back ends' summary.csv
            st = job_summary(rows, run.warmup, isolated_s=iso)
            jr.iterations = st["iterations"]
            jr.mean_iter_s, jr.p99_iter_s = st["mean_iter_s"], st["p99_iter_s"]
            jr.mean_comm_s, jr.jct_s = st["mean_comm_s"], st["jct_s"]
            jr.slowdown = st["slowdown_vs_isolated"]
            s_mean = num(srow.get("mean_iter_s"))
            if finite(s_mean) and abs(s_mean - jr.mean_iter_s) > 1e-3 * max(abs(s_mean), 1e-9):
                jr.notes.append(f"summary.csv says mean {fmt_s(s_mean)} s")
        elif srow:                                   # no iterations.csv: the back end's numbers
            n = num(srow.get("iterations"))
            jr.iterations = int(n) if finite(n) else 0
            jr.mean_iter_s = num(srow.get("mean_iter_s"))
            jr.p99_iter_s = num(srow.get("p99_iter_s"))
            jr.mean_comm_s = num(srow.get("mean_comm_s"))
            jr.jct_s = num(srow.get("jct_s"))
            jr.slowdown = ratio(jr.mean_iter_s, iso)
            jr.notes.append("from summary.csv (no iterations.csv)")
        want = sc.iterations.get(name)
        if run.time_bounded:                         # every job ran until the stop
            jr.finished, jr.jct_s = False, math.nan
        elif want is not None and jr.iterations < want:
            jr.finished = False
            jr.jct_s = math.nan
            state = "running at the stop" if run.stopped_s is not None else "unfinished"
            jr.notes.append(f"{state} ({jr.iterations}/{want} iterations)")
        run.jobs[name] = jr
    _corun(run, sc)


def _corun(run: PolicyRun, sc: ScenarioInfo) -> None:
    """Every job's mean iteration time while every job it shares a link group with was
    running (all the run's jobs when the scenario cannot be resolved; a job that shares
    nothing: its plain mean; nan for a job with too few such iterations)."""
    by_job: Dict[str, List[tuple]] = {}
    for r in run.iterations:
        by_job.setdefault(r[0], []).append(r)
    nb = sc.neighbours()
    until = ({n: run.stopped_s for n, j in run.jobs.items() if not j.finished}
             if run.stopped_s is not None else {})
    for name, jr in run.jobs.items():
        rows = by_job.get(name, [])
        peers = nb.get(name) if nb else set(by_job) - {name}
        peers = {m for m in (peers or ()) if by_job.get(m)}
        if not peers:
            jr.corun_iter_s = jr.mean_iter_s
            jr.corun_iterations = len({r[2] for r in rows if r[2] >= run.steady_from(name)})
            continue
        window = corun_window({m: by_job.get(m, []) for m in peers | {name}}, sc.arrivals, run.warmup,
                              until)
        jr.corun_iter_s, jr.corun_iterations = corun_mean(
            rows, sc.arrivals.get(name, 0.0), window, run.warmup)


def _load_epochs_jsonl(path: Path, ts: float) -> Tuple[List[Epoch], int]:
    out, bad = [], 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            pri = {j: int(d["priority"]) for j, d in (rec.get("decisions") or {}).items()
                   if isinstance(d, dict) and "priority" in d}
            out.append(Epoch(int(rec.get("epoch", len(out))), float(rec["time_s"]) / ts,
                             num(rec.get("decision_ms")), "ok", list(rec.get("active_jobs") or []), pri))
        except (ValueError, KeyError, TypeError, AttributeError):
            bad += 1
    return out, bad


def _load_epochs_csv(path: Path) -> List[Epoch]:
    by: Dict[str, Epoch] = {}
    for r in read_csv(path):
        k = r.get("epoch", "")
        e = by.get(k)
        if e is None:
            status = r.get("status", "ok") or "ok"
            ms = num(r.get("decision_ms")) if status not in ("disabled", "no policy") else math.nan
            e = by[k] = Epoch(int(num(k)) if finite(num(k)) else len(by), num(r.get("time_s")),
                              ms, status, [], {})
        job = r.get("job") or ""
        if job:
            e.active.append(job)
            if finite(num(r.get("priority"))):
                e.priority[job] = int(num(r["priority"]))
    return list(by.values())


# the typed columns of pcap_jobs.csv / pcap_check.csv (the others stay text)
_PCAP_FLOATS = {"trace_mb", "share", "peak_gbps", "epoch_seconds", "higher_mb_epochs",
                "lower_mb_epochs", "bin_s", "higher_mb_both", "lower_mb_both",
                "higher_gbps_both", "lower_gbps_both"}
_PCAP_INTS = {"epochs", "bins_both", "bins_higher_more"}


def _typed_pcap_row(r: dict) -> dict:
    out = dict(r)
    for k, v in r.items():
        if k in _PCAP_FLOATS:
            out[k] = num(v)
        elif k in _PCAP_INTS:
            x = num(v)
            out[k] = int(x) if finite(x) else v
        elif k == "same_class":
            out[k] = v == "True"
    return out


def _kept_capture_rows(run: PolicyRun, d: Path) -> None:
    """A run whose captures were pruned (the committed references keep no pcaps): the rows
    the report drew from them before, from DIR/pcap_jobs.csv and pcap_check.csv, so that
    reporting the directory again keeps them."""
    rows = {}
    for name in ("pcap_jobs.csv", "pcap_check.csv"):
        f = d / name
        rows[name] = ([_typed_pcap_row(r) for r in read_csv(f) if r.get("policy") == run.policy]
                      if f.is_file() else [])
    if rows["pcap_jobs.csv"] or rows["pcap_check.csv"]:
        run.kept_pcap = (rows["pcap_jobs.csv"], rows["pcap_check.csv"])
        run.capture_note = "captures pruned: these rows are an earlier report's"


def load_policy_run(path: Path, policy: str, sc: ScenarioInfo, compare_rec: Optional[dict],
                    bin_trace_s: float) -> PolicyRun:
    run = PolicyRun(policy, path)
    rec = compare_rec or {}
    if rec.get("status") in ("failed", "interrupted"):
        run.failed = True
        run.status = f"{rec['status']}: {rec.get('error', '?')}"
    info = {}
    if (path / "run.json").exists():
        try:
            info = json.loads((path / "run.json").read_text())
        except ValueError:
            run.notes.append("run.json is not valid JSON")
    if not run.failed and info.get("status") in ("failed", "interrupted", "running"):
        fails = info.get("failures") or []
        why = info.get("error") or (fails[0] if fails else "")
        run.status = f"{'partial' if (path / 'summary.csv').exists() else info['status']}: {why}".rstrip(": ")
        run.failed = not (path / "summary.csv").exists()
    wu = info.get("warmup_iterations", (info.get("config") or {}).get("warmup_iterations"))
    if isinstance(wu, int) and wu >= 0:
        run.warmup = wu
    run.stopped_s, run.time_bounded = stop_time(info)
    fid = info.get("fidelity")
    if isinstance(fid, dict) and fid.get("verdict"):
        run.fidelity = str(fid["verdict"])
    if not path.is_dir():
        if not run.failed:
            run.status, run.failed = "no results", True
        return run
    run.backend = ("emulation" if (path / "decisions.jsonl").exists() or (path / "captures").is_dir()
                   else "simulation" if (path / "decisions.csv").exists() or (path / "links.csv").exists()
                   else sc.backend)
    summary = {}
    if (path / "summary.csv").exists():
        summary = {r["job"]: r for r in read_csv(path / "summary.csv") if r.get("job")}
    if (path / "iterations.csv").exists():
        run.iterations = _load_iterations(path / "iterations.csv")
    iso = {k: num(v) for k, v in (info.get("isolated") or {}).items()}
    _job_results(run, sc, summary, iso)
    if not run.jobs and not run.failed:
        run.status, run.failed = "no results", True
    if (path / "decisions.jsonl").exists():
        run.epochs, bad = _load_epochs_jsonl(path / "decisions.jsonl", sc.time_scale)
        if bad:
            run.notes.append(f"decisions.jsonl: {bad} unreadable lines skipped")
    elif (path / "decisions.csv").exists():
        run.epochs = _load_epochs_csv(path / "decisions.csv")
    if (path / "links.csv").exists():
        run.links = read_csv(path / "links.csv")
    load_captures(run, sc, bin_trace_s)
    if run.backend == "emulation" and not run.captures and not (path / "captures").is_dir():
        _kept_capture_rows(run, path.parent)
    run.checks = priority_check(run, sc)
    unfinished = sum(1 for j in run.jobs.values() if not j.finished)
    if unfinished and not run.failed:
        run.status = f"{run.status}; {stop_note(run.stopped_s, run.time_bounded, unfinished)}"
    return run


def stop_note(stopped_s: Optional[float], time_bounded: bool, unfinished: int) -> str:
    """How a run with unfinished jobs ended (``stop_time``'s pair and the count)."""
    if time_bounded:
        return f"time-bounded: every job ran until {stopped_s:g} s"
    if stopped_s is not None:
        return f"stopped at {stopped_s:g} s with {unfinished} job(s) running"
    return f"{unfinished} job(s) unfinished"


def stop_time(info: dict) -> Tuple[Optional[float], bool]:
    """(the trace time at which a simulated run stopped with jobs still running, whether it
    was time-bounded): (S, True) for --until S; (S, False) for a run that reached --max-time
    S first; (None, False) for a run that ended when its jobs did."""
    cfg = info.get("config") or {}
    try:
        end = float((info.get("stats") or {}).get("sim_time_s"))
    except (TypeError, ValueError):
        return None, False
    bounds = [num(cfg.get(k)) for k in ("until_s", "max_time_s")]
    bound = min((b for b in bounds if finite(b)), default=math.nan)
    if not (finite(bound) and end >= bound * (1 - 1e-9)):
        return None, False
    return bound, bound == bounds[0]


# ---------------------------------------------------------------------------
# the whole directory
# ---------------------------------------------------------------------------

@dataclass
class Report:
    dir: Path
    scenario: ScenarioInfo
    runs: List[PolicyRun]
    compare: dict
    bin_trace_s: float
    bench_csv: Optional[Path] = None
    policy_rows: List[dict] = field(default_factory=list)
    job_rows: List[dict] = field(default_factory=list)
    pcap_job_rows: List[dict] = field(default_factory=list)
    pcap_check_rows: List[dict] = field(default_factory=list)
    plots: Dict[str, str] = field(default_factory=dict)        # file -> caption
    plot_notes: List[str] = field(default_factory=list)
    markdown: str = ""
    limit_row: Optional[dict] = None      # analysis/limit.py: the per-job bound, its mean

    def run(self, policy: str) -> Optional[PolicyRun]:
        return next((r for r in self.runs if r.policy == policy), None)

    @property
    def fair(self) -> Optional[PolicyRun]:
        r = self.run("fair")
        return r if r is not None and r.has_results else None


def load_results(d, bin_s: Optional[float] = None) -> Report:
    """Read a results directory (see the module docstring); ``bin_s``: capture throughput
    bin in trace seconds (default a tenth of the controller epoch)."""
    d = Path(d)
    if not d.is_dir():
        raise ReportError(f"{d}: no such results directory")
    comp = {}
    if (d / "compare.json").exists():
        try:
            comp = json.loads((d / "compare.json").read_text())
        except ValueError as e:
            raise ReportError(f"{d / 'compare.json'}: not valid JSON ({e})") from None
    subdirs = [p for p in sorted(d.iterdir()) if p.is_dir() and any((p / f).exists() for f in RESULT_FILES)]
    names = list(comp.get("policies") or []) + [p.name for p in subdirs]
    names = list(dict.fromkeys(names)) if comp.get("policies") else policy_order(names)
    if not names:
        if any((d / f).exists() for f in RESULT_FILES):
            raise ReportError(f"{d}: this is one policy's run; give the directory that holds "
                              f"the policies' directories (e.g. {d.parent})")
        raise ReportError(f"{d}: no policy results (expected DIR/<policy>/summary.csv or iterations.csv)")
    sc_path = d / "scenario.yaml"
    if not sc_path.exists():
        sc_path = next((d / n / "scenario.yaml" for n in names if (d / n / "scenario.yaml").exists()), None)
    if sc_path is None:
        raise ReportError(f"{d}: no scenario.yaml (neither in DIR nor in a policy directory)")
    sc = read_scenario_info(sc_path)
    if bin_s is not None and not bin_s > 0:
        raise ReportError(f"--bin must be > 0 (got {bin_s})")
    bin_trace = bin_s or sc.epoch_s / sc.time_scale / 10
    runs_rec = comp.get("runs") or {}
    runs = [load_policy_run(d / n, n, sc, runs_rec.get(n), bin_trace) for n in names]
    return Report(d, sc, runs, comp, bin_trace)

