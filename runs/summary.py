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
"""
from __future__ import annotations

import csv
import io
import math
from typing import Dict, Iterable, List, Optional, Sequence

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
                      "summary_csv_text", "write_summary_csv", "read_summary_csv"]
