"""Sweeps on Ray (python -m analysis sweep): a real 2-node Ray cluster on this machine
(ray.cluster_utils.Cluster, one CPU and one marker resource per node), real simulated runs.
Runs on both nodes, every cell in sweep.csv, the statistics against the rows they come from,
Ctrl-C then --resume running only what was missing, a failing cell recorded while the others
complete, and bad sweep files (one line, exit 2, nothing written)."""
from __future__ import annotations

import csv
import json
import math
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from analysis.__main__ import main as analysis_main
from analysis.repeats import ci95
from analysis.sweep_spec import cell_scenario, load_sweep
from conftest import REPO, run_cli

ray_cluster_utils = pytest.importorskip("ray.cluster_utils")


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes on this machine: the head (node_a) and a worker node (node_b)."""
    c = ray_cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"node_a": 1, "emulator": 1}, "include_dashboard": False})
    b = c.add_node(num_cpus=1, resources={"node_b": 1, "emulator": 1})
    c.wait_for_nodes()
    yield {"address": c.address, "nodes": {c.head_node.node_id: "node_a", b.node_id: "node_b"}}
    c.shutdown()


def sweep_file(tmp: Path, name: str, axes: str, seeds="[0, 1]", policies="[fair, harmonics]",
               iterations=20, jobs=4) -> Path:
    f = tmp / f"{name}.yaml"
    f.write_text(f"""name: {name}
base:
  generate:
    cluster: {{racks: 2, hosts_per_rack: 4, spines: 2, gpus_per_host: 4, host_link_gbps: 100}}
    jobs: {jobs}
    iterations: {iterations}
    placement: fragmented
