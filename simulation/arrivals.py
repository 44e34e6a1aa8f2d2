"""Cluster arrival traces (any CSV of jobs) -> arrival times and job sizes for the generator.

    python -m simulation generate OUT.yaml --arrivals csv:FILE \\
        [--arrival-columns start=creation_time,end=deletion_time,gpus=gpu_request] \\
        [--arrival-time-unit s|ms|us|ns|min|h] [--arrival-min-gpus N] \\
        [--arrival-trace-gpus N] [--mean-interarrival S]

``--arrivals openb`` is a named trace: the shipped OpenB file with its own window and the
generator's size mix (see ``PRESETS``).  The rules (column names recognised, time units,
fractional and zero GPU requests, rescaling to the simulated cluster) are in docs/schema.md,
"Arrival traces"; in short:

* columns: a role (start, end, duration, gpus, gpu_share, name) is taken from
  ``--arrival-columns`` (``role=column`` or ``role=column/divisor``), else from the first
  header that matches one of ``DEFAULT_NAMES`` (case, spaces and punctuation ignored);
* times: numbers in ``--arrival-time-unit``, else in the unit the start column's name ends
  with (``_ms``, ``_us``, ``_s``, ``_min``, ``_h`` ...), else in seconds unless their median
  is a Unix timestamp in ms / us / ns (magnitude ranges in ``EPOCH_RANGES``); date-times
  (ISO 8601, e.g. ``2020-04-01 08:00:05``) are read as such;
* rows without a start time are skipped and counted; a GPU request of 0 (or none) marks a
  task that is not a GPU job and is skipped; a fractional request takes whole GPUs
  (``ceil``: a shared 0.5 GPU is one GPU slot, 2.5 GPUs are 3);
* arrival gaps are scaled by (trace cluster GPUs) / (simulated cluster GPUs), which keeps the
  trace's arrival rate per GPU, or so that their mean is ``--mean-interarrival``; job sizes
  are halved, largest first, until the sampled jobs fit the simulated cluster together.

Errors are ScenarioError with one line: ``FILE line N, column C: problem``.
"""
from __future__ import annotations

import csv
import math
import random
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from workloads.scenario import ScenarioError, one_line

DATA_DIR = Path(__file__).resolve().parent / "data"
OPENB_TASKS = DATA_DIR / "openb2023" / "openb_gpu_tasks.csv"

UNITS: Dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}
ROLES = ("start", "end", "duration", "gpus", "gpu_share", "name")

# Header names recognised per role, in order of preference (normalised: lower case, only
# letters and digits).  A submission time is preferred to a start time: a job arrives when it
# is submitted; the start of a real scheduler includes its queueing.
DEFAULT_NAMES: Dict[str, Tuple[str, ...]] = {
    "start": ("submittime", "submittedtime", "submissiontime", "submittimestamp", "submitted",
              "submit", "creationtime", "createtime", "createdtime", "createdat", "arrivaltime",
              "arrival", "starttime", "start", "begintime", "timestamp", "time"),
    "end": ("endtime", "deletiontime", "finishtime", "completiontime", "completedtime",
            "stoptime", "end"),
    "duration": ("duration", "runtime", "runtimes", "durations", "elapsed", "elapsedtime",
                 "jobduration"),
    "gpus": ("gpurequest", "gpurequested", "numgpu", "numgpus", "gpunum", "gpucount", "ngpu",
             "ngpus", "gpus", "gpu", "plangpu", "totalgpus", "requestedgpus"),
    "gpu_share": ("gpumilli",),
    "name": ("jobid", "jobname", "name", "id", "instid", "taskname"),
}
# divisors of recognised columns whose unit is not "GPUs": PAI's plan_gpu is in percent of a
# GPU, OpenB's gpu_milli in thousandths of one
DEFAULT_DIVISORS: Dict[str, float] = {"plangpu": 100.0, "gpumilli": 1000.0}
UNIT_SUFFIXES: Tuple[Tuple[str, str], ...] = (
    ("ms", "ms"), ("msec", "ms"), ("millis", "ms"), ("us", "us"), ("usec", "us"),
    ("micros", "us"), ("ns", "ns"), ("nsec", "ns"), ("nanos", "ns"), ("sec", "s"),
    ("secs", "s"), ("seconds", "s"), ("s", "s"), ("min", "min"), ("mins", "min"),
    ("minutes", "min"), ("h", "h"), ("hr", "h"), ("hrs", "h"), ("hours", "h"))
