"""simulation.crossval: the same scenario emulated and simulated, compared by the CLI a user runs."""
import csv
import json

from emulation.qos import TCP_PAYLOAD_PER_FRAME
from simulation.crossval import payload_cluster
from workloads.scenario import load_scenario

from conftest import REPO, run_cli

PAIR = REPO / "scenarios" / "pair-shared-spine.yaml"


def test_payload_cluster_scales_every_link_and_nothing_else():
    sc = load_scenario(PAIR)
    p = payload_cluster(sc, TCP_PAYLOAD_PER_FRAME)
    assert p.cluster.host_link_gbps == sc.cluster.host_link_gbps * 1448 / 1514
    assert p.cluster.uplink_gbps == sc.cluster.uplink_gbps * 1448 / 1514
    assert p.cluster.racks == sc.cluster.racks and p.jobs == sc.jobs and p.seed == sc.seed
    assert load_scenario(PAIR).cluster.host_link_gbps == sc.cluster.host_link_gbps   # a copy


def test_crossval_of_a_prioritised_pair(emulation_ready, tmp_path):
    """Under Crux the pair's two jobs run in strict priority: both back ends must agree on
    each job's iteration time within 15% (the emulator's TCP adds a round trip per ring step;
    docs/fidelity.md has the measured ratios), and two simulated seeds are averaged. Every
    job runs 20 iterations (--iterations), not the scenario's 505."""
    out = tmp_path / "xv"
    r = run_cli("simulation.crossval", str(PAIR), "--policy", "crux", "--seeds", "2", "--out", str(out),
                "--iterations", "20", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("worst emulated/simulated iteration-time ratio: ")
    worst = float(last.rsplit(" ", 1)[1])
    res = json.loads((out / "crossval.json").read_text())
    assert res["runs"] == 1 and res["seeds"] == 2 and res["payload_fraction"] == TCP_PAYLOAD_PER_FRAME
    assert sorted(j["job"] for j in res["jobs"]) == ["jobA", "jobB"]
    for j in res["jobs"]:
        assert len(j["simulated_runs"]) == 2 and len(j["emulated_runs"]) == 1
        assert abs(j["ratio"] - j["emulated_s"] / j["simulated_s"]) < 1e-12
    assert 0.85 <= worst <= 1.15, r.stdout
    assert (out / "emulated" / "summary.csv").exists() and (out / "simulated" / "summary.csv").exists()
    for side in ("emulated", "simulated"):
        with open(out / side / "summary.csv", newline="") as f:
            assert [int(x["iterations"]) for x in csv.DictReader(f)] == [20, 20], side
    assert not (out / "emulated" / "done").exists()
