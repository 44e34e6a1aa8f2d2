"""Arrival traces from any CSV (simulation.arrivals): OpenB as a plain CSV, a Helios/Philly-
and a PAI-shaped derivative of it generated here (renamed columns, other time units, date-
times, fractional and zero GPU requests, rows without times), the rescaling rules, and the
command line (one line and exit 2 on bad input, nothing written)."""
from __future__ import annotations

import csv
import math
import random
from datetime import datetime, timezone
from pathlib import Path

import pytest

from simulation import arrivals as tr
from simulation.workload import arrivals as legacy_arrivals
from workloads.scenario import ScenarioError, load_scenario

from conftest import run_cli

OPENB = tr.OPENB_TASKS


def openb_rows():
    with open(OPENB, newline="") as f:
        return list(csv.DictReader(f))


def write_csv(path: Path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_openb_as_a_plain_csv_with_the_issue_column_map():
    t = tr.read_trace(OPENB, "start=creation_time,end=deletion_time,gpus=num_gpu")
    rows = openb_rows()
    assert t.rows == len(rows) == 7064 and len(t.jobs) == 7064
    assert t.unit == "s" and "relative" in t.unit_rule
    assert [j.start_s for j in t.jobs] == sorted(float(r["creation_time"]) for r in rows)
    assert sum(j.gpus for j in t.jobs) == sum(int(r["num_gpu"]) for r in rows)
    assert "gpu_share" not in t.columns    # not guessed next to an explicit GPU column


def test_openb_defaults_recognise_its_columns_and_the_share():
    t = tr.read_trace(OPENB)
    assert t.columns["start"] == "creation_time" and t.columns["end"] == "deletion_time"
    assert t.columns["gpus"] == "num_gpu" and t.columns["gpu_share"] == "gpu_milli"
    shared = [j for j in t.jobs if j.request < 1]
    assert shared and all(j.gpus == 1 for j in shared)     # a shared GPU takes one slot


def test_openb_alias_is_the_csv_path_with_its_window():
    a = legacy_arrivals(40, "openb", random.Random(5), 2.0)
    trace, preset = tr.load("openb")
    s = tr.sample(trace, 40, random.Random(5), 1, 2.0, sizes_from_trace=False)
    assert a == s.times and s.sizes is None
    assert all(j.start_s >= preset.start_after_s for j in trace.jobs)


def _helios_like(tmp_path):
    """Helios/Philly-shaped: submit_time as date-times, duration in s, gpu_num; some rows
    without a submit time, some CPU-only (0 GPUs)."""
    rows, skipped_start, zero = [], 0, 0
    for i, r in enumerate(openb_rows()[:600]):
        t = datetime.fromtimestamp(1_600_000_000 + float(r["creation_time"]), tz=timezone.utc)
        sub = "" if i % 97 == 5 else t.strftime("%Y-%m-%d %H:%M:%S")
        skipped_start += sub == ""
        gpus = 0 if i % 50 == 7 else int(r["num_gpu"])
        zero += gpus == 0 and sub != ""
        dur = float(r["deletion_time"]) - float(r["creation_time"])
        rows.append([f"job{i}", sub, f"{dur:.0f}", gpus, "COMPLETED"])
    p = write_csv(tmp_path / "helios_like.csv", ["job_id", "submit_time", "duration", "gpu_num", "state"], rows)
    return p, skipped_start, zero


def test_helios_like_datetimes_and_skipped_rows(tmp_path):
    p, no_start, zero = _helios_like(tmp_path)
    t = tr.read_trace(p)
    assert t.columns == {"start": "submit_time", "duration": "duration", "gpus": "gpu_num", "name": "job_id"}
    assert t.unit == "datetime"
    assert t.skipped["without a start time"] == no_start > 0
    assert t.skipped["with no GPU request (0 or empty)"] == zero > 0
    assert len(t.jobs) == 600 - no_start - zero
    line = t.summary()
    assert "\n" not in line and f"{no_start} without a start time" in line
    # same gaps as the source (date-times are absolute seconds)
    src = sorted(float(r["creation_time"]) for i, r in enumerate(openb_rows()[:600])
                 if i % 97 != 5 and not (i % 50 == 7))
    assert [j.start_s - t.jobs[0].start_s for j in t.jobs] == pytest.approx([s - src[0] for s in src])
    assert t.peak_gpus() > 0


def _pai_like(tmp_path, unit_ms=True, name="start_time"):
    """PAI-shaped: start/end as Unix timestamps in ms, plan_gpu in percent of a GPU."""
    rows = []
    for i, r in enumerate(openb_rows()[:400]):
        s = 1_580_000_000 + float(r["creation_time"])
        e = 1_580_000_000 + float(r["deletion_time"])
        k = 1000 if unit_ms else 1
        share = float(r["gpu_milli"]) / 1000 * int(r["num_gpu"])
        rows.append([f"t{i}", f"{s * k:.0f}", f"{e * k:.0f}", f"{share * 100:g}"])
    return write_csv(tmp_path / "pai_like.csv", ["job_name", name, "end_time", "plan_gpu"], rows)


def test_pai_like_epoch_ms_detected_and_percent_gpus(tmp_path):
    t = tr.read_trace(_pai_like(tmp_path))
    assert t.unit == "ms" and "Unix timestamps in ms" in t.unit_rule
    assert t.columns["gpus"] == "plan_gpu"
    src = openb_rows()[:400]
    want = sorted(float(r["gpu_milli"]) / 1000 * int(r["num_gpu"]) for r in src)
    assert sorted(j.request for j in t.jobs) == pytest.approx(want)
    assert all(j.gpus == math.ceil(j.request - 1e-9) for j in t.jobs)
    assert t.jobs[0].start_s == pytest.approx(1_580_000_000 + min(float(r["creation_time"]) for r in src))


def test_time_unit_from_name_and_stated(tmp_path):
    p = write_csv(tmp_path / "m.csv", ["arrival_min", "gpus"], [[0, 2], [1.5, 4], [3, 1]])
    t = tr.read_trace(p)
    assert t.unit == "min" and [j.start_s for j in t.jobs] == [0, 90, 180]
    t = tr.read_trace(p, time_unit="h")
    assert t.unit == "h" and t.unit_rule == "stated" and t.jobs[2].start_s == 3 * 3600
    p = write_csv(tmp_path / "rel.csv", ["submit", "gpus"], [[0, 2], [1500, 4]])
    assert tr.read_trace(p).unit == "s"
    assert tr.read_trace(p, time_unit="ms").jobs[1].start_s == pytest.approx(1.5)


def test_rescaling_rules(tmp_path):
    p = write_csv(tmp_path / "r.csv", ["start", "end", "gpus"],
                  [[0, 100, 8], [10, 50, 16], [20, 200, 64], [40, 60, 1], [100, 300, 0.5]])
    t = tr.read_trace(p)
    assert t.peak_gpus() == 89            # from t=40 to 50: 8 + 16 + 64 + 1
    # by the trace's peak demand: gaps x peak / simulated GPUs
    s = tr.sample(t, 5, random.Random(0), capacity_gpus=44)
    assert s.factor == pytest.approx(t.peak_gpus() / 44)
    assert s.times == pytest.approx([0, 10 * s.factor, 20 * s.factor, 40 * s.factor, 100 * s.factor])
    # sizes: ceil, then the largest halved until they fit 95 % of the cluster together
    assert s.sizes == [8, 16, 8, 1, 1] and sum(s.sizes) <= 0.95 * 44 and s.shrunk == 1
    # stated trace size, or a mean gap
    assert tr.sample(t, 5, random.Random(0), 44, trace_gpus=440).factor == pytest.approx(10)
    m = tr.sample(t, 5, random.Random(0), 44, mean_interarrival_s=2.0)
    assert m.times[-1] / 4 == pytest.approx(2.0)
    with pytest.raises(ScenarioError, match="only 5 usable jobs"):
        tr.sample(t, 6, random.Random(0), 44)
    q = write_csv(tmp_path / "noend.csv", ["submit_time", "gpus"], [[0, 1], [5, 2]])
    with pytest.raises(ScenarioError, match="--arrival-trace-gpus"):
        tr.sample(tr.read_trace(q), 2, random.Random(0), 8)


@pytest.mark.parametrize("text, cols, where", [
    ("a,b\n1,2\n", "", "no start-time column"),
    ("submit_time,gpus\n1,2\nyesterday,1\n", "", "line 3, column submit_time: not a time"),
    ("submit_time,gpus\n1,2\n3,-1\n", "", "line 3, column gpus: must be a non-negative number"),
    ("submit_time,gpus\n1,2\n2020-01-01 00:00:00,1\n", "", "is a datetime, earlier rows hold numbers"),
    ("", "", "no header row"),
    ("t,g\n1,2\n", "start=t,gpus=nope", "gpus=nope: no such column"),
    ("t,g\n1,2\n", "begin=t", "unknown role 'begin'"),
    ("t,g\n1,2\n", "start=t,gpus=g/0", "divisor of gpus must be a positive number"),
])
def test_bad_traces_are_one_line(tmp_path, text, cols, where):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(ScenarioError) as e:
        tr.read_trace(p, cols)
    assert where in str(e.value) and "\n" not in str(e.value)


def test_cli_generate_from_csv_and_bad_input(tmp_path):
    p = _pai_like(tmp_path)
    out = tmp_path / "sc.yaml"
    r = run_cli("simulation", "generate", str(out), "--racks", "4", "--hosts-per-rack", "4",
                "--spines", "2", "--gpus-per-host", "2", "--jobs", "10", "--arrivals", f"csv:{p}",
                "--arrival-trace-gpus", "64", "--seed", "2")
    assert r.returncode == 0, r.stderr
    notes = [l for l in r.stderr.splitlines() if l.startswith("arrivals:")]
    assert len(notes) == 1 and "400 rows" in notes[0]
    sc = load_scenario(out)
    assert len(sc.jobs) == 10 and sc.jobs[0].arrival_s == 0
    assert "csv:pai_like.csv" in sc.description and "trace cluster 64 GPUs (given) / simulated 32" in sc.description
    bad = tmp_path / "bad.csv"
    bad.write_text("submit_time,gpus\n1,2\n3,x\n")
    out2 = tmp_path / "no.yaml"
    r = run_cli("simulation", "generate", str(out2), "--jobs", "1", "--arrivals", f"csv:{bad}")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: bad.csv line 3, column gpus: not a number: 'x'"]
    assert not out2.exists() and not list(tmp_path.glob("no.yaml*"))