# the median start value of a numeric column, if inside one of these ranges, is a Unix
# timestamp in that unit (seconds: 2001-09 .. 5138; ms, us, ns: the same dates)
EPOCH_RANGES: Tuple[Tuple[float, float, str], ...] = (
    (1e9, 1e11, "s"), (1e12, 1e14, "ms"), (1e15, 1e17, "us"), (1e18, 1e20, "ns"))
MISSING = {"", "na", "nan", "none", "null", "nat", "-", "n/a", "?"}
MAX_ROWS = 5_000_000


@dataclass(frozen=True)
class TraceJob:
    start_s: float
    end_s: Optional[float]
    request: Optional[float]     # GPUs asked for (may be fractional); None: no GPU column
    line: int
    name: str = ""

    @property
    def gpus(self) -> Optional[int]:
        """Whole GPU slots: ceil of the request (None without a GPU column)."""
        return None if self.request is None else max(1, math.ceil(self.request - 1e-9))


@dataclass
class ArrivalTrace:
    path: Path
    jobs: List[TraceJob]                  # sorted by start
    columns: Dict[str, str]               # role -> header used
    unit: str                             # unit of numeric times ("datetime" for dates)
    unit_rule: str                        # how the unit was chosen
    rows: int = 0
    skipped: Dict[str, int] = field(default_factory=dict)
    ends_ignored: int = 0
    all_requests: List[Tuple[float, Optional[float], float]] = field(default_factory=list)

    @property
    def has_sizes(self) -> bool:
        return "gpus" in self.columns

    def summary(self) -> str:
        """One line: what was read and what was skipped."""
        skip = ", ".join(f"{n} {why}" for why, n in self.skipped.items() if n)
        cols = ", ".join(f"{r}={c}" for r, c in self.columns.items())
        end = f"; {self.ends_ignored} ends before their start ignored" if self.ends_ignored else ""
        return one_line(f"arrivals: {self.path.name}: {self.rows} rows, {len(self.jobs)} jobs"
                        + (f"; skipped {skip}" if skip else "") + end
                        + f"; columns {cols}; times in {self.unit} ({self.unit_rule})")

    def peak_gpus(self) -> Optional[float]:
        """Most GPUs requested at once over the trace (every GPU task with a start and an
        end, fractional requests as they are); None without end times."""
        ev = []
        for s, e, g in self.all_requests:
            if e is not None:
                ev.append((s, g))
                ev.append((e, -g))
        if not ev:
            return None
        ev.sort(key=lambda t: (t[0], t[1]))   # a release before an arrival at the same time
        cur = peak = 0.0
        for _, d in ev:
            cur += d
            peak = max(peak, cur)
        return peak


@dataclass(frozen=True)
class Preset:
    """A named trace: ``--arrivals NAME`` is ``csv:path`` with these settings."""
    path: Path
    start_after_s: float = 0.0       # ignore tasks created before (a snapshot's initial population)
    sizes_from_trace: bool = True
    columns: str = ""


PRESETS: Dict[str, Preset] = {
    # OpenB: tasks created before the first deletion (9,964,972 s) were already running when
    # the trace starts; its 99 % single-GPU tasks are not used as job sizes (provenance note)
    "openb": Preset(OPENB_TASKS, start_after_s=9_964_972, sizes_from_trace=False,
                    columns="start=creation_time,end=deletion_time,gpus=num_gpu"),
}


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def parse_column_map(spec: str) -> Dict[str, Tuple[str, float]]:
    """'start=creation_time,gpus=plan_gpu/100' -> {role: (column, divisor)}."""
    out: Dict[str, Tuple[str, float]] = {}
    for part in filter(None, (p.strip() for p in (spec or "").split(","))):
        role, eq, col = part.partition("=")
        role = role.strip().lower().replace("-", "_")
        if not eq or not col.strip():
            raise ScenarioError(f"--arrival-columns: {part!r} is not role=column")
        if role not in ROLES:
            raise ScenarioError(f"--arrival-columns: unknown role {role!r} (known: {', '.join(ROLES)})")
        col, slash, div = col.strip().rpartition("/") if "/" in col else (col.strip(), "", "")
        divisor = 1.0
        if slash:
            try:
                divisor = float(div)
            except ValueError:
                divisor = float("nan")
            if not (math.isfinite(divisor) and divisor > 0):
                raise ScenarioError(f"--arrival-columns: divisor of {role} must be a positive number, "
                                    f"got {div!r}")
        if role in out:
            raise ScenarioError(f"--arrival-columns: {role} given twice")
        out[role] = (col.strip(), divisor)
    return out


