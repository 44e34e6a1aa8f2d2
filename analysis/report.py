"""The comparison report, built purely from the files of a results directory.

    python -m analysis report DIR [--bin S] [--bench-csv FILE] [--no-plots]

DIR holds one sub-directory per policy, each with the result files of one (scenario, policy)
run as either back end writes them (scenario.yaml, iterations.csv, summary.csv, and
decisions.jsonl + captures/*.pcap + specs/*.json from the emulator or decisions.csv +
links.csv from the simulator), and optionally compare.json (written by
``python -m analysis compare``: the policies in order and how each run went).  Writes:

  DIR/comparison.csv       one row per policy (means over jobs, each also / fair)
  DIR/comparison_jobs.csv  one row per (policy, job)
  DIR/comparison_limit.csv per job the bound of the "limit" row (analysis/limit.py)
  DIR/pcap_jobs.csv        emulator: per job, its bytes on each policy's bottleneck link
  DIR/pcap_check.csv       emulator: does the higher-class job get more bytes there?
  DIR/comparison.md        all of the above as Markdown, with the plots
  DIR/plots/*.png          see analysis/plots.py

Conventions (the same as the back ends' summary.csv):
  * times are trace seconds; iteration time = end_s - start_s of one worker's iteration;
    the first ``warmup_iterations`` of each job (run.json; 1 in results that do not
    record it) are left out of means and percentiles, unless the job ran no more
    iterations than that (emulation.jobspec.WARMUP_ITERATIONS: one rule for both back ends);
  * fidelity (emulator): run.json's "fidelity" verdict, ``faithful`` or ``suspect: ...``
    (emulation/fidelity.py), at the top of the report and in comparison.csv;
  * per job: mean and p99 iteration time, mean communication time, JCT = the last end_s
    (times are relative to the job's arrival), isolated iteration time from run.json
    ("isolated") or else summary.csv (mean_iter_s / slowdown_vs_isolated), slowdown =
    mean iteration time / isolated iteration time; a job with fewer iterations than the
    scenario asks for is unfinished (no JCT);
  * per policy: the mean over jobs of each of these; makespan = last job end; "/ fair" =
    the policy's value divided by fair sharing's;
  * decision time: decision_ms per controller epoch (decisions.jsonl: one line per epoch;
    decisions.csv: one row per epoch and job, counted once per epoch, epochs without a
    policy call left out).
"""
from __future__ import annotations

import csv
import json
import re
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import yaml

WARMUP_ITERATIONS = 1          # results that do not record their warm-up used this
KNOWN_ORDER = ["fair", "optimal", "crux", "cassini", "harmonics"]
RESULT_FILES = ("summary.csv", "iterations.csv", "run.json", "decisions.jsonl", "decisions.csv")

POLICY_COLS = ["policy", "status", "jobs", "jobs_finished", "mean_iter_s", "p99_iter_s",
               "mean_jct_s", "makespan_s", "mean_comm_s", "mean_slowdown",
               "mean_iter_vs_fair", "p99_iter_vs_fair", "jct_vs_fair", "comm_vs_fair",
               "slowdown_vs_fair", "decision_ms_mean", "decision_ms_max", "epochs",
               "mean_iter_vs_limit", "fidelity"]
JOB_COLS = ["policy", "job", "iterations", "mean_iter_s", "p99_iter_s", "mean_comm_s", "jct_s",
            "isolated_iter_s", "slowdown", "mean_iter_vs_fair", "note"]
LIMIT_COLS = ["job", "isolated_s", "rho", "group", "limit_s"]
PCAP_JOB_COLS = ["policy", "link", "job", "trace_mb", "share", "peak_gbps", "dscp"]
PCAP_CHECK_COLS = ["policy", "link", "higher_job", "lower_job", "same_class", "epochs",
                   "epoch_seconds", "higher_mb_epochs", "lower_mb_epochs", "bins_both", "bin_s",
                   "higher_mb_both", "lower_mb_both", "higher_gbps_both", "lower_gbps_both",
                   "bins_higher_more", "verdict", "note"]
# metric -> its "/ fair" column
NORMALISED = {"mean_iter_s": "mean_iter_vs_fair", "p99_iter_s": "p99_iter_vs_fair",
              "mean_jct_s": "jct_vs_fair", "mean_comm_s": "comm_vs_fair",
              "mean_slowdown": "slowdown_vs_fair"}


