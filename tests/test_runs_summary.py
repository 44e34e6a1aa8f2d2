"""runs.summary: the one per-job summary of both back ends and the report."""
from __future__ import annotations

import math

import numpy as np

from runs.summary import SUMMARY_COLS, job_summary, steady_from, summary_csv_text, summary_row


def rows(times, comm=0.1, job="j"):
    # (job, worker, iteration, start_s, compute_s, comm_s, end_s), one worker
    out, t = [], 0.0
    for i, d in enumerate(times):
        out.append((job, "all", i, t, d - comm, comm, t + d))
        t += d
    return out


def test_warmup_left_out_unless_the_job_ran_no_more():
    assert steady_from(5, 1) == 1 and steady_from(1, 1) == 0 and steady_from(3, 0) == 0
    s = job_summary(rows([9.0, 1.0, 2.0, 3.0]), 1, isolated_s=1.0)
    assert s["iterations"] == 4 and s["mean_iter_s"] == 2.0
    assert s["p99_iter_s"] == float(np.percentile([1.0, 2.0, 3.0], 99))
    assert s["slowdown_vs_isolated"] == 2.0 and s["jct_s"] == 15.0
    one = job_summary(rows([9.0]), 1)
    assert one["mean_iter_s"] == 9.0 and math.isnan(one["slowdown_vs_isolated"])


def test_time_scale_origin_finished_and_empty():
    s = job_summary(rows([4.0, 2.0, 2.0]), 1, time_scale=2.0, origin=1.0, isolated_s=0.0)
    assert s["mean_iter_s"] == 1.0 and s["jct_s"] == (8.0 - 1.0) / 2.0
    assert math.isnan(s["slowdown_vs_isolated"])               # no positive isolated time
    assert math.isnan(job_summary(rows([1.0, 1.0]), 1, finished=False)["jct_s"])
    e = job_summary([], 1)
    assert e["iterations"] == 0 and all(math.isnan(e[k]) for k in
                                        ("mean_iter_s", "p99_iter_s", "mean_comm_s", "jct_s"))


def test_summary_csv_text():
    r = summary_row("j", "fair", rows([1.0, 2.0]), 1, phase={"phase_error": None, "corrections": 3})
    text = summary_csv_text([r])
    head, line = text.splitlines()
    assert head.split(",") == SUMMARY_COLS
    assert line == "j,fair,2,2.000000,2.000000,0.100000,3.000000,nan,nan,3"
