"""A run's per-job summary (summary.csv): iteration-time statistics of every job, computed in
one place for the emulator (``emulation.runner.collect``), the simulator
(``simulation.results``) and the report (``analysis.results``).

  summary.csv   job, policy, iterations, mean_iter_s, p99_iter_s, mean_comm_s, jct_s,
                slowdown_vs_isolated, phase_error, corrections

Rules (the same for both back ends):
  * an iteration row is (job, worker, iteration, start_s, compute_s, comm_s, end_s), the
    layout of iterations.csv; iteration time = end_s - start_s of one row;
  * ``iterations`` = how many distinct iterations the job ran;
  * the first ``warmup`` iterations are left out of means and percentiles, unless the job ran
    no more iterations than that (then all count): ``steady_from``;
  * jct_s = the last end_s since the job's origin (its arrival); nan for an unfinished job
    when the caller says so;
  * slowdown_vs_isolated = mean iteration time / the job's isolated iteration time (nan when
    that is unknown or not positive).

The co-run figures (``corun_window``, ``corun_mean``: the report's mean iteration time while
every job sharing a link with the job was running) need the other jobs' rows, so the report
computes them (analysis.results).
"""
from __future__ import annotations

import csv
import io
import math
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .files import PathLike, atomic_write_text

SUMMARY_COLS = ["job", "policy", "iterations", "mean_iter_s", "p99_iter_s", "mean_comm_s",
                "jct_s", "slowdown_vs_isolated", "phase_error", "corrections"]
NAN = float("nan")


def steady_from(iterations: int, warmup: int) -> int:
    """First iteration the means count: after the warm-up, unless the job ran no more
    iterations than the warm-up (then all count)."""
    warmup = max(0, int(warmup))
    return warmup if iterations > warmup else 0


def job_summary(rows: Sequence[tuple], warmup: int, *, isolated_s: float = NAN,
                finished: bool = True, time_scale: float = 1.0, origin: float = 0.0) -> dict:
    """The statistics of one job from its iteration rows (iterations.csv layout).

    ``time_scale``: the rows' times are divided by it (the emulator's workers log emulated
    seconds); ``origin``: the time the job's JCT counts from, in the rows' time base.
    Returns iterations, mean_iter_s, p99_iter_s, mean_comm_s, jct_s, isolated_iter_s and
    slowdown_vs_isolated."""
    ts = time_scale
    n_it = len({r[2] for r in rows})
    wu = steady_from(n_it, warmup)
    steady = [r for r in rows if r[2] >= wu] or list(rows)
    its = [(r[6] - r[3]) / ts for r in steady]
    comm = [r[5] / ts for r in steady]
    mean = float(np.mean(its)) if its else NAN
    iso = float(isolated_s) if isolated_s is not None else NAN
    jct = (max(r[6] for r in rows) - origin) / ts if rows and finished else NAN
    return {"iterations": n_it, "mean_iter_s": mean,
            "p99_iter_s": float(np.percentile(its, 99)) if its else NAN,
            "mean_comm_s": float(np.mean(comm)) if comm else NAN,
            "jct_s": jct,
            "slowdown_vs_isolated": mean / iso if math.isfinite(iso) and iso > 0 else NAN,
            "isolated_iter_s": iso}


def summary_row(job: str, policy: str, rows: Sequence[tuple], warmup: int, *,
                isolated_s: float = NAN, finished: bool = True, time_scale: float = 1.0,
                origin: float = 0.0, phase: Optional[dict] = None) -> dict:
    """One summary.csv row (plus isolated_iter_s): ``job_summary`` with the job's name, the
    policy and its phase-control figures (``phase``: scheduling.phase.phase_summary's entry
    of the job, if any)."""
    r = {"job": job, "policy": policy}
    r.update(job_summary(rows, warmup, isolated_s=isolated_s, finished=finished,
                         time_scale=time_scale, origin=origin))
    ph = phase or {}
    pe = ph.get("phase_error")
    r["phase_error"] = NAN if pe is None else pe
    r["corrections"] = ph.get("corrections", 0)
    return r


