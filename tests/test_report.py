"""The comparison report (analysis/): regenerated from the committed sample results directory
(tests/data/report_sample, made by its generate.py), numbers traced back to the files, the
packet-capture check, plots, and the compare command's errors and bookkeeping.  No emulation."""
from __future__ import annotations

import csv
import json
import math
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import yaml

from analysis.__main__ import main as analysis_main
from analysis.compare import run_compare
from analysis.report import generate_report
from conftest import REPO, run_cli

SAMPLE = Path(__file__).resolve().parent / "data" / "report_sample"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def sample(tmp_path) -> Path:
    d = tmp_path / "results"
    shutil.copytree(SAMPLE, d, ignore=shutil.ignore_patterns("generate.py", "comparison*", "pcap_*",
                                                             "plots"))
    return d


def rows(path: Path) -> list:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def by_policy(d: Path) -> dict:
    return {r["policy"]: r for r in rows(d / "comparison.csv")}


def iteration_rows(d: Path, policy: str) -> list:
    return rows(d / policy / "iterations.csv")


def expected_job(d: Path, policy: str, job: str) -> dict:
    """The per-job numbers, computed here straight from iterations.csv and run.json."""
    rs = [r for r in iteration_rows(d, policy) if r["job"] == job]
    steady = [r for r in rs if int(r["iteration"]) >= 1]
    its = [float(r["end_s"]) - float(r["start_s"]) for r in steady]
    iso = json.loads((d / policy / "run.json").read_text())["isolated"][job]
    return {"mean": float(np.mean(its)), "p99": float(np.percentile(its, 99)),
            "comm": float(np.mean([float(r["comm_s"]) for r in steady])),
            "jct": max(float(r["end_s"]) for r in rs), "slowdown": float(np.mean(its)) / iso}


def test_report_from_sample_files(sample, capsys):
    rc = analysis_main(["report", str(sample)])
    out = capsys.readouterr().out
    assert rc == 0
    pol = by_policy(sample)
    assert list(pol) == ["fair", "harmonics"]
    for p in ("fair", "harmonics"):
        exp = {j: expected_job(sample, p, j) for j in ("jobA", "jobB")}
        r = pol[p]
        assert r["status"] == "ok" and r["jobs"] == "2" and r["jobs_finished"] == "2"
        assert float(r["mean_iter_s"]) == pytest.approx(np.mean([e["mean"] for e in exp.values()]), rel=1e-5)
        assert float(r["p99_iter_s"]) == pytest.approx(np.mean([e["p99"] for e in exp.values()]), rel=1e-5)
        assert float(r["mean_comm_s"]) == pytest.approx(np.mean([e["comm"] for e in exp.values()]), rel=1e-5)
        assert float(r["mean_jct_s"]) == pytest.approx(np.mean([e["jct"] for e in exp.values()]), rel=1e-5)
        assert float(r["makespan_s"]) == pytest.approx(max(e["jct"] for e in exp.values()), rel=1e-5)
        assert float(r["mean_slowdown"]) == pytest.approx(np.mean([e["slowdown"] for e in exp.values()]), rel=1e-5)
        # the back end's own summary.csv agrees with what the report computes
        for s in rows(sample / p / "summary.csv"):
            assert float(s["mean_iter_s"]) == pytest.approx(exp[s["job"]]["mean"], abs=2e-6)
        # decision time: mean ms over the decisions.jsonl lines
        ms = [json.loads(x)["decision_ms"] for x in (sample / p / "decisions.jsonl").read_text().splitlines()]
        assert float(r["decision_ms_mean"]) == pytest.approx(np.mean(ms), rel=1e-5)
        assert float(r["decision_ms_max"]) == pytest.approx(max(ms), rel=1e-5)
        assert r["epochs"] == str(len(ms))
    # normalised to fair
    for k, nk in (("mean_iter_s", "mean_iter_vs_fair"), ("mean_jct_s", "jct_vs_fair"),
                  ("mean_slowdown", "slowdown_vs_fair"), ("p99_iter_s", "p99_iter_vs_fair"),
                  ("mean_comm_s", "comm_vs_fair")):
        assert float(pol["fair"][nk]) == pytest.approx(1.0)
        assert float(pol["harmonics"][nk]) == pytest.approx(
            float(pol["harmonics"][k]) / float(pol["fair"][k]), rel=1e-4)
    jobs = rows(sample / "comparison_jobs.csv")
    assert {(r["policy"], r["job"]) for r in jobs} == {(p, j) for p in ("fair", "harmonics")
                                                       for j in ("jobA", "jobB")}
    assert all(r["note"] == "" for r in jobs)          # iterations.csv and summary.csv agree
    # plots: every one exists, is a PNG and is not tiny
    for name in ("iteration_time", "iteration_cdf", "link_throughput", "slowdown", "decision_time"):
        png = sample / "plots" / f"{name}.png"
        data = png.read_bytes()
        assert data[:8] == PNG_MAGIC, name
        w, h = struct.unpack(">II", data[16:24])
        assert w >= 400 and h >= 300 and len(data) > 10_000, (name, w, h, len(data))
        assert f"plots/{name}.png" in (sample / "comparison.md").read_text()
    md = (sample / "comparison.md").read_text()
    for needle in ("## Policies", "## Per job", "## Packet-capture check", "| harmonics |",
                   "scheduling/bench.py"):
        assert needle in md, needle
    # the run ends with the Markdown table on stdout
    assert "| policy | mean iter s |" in out and "| harmonics |" in out
    assert "higher class got more" in out