class ReportError(RuntimeError):
    """The directory cannot be reported on.  str() is one line."""


# ---------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------

def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _mean(xs) -> float:
    v = [x for x in xs if _finite(x)]
    return float(np.mean(v)) if v else math.nan


def _ratio(a: float, b: float) -> float:
    return a / b if _finite(a) and _finite(b) and b != 0 else math.nan


def _read_csv(path: Path) -> List[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _csv_value(x) -> str:
    if isinstance(x, float):
        return "" if math.isnan(x) else f"{x:.6g}"
    return "" if x is None else str(x)


def _write_csv(path: Path, cols: Sequence[str], rows: Sequence[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow([_csv_value(r.get(c)) for c in cols])


def fmt_s(x) -> str:
    """Seconds for a table: enough digits for 10 ms iterations and 1000 s JCTs."""
    if not _finite(x):
        return "–"
    a = abs(x)
    return f"{x:.4f}" if a < 1 else f"{x:.3f}" if a < 100 else f"{x:.1f}"


def fmt_r(x) -> str:
    return f"{x:.3f}" if _finite(x) else "–"


def fmt_ms(x) -> str:
    return f"{x:.2f}" if _finite(x) else "–"


def policy_order(names) -> List[str]:
    names = list(dict.fromkeys(names))
    known = [p for p in KNOWN_ORDER if p in names]
    return known + sorted(p for p in names if p not in KNOWN_ORDER)


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
    arrivals: Dict[str, float] = field(default_factory=dict)     # trace s
    iterations: Dict[str, int] = field(default_factory=dict)

    @property
    def bytes_scale(self) -> float:
        return self.bandwidth_scale / self.time_scale


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
        uplink_gbps=_num(cl.get("uplink_gbps")), host_link_gbps=_num(cl.get("host_link_gbps")),
        arrivals={j["name"]: float(j.get("arrival_s", 0.0) or 0.0) for j in jobs},
        iterations={j["name"]: int(j["iterations"]) for j in jobs if "iterations" in j})


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


@dataclass
class Epoch:
    epoch: int
    time_s: float                  # trace seconds since the run's start
    decision_ms: float
    status: str
    active: List[str]
    priority: Dict[str, int]       # job -> class of the jobs the policy decided on


@dataclass
class PcapCheck:
    """Two jobs on one link in the epochs where both were active and the policy had them in
    different classes (or, for the record, in the same class: then nothing is checked)."""
    link: str
    higher: str                    # the job in the higher class (same class: the first name)
    lower: str
    same_class: bool = False
    epochs: int = 0
    seconds: float = 0.0           # trace seconds of those epochs
    higher_bytes: float = 0.0      # trace bytes on the link in those epochs
    lower_bytes: float = 0.0
    bins: int = 0                  # bins of those epochs in which both jobs sent on the link
    bin_s: float = 0.0
    higher_bytes_both: float = 0.0  # trace bytes in those bins
    lower_bytes_both: float = 0.0
    bins_higher_more: int = 0
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.same_class or self.bins == 0:
            return "n/a"
        return "yes" if self.higher_bytes_both > self.lower_bytes_both else "no"

    def gbps(self, which: str) -> float:
        """Mean trace Gb/s of 'higher'/'lower' over the bins where both sent."""
        b = self.higher_bytes_both if which == "higher" else self.lower_bytes_both
        return b * 8 / (self.bins * self.bin_s) / 1e9 if self.bins else math.nan


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
    links: List[dict] = field(default_factory=list)             # simulator's links.csv
    notes: List[str] = field(default_factory=list)
    warmup: int = WARMUP_ITERATIONS                             # iterations left out per job
    fidelity: str = ""                                          # emulator: the run's verdict

    @property
    def has_results(self) -> bool:
        return bool(self.jobs)

    def decision_ms(self) -> np.ndarray:
        return np.array([e.decision_ms for e in self.epochs if _finite(e.decision_ms)])

    def iteration_times(self, job: Optional[str] = None, warmup: bool = False) -> np.ndarray:
        return np.array([r[6] - r[3] for r in self.iterations
                         if (job is None or r[0] == job) and (warmup or r[2] >= self.steady_from(r[0]))])

    def steady_from(self, job: str) -> int:
        """First iteration a job's means count: after the warm-up, unless the job ran no more
        iterations than the warm-up (then all count)."""
        cache = self.__dict__.setdefault("_steady", {})
        if job not in cache:
            n = len({r[2] for r in self.iterations if r[0] == job})
            cache[job] = self.warmup if n > self.warmup else 0
        return cache[job]


def _load_iterations(path: Path) -> List[tuple]:
    out = []
    for r in _read_csv(path):
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
        if rows:
            steady = [r for r in rows if r[2] >= run.steady_from(name)] or rows
            its = np.array([r[6] - r[3] for r in steady])
            jr.iterations = len({r[2] for r in rows})
            jr.mean_iter_s = float(its.mean())
            jr.p99_iter_s = float(np.percentile(its, 99))
            jr.mean_comm_s = float(np.mean([r[5] for r in steady]))
            jr.jct_s = max(r[6] for r in rows)
            s_mean = _num(srow.get("mean_iter_s"))
            if _finite(s_mean) and abs(s_mean - jr.mean_iter_s) > 1e-3 * max(abs(s_mean), 1e-9):
                jr.notes.append(f"summary.csv says mean {fmt_s(s_mean)} s")
        elif srow:                                   # no iterations.csv: the back end's numbers
            n = _num(srow.get("iterations"))
            jr.iterations = int(n) if _finite(n) else 0
            jr.mean_iter_s = _num(srow.get("mean_iter_s"))
            jr.p99_iter_s = _num(srow.get("p99_iter_s"))
            jr.mean_comm_s = _num(srow.get("mean_comm_s"))
            jr.jct_s = _num(srow.get("jct_s"))
            jr.notes.append("from summary.csv (no iterations.csv)")
        want = sc.iterations.get(name)
        if want is not None and jr.iterations < want:
            jr.finished = False
            jr.jct_s = math.nan
            jr.notes.append(f"unfinished ({jr.iterations}/{want} iterations)")
        iso = isolated.get(name, math.nan)
        if not _finite(iso):
            iso = _ratio(_num(srow.get("mean_iter_s")), _num(srow.get("slowdown_vs_isolated")))
        jr.isolated_iter_s = iso
        jr.slowdown = _ratio(jr.mean_iter_s, iso)
        run.jobs[name] = jr


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
                             _num(rec.get("decision_ms")), "ok", list(rec.get("active_jobs") or []), pri))
        except (ValueError, KeyError, TypeError, AttributeError):
            bad += 1
    return out, bad