def _pick_columns(header: Sequence[str], given: Dict[str, Tuple[str, float]],
                  where: str) -> Dict[str, Tuple[int, str, float]]:
    """role -> (index, header, divisor)."""
    norm = {}
    for i, h in enumerate(header):
        norm.setdefault(_norm(h), i)
        norm.setdefault(h.strip(), i)
    for i, h in enumerate(header):   # 'submit_time_ms', 'arrival (min)': the name without its unit
        if _unit_from_name(h):
            norm.setdefault(_norm(_strip_unit(h)), i)
    cols: Dict[str, Tuple[int, str, float]] = {}
    for role, (col, div) in given.items():
        i = norm.get(col, norm.get(_norm(col)))
        if i is None:
            raise ScenarioError(f"{where}: --arrival-columns {role}={col}: no such column "
                                f"(columns: {', '.join(h.strip() for h in header)[:300]})")
        cols[role] = (i, header[i].strip(), div)
    taken = {i for i, _, _ in cols.values()}
    for role in ROLES:
        if role in cols or (role == "gpu_share" and "gpus" in given):
            continue   # a share column is only guessed along with a guessed GPU column
        for cand in DEFAULT_NAMES[role]:
            i = norm.get(cand)
            if i is not None and i not in taken:
                cols[role] = (i, header[i].strip(), DEFAULT_DIVISORS.get(cand, 1.0))
                taken.add(i)
                break
    if "start" not in cols:
        raise ScenarioError(f"{where}: no start-time column (looked for "
                            f"{', '.join(DEFAULT_NAMES['start'][:8])}, ...); name it with "
                            "--arrival-columns start=COLUMN")
    if "gpu_share" in cols and "gpus" not in cols:
        del cols["gpu_share"]
    return cols


def _unit_from_name(name: str) -> Optional[str]:
    n = name.strip().lower()
    for suf, unit in UNIT_SUFFIXES:
        if re.search(rf"(^|[^a-z0-9]){suf}$", n) or n.endswith(f"({suf})") or n.endswith(f"[{suf}]"):
            return unit
    return None


def _strip_unit(name: str) -> str:
    return re.sub(r"[\s_\-.]*[(\[]?[a-z]+[)\]]?$", "", name.strip().lower())


def _parse_datetime(tok: str) -> Optional[float]:
    t = tok.strip()
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    try:
        d = datetime.fromisoformat(t)
    except ValueError:
        return None
    if d.tzinfo is None:
        d = d.replace(tzinfo=timezone.utc)
    return d.timestamp()


class _Reader:
    """Reads one value kind per column: numbers or date-times (whichever the first value is)."""

    def __init__(self, where: str):
        self.where = where
        self.kind: Dict[str, str] = {}

    def time(self, tok: str, line: int, col: str) -> Optional[float]:
        t = tok.strip()
        if t.lower() in MISSING:
            return None
        try:
            v = float(t)
            kind = "number"
        except ValueError:
            v = _parse_datetime(t)
            kind = "datetime"
            if v is None:
                raise ScenarioError(f"{self.where} line {line}, column {col}: not a time: {t[:40]!r}") \
                    from None
        if not math.isfinite(v):
            raise ScenarioError(f"{self.where} line {line}, column {col}: not a finite time: {t[:40]!r}")
        seen = self.kind.setdefault(col, kind)
        if seen != kind:
            raise ScenarioError(f"{self.where} line {line}, column {col}: {t[:40]!r} is a {kind}, "
                                f"earlier rows hold {seen}s")
        return v

    @staticmethod
    def number(tok: str, line: int, col: str, where: str) -> Optional[float]:
        t = tok.strip()
        if t.lower() in MISSING:
            return None
        try:
            v = float(t)
        except ValueError:
            raise ScenarioError(f"{where} line {line}, column {col}: not a number: {t[:40]!r}") from None
        if not math.isfinite(v) or v < 0:
            raise ScenarioError(f"{where} line {line}, column {col}: must be a non-negative number, "
                                f"got {t[:40]!r}")
        return v