# the co-run figures: a job's iterations while every one of a set of jobs is running
CORUN_MIN_ITERATIONS = 3     # fewer inside the window: no figure for the job


def corun_window(rows_by_job: Mapping[str, Sequence[tuple]], arrivals: Mapping[str, float],
                 warmup: int, running_until: Optional[Mapping[str, float]] = None
                 ) -> Tuple[float, float]:
    """The interval, in seconds since the run's start (rows are job-relative: a job's times
    count from its ``arrivals`` entry), in which every job runs past its warm-up: from the
    latest start of a job's first measured iteration to the earliest end of a job's last
    iteration.  ``running_until``: jobs that were still running when a time-bounded run
    stopped, with the stop time (seconds since the run's start), which then stands for the
    end of their last iteration.  (nan, nan) with fewer than two jobs; start >= end when they
    never all ran."""
    starts, ends = [], []
    until = running_until or {}
    for job, rows in rows_by_job.items():
        if not rows:
            continue
        a = float(arrivals.get(job, 0.0))
        wu = steady_from(len({r[2] for r in rows}), warmup)
        measured = [r for r in rows if r[2] >= wu] or list(rows)
        starts.append(a + min(r[3] for r in measured))
        ends.append(float(until[job]) if job in until else a + max(r[6] for r in rows))
    if len(starts) < 2:
        return NAN, NAN
    return max(starts), min(ends)


def corun_mean(rows: Sequence[tuple], arrival: float, window: Tuple[float, float],
               warmup: int, min_iterations: int = CORUN_MIN_ITERATIONS) -> Tuple[float, int]:
    """(mean iteration time, iterations) of a job's measured iterations that lie wholly
    inside ``window`` (``corun_window``); nan when fewer than ``min_iterations`` do.  Unlike
    the mean over all measured iterations, it leaves out the iterations a job ran after a
    competitor had finished (or before one arrived), which a short run with equal iteration
    counts would otherwise mix in: under strict priority the favoured job finishes first and
    the other then runs alone."""
    t0, t1 = window
    if not (math.isfinite(t0) and math.isfinite(t1)) or t1 <= t0 or not rows:
        return NAN, 0
    eps = 1e-9 * max(1.0, abs(t1))
    wu = steady_from(len({r[2] for r in rows}), warmup)
    inside = [r for r in rows if r[2] >= wu and arrival + r[3] >= t0 - eps
              and arrival + r[6] <= t1 + eps]
    n = len({r[2] for r in inside})
    if n < min_iterations:
        return NAN, n
    return float(np.mean([r[6] - r[3] for r in inside])), n


def _cell(x) -> str:
    return f"{x:.6f}" if isinstance(x, float) else str(x)


def summary_csv_text(rows: Iterable[dict], cols: Sequence[str] = SUMMARY_COLS) -> str:
    """summary.csv's text: floats with 6 decimals (nan as 'nan'), a missing cell as nan."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(cols)
    for r in rows:
        w.writerow([_cell(r.get(c, NAN)) for c in cols])
    return buf.getvalue()


def write_summary_csv(path: PathLike, rows: Iterable[dict]) -> None:
    atomic_write_text(path, summary_csv_text(rows))


def read_summary_csv(path: PathLike) -> Dict[str, dict]:
    """summary.csv rows by job (cells as text)."""
    with open(path, newline="") as f:
        return {r["job"]: r for r in csv.DictReader(f) if r.get("job")}


__all__: List[str] = ["SUMMARY_COLS", "steady_from", "job_summary", "summary_row",
                      "CORUN_MIN_ITERATIONS", "corun_window", "corun_mean",
                      "summary_csv_text", "write_summary_csv", "read_summary_csv"]