def _load_epochs_csv(path: Path) -> List[Epoch]:
    by: Dict[str, Epoch] = {}
    for r in _read_csv(path):
        k = r.get("epoch", "")
        e = by.get(k)
        if e is None:
            status = r.get("status", "ok") or "ok"
            ms = _num(r.get("decision_ms")) if status not in ("disabled", "no policy") else math.nan
            e = by[k] = Epoch(int(_num(k)) if _finite(_num(k)) else len(by), _num(r.get("time_s")),
                              ms, status, [], {})
        job = r.get("job") or ""
        if job:
            e.active.append(job)
            if _finite(_num(r.get("priority"))):
                e.priority[job] = int(_num(r["priority"]))
    return list(by.values())


def _load_captures(run: PolicyRun, sc: ScenarioInfo, bin_trace_s: float) -> None:
    caps = sorted((run.path / "captures").glob("*.pcap"))
    if not caps:
        return
    from emulation.pcap import PcapError, analyze_pcap, load_port_map
    specs = run.path / "specs"
    try:
        ports = load_port_map(specs if specs.is_dir() else run.path / "scenario.yaml")
    except PcapError as e:
        run.capture_note = f"no port map: {e}"
        return
    t0 = None
    for p in sorted(specs.glob("*.json")) if specs.is_dir() else []:
        try:
            t = float(json.loads(p.read_text())["start_at"])
            t0 = t if t0 is None else min(t0, t)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    if t0 is None:
        run.capture_note = "no job start times in specs/: capture times start at the first packet"
    run.pcap_t0 = t0
    cluster = None
    try:
        from workloads.cluster import Cluster
        from workloads.scenario import load_scenario
        cluster = Cluster(load_scenario(run.path / "scenario.yaml").cluster)
    except Exception:  # the captures are still read whole (both directions)
        pass
    for p in caps:
        # a capture named torR-spS holds both directions of that link: keep the uplink's
        # (packets from rack R's hosts), the direction whose egress carries the classes
        m = re.fullmatch(r"tor(\d+)-sp(\d+)", p.stem)
        src = None
        if m and cluster is not None and int(m.group(1)) < cluster.spec.racks:
            src = {cluster.host_ip(h) for h in cluster.hosts_in_rack(int(m.group(1)))}
        try:
            run.captures[p.stem] = analyze_pcap(p, ports, bin_s=bin_trace_s * sc.time_scale, t0=t0,
                                                src_ips=src)
        except PcapError as e:
            run.notes.append(f"capture {p.name}: {e}")
    if run.captures:
        load = {k: sum(j.bytes for j in an.jobs.values()) for k, an in run.captures.items()}
        run.bottleneck = max(load, key=lambda k: (load[k], k))
        if load[run.bottleneck] == 0:
            run.capture_note = "the captures hold no job traffic"


