"""What a user runs: the scenario scripts end to end, and the Vagrant provisioning path."""
import csv
import json
import re
import subprocess

from conftest import REPO, our_bridges


def test_vagrant_provisioning_command_sets_the_machine_up(emulation_ready):
    # Vagrant cannot run here: run the exact command the Vagrantfile provisions with,
    # with /vagrant (the synced folder) standing for this checkout
    text = (REPO / "Vagrantfile").read_text()
    cmd = re.search(r'provision "shell", inline: "([^"]+)"', text).group(1)
    assert "scripts/setup.sh" in cmd
    r = subprocess.run(["bash", "-c", cmd.replace("/vagrant", str(REPO))], capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    assert "[setup] ready" in r.stdout


def test_arrivals_scenario_script_end_to_end(emulation_ready, tmp_path):
    out = tmp_path / "arrivals"
    r = subprocess.run([str(REPO / "scripts" / "run-arrivals.sh"), "--policies", "fair,harmonics",
                        "--isolated", "analytical", "--out", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "| harmonics |" in r.stdout                      # the summary table is printed
    rows = {row["policy"]: row for row in csv.DictReader(open(out / "comparison.csv"))}
    assert set(rows) == {"fair", "harmonics"} and all(v["status"] == "ok" for v in rows.values())
    for png in ("iteration_time", "iteration_cdf", "link_throughput", "slowdown"):
        assert (out / "plots" / f"{png}.png").stat().st_size > 10_000
    # jobs are picked up when they arrive and dropped (classes released) when they end
    recs = [json.loads(l) for l in open(out / "harmonics" / "decisions.jsonl")]
    seen = [set(r["active_jobs"]) for r in recs]
    first_third = next(i for i, s in enumerate(seen) if "third" in s)
    assert first_third > 0 and "third" not in seen[0]
    assert "third" not in seen[-1] and "third" not in recs[-1]["decisions"]
    assert not our_bridges()


def test_demo_script_runs_the_default_scenario_shortened_and_takes_the_users_options(
        emulation_ready, tmp_path):
    """demo.sh runs pair-shared-spine with 105 iterations a job unless the user asks for
    another length (here 8, fair only, to keep the test short): the user's options win."""
    out = tmp_path / "demo"
    r = subprocess.run([str(REPO / "scripts" / "demo.sh"), "--policies", "fair", "--iterations", "8",
                        "--isolated", "analytical", "--out", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "demo: every job runs 105 iterations" in r.stderr and "| fair |" in r.stdout
    ran = (out / "scenario.yaml").read_text()
    assert "name: pair-shared-spine" in ran and ran.count("iterations: 8") == 2
    rows = list(csv.DictReader(open(out / "fair" / "summary.csv")))
    assert [int(x["iterations"]) for x in rows] == [8, 8]
    assert not our_bridges()
