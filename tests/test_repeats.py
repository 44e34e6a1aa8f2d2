"""Repeated comparisons (compare --runs N): the aggregation's statistics against textbook values,
the simulator path for real, bad input, and an interrupted series."""
from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest

from analysis.__main__ import main as analysis_main
from analysis.report import POLICY_COLS
from analysis.repeats import aggregate, ci95, run_repeats, runs_for
from conftest import REPO, run_cli

SAMPLE = Path(__file__).resolve().parent / "data" / "report_sample"
T975 = {1: 12.706204736, 2: 4.302652730, 3: 3.182446305, 4: 2.776445105}   # t(0.975, dof), tables


def _rows(path: Path) -> list:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _stat(d: Path, policy: str, metric: str) -> dict:
    return next(r for r in _rows(d / "repeats.csv") if r["policy"] == policy and r["metric"] == metric)


def test_ci95_is_the_student_t_interval():
    n, m, sd, lo, hi = ci95([1.0, 2.0, 3.0, 4.0, math.nan])
    assert n == 4 and m == 2.5 and sd == pytest.approx(math.sqrt(5 / 3))
    h = T975[3] * math.sqrt(5 / 3) / 2
    assert (lo, hi) == (pytest.approx(2.5 - h), pytest.approx(2.5 + h))
    assert ci95([0.9])[:2] == (1, 0.9) and math.isnan(ci95([0.9])[3])
    assert ci95([])[0] == 0


def _write_run(d: Path, rows: list) -> None:
    d.mkdir(parents=True)
    with open(d / "comparison.csv", "w", newline="") as f:
        w = csv.DictWriter(f, POLICY_COLS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in POLICY_COLS})


def test_aggregate_pairs_ratios_and_counts_only_ok_runs(tmp_path):
    d = tmp_path / "rep"
    d.mkdir()
    (d / "repeats.json").write_text(json.dumps({"scenario": "x", "runs": 4, "command": "c"}))
    fair = [0.100, 0.120, 0.110, 0.130]                 # a noisy machine: fair itself moves
    harm = [0.090, 0.110, 0.095, 0.125]
    for k, (f, h) in enumerate(zip(fair, harm), 1):
        rows = [{"policy": "fair", "status": "ok", "mean_iter_s": f, "mean_iter_vs_fair": 1.0},
                {"policy": "harmonics", "status": "ok", "mean_iter_s": h, "mean_iter_vs_fair": h / f},
                {"policy": "crux", "status": "ok" if k != 2 else "failed: boom",
                 "mean_iter_s": 0.2, "mean_iter_vs_fair": 0.2 / f}]
        _write_run(d / f"run{k}", rows)
    (d / "run5").mkdir()                                 # cut short: no comparison.csv
    res = aggregate(d, plots=True)
    assert res["runs"] == 4 and res["policies"] == ["fair", "crux", "harmonics"]
    ratios = [h / f for f, h in zip(fair, harm)]
    m = sum(ratios) / 4
    sd = math.sqrt(sum((x - m) ** 2 for x in ratios) / 3)
    r = _stat(d, "harmonics", "mean_iter_vs_fair")
    assert int(r["runs"]) == 4 and float(r["mean"]) == pytest.approx(m, rel=1e-5)
    assert float(r["ci95_high"]) == pytest.approx(m + T975[3] * sd / 2, rel=1e-5)
    assert int(r["runs_below_1"]) == 4
    raw = _stat(d, "harmonics", "mean_iter_s")
    assert float(raw["mean"]) == pytest.approx(sum(harm) / 4, rel=1e-5) and raw["runs_below_1"] == ""
    crux = _stat(d, "crux", "mean_iter_vs_fair")              # run 2 failed: three samples
    assert int(crux["runs"]) == 3
    assert float(crux["mean"]) == pytest.approx(sum(0.2 / f for k, f in enumerate(fair) if k != 1) / 3,
                                                rel=1e-5)
    md = (d / "repeats.md").read_text()
    assert "| harmonics | 4 |" in md and " *" in md and "plots/repeats.png" in md
    assert "[run1](run1/comparison.md)" not in md           # no per-run report was written here
    assert (d / "plots" / "repeats.png").read_bytes()[:4] == b"\x89PNG"
    # harmonics' interval excludes 1; crux is longer than fair
    text = "\n".join(l for l in md.splitlines() if l.startswith("- "))
    assert "harmonics: mean iteration time" in text and "shorter than fair's at the 95% level" in text
    assert "crux: mean iteration time" in text and "longer than fair's at the 95% level" in text
    # `report DIR` on such a directory aggregates it again
    (d / "repeats.csv").unlink()
    assert analysis_main(["report", str(d), "--no-plots"]) == 0
    assert _stat(d, "harmonics", "mean_iter_vs_fair")["runs"] == "4"