def capture_series(run: PolicyRun, sc: ScenarioInfo, link: Optional[str] = None):
    """(bin start in trace s since the run's start, {job: trace Gb/s per bin}) of a link."""
    an = run.captures[link or run.bottleneck]
    t = an.times() / sc.time_scale
    # emulated Mbit/s x bandwidth_scale / 1000 = trace Gb/s
    return t, {j: an.throughput_mbps(j) * sc.bandwidth_scale / 1000.0 for j in an.jobs}


def priority_check(run: PolicyRun, sc: ScenarioInfo) -> List[PcapCheck]:
    """For every pair of jobs both active in an epoch (decision at t_k holds until t_k+1; the
    last one for one epoch): their bytes on the bottleneck link, higher class vs lower class.
    The verdict uses the bins in which both jobs sent on the link (they competed there);
    the epochs' totals, which include the times only one of them was communicating, are
    given for context."""
    if not run.bottleneck or not run.epochs or run.pcap_t0 is None:
        return []
    an = run.captures[run.bottleneck]
    t = an.times() / sc.time_scale                           # trace s since the run's start
    bin_trace = an.bin_s / sc.time_scale
    series = {j: an.bytes_series(j) * sc.bytes_scale for j in an.jobs}    # trace bytes per bin
    jobs = sorted(series)
    checks: Dict[Tuple[str, str, bool], PcapCheck] = {}
    epoch_trace = sc.epoch_s / sc.time_scale
    eps = sorted(run.epochs, key=lambda e: e.time_s)
    for k, e in enumerate(eps):
        t1 = eps[k + 1].time_s if k + 1 < len(eps) else e.time_s + epoch_trace
        m = (t >= e.time_s) & (t < t1)
        act = [j for j in jobs if j in e.active and j in e.priority]
        for i, a in enumerate(act):
            for b in act[i + 1:]:
                same = e.priority[a] == e.priority[b]
                hi, lo = (a, b) if e.priority[a] <= e.priority[b] else (b, a)
                sh, sl = series[hi][m], series[lo][m]
                if sh.sum() + sl.sum() <= 0:
                    continue                     # neither sent on this link: nothing to compare
                c = checks.get((a, b, same))
                if c is None:
                    c = checks[(a, b, same)] = PcapCheck(run.bottleneck, hi, lo, same_class=same,
                                                         bin_s=bin_trace)
                if not same and (hi, lo) != (c.higher, c.lower):
                    c.note = "the classes swapped between epochs: bytes of whichever was higher"
                both = (sh > 0) & (sl > 0)
                c.epochs += 1
                c.seconds += t1 - e.time_s
                c.higher_bytes += float(sh.sum())
                c.lower_bytes += float(sl.sum())
                c.bins += int(both.sum())
                c.higher_bytes_both += float(sh[both].sum())
                c.lower_bytes_both += float(sl[both].sum())
                c.bins_higher_more += int((sh[both] > sl[both]).sum())
    out = sorted(checks.values(), key=lambda c: (c.same_class, c.higher, c.lower))
    for c in out:
        if c.same_class:
            c.note = "same class: nothing to check (numbers for comparison)"
        elif c.bins == 0:
            c.note = (c.note + "; " if c.note else "") + "the two never sent on the link in the same bin"
    return out


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
        summary = {r["job"]: r for r in _read_csv(path / "summary.csv") if r.get("job")}
    if (path / "iterations.csv").exists():
        run.iterations = _load_iterations(path / "iterations.csv")
    iso = {k: _num(v) for k, v in (info.get("isolated") or {}).items()}
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
        run.links = _read_csv(path / "links.csv")
    _load_captures(run, sc, bin_trace_s)
    run.checks = priority_check(run, sc)
    unfinished = sum(1 for j in run.jobs.values() if not j.finished)
    if unfinished and not run.failed:
        run.status = f"{run.status}; {unfinished} job(s) unfinished"
    return run


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