def _read_rows(path: Path) -> Tuple[List[str], List[Tuple[int, List[str]]]]:
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            sample = f.read(65536)
            f.seek(0)
            try:
                dialect = csv.Sniffer().sniff(sample, delimiters=",;\t|")
            except csv.Error:
                dialect = csv.excel
            r = csv.reader(f, dialect)
            header = next(r, None)
            rows = []
            for row in r:
                if len(rows) >= MAX_ROWS:
                    raise ScenarioError(f"{path.name}: more than {MAX_ROWS} rows")
                if any(c.strip() for c in row):
                    rows.append((r.line_num, row))
    except OSError as e:
        raise ScenarioError(f"{path.name}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{path.name}: not a UTF-8 text file") from None
    except csv.Error as e:
        raise ScenarioError(f"{path.name}: not a readable CSV ({e})") from None
    if not header or not any(h.strip() for h in header):
        raise ScenarioError(f"{path.name} line 1: no header row (a CSV of jobs needs column names)")
    return header, rows


def read_trace(path, columns: str = "", time_unit: Optional[str] = None,
               min_gpus: int = 1, start_after_s: float = 0.0) -> ArrivalTrace:
    """Read an arrival-trace CSV (see the module docstring for the rules)."""
    path = Path(path)
    where = path.name
    if time_unit is not None and time_unit not in UNITS:
        raise ScenarioError(f"--arrival-time-unit: unknown unit {time_unit!r} (known: {', '.join(UNITS)})")
    given = parse_column_map(columns)
    header, rows = _read_rows(path)
    cols = _pick_columns(header, given, where)
    rd = _Reader(where)
    raw: List[Tuple[int, float, Optional[float], Optional[float], Optional[float], str]] = []
    skipped = {"without a start time": 0, "with no GPU request (0 or empty)": 0,
               f"below {min_gpus} GPUs": 0, "before the trace window": 0}
    no_start, no_gpu = "without a start time", "with no GPU request (0 or empty)"
    for line, row in rows:
        def cell(role):
            c = cols.get(role)
            return (row[c[0]] if c and c[0] < len(row) else "", c[1] if c else role)
        tok, name = cell("start")
        start = rd.time(tok, line, name)
        if start is None:
            skipped[no_start] += 1
            continue
        end = dur = None
        if "end" in cols:
            end = rd.time(cell("end")[0], line, cols["end"][1])
        if "duration" in cols:
            dur = _Reader.number(cell("duration")[0], line, cols["duration"][1], where)
        req = None
        if "gpus" in cols:
            g = _Reader.number(cell("gpus")[0], line, cols["gpus"][1], where)
            req = (g or 0.0) / cols["gpus"][2]
            if "gpu_share" in cols:
                sh = _Reader.number(cell("gpu_share")[0], line, cols["gpu_share"][1], where)
                if sh is not None:
                    req *= sh / cols["gpu_share"][2]
            if req <= 0:
                skipped[no_gpu] += 1
                continue
        raw.append((line, start, end, dur, req, cell("name")[0].strip()[:64]))
    if "end" in cols and rd.kind.get(cols["end"][1], rd.kind.get(cols["start"][1])) \
            != rd.kind.get(cols["start"][1]):
        raise ScenarioError(f"{where}: column {cols['end'][1]} holds {rd.kind[cols['end'][1]]}s, "
                            f"column {cols['start'][1]} {rd.kind[cols['start'][1]]}s")
    unit, rule = _choose_unit(time_unit, cols, rd, [r[1] for r in raw])
    if unit == "datetime":   # absolute seconds; durations in the stated unit, else seconds
        scale, dur_scale = 1.0, UNITS[time_unit or "s"]
    else:
        scale = dur_scale = UNITS[unit]
    jobs: List[TraceJob] = []
    all_req: List[Tuple[float, Optional[float], float]] = []
    ends_ignored = 0
    for line, start, end, dur, req, name in raw:
        s = start * scale
        e = end * scale if end is not None else (s + dur * dur_scale if dur is not None else None)
        if e is not None and e < s:
            e = None
            ends_ignored += 1
        if s < start_after_s:
            skipped["before the trace window"] += 1
            continue
        all_req.append((s, e, req if req is not None else 1.0))
        j = TraceJob(s, e, req, line, name)
        if req is not None and j.gpus < min_gpus:
            skipped[f"below {min_gpus} GPUs"] += 1
            continue
        jobs.append(j)
    jobs.sort(key=lambda j: (j.start_s, j.line))
    return ArrivalTrace(path=path, jobs=jobs, columns={r: c[1] for r, c in cols.items()},
                        unit=unit, unit_rule=rule, rows=len(rows), skipped=skipped,
                        ends_ignored=ends_ignored, all_requests=all_req)