policies: {policies}
seeds: {seeds}
axes:
{axes}
metrics: [mean_iter_s, mean_slowdown]
""")
    return f


def rows(d: Path) -> list:
    with open(d / "sweep.csv", newline="") as f:
        return list(csv.DictReader(f))


def records(d: Path) -> dict:
    out = {}
    for p in (d / "cells").glob("*/*/sweep_run.json"):
        out[f"{p.parent.parent.name}/{p.parent.name}"] = json.loads(p.read_text())
    return out


def leftovers(d: Path) -> list:
    return [p.name for p in (d / "cells").glob("*/.*")]


def test_sweep_on_two_ray_nodes_every_cell_in_sweep_csv(cluster, tmp_path):
    f = sweep_file(tmp_path, "two-nodes", "  cluster.oversubscription: [1, 4]", seeds="[0, 1, 2]")
    out = tmp_path / "out"
    r = run_cli("analysis", "sweep", str(f), "--address", cluster["address"], "--out", str(out),
                timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rs = rows(out)
    cells = {(o, s) for o in ("1", "4") for s in ("0", "1", "2")}
    assert {(x["cluster.oversubscription"], x["seed"]) for x in rs} == cells
    assert sorted((x["cell"], x["policy"]) for x in rs) == sorted(
        (f"oversubscription-{o}__seed-{s}", p) for o, s in cells for p in ("fair", "harmonics"))
    assert all(x["status"] == "ok" for x in rs)
    # every run ran on a node of the cluster, and both nodes ran some
    assert {x["node_id"] for x in rs} == set(cluster["nodes"])
    for x in rs:                                # each run's own results directory, as compare writes
        rd = out / "cells" / x["cell"] / x["policy"]
        assert (rd / "summary.csv").is_file() and (rd / "scenario.yaml").is_file()
        assert json.loads((rd / "sweep_run.json").read_text())["node_id"] == x["node_id"]
    for c in {x["cell"] for x in rs}:
        assert (out / "cells" / c / "comparison.md").is_file()
    # ratios to fair are paired inside a cell; the table's figures are the seeds' mean and CI
    by = {(x["cell"], x["policy"]): x for x in rs}
    for (c, p), x in by.items():
        fair = float(by[c, "fair"]["mean_iter_s"])
        assert float(x["mean_iter_s_vs_fair"]) == pytest.approx(float(x["mean_iter_s"]) / fair, rel=1e-4)
    ratios = [float(x["mean_iter_s_vs_fair"]) for x in rs
              if x["policy"] == "harmonics" and x["cluster.oversubscription"] == "4"]
    n, m, sd, lo, hi = ci95(ratios)
    md = (out / "sweep.md").read_text()
    assert n == 3 and f"{m:.3f} ± {hi - m:.3f}" in md
    assert "| cluster.oversubscription | fair | harmonics |" in md
    for metric in ("mean_iter_s", "mean_slowdown"):
        assert (out / "plots" / f"{metric}__vs__cluster_oversubscription.png").stat().st_size > 10_000
    assert not leftovers(out)


def test_interrupted_sweep_resumes_only_the_missing_runs(cluster, tmp_path):
    f = sweep_file(tmp_path, "killed", "  cluster.oversubscription: [1, 2, 4]", seeds="[0, 1, 2]",
                   iterations=150, jobs=6)
    out = tmp_path / "out"
    scratch_before = set(Path(tempfile.gettempdir()).glob("harmonics-sweep-*"))
    p = subprocess.Popen([sys.executable, "-m", "analysis", "sweep", str(f), "--address",
                          cluster["address"], "--out", str(out), "--no-plots"], cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while time.time() - t0 < 300 and p.poll() is None:
        if (out / "cells").is_dir() and len(records(out)) >= 2:
            break
        time.sleep(0.2)
    assert p.poll() is None, "the sweep ended before it could be interrupted"
    p.send_signal(signal.SIGINT)
    so, se = p.communicate(timeout=120)
    assert p.returncode == 130, se[-3000:]
    assert "interrupted" in se
    before = records(out)
    assert 2 <= len(before) < 18
    assert all(r["status"] == "ok" for r in before.values())
    assert not leftovers(out)                    # cancelled runs left no partial directory
    # nor did the runs on the other node (their scratch is in the temp folder, not under out)
    t0 = time.time()
    while set(Path(tempfile.gettempdir()).glob("harmonics-sweep-*")) - scratch_before and time.time() - t0 < 10:
        time.sleep(0.2)
    assert not set(Path(tempfile.gettempdir()).glob("harmonics-sweep-*")) - scratch_before
    info = json.loads((out / "sweep.json").read_text())
    assert info["invocations"][0]["status"] == "interrupted"
    partial = rows(out)
    assert len(partial) == 18 and sum(x["status"] == "ok" for x in partial) == len(before)
    assert "--resume" in (out / "sweep.md").read_text()

    r = run_cli("analysis", "sweep", str(f), "--address", cluster["address"], "--out", str(out),
                "--resume", "--no-plots", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    inv = json.loads((out / "sweep.json").read_text())["invocations"][-1]
    every = {f"oversubscription-{o}__seed-{s}/{pol}" for o in (1, 2, 4) for s in (0, 1, 2)
             for pol in ("fair", "harmonics")}
    assert inv["skipped"] == len(before)
    assert sorted(inv["ran"]) == sorted(every - set(before))       # only the missing runs
    after = records(out)
    for k, rec in before.items():                                   # finished runs untouched
        assert after[k] == rec
    assert set(after) == every and all(x["status"] == "ok" for x in rows(out))


def test_failing_cell_is_recorded_while_the_others_complete(cluster, tmp_path):
    f = sweep_file(tmp_path, "failing", "  jobs: [3, 999]\n  cluster.oversubscription: [1, 2]",
                   seeds="[0]")
    out = tmp_path / "out"
    r = run_cli("analysis", "sweep", str(f), "--address", cluster["address"], "--out", str(out),
                timeout=600)
    assert r.returncode == 1, r.stderr[-3000:]
    rs = rows(out)
    assert len(rs) == 8
    bad = [x for x in rs if x["jobs"] == "999"]
    good = [x for x in rs if x["jobs"] == "3"]
    assert len(bad) == 4 and all(x["status"] == "failed" and "999 jobs do not fit on 32 GPUs" in x["error"]
                                 for x in bad)
    assert len(good) == 4 and all(x["status"] == "ok" and math.isfinite(float(x["mean_iter_s"]))
                                  for x in good)
    md = (out / "sweep.md").read_text()
    assert "## Failed runs" in md and "jobs-999__oversubscription-1__seed-0 | fair, harmonics |" in md
    assert "4 ok, 4 failed" in md
    assert "failed" in r.stderr and "999 jobs do not fit" in r.stderr


def _bad(tmp: Path, text: str) -> Path:
    f = tmp / "bad.yaml"
    f.write_text(text)
    return f


GOOD = """name: s
base:
  generate:
    cluster: {racks: 2, hosts_per_rack: 2}
    jobs: 2
policies: [fair, crux]
axes:
  cluster.oversubscription: [1, 2]