def _policy_row(run: PolicyRun) -> dict:
    js = list(run.jobs.values())
    fin = [j for j in js if j.finished]
    ms = run.decision_ms()
    return {"policy": run.policy, "status": run.status, "jobs": len(js), "jobs_finished": len(fin),
           "mean_iter_s": _mean(j.mean_iter_s for j in js),
           "p99_iter_s": _mean(j.p99_iter_s for j in js),
           "mean_jct_s": _mean(j.jct_s for j in fin),
           "mean_comm_s": _mean(j.mean_comm_s for j in js),
           "mean_slowdown": _mean(j.slowdown for j in js),
           "decision_ms_mean": float(ms.mean()) if len(ms) else math.nan,
           "decision_ms_max": float(ms.max()) if len(ms) else math.nan,
           "epochs": len(ms), "fidelity": run.fidelity}


def build_tables(rep: Report) -> None:
    sc = rep.scenario
    rows = []
    for run in rep.runs:
        r = _policy_row(run)
        js = list(run.jobs.values())
        ends = [sc.arrivals.get(j.job, 0.0) + j.jct_s for j in js]
        r["makespan_s"] = max(ends) if js and all(_finite(x) for x in ends) else math.nan
        rows.append(r)
    fair = next((r for r in rows if r["policy"] == "fair" and r["jobs"]), None)
    for r in rows:
        for k, nk in NORMALISED.items():
            r[nk] = _ratio(r[k], fair[k]) if fair else math.nan
    rep.policy_rows = rows
    _limit(rep)
    fair_run = rep.fair
    jrows = []
    for run in rep.runs:
        for j in run.jobs.values():
            fj = fair_run.jobs.get(j.job) if fair_run else None
            jrows.append({"policy": run.policy, "job": j.job, "iterations": j.iterations,
                          "mean_iter_s": j.mean_iter_s, "p99_iter_s": j.p99_iter_s,
                          "mean_comm_s": j.mean_comm_s, "jct_s": j.jct_s,
                          "isolated_iter_s": j.isolated_iter_s, "slowdown": j.slowdown,
                          "mean_iter_vs_fair": _ratio(j.mean_iter_s, fj.mean_iter_s) if fj else math.nan,
                          "note": "; ".join(j.notes)})
    rep.job_rows = jrows
    prow, crow = [], []
    for run in rep.runs:
        if not run.bottleneck:
            continue
        an = run.captures[run.bottleneck]
        total = sum(j.bytes for j in an.jobs.values())
        _, gbps = capture_series(run, sc)
        for name, jt in an.jobs.items():
            prow.append({"policy": run.policy, "link": run.bottleneck, "job": name,
                         "trace_mb": jt.bytes * sc.bytes_scale / 1e6,
                         "share": jt.bytes / total if total else math.nan,
                         "peak_gbps": float(gbps[name].max()) if len(gbps[name]) else 0.0,
                         "dscp": " ".join(f"{k}:{v}" for k, v in sorted(jt.dscp.items()))})
        for c in run.checks:
            crow.append({"policy": run.policy, "link": c.link, "higher_job": c.higher,
                         "lower_job": c.lower, "same_class": c.same_class, "epochs": c.epochs,
                         "epoch_seconds": c.seconds, "higher_mb_epochs": c.higher_bytes / 1e6,
                         "lower_mb_epochs": c.lower_bytes / 1e6, "bins_both": c.bins,
                         "bin_s": c.bin_s, "higher_mb_both": c.higher_bytes_both / 1e6,
                         "lower_mb_both": c.lower_bytes_both / 1e6,
                         "higher_gbps_both": c.gbps("higher"), "lower_gbps_both": c.gbps("lower"),
                         "bins_higher_more": c.bins_higher_more, "verdict": c.verdict,
                         "note": c.note})
    rep.pcap_job_rows, rep.pcap_check_rows = prow, crow