def test_pcap_check_against_decisions(sample):
    generate_report(sample, plots=False)
    chk = {r["policy"]: r for r in rows(sample / "pcap_check.csv")}
    h = chk["harmonics"]
    # harmonics put jobA in class 0 and jobB in class 1 (decisions.jsonl)
    assert (h["higher_job"], h["lower_job"], h["same_class"]) == ("jobA", "jobB", "False")
    assert h["verdict"] == "yes" and int(h["bins_both"]) > 0
    assert float(h["higher_mb_both"]) > 2 * float(h["lower_mb_both"])
    assert int(h["epochs"]) == 3                      # the 4th epoch has no active job
    # fair: one class, nothing to check, numbers given
    f = chk["fair"]
    assert f["same_class"] == "True" and f["verdict"] == "n/a"
    # the bottleneck is the most loaded capture, and the per-job bytes come from it
    pj = [r for r in rows(sample / "pcap_jobs.csv") if r["policy"] == "harmonics"]
    assert {r["link"] for r in pj} == {"tor0-sp0"}
    from emulation.pcap import analyze_pcap
    an = analyze_pcap(sample / "harmonics" / "captures" / "tor0-sp0.pcap", sample / "harmonics" / "specs")
    bs = 2000 / 10
    for r in pj:
        assert float(r["trace_mb"]) == pytest.approx(an.jobs[r["job"]].bytes * bs / 1e6, rel=1e-4)
    dscp = {r["job"]: r["dscp"] for r in pj}
    assert "46:" in dscp["jobA"] and "34:" in dscp["jobB"]      # class 0 / class 1 marking

    # flip the classes in the decisions: now the higher class gets fewer bytes -> "no"
    p = sample / "harmonics" / "decisions.jsonl"
    recs = [json.loads(x) for x in p.read_text().splitlines()]
    for r in recs:
        for j, d in r["decisions"].items():
            d["priority"] = 1 - d["priority"]
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    generate_report(sample, plots=False)
    h2 = {r["policy"]: r for r in rows(sample / "pcap_check.csv")}["harmonics"]
    assert (h2["higher_job"], h2["verdict"]) == ("jobB", "no")
    assert float(h2["higher_mb_both"]) == pytest.approx(float(h["lower_mb_both"]), rel=1e-4)