def test_precision_plans_the_runs_from_the_series_spread(tmp_path):
    # textbook: CV 0.5% -> 2 runs give 12.706 * 0.5% / sqrt(2) = 4.5% > 3%; 3 runs 1.24%
    assert runs_for(0.005, 0.03) == 3
    assert runs_for(0.005, 0.01) == 4          # 3.182 * 0.5% / 2 = 0.80%; 3 runs: 1.24%
    assert runs_for(0.5, 0.01) is None and runs_for(math.nan, 0.03) is None
    d = tmp_path / "rep"
    d.mkdir()
    (d / "repeats.json").write_text(json.dumps({"scenario": "x", "runs": 4}))
    fair = [0.100, 0.120, 0.110, 0.130]
    for k, f in enumerate(fair, 1):
        _write_run(d / f"run{k}", [{"policy": "fair", "status": "ok", "mean_iter_s": f,
                                    "mean_iter_vs_fair": 1.0}])
    md = aggregate(d, plots=False)["markdown"]
    cv = math.sqrt(0.0005 / 3) / 0.115                  # 11.2%: sd over 3 dof, over the mean
    from scipy.stats import t
    n = runs_for(cv, 0.03)
    assert t.ppf(0.975, n - 1) * cv / math.sqrt(n) <= 0.03 < t.ppf(0.975, n - 2) * cv / math.sqrt(n - 1)
    n1 = runs_for(cv, 0.01)                              # about (1.96 * 11.2)^2 = 482
    assert 450 < n1 < 520
    assert f"| fair | 4 | 11.2% | ±{T975[3] * cv / 2:.1%} | {n} | {n1} |" in md


def test_repeats_on_the_simulator(tmp_path):
    """compare --runs 2 as a user runs it, on the simulator: the simulator is deterministic,
    so the two runs agree and the intervals have zero width."""
    sc = tmp_path / "pair.yaml"
    sc.write_text((REPO / "scenarios" / "pair-shared-spine.yaml").read_text()
                  .replace("backend: emulation", "backend: simulation"))
    out = tmp_path / "rep"
    r = run_cli("analysis", "compare", str(sc), "--policies", "fair,harmonics", "--runs", "2",
                "--out", str(out), "--iterations", "15", timeout=240)
    assert r.returncode == 0, r.stderr
    for k in (1, 2):                                    # every run ran the length asked for
        assert "iterations: 15" in (out / f"run{k}" / "scenario.yaml").read_text()
    assert "== run 1/2 ==" in r.stderr and "== run 2/2 ==" in r.stderr
    one = {x["policy"]: x for x in _rows(out / "run1" / "comparison.csv")}
    two = {x["policy"]: x for x in _rows(out / "run2" / "comparison.csv")}
    assert one["harmonics"]["mean_iter_s"] == two["harmonics"]["mean_iter_s"]
    st = _stat(out, "harmonics", "mean_iter_vs_fair")
    assert st["runs"] == "2" and float(st["std"]) == 0.0
    assert float(st["mean"]) == pytest.approx(float(one["harmonics"]["mean_iter_vs_fair"]), rel=1e-5)
    info = json.loads((out / "repeats.json").read_text())
    assert info["exit_codes"] == [0, 0] and "--runs 2" in info["command"]
    assert "| harmonics | 2 |" in r.stdout and "harmonics: mean iteration time" in r.stdout
    assert (out / "plots" / "repeats.png").stat().st_size > 5_000
    assert "[run2](run2/comparison.md)" in (out / "repeats.md").read_text()


def test_repeats_bad_input_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    pair = str(REPO / "scenarios" / "pair-shared-spine.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncluster: {racks: 2}\n")
    for args in ([pair, "--runs", "0"], [pair, "--runs", "two"], [str(bad), "--runs", "3"],
                 [pair, "--runs", "3", "--policies", "fair,nosuch"]):
        try:
            rc = analysis_main(["compare", *args, "--out", str(out)])
        except SystemExit as e:
            rc = e.code
        err = capsys.readouterr()
        assert rc == 2 and err.out == "", args
        assert err.err.startswith("error: ") and err.err.strip().count("\n") == 0, err.err
        assert not out.exists()
    assert run_repeats(pair, None, str(out), {}, 1) == 2
    assert "--runs: give at least 2" in capsys.readouterr().err and not out.exists()


def test_interrupted_series_aggregates_what_finished(tmp_path, capsys):
    calls = []

    def runner(sc, policy, out, opts):
        calls.append(policy)
        if len(calls) == 4:                      # run 2, second policy: Ctrl-C
            raise KeyboardInterrupt
        shutil.copytree(SAMPLE / policy, out)
        return "ok"
    out = tmp_path / "rep"
    rc = run_repeats(str(SAMPLE / "scenario.yaml"), None, str(out), {"plots": False}, 3,
                     runners={"emulation": runner})
    cap = capsys.readouterr()
    assert rc == 130 and calls == ["fair", "harmonics", "fair", "harmonics"]
    assert not (out / "run3").exists()
    assert json.loads((out / "repeats.json").read_text())["exit_codes"] == [0, 130]
    # run 2 has fair only: harmonics counts once, fair twice
    assert _stat(out, "fair", "mean_iter_s")["runs"] == "2"
    assert _stat(out, "harmonics", "mean_iter_s")["runs"] == "1"
    assert "harmonics: mean iteration time" in cap.out and "one run: no interval" in cap.out
    assert "cut short: 1 of the 3 planned runs completed" in (out / "repeats.md").read_text()