def _choose_unit(stated: Optional[str], cols, rd: _Reader, starts: List[float]) -> Tuple[str, str]:
    if rd.kind.get(cols["start"][1]) == "datetime":
        return "datetime", "date-times"
    if stated:
        return stated, "stated"
    by_name = _unit_from_name(cols["start"][1])
    if by_name:
        return by_name, f"from the column name {cols['start'][1]!r}"
    if starts:
        med = sorted(starts)[len(starts) // 2]
        for lo, hi, unit in EPOCH_RANGES:
            if lo <= med < hi:
                return unit, f"detected: Unix timestamps in {unit}"
    return "s", "detected: relative times, seconds"


def load(kind: str, columns: str = "", time_unit: Optional[str] = None,
         min_gpus: int = 1) -> Tuple[ArrivalTrace, Preset]:
    """``csv:FILE`` or a preset name -> (trace, preset settings)."""
    if kind in PRESETS:
        pr = PRESETS[kind]
        tr = read_trace(pr.path, columns or pr.columns, time_unit, min_gpus,
                        start_after_s=pr.start_after_s)
        return tr, pr
    if not kind.startswith("csv:") or not kind[4:]:
        raise ScenarioError(f"arrivals: unknown kind {kind!r} (none, poisson, "
                            f"{', '.join(PRESETS)}, csv:FILE)")
    pr = Preset(Path(kind[4:]))
    return read_trace(pr.path, columns, time_unit, min_gpus), pr


@dataclass
class Sample:
    times: List[float]                 # arrival times (s), first at 0
    sizes: Optional[List[int]]         # job sizes (GPUs) or None: the generator's size mix
    factor: float                      # simulated seconds per trace second
    rule: str                          # how the factor was chosen (for the description)
    first_line: int                    # CSV line of the first sampled job
    shrunk: int = 0                    # jobs halved to fit


def sample(trace: ArrivalTrace, n: int, rng: random.Random, capacity_gpus: int,
           mean_interarrival_s: Optional[float] = None, trace_gpus: Optional[float] = None,
           fill: float = 0.95, sizes_from_trace: bool = True) -> Sample:
    """``n`` consecutive jobs of the trace from a seed-chosen start, rescaled (module doc)."""
    jobs = trace.jobs
    if n < 1:
        return Sample([], [] if trace.has_sizes and sizes_from_trace else None, 1.0, "", 0)
    if len(jobs) < n:
        raise ScenarioError(f"{trace.path.name}: the trace has only {len(jobs)} usable jobs, "
                            f"{n} asked for")
    start = rng.randrange(0, len(jobs) - n + 1)
    window = jobs[start:start + n]
    if mean_interarrival_s is not None:
        gaps = [b.start_s - a.start_s for a, b in zip(jobs, jobs[1:])]
        mean = sum(gaps) / len(gaps) if gaps else 0.0
        factor = mean_interarrival_s / mean if mean > 0 else 1.0
        rule = f"gaps scaled to a mean of {mean_interarrival_s:g} s (trace mean {mean:.4g} s)"
    else:
        cap_trace = trace_gpus if trace_gpus is not None else trace.peak_gpus()
        if not cap_trace:
            raise ScenarioError(f"{trace.path.name}: no end times to size the trace's cluster; "
                                "give --arrival-trace-gpus N or --mean-interarrival S")
        factor = cap_trace / capacity_gpus
        how = "given" if trace_gpus is not None else "peak demand"
        rule = (f"gaps x {factor:.4g} = trace cluster {cap_trace:.6g} GPUs ({how}) / "
                f"simulated {capacity_gpus} GPUs")
    times, t = [0.0], 0.0
    for a, b in zip(window, window[1:]):
        t += (b.start_s - a.start_s) * factor
        times.append(t)
    sizes, shrunk = None, 0
    if trace.has_sizes and sizes_from_trace:
        sizes, shrunk = fit_sizes([j.gpus for j in window], capacity_gpus, fill)
    return Sample(times, sizes, factor, rule, window[0].line, shrunk)


def fit_sizes(sizes: List[int], capacity: int, fill: float = 0.95) -> Tuple[List[int], int]:
    """Halve the largest job (ties: the later one) until the jobs fit together in
    ``fill`` x ``capacity`` GPUs (placements are static and exclusive); (sizes, jobs halved)."""
    if len(sizes) > capacity:
        raise ScenarioError(f"{len(sizes)} jobs do not fit on {capacity} GPUs")
    out = list(sizes)
    budget = max(len(out), int(capacity * fill))
    halved = set()
    while sum(out) > budget:
        i = max(range(len(out)), key=lambda k: (out[k], k))
        if out[i] == 1:
            break
        out[i] = max(1, out[i] // 2)
        halved.add(i)
    return out, len(halved)
