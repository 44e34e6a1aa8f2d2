"""python -m simulation: result files, bad input (exit 2, one line, nothing written)."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PAIR = """\
name: cli-pair
backend: simulation
cluster: {racks: 2, hosts_per_rack: 2, spines: 1, host_link_gbps: 100, uplink_gbps: 100}
emulation: {epoch_s: 0.1, time_scale: 1}
jobs:
  - name: a
    iterations: 6
    placement: {slots: [r0h0, r1h0]}
    profile: {phases: [{op: compute, seconds: 0.02}, {op: allreduce, bytes: 300MB}]}
  - name: b
    iterations: 6
    arrival_s: 0.01
    placement: {slots: [r0h1, r1h1]}
    profile: {phases: [{op: compute, seconds: 0.02}, {op: allreduce, bytes: 300MB}]}
"""


def run(*args, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def rows(p: Path):
    with open(p, newline="") as f:
        return list(csv.DictReader(f))


def test_run_writes_the_emulator_files(tmp_path):
    sc = tmp_path / "pair.yaml"
    sc.write_text(PAIR)
    out = tmp_path / "out"
    p = run("simulation", "run", str(sc), "--policy", "fair", "--out", str(out), "--quiet")
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in out.iterdir()) == sorted(
        ["scenario.yaml", "iterations.csv", "summary.csv", "links.csv", "decisions.csv", "run.json"])
    it = rows(out / "iterations.csv")
    assert list(it[0]) == ["job", "worker", "iteration", "start_s", "compute_s", "comm_s", "end_s"]
    assert len(it) == 12 and it[0]["worker"] == "all"
    summ = rows(out / "summary.csv")
    assert list(summ[0]) == ["job", "policy", "iterations", "mean_iter_s", "p99_iter_s",
                             "mean_comm_s", "jct_s", "slowdown_vs_isolated", "phase_error",
                             "corrections"]
    assert {r["policy"] for r in summ} == {"fair"}
    dec = rows(out / "decisions.csv")
    assert dec and {"epoch", "time_s", "decision_ms", "job", "priority"} <= set(dec[0])
    links = rows(out / "links.csv")
    assert any(r["link"] == "tor0>sp0" and float(r["utilisation"]) > 0 for r in links)
    assert all(0 <= float(r["utilisation"]) <= 1 + 1e-9 for r in links)
    # a second run replaces the directory whole
    p = run("simulation", "run", str(sc), "--policy", "none", "--out", str(out), "--quiet")
    assert p.returncode == 0, p.stderr
    assert {r["policy"] for r in rows(out / "summary.csv")} == {"none"}
    assert not [x for x in tmp_path.iterdir() if x.name.startswith(".out")]


@pytest.mark.parametrize("text,needle", [
    ("jobs: [\n", "not valid YAML"),
    (PAIR.replace("iterations: 6\n    placement: {slots: [r0h0", "iterations: 0\n    placement: {slots: [r0h0"),
     "iterations"),
    (PAIR.replace("r1h1]", "r9h1]"), "does not exist"),
])
def test_bad_scenario_exit_2_one_line_nothing_written(tmp_path, text, needle):
    sc = tmp_path / "bad.yaml"
    sc.write_text(text)
    out = tmp_path / "out"
    p = run("simulation", "run", str(sc), "--out", str(out))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [sc]


def test_unknown_policy_exit_2(tmp_path):
    sc = tmp_path / "pair.yaml"
    sc.write_text(PAIR)
    p = run("simulation", "run", str(sc), "--policy", "nope", "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_set_passes_a_setting_to_the_policy_and_records_it(tmp_path):
    """--set KEY=VALUE reaches the policy's constructor (a setting it does not have: one
    line, exit 2, nothing written) and is kept in run.json."""
    sc = tmp_path / "pair.yaml"
    sc.write_text(PAIR)
    p = run("simulation", "run", str(sc), "--policy", "harmonics", "--set", "nosuch=1",
            "--out", str(tmp_path / "bad"))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "nosuch" in p.stderr and not (tmp_path / "bad").exists()
    p = run("simulation", "run", str(sc), "--policy", "harmonics", "--set", "wide_order=0",
            "--set", "shift_phases=1", "--quiet", "--out", str(tmp_path / "o"))
    assert p.returncode == 0, p.stderr
    info = json.loads((tmp_path / "o" / "run.json").read_text())
    assert info["policy_settings"] == {"wide_order": 0, "shift_phases": 1}
    # shift_phases=1 switches Harmonics' phase stage off: no decided shift anywhere
    with open(tmp_path / "o" / "decisions.csv", newline="") as f:
        shifts = {float(r["shift_s"]) for r in csv.DictReader(f) if r.get("job")}
    assert shifts == {0.0}


def test_generate_and_bench_small(tmp_path):
    out = tmp_path / "g.yaml"
    p = run("simulation", "generate", str(out), "--racks", "2", "--hosts-per-rack", "2",
            "--spines", "1", "--jobs", "4", "--iterations", "3", "--placement", "fragmented")
    assert p.returncode == 0, p.stderr
    assert out.read_text().startswith("# Generated by: python -m simulation generate")
    p = run("simulation", "run", str(out), "--out", str(tmp_path / "r"), "--quiet")
    assert p.returncode == 0, p.stderr
    p = run("simulation.bench", "--sizes", "256", "--iterations", "3")
    assert p.returncode == 0, p.stderr
    assert "256" in p.stdout.splitlines()[-1]


def test_generate_writes_the_class_guarantee_and_refuses_a_bad_one(tmp_path):
    from workloads.scenario import load_scenario
    out = tmp_path / "g.yaml"
    base = ["simulation", "generate", str(out), "--racks", "2", "--hosts-per-rack", "2",
            "--spines", "1", "--jobs", "3", "--iterations", "3"]
    p = run(*base, "--class-guarantee", "0.3")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "--class-guarantee" in p.stderr and not out.exists()
    p = run(*base, "--class-guarantee", "0.1")
    assert p.returncode == 0, p.stderr
    assert load_scenario(out).cluster.class_guarantee == 0.1
    assert "--class-guarantee 0.1" in out.read_text().splitlines()[0]


def test_simulation_compare_is_analysis_compare_in_processes(tmp_path):
    """python -m simulation.compare = python -m analysis compare --run-timeout: one process
    per policy, the same result files as an in-process run, and compare's report."""
    sc = tmp_path / "pair.yaml"
    sc.write_text(PAIR)
    p = run("simulation.compare", str(sc), "--policies", "fair,harmonics", "--out",
            str(tmp_path / "cmp"), "--no-plots")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "cmp" / "comparison.csv").is_file()
    from emulation.jobspec import WARMUP_ITERATIONS
    q = run("simulation", "run", str(sc), "--policy", "harmonics", "--out", str(tmp_path / "one"),
            "--quiet", "--warmup", str(WARMUP_ITERATIONS))
    assert q.returncode == 0, q.stderr
    a = (tmp_path / "cmp" / "harmonics" / "summary.csv").read_text()
    assert a == (tmp_path / "one" / "summary.csv").read_text()
    sys.path.insert(0, str(ROOT))
    from analysis.compare import run_compare
    assert run_compare(sc, "harmonics", str(tmp_path / "inproc"), {"plots": False}, summary=False) == 0
    assert a == (tmp_path / "inproc" / "harmonics" / "summary.csv").read_text()   # same as in-process


