"""Readers of one run directory (emulated or simulated, running or finished), for the live
view: the controller's REST (controllers/rest.py) and ``python -m analysis serve`` both
answer from these, so a finished run's page shows what the live page showed.

Everything is returned in the trace's units (seconds and Gb/s of the real cluster; the
emulator's scaling undone) as plain JSON-ready values (NaN and infinities become None).
The readers never raise on a file that is missing, half-written (a run still appending to
it) or malformed: what cannot be read is left out, and the sections that have no data say
``"available": false``.

Files read (see emulation/runner.py and simulation/output.py for their writers; the workers'
logs' format is runs/logs.py's):
  scenario.yaml          name, back end, jobs and their iteration counts, emulation scaling
  run.json               status, policy, "fidelity" (the fidelity monitor's verdict)
  logs/JOB.csv           the workers' iteration logs (emulated; read while a run is going)
  iterations.csv         per-iteration times (a finished run, either back end)
  summary.csv            per-job results (optional columns phase_error, corrections)
  decisions.jsonl        the controller's epochs (emulated; with phase control "phase",
                         "phase_samples", "corrections")
  phase.csv              phase control's measurements and corrections (both back ends)
  decisions.csv          the simulator's epochs, one row per epoch and decided job
  throughput.jsonl       per-link throughput by class, sampled from the controller's counters
  links.csv              the simulator's per-link load per time bin (no split by class)
  notes.jsonl            notes posted to the live view (POST /api/v1/notes)
"""
from __future__ import annotations

import csv
import json
import math
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import yaml

from .files import read_jsonl
from .logs import read_worker_log

NOT_AVAILABLE = {"available": False}


def clean(x: Any) -> Any:
    """JSON-safe copy: NaN/inf -> None (browsers' JSON.parse rejects NaN)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    return x


def _num(v: Any) -> Optional[float]:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _int(v: Any) -> Optional[int]:
    try:
        return int(float(v))
    except (TypeError, ValueError, OverflowError):
        return None


class _Cache:
    """Parsed files memoised on (mtime, size): a page refreshing every two seconds does not
    re-parse a large finished run's files."""

    def __init__(self):
        self._lock = threading.Lock()
        self._memo: Dict[tuple, tuple] = {}

    def get(self, path: Path, parse: Callable[[Path], Any], default: Any) -> Any:
        try:
            st = path.stat()
        except OSError:
            return default
        key = (str(path), parse.__name__)
        stamp = (st.st_mtime_ns, st.st_size)
        with self._lock:
            hit = self._memo.get(key)
            if hit is not None and hit[0] == stamp:
                return hit[1]
        try:
            value = parse(path)
        except (OSError, ValueError, UnicodeDecodeError, yaml.YAMLError, csv.Error):
            return default
        with self._lock:
            self._memo[key] = (stamp, value)
        return value


def _read_yaml(p: Path):
    d = yaml.safe_load(p.read_text())
    return d if isinstance(d, dict) else {}


def _read_json(p: Path):
    d = json.loads(p.read_text())
    return d if isinstance(d, dict) else {}


def _read_csv(p: Path) -> List[dict]:
    with open(p, newline="") as f:
        return [r for r in csv.DictReader(f)]