def _limit(rep: Report) -> None:
    """The "limit" row (analysis/limit.py) and every policy's gap to it, over its jobs."""
    path = rep.dir / "scenario.yaml"
    if not path.exists():
        path = next((rep.dir / r.policy / "scenario.yaml" for r in rep.runs
                     if (rep.dir / r.policy / "scenario.yaml").exists()), path)
    iso = {}
    for run in ([rep.fair] if rep.fair else []) + rep.runs:
        for j in run.jobs.values():
            if _finite(j.isolated_iter_s) and j.job not in iso:
                iso[j.job] = j.isolated_iter_s
    from .limit import job_limits
    lim = job_limits(path, iso) if path.exists() else {}
    if not lim:
        return
    rep.limit_row = {"policy": "limit", "status": "bound", "jobs": len(lim),
                     "jobs_rows": [dict(v, job=n) for n, v in sorted(lim.items())],
                     "mean_iter_s": _mean(v["limit_s"] for v in lim.values()),
                     "mean_iter_vs_limit": 1.0}
    for r in rep.policy_rows:
        run = rep.run(r["policy"])
        names = [n for n in run.jobs if n in lim] if run else []
        r["mean_iter_vs_limit"] = (_ratio(_mean(run.jobs[n].mean_iter_s for n in names),
                                          _mean(lim[n]["limit_s"] for n in names))
                                   if names else math.nan)


# ---------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------

def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]], right_from: int = 1,
              right=None) -> List[str]:
    """A Markdown table; numbers right-aligned: columns ``right`` (default from right_from on)."""
    right = set(right if right is not None else range(right_from, len(header)))
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c).replace("|", "/") for c in r) + " |")
    return out


def policy_table_md(rep: Report) -> List[str]:
    has_fair = any(r["policy"] == "fair" and r["jobs"] for r in rep.policy_rows)
    hdr = ["policy", "mean iter s", "p99 iter s", "mean JCT s", "comm s", "slowdown"]
    if has_fair:
        hdr = ["policy", "mean iter s", "/ fair", "p99 iter s", "/ fair", "mean JCT s", "/ fair",
               "comm s", "/ fair", "slowdown", "/ fair"]
    lim = rep.limit_row is not None
    if lim:
        hdr.insert(hdr.index("mean iter s") + (2 if has_fair else 1), "/ limit")
    hdr += ["decision ms (mean / max)", "epochs", "status"]
    rows = []
    for r in rep.policy_rows + ([rep.limit_row] if lim else []):
        cells = [r["policy"]]
        for k in ("mean_iter_s", "p99_iter_s", "mean_jct_s", "mean_comm_s", "mean_slowdown"):
            v = r.get(k, math.nan)
            cells.append(fmt_r(v) if k == "mean_slowdown" else fmt_s(v))
            if has_fair:
                cells.append(fmt_r(r.get(NORMALISED[k], math.nan)) if r is not rep.limit_row
                             else fmt_r(_ratio(v, next(x[k] for x in rep.policy_rows
                                                       if x["policy"] == "fair"))))
            if lim and k == "mean_iter_s":
                cells.append(fmt_r(r.get("mean_iter_vs_limit", math.nan)))
        cells += [f"{fmt_ms(r['decision_ms_mean'])} / {fmt_ms(r['decision_ms_max'])}"
                  if r.get("epochs") else "–", str(r.get("epochs", "–")), r["status"]]
        rows.append(cells)
    return _md_table(hdr, rows, right=range(1, len(hdr) - 1))


def check_table_md(rep: Report) -> List[str]:
    rows = []
    for r in rep.pcap_check_rows:
        pair = (f"{r['higher_job']} = {r['lower_job']}" if r["same_class"]
                else f"{r['higher_job']} > {r['lower_job']}")
        rows.append([r["policy"], r["link"], pair, str(r["epochs"]),
                     f"{r['higher_mb_epochs']:.1f} / {r['lower_mb_epochs']:.1f}",
                     str(r["bins_both"]),
                     f"{r['higher_mb_both']:.1f} / {r['lower_mb_both']:.1f}",
                     f"{fmt_r(r['higher_gbps_both'])} / {fmt_r(r['lower_gbps_both'])}",
                     f"{r['bins_higher_more']}/{r['bins_both']}", f"**{r['verdict']}**", r["note"]])
    return _md_table(["policy", "link", "classes (higher > lower)", "epochs", "MB in epochs",
                      "bins both sent", "MB when both sent", "Gb/s when both sent",
                      "bins higher got more", "higher class got more?", "note"], rows,
                     right=range(3, 9))


def warmup_text(rep: Report) -> str:
    wus = sorted({r.warmup for r in rep.runs if r.has_results})
    if not wus:
        return "warm-up left out"
    w = "/".join(str(x) for x in wus)
    return f"the first {w} iteration{'s' if wus != [1] else ''} of each job left out as warm-up"


