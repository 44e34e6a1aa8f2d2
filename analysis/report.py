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
    iterations than that (runs.summary: one rule and one computation for both back ends);
  * fidelity (emulator): run.json's "fidelity" verdict, ``faithful`` or ``suspect: ...``
    (emulation/fidelity.py), at the top of the report and in comparison.csv;
  * per job: mean and p99 iteration time, mean communication time, JCT = the last end_s
    (times are relative to the job's arrival), isolated iteration time from run.json
    ("isolated") or else summary.csv (mean_iter_s / slowdown_vs_isolated), slowdown =
    mean iteration time / isolated iteration time; a job with fewer iterations than the
    scenario asks for is unfinished (no JCT); corun_iter_s = the mean iteration time over
    only the iterations that ran while every job sharing a link group with it was running
    (runs.summary ``corun_window`` over the job and its ``analysis.limit.link_neighbours``;
    nan with fewer than 3 such iterations), per policy only when every job has one;
  * per policy: the mean over jobs of each of these; makespan = last job end; "/ fair" =
    the policy's value divided by fair sharing's;
  * decision time: decision_ms per controller epoch (decisions.jsonl: one line per epoch;
    decisions.csv: one row per epoch and job, counted once per epoch, epochs without a
    policy call left out).

The parts: ``analysis.results`` reads DIR (``analysis.captures`` its packet captures),
``analysis.comparison`` builds the tables, ``analysis.markdown`` writes them as Markdown,
``analysis.plots`` draws the figures, and ``analysis.tables`` holds the number, CSV and
Markdown helpers the repeats and sweep summaries share.  This module writes the files.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from .comparison import (JOB_COLS, LIMIT_COLS, NORMALISED, PCAP_CHECK_COLS,  # noqa: F401
                         PCAP_JOB_COLS, POLICY_COLS, build_tables)
from .markdown import render_markdown, summary_text  # noqa: F401
from .results import Report, ReportError, load_results  # noqa: F401
from .tables import write_csv

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
    write_csv(rep.dir / "comparison.csv", POLICY_COLS, rep.policy_rows)
    if rep.limit_row:
        write_csv(rep.dir / "comparison_limit.csv", LIMIT_COLS, rep.limit_row["jobs_rows"])
    write_csv(rep.dir / "comparison_jobs.csv", JOB_COLS, rep.job_rows)
    if rep.pcap_job_rows or (rep.dir / "pcap_jobs.csv").exists():
        write_csv(rep.dir / "pcap_jobs.csv", PCAP_JOB_COLS, rep.pcap_job_rows)
        write_csv(rep.dir / "pcap_check.csv", PCAP_CHECK_COLS, rep.pcap_check_rows)
    if plots:
        from .plots import make_plots
        make_plots(rep)
    rep.markdown = render_markdown(rep)
    (rep.dir / "comparison.md").write_text(rep.markdown)
    return rep