class RunData:
    """The run directory ``run_dir`` as the live view's sections."""

    def __init__(self, run_dir, live: bool = False):
        self.dir = Path(run_dir)
        self.live = live
        self._cache = _Cache()

    # ---------------------------------------------------------------- files
    def _file(self, name: str, parse, default):
        return self._cache.get(self.dir / name, parse, default)

    def scenario(self) -> dict:
        return self._file("scenario.yaml", _read_yaml, {})

    def run_json(self) -> dict:
        return self._file("run.json", _read_json, {})

    @property
    def kind(self) -> str:
        """'simulated' or 'emulated', from the files (the simulator also runs emulation
        scenarios), else from the scenario's back end."""
        if any((self.dir / f).exists() for f in ("decisions.csv", "links.csv")):
            return "simulated"
        if self.live or any((self.dir / f).exists() for f in ("decisions.jsonl", "logs")):
            return "emulated"
        return "simulated" if self.scenario().get("backend") == "simulation" else "emulated"

    def scaling(self) -> tuple:
        """(time_scale, bandwidth_scale) of an emulated run; (1, 1) for a simulated one."""
        if self.kind != "emulated":
            return 1.0, 1.0
        emu = self.run_json().get("emulation") or self.scenario().get("emulation") or {}
        return (_num(emu.get("time_scale")) or 1.0, _num(emu.get("bandwidth_scale")) or 1.0)

    def job_names(self) -> List[str]:
        names = [j.get("name") for j in self.scenario().get("jobs") or [] if isinstance(j, dict)]
        names = [n for n in names if isinstance(n, str)]
        for n in self.summary():
            if n not in names:
                names.append(n)
        return names

    # ------------------------------------------------------------- sections
    def status(self) -> dict:
        sc, rj = self.scenario(), self.run_json()
        ts, bs = self.scaling()
        status = rj.get("status") or ("running" if self.live else "unknown")
        if self.kind == "simulated" and "status" not in rj and rj:
            status = "ok"
        return clean({"live": self.live, "run_dir": str(self.dir), "kind": self.kind,
                      "scenario": sc.get("name") or rj.get("scenario"), "policy": rj.get("policy"),
                      "status": status, "time_scale": ts, "bandwidth_scale": bs,
                      "jobs": self.job_names(), "wall_s": _num(rj.get("wall_s"))})

    def summary(self) -> Dict[str, dict]:
        rows = self._file("summary.csv", _read_csv, [])
        out = {}
        for r in rows:
            name = r.get("job")
            if not name:
                continue
            d = {"policy": r.get("policy")}
            for k, v in r.items():
                if k not in ("job", "policy"):
                    d[k] = _int(v) if k in ("iterations", "corrections") else _num(v)
            out[name] = d
        return out

    def _iterations(self) -> Dict[str, Dict[int, List[float]]]:
        """job -> iteration -> the ranks' iteration times (trace seconds)."""
        per: Dict[str, Dict[int, List[float]]] = {}
        rows = self._file("iterations.csv", _read_csv, None)
        if rows is not None:
            for r in rows:
                it, a, b = _int(r.get("iteration")), _num(r.get("start_s")), _num(r.get("end_s"))
                if r.get("job") and it is not None and a is not None and b is not None:
                    per.setdefault(r["job"], {}).setdefault(it, []).append(b - a)
            return per
        ts = self.scaling()[0]
        logs = self.dir / "logs"
        for p in sorted(logs.glob("*.csv")) if logs.is_dir() else []:
            for r in self._cache.get(p, read_worker_log, []):
                if r.get("status") == "ok" and r.get("start_s") is not None and r.get("end_s") is not None:
                    per.setdefault(r["job"], {}).setdefault(r["iteration"], []).append(
                        (r["end_s"] - r["start_s"]) / ts)
        return per

    def jobs(self) -> dict:
        totals = {j.get("name"): _int(j.get("iterations"))
                  for j in self.scenario().get("jobs") or [] if isinstance(j, dict)}
        per = self._iterations()
        summary = self.summary()
        out = []
        for name in self.job_names() + sorted(set(per) - set(self.job_names())):
            its = sorted(per.get(name, {}).items())
            out.append({"name": name, "total_iterations": totals.get(name),
                        "iterations": [i for i, _ in its],
                        "iter_s": [sum(v) / len(v) for _, v in its],
                        "summary": summary.get(name)})
        return clean({"units": "trace seconds (mean over the job's ranks)", "jobs": out})

    def epochs(self, since: int = 0, limit: int = 5000) -> dict:
        """The controller's (or simulator's) epoch records from position ``since`` (the number
        already received) on, at most ``limit``."""
        ts = self.scaling()[0]
        recs = []
        if (self.dir / "decisions.jsonl").exists():
            for r in self._file("decisions.jsonl", read_jsonl, []):
                ep = _int(r.get("epoch"))
                if ep is None:
                    continue
                ds = r.get("decisions") if isinstance(r.get("decisions"), dict) else {}
                recs.append({"epoch": ep, "time_s": (_num(r.get("time_s")) or 0.0) / ts,
                             "decision_ms": _num(r.get("decision_ms")),
                             "active_jobs": r.get("active_jobs") or [],
                             "decisions": {j: _decision(d) for j, d in ds.items() if isinstance(d, dict)},
                             "phase": r.get("phase") if isinstance(r.get("phase"), dict) else None,
                             "corrections": r.get("corrections") if isinstance(r.get("corrections"), list) else None})
        else:
            by: Dict[int, dict] = {}
            for r in self._file("decisions.csv", _read_csv, []):
                ep = _int(r.get("epoch"))
                if ep is None:
                    continue
                e = by.setdefault(ep, {"epoch": ep, "time_s": _num(r.get("time_s")),
                                       "decision_ms": _num(r.get("decision_ms")), "active_jobs": [],
                                       "decisions": {}, "phase": None, "corrections": None})
                if r.get("job"):
                    e["decisions"][r["job"]] = _decision(r)
                    e["active_jobs"].append(r["job"])
            recs = [by[k] for k in sorted(by)]
        total = len(recs)
        recs = recs[since:since + limit]      # by position: a restarted controller counts from 0
        return clean({"units": "trace seconds", "total": total, "epochs": recs,
                      "notes": self.notes()})

    def notes(self) -> List[dict]:
        return [{"time_s": _num(n.get("time_s")), "text": str(n.get("text", ""))[:500]}
                for n in self._file("notes.jsonl", read_jsonl, [])]

    def throughput(self) -> dict:
        """Per-link throughput by class: series of (time, Gb/s)."""
        series: Dict[tuple, dict] = {}
        if (self.dir / "throughput.jsonl").exists():
            source = "controller flow counters (emulated), per class of the flow's job"
            for s in self._file("throughput.jsonl", read_jsonl, []):
                t = _num(s.get("t"))
                links = s.get("links")
                if t is None or not isinstance(links, dict):
                    continue
                for link, by_class in links.items():
                    for cls, g in (by_class or {}).items():
                        e = series.setdefault((link, str(cls)), {"t": [], "gbps": []})
                        e["t"].append(t)
                        e["gbps"].append(_num(g))
        elif (self.dir / "links.csv").exists():
            source = "simulator links.csv (mean per time bin; the simulator does not split by class)"
            for r in self._file("links.csv", _read_csv, []):
                a, b, g = _num(r.get("start_s")), _num(r.get("end_s")), _num(r.get("mean_gbps"))
                if r.get("link") and a is not None and b is not None:
                    e = series.setdefault((r["link"], "all"), {"t": [], "gbps": []})
                    e["t"].append((a + b) / 2)
                    e["gbps"].append(g)
        else:
            return dict(NOT_AVAILABLE, reason="no throughput.jsonl or links.csv in the run directory")
        out = [{"link": k[0], "class": k[1], **v} for k, v in sorted(series.items())]
        return clean({"available": True, "units": "trace Gb/s", "source": source, "series": out})

    def phase(self) -> dict:
        """Phase control's measurements and corrections, where the run recorded them:
        phase.csv of a finished run (either back end), else the phase samples the controller
        appends to decisions.jsonl while the run goes (docs/phase-control.md)."""
        rows = self._file("phase.csv", _read_csv, []) if (self.dir / "phase.csv").exists() else []
        if not rows and (self.dir / "decisions.jsonl").exists():
            rows = phase_rows_from_records(self._file("decisions.jsonl", read_jsonl, []))
        per: Dict[str, dict] = {}
        corrections = []
        for r in rows:
            job, t = r.get("job"), _num(r.get("time_s"))
            if not job or t is None:
                continue
            if r.get("ref") and _num(r.get("error")) is not None:
                d = per.setdefault(job, {"t": [], "error": [], "offset_s": [], "period_s": [],
                                         "ref": r.get("ref")})
                d["t"].append(t)
                for k in ("error", "offset_s", "period_s"):
                    d[k].append(_num(r.get(k)))
            delay = _num(r.get("correction_s"))
            if delay:
                corrections.append({"time_s": t, "epoch": _int(r.get("epoch")), "job": job,
                                    "delay_s": delay, "error": _num(r.get("error"))})
        summary = {j: {k: s.get(k) for k in ("phase_error", "corrections")}
                   for j, s in self.summary().items() if "phase_error" in s or "corrections" in s}
        if not per and not corrections and not summary:
            return dict(NOT_AVAILABLE, reason="the run recorded no phase errors or corrections")
        return clean({"available": True,
                      "units": "trace seconds; error: measured minus decided offset, fraction of the beat",
                      "jobs": per, "corrections": corrections, "summary": summary})

    def fidelity(self) -> dict:
        f = self.run_json().get("fidelity")
        if not isinstance(f, dict):
            return dict(NOT_AVAILABLE, reason="run.json has no fidelity section")
        return clean(dict(f, available=True))