def fidelity_lines(rep: Report) -> List[str]:
    """One line per emulated policy run: its fidelity verdict."""
    return [f"{r.policy}: {r.fidelity}" for r in rep.runs if r.fidelity]


def fidelity_md(rep: Report) -> List[str]:
    lines = fidelity_lines(rep)
    if not lines:
        return []
    bad = [r.policy for r in rep.runs if r.fidelity.startswith("suspect")]
    head = ("**Fidelity: every run faithful**" if not bad else
            f"**Fidelity: {len(bad)} of {len(lines)} runs SUSPECT ({', '.join(bad)})**: "
            "their numbers may reflect the emulator's limits (CPU, shaping) rather than the policy")
    return [head + " (emulation/fidelity.py; figures and thresholds in each run's run.json, "
            "`fidelity`):", ""] + [f"- {x}" for x in lines] + [""]


def render_markdown(rep: Report) -> str:
    sc = rep.scenario
    L = [f"# Policy comparison: {sc.name}", ""]
    if sc.description:
        L += [f"> {sc.description}", ""]
    L += fidelity_md(rep)
    backends = sorted({r.backend for r in rep.runs if r.backend != "?"}) or [sc.backend]
    L += [f"- back end: **{', '.join(backends)}**; cluster: {sc.racks} racks, {sc.hosts} hosts, "
          f"{sc.gpus} GPUs, {sc.spines} spine{'s' if sc.spines != 1 else ''}, host links {sc.host_link_gbps:g} Gb/s, "
          f"uplinks {sc.uplink_gbps:g} Gb/s; {len(sc.arrivals)} jobs",
          f"- results: `{rep.dir}`; report generated {time.strftime('%Y-%m-%d %H:%M:%S')} by "
          f"`python -m analysis report`"]
    if rep.compare.get("started"):
        L.append(f"- runs started {rep.compare['started']} by `{rep.compare.get('command', 'python -m analysis compare')}`")
    if sc.backend == "emulation" or "emulation" in backends:
        L.append(f"- emulator scaling: time x{sc.time_scale:g}, bandwidth / {sc.bandwidth_scale:g}; "
                 "all numbers below are trace units (seconds and bytes of the real cluster)")
    L += ["", "## Policies", "",
          f"Means over jobs ({warmup_text(rep)}); `/ fair` = the policy's value divided by fair "
          "sharing's (below 1 is better); slowdown = mean iteration time / the job's isolated "
          "iteration time; decision time per controller epoch. Row `limit`: per job its "
          "isolated iteration time, stretched by the load of its most loaded link group at "
          "isolated pace where that exceeds the capacity (no policy brings every job of that "
          "link below it at once; analysis/limit.py); `/ limit` = mean iteration time / the "
          "mean of that bound over the same jobs.", ""]
    L += policy_table_md(rep)
    if not any(r["policy"] == "fair" and r["jobs"] for r in rep.policy_rows):
        L += ["", "_No fair-sharing results: nothing to normalise to._"]
    L += ["", "## Per job", ""]
    has_fair = rep.fair is not None
    hdr = ["policy", "job", "iterations", "mean iter s", "p99 iter s", "comm s", "JCT s",
           "isolated s", "slowdown"] + (["mean iter / fair"] if has_fair else []) + ["note"]
    rows = []
    for r in rep.job_rows:
        rows.append([r["policy"], r["job"], str(r["iterations"]), fmt_s(r["mean_iter_s"]),
                     fmt_s(r["p99_iter_s"]), fmt_s(r["mean_comm_s"]), fmt_s(r["jct_s"]),
                     fmt_s(r["isolated_iter_s"]), fmt_r(r["slowdown"])]
                    + ([fmt_r(r["mean_iter_vs_fair"])] if has_fair else []) + [r["note"]])
    L += _md_table(hdr, rows, right=range(2, len(hdr) - 1))
    L += ["", "## Packet-capture check", ""]
    caps = [r for r in rep.runs if r.captures]
    if not caps:
        L.append("No packet captures in these results (the simulator writes none; the emulator "
                 "writes captures/*.pcap unless `emulation.capture: [none]`).")
    else:
        L += ["Per policy, the bottleneck link is the captured link that carried the most "
              "payload bytes. Bytes are TCP payload on that link converted to trace bytes "
              f"(x bytes_scale = {sc.bytes_scale:g}); DSCP = packets per DSCP value seen "
              "(the class marking the controller installed; 0 = best effort).", ""]
        for run in caps:
            an_load = {k: sum(j.bytes for j in an.jobs.values()) * sc.bytes_scale / 1e6
                       for k, an in run.captures.items()}
            L.append(f"- **{run.policy}**: bottleneck `{run.bottleneck}`; captured links (trace MB): "
                     + ", ".join(f"{k} {v:.1f}" for k, v in sorted(an_load.items()))
                     + (f" ({run.capture_note})" if run.capture_note else ""))
        L += [""]
        L += _md_table(["policy", "link", "job", "trace MB", "share of link", "peak Gb/s", "DSCP: packets"],
                       [[r["policy"], r["link"], r["job"], f"{r['trace_mb']:.1f}",
                         f"{100 * r['share']:.1f}%" if _finite(r["share"]) else "–",
                         fmt_r(r["peak_gbps"]), r["dscp"] or "–"] for r in rep.pcap_job_rows],
                       right=range(3, 6))
        L += ["", "Check against the controller's decisions: in the epochs where two jobs were "
              "both active and the policy had them in different priority classes (a decision "
              "holds until the next epoch), did the job in the higher class get more bytes on "
              "the bottleneck link? The verdict compares their bytes in the capture bins "
              f"({1000 * rep.bin_trace_s:.3g} ms trace) in which both sent on the link, i.e. "
              "competed for it; the epochs' totals (`MB in epochs`, higher / lower) also count "
              "the times only one of them was communicating. Pairs the policy kept in one class "
              "are listed for comparison.", ""]
        if rep.pcap_check_rows:
            L += check_table_md(rep)
        else:
            L.append("_No epochs with decisions to check (no decisions.jsonl, or no job pairs were ever active together)._")
    if rep.plots:
        L += ["", "## Plots", ""]
        for f, cap in rep.plots.items():
            L += [f"**{cap}** (`{f}`)", "", f"![{cap}]({f})", ""]
        for n in rep.plot_notes:
            L.append(f"- {n}")
    notes = [f"{r.policy}: {n}" for r in rep.runs for n in r.notes]
    if notes:
        L += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(L).rstrip() + "\n"


