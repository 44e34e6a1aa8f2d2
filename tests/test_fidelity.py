"""The fidelity monitor: a run made unfaithful on purpose (busy loops on both cores beside it)
is called suspect, with the CPU as the reason; the verdict reaches run.json, summary.csv,
the report and the repeated-runs table."""
import csv
import json
import os
import subprocess
import sys
import time

import pytest

from analysis.repeats import aggregate
from analysis.report import generate_report
from emulation import fidelity
from emulation.runner import run_emulation
from workloads.scenario import load_scenario

from conftest import REPO

PAIR = REPO / "scenarios" / "pair-shared-spine.yaml"
HOG = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"


def _hogs():
    """One busy loop pinned on each core (at the same priority as everything else)."""
    return [subprocess.Popen([sys.executable, "-c", HOG, str(c)]) for c in sorted(os.sched_getaffinity(0))]


def _stop(procs):
    for p in procs:
        p.kill()
        p.wait()


def _csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def hogged_run(emulation_ready, tmp_path_factory):
    d = tmp_path_factory.mktemp("hog")
    sc = load_scenario(PAIR)
    sc = sc.with_iterations(12)
    hogs = _hogs()
    try:
        run_emulation(sc, "fair", d / "fair", isolated="analytical", quiet=True)
    finally:
        _stop(hogs)
    return d


def test_a_cpu_hog_makes_the_run_suspect(hogged_run):
    info = json.loads((hogged_run / "fair" / "run.json").read_text())
    fid = info["fidelity"]
    assert fid["verdict"].startswith("suspect: "), fid["verdict"]
    assert fid["checks"]["cpu"] == "suspect"
    assert "CPU headroom" in fid["verdict"] or "Open vSwitch waited" in fid["verdict"]
    cpu = fid["figures"]["cpu"]
    # both cores were busy: the median sampling interval left (almost) nothing idle
    assert cpu["headroom_median"] < fid["thresholds"]["cpu_headroom_median_min"], cpu
    assert cpu["samples"] > 10
    assert set(cpu["cores_used_by_role"]) >= {"ovs-vswitchd", "workers", "controller", "tcpdump"}
    # the other figures are there too: the captured uplinks' retransmissions, every shaped link
    assert set(fid["figures"]["retransmit"]) == {"tor0-sp0", "tor1-sp0"}
    assert {l["link"] for l in fid["figures"]["links"]} >= {"tor0>sp0", "sp0>tor1", "tor0>r0h0"}
    assert info["warmup_iterations"] == 5


def test_the_verdict_reaches_summary_and_report(hogged_run):
    verdict = json.loads((hogged_run / "fair" / "run.json").read_text())["fidelity"]["verdict"]
    rows = _csv(hogged_run / "fair" / "summary.csv")
    assert [r["fidelity"] for r in rows] == [verdict, verdict]
    assert rows[0]["mean_iter_s"]                       # the other columns are kept
    rep = generate_report(hogged_run, plots=False)
    head = rep.markdown.split("## Policies")[0]
    assert "SUSPECT" in head and verdict in head
    assert _csv(hogged_run / "comparison.csv")[0]["fidelity"] == verdict


def test_monitor_sees_a_hog_on_this_machine():
    """The monitor alone (no cluster): CPU headroom and the run-queue wait of a process."""
    mon = fidelity.Monitor({}, {"me": lambda: [os.getpid()]}, period=0.05).start()
    hogs = _hogs()
    try:
        t = time.time()
        while time.time() - t < 1.5:
            sum(range(10000))                 # this process competes with the hogs
    finally:
        mon.stop()
        _stop(hogs)
    cpu = mon.cpu_figures()
    assert cpu["headroom_median"] < fidelity.THRESHOLDS["cpu_headroom_median_min"], cpu
    assert cpu["wait_per_cpu_s"]["me"] > 0


def test_phase_error_and_summary_columns(tmp_path):
    """summary.csv as phase control writes it (phase_error, corrections): kept, judged, annotated."""
    (tmp_path / "summary.csv").write_text(
        "job,policy,iterations,mean_iter_s,phase_error,corrections\n"
        "jobA,harmonics,55,0.050,nan,3\njobB,harmonics,55,0.050,0.31,9\n")
    res = fidelity.evaluate(None, tmp_path)
    assert res["checks"]["phase_error"] == "suspect"
    assert res["figures"]["phase_error"] == {"jobB": 0.31}
    assert "jobB's phase error 31% of its period" in res["verdict"]
    fidelity.annotate_summary(tmp_path, res["verdict"])
    fidelity.annotate_summary(tmp_path, "faithful")          # replaced, not appended twice
    rows = _csv(tmp_path / "summary.csv")
    assert list(rows[0]) == ["job", "policy", "iterations", "mean_iter_s", "phase_error",
                             "corrections", "fidelity"]
    assert [r["fidelity"] for r in rows] == ["faithful", "faithful"]
    assert rows[1]["corrections"] == "9"