def test_run_timeout_kills_the_run_and_the_next_one_runs(tmp_path):
    sys.path.insert(0, str(ROOT))
    from analysis.compare import run_compare
    sc = tmp_path / "pair.yaml"
    sc.write_text(PAIR)
    rc = run_compare(sc, "fair", str(tmp_path / "cmp"), {"run_timeout": 1e-3, "plots": False},
                     summary=False)
    rec = json.loads((tmp_path / "cmp" / "compare.json").read_text())["runs"]["fair"]
    assert rc == 1 and rec["status"] == "failed" and "killed after" in rec["error"]


def test_bench_passes_progress_on_and_stops_a_size_at_its_timeout(monkeypatch, capsys):
    """simulation.bench runs each size in a child process: the child's ``[sim ...]``
    progress lines reach stderr with the size's label, its last stderr line is kept for the
    failure message, and a child past its timeout is killed (exit code None)."""
    from simulation import bench
    monkeypatch.setattr(bench, "PROGRESS_EVERY_S", 0.0)
    code = ("import sys\n"
            "for i in range(3):\n"
            "    print(f'[sim fair] t={i}.00s  events={i}', file=sys.stderr, flush=True)\n"
            "print('{\"ok\": 1}')\n"
            "print('last words', file=sys.stderr)\n")
    rc, out, err = bench._child([sys.executable, "-c", code], 60, "tiny")
    assert rc == 0 and json.loads(out) == {"ok": 1} and err == "last words"
    shown = [l for l in capsys.readouterr().err.splitlines() if l.startswith("  tiny: ")]
    assert shown == [f"  tiny: t={i}.00s  events={i}" for i in range(3)]
    rc, out, err = bench._child([sys.executable, "-c", "import time; time.sleep(120)"], 1.0,
                                "slow")
    assert rc is None and out == ""