def summary_text(rep: Report) -> str:
    """What a run prints at the end: the policy table and the capture check."""
    L = [f"{rep.scenario.name}: {len(rep.runs)} policies", ""]
    fl = fidelity_lines(rep)
    if fl:
        L += ["fidelity:"] + [f"  {x}" for x in fl] + [""]
    L += policy_table_md(rep)
    if rep.pcap_check_rows:
        L += ["", "packet-capture check (higher class got more bytes on the bottleneck link?):", ""]
        L += check_table_md(rep)
    L += ["", f"report: {rep.dir / 'comparison.md'}"]
    return "\n".join(L)


BENCH_COPY = "decision_time_bench.csv"


def generate_report(d, *, bin_s: Optional[float] = None, bench_csv=None,
                    plots: bool = True) -> Report:
    """Read DIR, write comparison*.csv, pcap_*.csv, comparison.md and plots/*.png."""
    rep = load_results(d, bin_s=bin_s)
    if bench_csv is None and (rep.dir / BENCH_COPY).is_file():
        bench_csv = rep.dir / BENCH_COPY      # the copy `compare` left in the directory
    rep.bench_csv = Path(bench_csv) if bench_csv else None
    if rep.bench_csv is not None and not rep.bench_csv.is_file():
        raise ReportError(f"--bench-csv: {rep.bench_csv}: no such file")
    build_tables(rep)
    _write_csv(rep.dir / "comparison.csv", POLICY_COLS, rep.policy_rows)
    if rep.limit_row:
        _write_csv(rep.dir / "comparison_limit.csv", LIMIT_COLS, rep.limit_row["jobs_rows"])
    _write_csv(rep.dir / "comparison_jobs.csv", JOB_COLS, rep.job_rows)
    if rep.pcap_job_rows or (rep.dir / "pcap_jobs.csv").exists():
        _write_csv(rep.dir / "pcap_jobs.csv", PCAP_JOB_COLS, rep.pcap_job_rows)
        _write_csv(rep.dir / "pcap_check.csv", PCAP_CHECK_COLS, rep.pcap_check_rows)
    if plots:
        from .plots import make_plots
        make_plots(rep)
    rep.markdown = render_markdown(rep)
    (rep.dir / "comparison.md").write_text(rep.markdown)
    return rep