def test_repeats_table_shows_each_policys_verdicts(tmp_path):
    cols = "policy,status,mean_iter_s,mean_iter_vs_fair,fidelity\n"
    (tmp_path / "repeats.json").write_text(json.dumps({"scenario": "s", "runs": 2}))
    for k, (vf, vc) in enumerate([("faithful", "faithful"), ("faithful", "suspect: CPU headroom median 0%")], 1):
        (tmp_path / f"run{k}").mkdir()
        (tmp_path / f"run{k}" / "comparison.csv").write_text(
            cols + f"fair,ok,0.05,1,{vf}\ncrux,ok,0.04,0.8,{vc}\n")
    res = aggregate(tmp_path, plots=False)
    md = res["markdown"]
    assert any(l.startswith("| policy") and l.rstrip().endswith("| fidelity |") for l in md.splitlines())
    assert "2/2 faithful" in md and "1/2 faithful (run2 suspect)" in md
    assert "crux run2: suspect: CPU headroom median 0%" in md


def _qsample(t, top_backlog, low_backlog, top_bytes, low_bytes):
    return {"t": t, "idle": 0, "total": 0, "psi": None,
            "q": {"eth": {"bytes": top_bytes + low_bytes, "backlog": top_backlog + low_backlog, "drops": 0,
                          "classes": {0: (top_bytes, top_backlog), 1: (low_bytes, low_backlog)}}}}


def test_class_share_is_judged_only_while_the_higher_class_stays_backlogged():
    """A 10 Mbit/s link sampled every 0.1 s (125 KB an interval). Interval 1: the higher class
    starts with 200 KB queued and gets 90% of what was sent: judged. Interval 2: it starts with
    only 3 KB queued (it ran dry inside the interval and got 20%): not judged, so the link's
    share is interval 1's alone."""
    mon = fidelity.Monitor({"eth": ("tor0-sp0", 10.0)}, period=0.1)
    mon.samples = [_qsample(0.0, 200_000, 50_000, 0, 0),
                   _qsample(0.1, 3_000, 50_000, 112_500, 12_500),
                   _qsample(0.2, 3_000, 50_000, 112_500 + 25_000, 12_500 + 100_000)]
    rec = mon.link_figures()["eth"]
    assert rec["competing_s"] == pytest.approx(0.1)
    assert rec["top_class_share"] == pytest.approx(0.9)
    assert rec["qdisc_drops"] == 0


def test_class_share_leaves_out_a_higher_class_that_never_queued():
    """Three classes on a 10 Mbit/s link, as sampled on `oversubscribed` under Harmonics: class
    0 is served first and so never queues; classes 1 and 2 both hold deep queues. Of the 125
    KB sent in the interval class 0 took 100 KB, class 1 24.5 KB and class 2 0.5 KB: class 1
    got 98% of what class 0 left, which is htb's promise (not 19.6% of the link)."""
    def sample(t, sent):
        return {"t": t, "idle": 0, "total": 0, "psi": None,
                "q": {"eth": {"bytes": sum(sent), "backlog": 400_000, "drops": 0,
                              "classes": {0: (sent[0], 0), 1: (sent[1], 200_000),
                                          2: (sent[2], 200_000)}}}}
    mon = fidelity.Monitor({"eth": ("tor0-sp0", 10.0)}, period=0.1)
    mon.samples = [sample(0.0, (0, 0, 0)), sample(0.1, (100_000, 24_500, 500))]
    rec = mon.link_figures()["eth"]
    assert rec["competing_s"] == pytest.approx(0.1)
    assert rec["top_class_share"] == pytest.approx(0.98)
    assert rec["top_class_expected"] == pytest.approx(0.98)


def test_switch_drops_are_counted_from_the_log_since_the_run_began(tmp_path):
    log = tmp_path / "ovs-vswitchd.log"
    log.write_text("2026-12-04T00:00:00Z|netdev_linux|WARN|error sending Ethernet packet on tor0-eth6: "
                   "Resource temporarily unavailable\n")
    at = fidelity.log_size(log)
    assert fidelity.ovs_send_errors(at, log) == 0
    with open(log, "a") as f:
        for _ in range(3):
            f.write("2026-12-04T00:00:01Z|netdev_linux|WARN|error sending Ethernet packet on "
                    "tor1-eth5: Resource temporarily unavailable\n")
    assert fidelity.ovs_send_errors(at, log) == 3
    assert fidelity.ovs_send_errors(0, tmp_path / "missing.log") is None