"""


@pytest.mark.parametrize("text, expect", [
    (GOOD.replace("policies:", "polices:"), "bad.yaml:6: polices: unknown key"),
    (GOOD.replace("[fair, crux]", "[fair, fastest]"), "bad.yaml:6: policies.1: unknown policy 'fastest'"),
    (GOOD.replace("[1, 2]", "[1, 0]"), "bad.yaml:8: cell cluster.oversubscription=0: cluster.oversubscription: "
                                       "Input should be greater than 0"),
    (GOOD.replace("cluster.oversubscription", "cluster.colour"), "bad.yaml:8: cell cluster.colour=1: "
                                                                 "cluster.colour: unknown key"),
    (GOOD.replace("jobs: 2", "jobs: two"), "bad.yaml:5: base.generate.jobs: Input should be a valid integer"),
    (GOOD.replace("[1, 2]", "[1, 2"), "bad.yaml:9: not valid YAML"),
    (GOOD + "metrics: [speed]\n", "bad.yaml:9: metrics: unknown metric 'speed'"),
    (GOOD + "seeds: [1, 1]\n", "bad.yaml:9: seeds: 1 given twice"),
    (GOOD.replace("  generate:", "  scenario: nowhere.yaml\n  generate:"),
     "bad.yaml:2: base: give exactly one of scenario or generate"),
    (GOOD.replace("  generate:\n    cluster: {racks: 2, hosts_per_rack: 2}\n    jobs: 2\n",
                  "  scenario: nowhere.yaml\n"), "bad.yaml:3: base.scenario: "),
    (GOOD.replace("axes:\n  cluster.oversubscription: [1, 2]\n", "axes:\n  jobs: []\n"),
     "bad.yaml:7: axes: axis 'jobs' has no values"),
    ("name: pair\ncluster: {racks: 2}\njobs: []\n",
     "bad.yaml: a scenario, not a sweep (a sweep file has base, axes and policies"),
    (f"name: s\nbase:\n  scenario: {REPO}/scenarios/pair-shared-spine.yaml\npolicies: [fair]\n"
     "options:\n  until: 5\naxes:\n  emulation.time_scale: [10]\n",
     "bad.yaml:6: options.until: a simulator option, and the base runs on the emulation back end"),
])
def test_bad_sweep_files_one_line_exit_2_nothing_written(tmp_path, capsys, text, expect):
    f = _bad(tmp_path, text)
    out = tmp_path / "out"
    rc = analysis_main(["sweep", str(f), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    assert expect in err, err
    assert not out.exists()


def test_resume_without_an_earlier_run_and_non_empty_out(tmp_path, capsys, monkeypatch):
    f = _bad(tmp_path, GOOD)
    monkeypatch.chdir(tmp_path)
    assert analysis_main(["sweep", str(f), "--resume"]) == 2
    assert "--resume: no earlier run of s" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    assert analysis_main(["sweep", str(f), "--out", str(tmp_path / "full")]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_an_address_nothing_answers_on_is_one_line(tmp_path, capsys):
    f = _bad(tmp_path, GOOD)
    import socket
    with socket.socket() as s:              # a port that was free a moment ago: nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "out"
    assert analysis_main(["sweep", str(f), "--address", f"127.0.0.1:{port}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--address 127.0.0.1:{port}: no Ray head answers there" in err
    assert not out.exists()


def test_scenario_base_overrides_and_virtual_oversubscription(tmp_path):
    f = _bad(tmp_path, f"""base:
  scenario: {REPO / 'scenarios' / 'sim-2048-first-fit.yaml'}
policies: [fair]
seeds: [3]
axes:
  cluster.oversubscription: [1, 4]
  jobs.*.iterations: [5]
""")
    sw = load_sweep(f)
    assert sw.name == "bad" and sw.backend == "simulation" and len(sw.cells) == 2
    sc = cell_scenario(sw.kind, sw.cells[1].base, sw.cells[1].seed, "x")
    cl = sc.cluster                     # 8 hosts x 200 Gb/s over 4 spines at 4:1
    assert cl.uplink_gbps == pytest.approx(8 * 200 / (4 * 4))
    assert sc.seed == 3 and {j.iterations for j in sc.jobs} == {5}
    assert sw.cells[0].spec_hash("fair", sw.options) != sw.cells[1].spec_hash("fair", sw.options)


def test_every_committed_sweep_loads_and_the_mixes_sweeps_draw_the_committed_scenarios():
    """Each sweeps/*.yaml is valid; the across-mixes sweeps (steady state or not) draw, at the
    seeds their comments name, exactly the committed contention-heavy scenarios (README,
    "Across job mixes"): their cells are the references' runs."""
    from workloads.scenario import load_scenario
    files = sorted((REPO / "sweeps").glob("*.yaml"))
    assert len(files) >= 4
    for f in files:
        assert load_sweep(f).cells
    for name in ("harmonics-mixes", "harmonics-mixes-until300"):
        sw = load_sweep(REPO / "sweeps" / f"{name}.yaml")
        assert sw.options["decision_timeout"] == 10 and sw.options["decision_budget"] == 60
        for cid, path in (("mix-fragmented-2048__seed-1", "sim-2048-fragmented.yaml"),
                          ("mix-lingjun-openb__seed-3", "sim-lingjun-openb.yaml")):
            cell = next(c for c in sw.cells if c.id == cid)
            drawn = cell_scenario(sw.kind, cell.base, cell.seed, "x").model_dump()
            ref = load_scenario(REPO / "scenarios" / path).model_dump()
            assert {k: v for k, v in drawn.items() if k != "name"} == \
                {k: v for k, v in ref.items() if k != "name"}