def test_numbers_follow_the_input_files(sample):
    generate_report(sample, plots=False)
    before = by_policy(sample)
    before_jobs = {(r["policy"], r["job"]): r for r in rows(sample / "comparison_jobs.csv")}
    # make one iteration of harmonics/jobB 50 ms longer (both workers)
    p = sample / "harmonics" / "iterations.csv"
    its = rows(p)
    for r in its:
        if r["job"] == "jobB" and r["iteration"] == "3":
            r["end_s"] = f"{float(r['end_s']) + 0.05:.6f}"
            r["comm_s"] = f"{float(r['comm_s']) + 0.05:.6f}"
    with open(p, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(its[0]))
        w.writeheader()
        w.writerows(its)
    # and halve fair's decision times
    q = sample / "fair" / "decisions.jsonl"
    recs = [json.loads(x) for x in q.read_text().splitlines()]
    for r in recs:
        r["decision_ms"] /= 2
    q.write_text("".join(json.dumps(r) + "\n" for r in recs))
    generate_report(sample, plots=False)
    after = by_policy(sample)
    after_jobs = {(r["policy"], r["job"]): r for r in rows(sample / "comparison_jobs.csv")}
    e = expected_job(sample, "harmonics", "jobB")
    b = after_jobs[("harmonics", "jobB")]
    assert float(b["mean_iter_s"]) == pytest.approx(e["mean"], rel=1e-5)
    assert float(b["mean_iter_s"]) - float(before_jobs[("harmonics", "jobB")]["mean_iter_s"]) == \
        pytest.approx(0.05 / 5, rel=1e-3)               # 5 steady iterations x 2 workers
    assert float(b["p99_iter_s"]) > float(before_jobs[("harmonics", "jobB")]["p99_iter_s"]) + 0.04
    assert "summary.csv says" in b["note"]             # the back end's summary no longer agrees
    assert float(after["harmonics"]["mean_slowdown"]) > float(before["harmonics"]["mean_slowdown"])
    assert float(after["harmonics"]["mean_iter_vs_fair"]) > float(before["harmonics"]["mean_iter_vs_fair"])
    assert after["harmonics"]["mean_jct_s"] == before["harmonics"]["mean_jct_s"]   # not the last iteration
    assert float(after["fair"]["decision_ms_mean"]) == pytest.approx(float(before["fair"]["decision_ms_mean"]) / 2)
    assert after["fair"]["mean_iter_s"] == before["fair"]["mean_iter_s"]
    # the isolated time comes from run.json: change it, the slowdown follows
    rj = sample / "fair" / "run.json"
    info = json.loads(rj.read_text())
    info["isolated"]["jobA"] *= 2
    rj.write_text(json.dumps(info))
    generate_report(sample, plots=False)
    fa = {(r["policy"], r["job"]): r for r in rows(sample / "comparison_jobs.csv")}[("fair", "jobA")]
    assert float(fa["slowdown"]) == pytest.approx(expected_job(sample, "fair", "jobA")["slowdown"], rel=1e-5)
    assert float(fa["slowdown"]) == pytest.approx(float(before_jobs[("fair", "jobA")]["slowdown"]) / 2, rel=1e-5)


def test_failed_and_unfinished_runs(sample):
    # a job that did not finish all its iterations has no JCT
    p = sample / "harmonics" / "iterations.csv"
    keep = [r for r in rows(p) if not (r["job"] == "jobB" and r["iteration"] == "5")]
    with open(p, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(keep[0]))
        w.writeheader()
        w.writerows(keep)
    # a third policy that failed before writing anything, recorded by compare.json
    comp = json.loads((sample / "compare.json").read_text())
    comp["policies"].append("crux")
    comp["runs"]["crux"] = {"status": "failed", "error": "RunFailed: the cluster did not come up"}
    (sample / "compare.json").write_text(json.dumps(comp))
    rep = generate_report(sample, plots=False)
    pol = by_policy(sample)
    assert list(pol) == ["fair", "harmonics", "crux"]
    assert pol["crux"]["status"].startswith("failed: RunFailed") and pol["crux"]["mean_iter_s"] == ""
    assert "1 job(s) unfinished" in pol["harmonics"]["status"]
    assert pol["harmonics"]["jobs_finished"] == "1"
    job = {(r["policy"], r["job"]): r for r in rows(sample / "comparison_jobs.csv")}[("harmonics", "jobB")]
    assert job["jct_s"] == "" and "unfinished (5/6 iterations)" in job["note"]
    assert "failed: RunFailed" in rep.markdown