def test_phase_error_is_judged_against_the_model(tmp_path):
    """A job is judged against the phase error the simulator got for the same run (plus 0.10
    of a period); a job the model does not hold, against the absolute bound (0.25)."""
    (tmp_path / "summary.csv").write_text(
        "job,policy,iterations,mean_iter_s,phase_error,corrections\n"
        "a,harmonics,55,0.05,0.28,3\nb,harmonics,55,0.05,0.40,3\nc,harmonics,55,0.05,0.20,3\n")
    res = fidelity.evaluate(None, tmp_path, model_pe={"a": 0.27, "b": 0.20})
    assert res["checks"]["phase_error"] == "suspect"
    assert res["figures"]["phase_error_model"] == {"a": 0.27, "b": 0.20}
    assert "b's phase error 40% of its period, the model 20% (max 30%)" in res["verdict"]
    assert "a's" not in res["verdict"] and "c's" not in res["verdict"]
    ok = fidelity.evaluate(None, tmp_path, model_pe={"a": 0.27, "b": 0.35})
    assert ok["checks"]["phase_error"] == "ok" and ok["verdict"] == "faithful"


def test_the_models_phase_error_comes_from_the_simulator(tmp_path):
    """The pair under Harmonics in the simulator: jobB is shifted and held; its phase error
    is a fraction of its period, and the scratch folder is gone."""
    (tmp_path / "scenario.yaml").write_text(PAIR.read_text())
    pe = fidelity.model_phase_errors(tmp_path, "harmonics", 4)
    assert set(pe) == {"jobB"} and 0 < pe["jobB"] < 0.25, pe
    assert [p.name for p in tmp_path.iterdir()] == ["scenario.yaml"]
    assert fidelity.model_phase_errors(tmp_path, "static", 4) is None


IDLE_HOG = ("import os, sys; sys.path.insert(0, sys.argv[2]); os.sched_setaffinity(0, {int(sys.argv[1])})\n"
            "from controllers.decider import lower_priority; lower_priority()\nwhile True: pass")


def _cpu_beside(hogs, yielding: bool):
    mon = fidelity.Monitor({}, {fidelity.YIELDING_ROLE: (lambda: [h.pid for h in hogs]) if yielding
                                else (lambda: [])}, period=0.05).start()
    try:
        time.sleep(1.5)
    finally:
        mon.stop()
    return mon.cpu_figures()


def test_the_decision_process_time_counts_as_headroom():
    """Busy loops that lower themselves as the policy's decision process does (a session of
    their own at autogroup nice 19, SCHED_IDLE) and are named as that role: their time is
    headroom, reported apart. The same loops not named as the role are not."""
    hogs = [subprocess.Popen([sys.executable, "-c", IDLE_HOG, str(c), str(REPO)])
            for c in sorted(os.sched_getaffinity(0))]
    try:
        time.sleep(0.5)
        named = _cpu_beside(hogs, True)
        unnamed = _cpu_beside(hogs, False)
    finally:
        _stop(hogs)
    assert named["yielded_mean"] > 0.4, named
    assert unnamed["yielded_mean"] == 0, unnamed
    assert named["headroom_median"] > unnamed["headroom_median"] + 0.4, (named, unnamed)


def test_yielding_processes_are_those_lowered_as_the_decision_process():
    """Found: a process lowered as the decision process is (its own session at autogroup nice
    19). Not found: a nice-19 process in a session of normal priority, which with the kernel's
    autogroups still gets its session's share."""
    lowered = subprocess.Popen([sys.executable, "-c", IDLE_HOG.replace("while True: pass", "import time; time.sleep(30)"),
                                str(min(os.sched_getaffinity(0))), str(REPO)])
    niced = subprocess.Popen([sys.executable, "-c", "import os, time; os.setpriority(os.PRIO_PROCESS, 0, 19); time.sleep(30)"],
                             start_new_session=True)
    try:
        deadline = time.time() + 10
        while lowered.pid not in fidelity.yielding_pids() and time.time() < deadline:
            time.sleep(0.1)
        found = fidelity.yielding_pids()
        assert lowered.pid in found
        assert niced.pid not in found and os.getpid() not in found
    finally:
        _stop([lowered, niced])


def test_the_decision_process_yields_to_a_normal_process():
    """Its autogroup at nice 19: beside a normal busy loop on the same core it gets almost
    nothing (with the kernel's autogroups a plain nice 19 in another session gets half)."""
    core = min(os.sched_getaffinity(0))
    low = subprocess.Popen([sys.executable, "-c", IDLE_HOG, str(core), str(REPO)])
    normal = subprocess.Popen([sys.executable, "-c", HOG, str(core)], start_new_session=True)
    try:
        time.sleep(0.5)
        a = fidelity.proc_ticks(low.pid)
        time.sleep(2.0)
        got = (fidelity.proc_ticks(low.pid) - a) / os.sysconf("SC_CLK_TCK") / 2.0
    finally:
        _stop([low, normal])
    assert got < 0.1, got
