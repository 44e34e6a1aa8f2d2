"""Decisions become the network's behaviour: priority classes (DSCP + htb) and meters,
on the real emulated cluster, through the controller's epoch loop (static policy: the
decisions come from a file the test rewrites)."""
import json
import subprocess
import time

import pytest

from emulation import qos, runner, stackcheck
from emulation.net import EmulatedCluster, free_tcp_port
from workloads.scenario import load_scenario

from conftest import REPO

SCENARIO = REPO / "scenarios" / "pair-shared-spine.yaml"
PAIRS = [("r0h0", "r1h0"), ("r0h1", "r1h1")]   # flow of jobA, flow of jobB: same uplink


def _decision(job, priority=3, caps=None):
    return {"job": job, "priority": priority, "rate_caps_gbps": caps or {}, "spine": None,
            "flow_spines": {}, "shift_s": 0.0, "reason": "test"}


@pytest.fixture(scope="module")
def cluster(emulation_ready, tmp_path_factory):
    run = tmp_path_factory.mktemp("enforce")
    decisions = run / "static.json"
    decisions.write_text("{}")
    sc = load_scenario(SCENARIO)
    now = time.time()
    # the tcpflow flows use ports 47000 and 47001: make them the two jobs' ports
    cfg = {"jobs": [{"name": "jobA", "port_base": 47000, "ranks": 1, "start_at": now},
                    {"name": "jobB", "port_base": 47001, "ranks": 1, "start_at": now}],
           "policy": "static", "policy_kw": {"path": str(decisions)}, "scenario_path": str(SCENARIO),
           "epoch_s": 0.5, "poll_s": 0.25, "bandwidth_scale": sc.emulation.bandwidth_scale,
           "num_classes": 4, "decisions_log": str(run / "decisions.jsonl"),
           "rest_port": free_tcp_port()}
    with EmulatedCluster(sc, run, controller_config=cfg) as ec:
        qos.install_classes_map(runner.shared_link_interfaces(ec), 4)

        def decide(d):
            decisions.write_text(json.dumps(d))
            time.sleep(1.5)  # three epochs: the controller has applied it
        yield ec, decide


def test_high_class_gets_more_and_swapping_swaps(cluster):
    ec, decide = cluster
    decide({"jobA": _decision("jobA", 0), "jobB": _decision("jobB", 3)})
    a, b = stackcheck.measure_flows(ec, PAIRS, seconds=5)
    assert a.mbps >= 1.5 * b.mbps, (a.mbps, b.mbps)
    decide({"jobA": _decision("jobA", 3), "jobB": _decision("jobB", 0)})
    a2, b2 = stackcheck.measure_flows(ec, PAIRS, seconds=5)
    assert b2.mbps >= 1.5 * a2.mbps, (a2.mbps, b2.mbps)
    # the decisions log says what was decided, epoch by epoch
    recs = [json.loads(l) for l in open(ec.run_dir / "decisions.jsonl")]
    assert recs and recs[-1]["decisions"]["jobB"]["priority"] == 0


def test_lower_class_keeps_the_clusters_guarantee(cluster):
    # cluster.class_guarantee is what a saturated lower class keeps under a saturated higher
    # one: the htb tree at 0.25 of the link against the emulator's own 0.02
    ec, decide = cluster
    decide({"jobA": _decision("jobA", 0), "jobB": _decision("jobB", 3)})
    devs = runner.shared_link_interfaces(ec)

    def set_share(g):     # the installed tree's classes changed in place (htb's root stays)
        share = qos.guarantee_of(ec.scenario.cluster.model_copy(update={"class_guarantee": g}))
        for dev, mbps in devs.items():
            for cmd in qos.tree_commands(dev, mbps, 4, share):
                if cmd[1] == "class":
                    subprocess.run(cmd, check=True, capture_output=True)

    shares = {}
    try:
        for g in (0.25, qos.GUARANTEE_FRACTION):
            set_share(g)
            a, b = stackcheck.measure_flows(ec, PAIRS, seconds=5)
            shares[g] = b.mbps / (a.mbps + b.mbps)
    finally:
        set_share(qos.GUARANTEE_FRACTION)
    assert 0.18 <= shares[0.25] <= 0.32, shares            # measured: 0.250
    assert shares[qos.GUARANTEE_FRACTION] <= 0.06, shares   # measured: 0.021


def test_meter_holds_a_tcp_flow_within_10_percent(cluster):
    ec, decide = cluster
    cap_gbps = 40.0                                    # = 20 Mbit/s on the emulator
    rate = cap_gbps * 1000 / ec.emu.bandwidth_scale
    decide({"jobA": _decision("jobA", 3, {"tor0>sp0": cap_gbps})})
    [a] = stackcheck.measure_flows(ec, PAIRS[:1], seconds=6)
    assert abs(a.mbps - rate) <= 0.1 * rate, f"{a.mbps:.1f} Mbit/s under a {rate:g} Mbit/s meter"
    # a policy that leaves a running job out keeps its last decision (scheduling/epochs.py):
    # a new decision without the cap releases the meter
    decide({"jobA": _decision("jobA", 3)})
    [a] = stackcheck.measure_flows(ec, PAIRS[:1], seconds=4)
    assert a.mbps > 1.5 * rate


def test_rest_status_on_loopback_only(cluster):
    import subprocess
    import urllib.request
    ec, decide = cluster
    decide({"jobA": _decision("jobA", 0), "jobB": _decision("jobB", 2)})
    port = ec.extra_config["rest_port"]
    listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
    local = [line.split()[3] for line in listening.splitlines()]
    assert local == [f"127.0.0.1:{port}"], listening
    st = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5))
    assert st["policy"] == "static" and st["epoch"] > 0
    assert st["decisions"]["jobB"]["priority"] == 2
    dec = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/decisions", timeout=5))
    assert dec["decisions"]["jobA"]["reason"] == "test" and "decision_ms" in dec