def test_report_without_fair_has_no_normalisation(sample):
    shutil.rmtree(sample / "fair")
    comp = json.loads((sample / "compare.json").read_text())
    comp["policies"].remove("fair")
    del comp["runs"]["fair"]
    (sample / "compare.json").write_text(json.dumps(comp))
    rep = generate_report(sample, plots=False)
    assert rep.policy_rows[0]["policy"] == "harmonics"
    assert math.isnan(rep.policy_rows[0]["mean_iter_vs_fair"])
    assert "nothing to normalise to" in rep.markdown


def test_report_errors(tmp_path):
    r = run_cli("analysis", "report", str(tmp_path / "nope"), timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "no such results directory" in r.stderr
    (tmp_path / "empty").mkdir()
    r = run_cli("analysis", "report", str(tmp_path / "empty"), timeout=60)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "no policy results" in r.stderr
    assert not any((tmp_path / "empty").iterdir())


def _exit_code(argv) -> int:
    try:
        return analysis_main(argv)
    except SystemExit as e:                  # argparse errors
        return e.code


def test_compare_bad_scenario_exits_2_with_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncluster: {racks: 2}\n")
    out = tmp_path / "out"
    # as a user runs it
    r = run_cli("analysis", "compare", str(tmp_path / "missing.yaml"), "--out", str(out), timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("error: ") and r.stderr.strip().count("\n") == 0, r.stderr
    assert "missing.yaml: cannot read" in r.stderr and not out.exists()
    pair = str(REPO / "scenarios" / "pair-shared-spine.yaml")
    for args in ([str(bad)], [pair, "--policies", "fair,nosuch"], [pair, "--policies", "fair,fair"],
                 [pair, "--policies", " , "], [pair, "--bin", "0"],
                 [pair, "--bench-csv", str(tmp_path / "none.csv")]):
        assert _exit_code(["compare", *args, "--out", str(out)]) == 2, args
        err = capsys.readouterr()
        assert err.out == "" and err.err.startswith("error: ") and err.err.strip().count("\n") == 0, err.err
        assert not out.exists()


def _fake_emulator(sc, policy, out, opts):
    """Stand-in for run_emulation: the sample's files for fair and harmonics, a crash for crux."""
    if policy == "crux":
        raise RuntimeError("mininet exploded")
    shutil.copytree(SAMPLE / policy, out)
    return "ok"


def test_compare_records_failures_and_writes_the_report(tmp_path, capsys):
    sc = tmp_path / "sc.yaml"
    text = (SAMPLE / "scenario.yaml").read_text().replace("- harmonics", "- crux\n- harmonics")
    sc.write_text(text)
    out = tmp_path / "run"
    rc = run_compare(str(sc), None, str(out), {"plots": False}, runners={"emulation": _fake_emulator})
    cap = capsys.readouterr()
    assert rc == 1                                      # one policy failed
    assert "[1/3] fair ..." in cap.err and "[2/3] crux failed" in cap.err and "mininet exploded" in cap.err
    assert "[3/3] harmonics ok" in cap.err
    comp = json.loads((out / "compare.json").read_text())
    assert comp["policies"] == ["fair", "crux", "harmonics"]
    assert comp["runs"]["crux"]["status"] == "failed" and "mininet exploded" in comp["runs"]["crux"]["error"]
    pol = by_policy(out)
    assert pol["crux"]["status"].startswith("failed: RuntimeError: mininet exploded")
    assert pol["harmonics"]["status"] == "ok" and float(pol["harmonics"]["mean_iter_vs_fair"]) < 1
    assert (out / "scenario.yaml").exists() and (out / "comparison.md").exists()
    assert "| crux |" in cap.out                        # the summary table on stdout
    # --out must not be reused
    r = run_cli("analysis", "compare", str(sc), "--out", str(out), timeout=60)
    assert r.returncode == 2 and "exists and is not empty" in r.stderr
    # a length that leaves nothing after the warm-up: one line, nothing written
    fresh = tmp_path / "fresh"
    r = run_cli("analysis", "compare", str(sc), "--out", str(fresh), "--iterations", "5", timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--iterations 5" in r.stderr, r.stderr
    assert not fresh.exists()


def test_compare_on_the_simulator(tmp_path):
    """The simulator path for real, on the smallest scenario (a second or two): every job
    shortened to 8 iterations by --iterations, which the run's scenario.yaml records."""
    sc = tmp_path / "pair.yaml"
    sc.write_text((REPO / "scenarios" / "pair-shared-spine.yaml").read_text()
                  .replace("backend: emulation", "backend: simulation"))
    out = tmp_path / "cmp"
    r = run_cli("analysis", "compare", str(sc), "--policies", "fair,harmonics", "--out", str(out),
                "--iterations", "8", timeout=120)
    assert r.returncode == 0, r.stderr
    assert [j["iterations"] for j in yaml.safe_load((out / "scenario.yaml").read_text())["jobs"]] == [8, 8]
    assert json.loads((out / "compare.json").read_text())["options"]["iterations"] == 8
    with open(out / "fair" / "iterations.csv", newline="") as f:
        assert max(int(x["iteration"]) for x in csv.DictReader(f)) == 7
    pol = by_policy(out)
    assert [pol[p]["status"] for p in ("fair", "harmonics")] == ["ok", "ok"]
    assert (out / "fair" / "decisions.csv").exists() and (out / "harmonics" / "links.csv").exists()
    assert float(pol["harmonics"]["decision_ms_mean"]) > 0
    assert "[2/2] harmonics ok" in r.stderr and "| harmonics |" in r.stdout
    assert (out / "plots" / "link_throughput.png").stat().st_size > 10_000


def test_reporting_again_after_the_captures_were_pruned_keeps_their_tables(sample):
    """The committed references keep no pcaps: reporting such a directory again keeps the
    rows (and the throughput plot) the earlier report drew from the captures."""
    assert generate_report(sample).pcap_check_rows
    before = {n: (sample / n).read_bytes() for n in ("pcap_jobs.csv", "pcap_check.csv")}
    plot = (sample / "plots" / "link_throughput.png").read_bytes()
    for pol in ("fair", "harmonics"):
        shutil.rmtree(sample / pol / "captures")
    rep = generate_report(sample)
    assert {n: (sample / n).read_bytes() for n in before} == before
    assert (sample / "plots" / "link_throughput.png").read_bytes() == plot
    md = (sample / "comparison.md").read_text()
    assert "captures pruned: these rows are an earlier report's" in md
    assert any(r["verdict"] == "yes" for r in rep.pcap_check_rows)
    # a directory that never had captures still gets none
    for n in before:
        (sample / n).unlink()
    assert not generate_report(sample, plots=False).pcap_check_rows


def test_the_phase_plot_of_many_held_jobs_shows_their_spread(tmp_path):
    """A large mix holds dozens of jobs: one line each would leave no room for the axes; the
    plot then gives the median and 90th percentile of |offset error| per time bin instead,
    without any layout warning."""
    import warnings
    from analysis.plots import PHASE_LINES_MAX, plot_phase
    from analysis.results import PolicyRun, Report, ScenarioInfo
    from scheduling.phase import write_phase_csv
    rng = np.random.default_rng(0)
    n = PHASE_LINES_MAX + 30
    rows = [{"epoch": e, "time_s": 0.5 * e, "job": f"j{k:03d}", "ref": "j000", "period_s": 1.0,
             "beat_s": 1.0, "offset_s": 0.0, "decided_s": 0.0, "error": float(rng.uniform(-0.5, 0.5)),
             "correction_s": 0.0} for e in range(1, 40) for k in range(1, n + 1)]
    (tmp_path / "p").mkdir()
    write_phase_csv(tmp_path / "p" / "phase.csv", rows)
    rep = Report(tmp_path, ScenarioInfo(name="big"), [PolicyRun("p", tmp_path / "p")], {}, 0.1)
    out = tmp_path / "phase.png"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plot_phase(rep, out)
    assert out.stat().st_size > 10_000


def test_the_report_says_how_the_switches_serve_the_classes(sample):
    generate_report(sample, plots=False)
    assert "keeps" not in (sample / "comparison.md").read_text().split("\n## ")[0]   # unset: unsaid
    scen = sample / "scenario.yaml"
    d = yaml.safe_load(scen.read_text())
    d["cluster"]["class_guarantee"] = 0.1
    scen.write_text(yaml.safe_dump(d))
    generate_report(sample, plots=False)
    assert "every lower priority class keeps 10% of a link" in (sample / "comparison.md").read_text()