def _json_field(v):
    """A dict field as decisions.jsonl holds it, or as JSON text in a decisions.csv cell."""
    if not isinstance(v, str):
        return v
    try:
        return json.loads(v) if v.strip() else {}
    except ValueError:
        return {"raw": v}


def _decision(d: dict) -> dict:
    """One decision, from a decisions.jsonl record or a decisions.csv row."""
    caps = _json_field(d.get("rate_caps_gbps"))
    spine = d.get("spine")
    if isinstance(spine, str):
        spine = _int(spine)
    fs = _json_field(d.get("flow_spines"))
    return {"class": _int(d.get("priority")), "shift_s": _num(d.get("shift_s")) or 0.0,
            "caps_gbps": caps if isinstance(caps, dict) else {}, "spine": spine,
            "flow_spines": fs if isinstance(fs, dict) else {}, "reason": str(d.get("reason") or "")}


def phase_rows_from_records(records: List[dict]) -> List[dict]:
    """phase.csv rows from the controller's epoch records (decisions.jsonl): each record
    carries the phase samples taken since the epoch before it (the runner writes phase.csv
    from these; the live view reads them while the run goes)."""
    out = []
    for rec in records:
        for row in rec.get("phase_samples") or []:
            if isinstance(row, dict):
                out.append({**row, "epoch": rec.get("epoch")})
    return out
