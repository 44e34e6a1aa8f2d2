"""Capture analysis: a real loopback capture of two jobs, the trace comparison, errors."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emulation.pcap import (JobPorts, PcapError, _Coverage, analyze_pcap, compare_bytes,
                            expected_job_bytes, expected_link_bytes, load_port_map,
                            relative_error)
from runs.logs import read_worker_log
from tests.test_worker import (REPO, free_port_base, job_dict, make_resolved, start_workers,
                               wait_all)
from workloads.scenario import dump_scenario, parse_scenario, resolve
from emulation.jobspec import write_job_spec
from runs.control import write_control


def _start_tcpdump(pcap: Path, lo: int, hi: int) -> subprocess.Popen:
    # --immediate-mode: without it packets of the last ~second wait in the kernel's capture
    # ring (TPACKET_V3 block timeout) and are lost when tcpdump is stopped.  -s 160 keeps
    # headers only: payload sizes come from the IP total length.
    p = subprocess.Popen(["tcpdump", "-i", "lo", "-w", str(pcap), "-U", "--immediate-mode",
                          "-Z", "root", "-s", "160", f"tcp portrange {lo}-{hi}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 10
    while time.time() < deadline:           # tcpdump says 'listening on lo' when it is
        line = p.stderr.readline()
        if "listening on" in line or not line:
            break
    if p.poll() is not None:
        pytest.skip(f"tcpdump cannot capture here: {p.stderr.read().strip()}")
    return p


def _stop_tcpdump(p: subprocess.Popen) -> str:
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    return err


@pytest.mark.skipif(shutil.which("tcpdump") is None or os.geteuid() != 0,
                    reason="needs tcpdump and root")
def test_capture_of_two_jobs_matches_bytes_sent(tmp_path):
    rs = make_resolved([
        job_dict("jobA", 3, [{"op": "compute", "seconds": 0.02},
                             {"op": "allreduce", "bytes": 3_000_000}], iterations=4),
        job_dict("jobB", 2, [{"op": "compute", "seconds": 0.02},
                             {"op": "alltoall", "bytes": 2_000_000},
                             {"op": "sendrecv", "bytes": 500_000}], iterations=4)], hosts=3)
    base = free_port_base(200)
    start = time.time() + 1.5
    specs = {}
    for k, job in enumerate(rs.jobs):
        path = tmp_path / "jobs" / f"{job.name}.json"
        specs[job.name] = (path, write_job_spec(
            job, rs.cluster, rs.scenario.emulation, path, port_base=base + 100 * k,
            start_at=start, control_dir=tmp_path / "control", log_path=tmp_path / f"{job.name}.csv",
            ip_of=lambda h: "127.0.0.1", dscp=10 if job.name == "jobB" else None))
    # the controller's mark for jobA reaches its workers through the control file
    write_control(tmp_path / "control" / "jobA.json", 0.0, 0, dscp=34)
    pcap = tmp_path / "lo.pcap"
    td = _start_tcpdump(pcap, base, base + 199)
    try:
        procs = {}
        for name, (path, spec) in specs.items():
            for r, p in start_workers(path, spec["num_ranks"]).items():
                procs[(name, r)] = p
        codes = wait_all(procs, 40)
        assert all(c == 0 for c in codes.values()), codes
        time.sleep(0.3)
    finally:
        err = _stop_tcpdump(td)
    assert re.search(r"^0 packets dropped by kernel", err, re.M), err

    an = analyze_pcap(pcap, tmp_path / "jobs", bin_s=0.05)
    assert set(an.jobs) == {"jobA", "jobB"}
    assert an.unmatched_packets == 0 and an.ambiguous_packets == 0
    sent = {}
    for name, (_, spec) in specs.items():
        rows = read_worker_log(spec["log_path"])
        sent[name] = sum(r["sent_bytes"] for r in rows if r["status"] == "done")
    exp = expected_job_bytes(rs)
    assert exp == {n: float(v) for n, v in sent.items()}     # workers sent what flows.py says
    for name, j in an.jobs.items():
        assert abs(relative_error(j.bytes, sent[name])) < 0.02, (name, j.bytes, sent[name])
        assert abs(relative_error(j.unique_bytes, sent[name])) < 0.02
        assert j.series.sum() == j.bytes
        assert an.throughput_mbps(name).max() > 0
        # every rank's listen port saw traffic; directions are IP pairs (all loopback here)
        assert set(j.by_direction) == {("127.0.0.1", "127.0.0.1")}
    assert set(an.jobs["jobB"].dscp) == {10}
    # jobA: unmarked until its workers read the control file (connection set-up), then 34
    a = an.jobs["jobA"].dscp
    assert set(a) <= {0, 34} and a.get(34, 0) > 0.9 * sum(a.values()), a
    cmp = compare_bytes(an.measured("unique"), exp)
    assert all(abs(c["rel_error"]) < 0.02 for c in cmp.values()), cmp

    # the CLI on the same capture
    out_csv = tmp_path / "series.csv"
    r = subprocess.run([sys.executable, "-m", "emulation.pcap", str(pcap), "--ports",
                        str(tmp_path / "jobs"), "--bin", "0.05", "--csv", str(out_csv)],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "jobA" in r.stdout and "jobB" in r.stdout and "DSCP 10:" in r.stdout
    lines = out_csv.read_text().splitlines()
    assert lines[0] == "time_s,jobA_mbps,jobB_mbps" and len(lines) == len(an.times()) + 1
    # with the run's scenario: port map from the specs under its directory, trace comparison
    (tmp_path / "scenario.yaml").write_text(dump_scenario(rs.scenario))
    r = subprocess.run([sys.executable, "-m", "emulation.pcap", str(pcap), "--scenario",
                        str(tmp_path), "--link", "r0h0>tor0"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "vs trace on r0h0>tor0" in r.stdout and "r0h0 -> " not in r.stdout  # IPs are loopback


def test_expected_link_bytes_two_racks():
    job = lambda name, slots: {"name": name, "iterations": 15, "placement": {"slots": slots},
                               "profile": {"phases": [{"op": "compute", "seconds": 0.05},
                                                      {"op": "allreduce", "bytes": "300MB"}]}}
    rs = resolve(parse_scenario({
        "name": "t", "cluster": {"racks": 2, "hosts_per_rack": 2, "spines": 1,
                                 "host_link_gbps": 100, "uplink_gbps": 100},
        "emulation": {"bandwidth_scale": 2000, "time_scale": 10},
        "jobs": [job("jobA", ["r0h0", "r1h0"]), job("jobB", ["r0h1", "r1h1"])]}))
    # 300 MB all-reduce of 2 ranks: each sends 2(n-1)/n * M = 300 MB per iteration; bytes_scale 200
    up = expected_link_bytes(rs, "tor0>sp0")
    assert up == {"jobA": pytest.approx(15 * 1.5e6), "jobB": pytest.approx(15 * 1.5e6)}
    assert expected_link_bytes(rs, "r0h0>tor0")["jobB"] == 0
    assert expected_link_bytes(rs, "r0h0>tor0", iterations={"jobA": 2})["jobA"] == pytest.approx(3e6)
    assert expected_job_bytes(rs)["jobA"] == pytest.approx(2 * 15 * 1.5e6)
    with pytest.raises(PcapError, match="no link"):
        expected_link_bytes(rs, "tor0>sp9")


def test_relative_error_and_compare():
    assert relative_error(102, 100) == pytest.approx(0.02)
    assert relative_error(0, 0) == 0 and relative_error(5, 0) == float("inf")
    c = compare_bytes({"a": 99, "z": 3}, {"a": 100, "b": 10})
    assert c["a"]["rel_error"] == pytest.approx(-0.01)
    assert c["b"]["measured"] == 0 and c["b"]["rel_error"] == -1
    assert c["z"]["expected"] == 0


def test_port_maps(tmp_path):
    assert load_port_map("jobA=20000:2, jobB=20100:4") == [JobPorts("jobA", 20000, 2),
                                                          JobPorts("jobB", 20100, 4)]
    assert load_port_map({"x": [1, 2]}) == [JobPorts("x", 1, 2)]
    f = tmp_path / "m.json"
    f.write_text('{"x": {"port_base": 30000, "ranks": 3}}')
    assert load_port_map(f) == [JobPorts("x", 30000, 3)]
    with pytest.raises(PcapError):
        load_port_map("nonsense")


def test_unreadable_capture_is_one_line_error(tmp_path):
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"this is not a capture at all")
    for path in (bad, tmp_path / "missing.pcap"):
        with pytest.raises(PcapError) as e:
            analyze_pcap(path, "j=20000:2")
        assert "\n" not in str(e.value) and str(path) in str(e.value)
        r = subprocess.run([sys.executable, "-m", "emulation.pcap", str(path)], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert r.stderr.startswith("error: ")


def test_coverage_counts_retransmissions_once():
    c = _Coverage(2**32 - 5)                       # sequence numbers wrap inside the flow
    seq = lambda off: (2**32 - 5 + off) & 0xFFFFFFFF
    assert c.add(seq(0), 100) == 100
    assert c.add(seq(200), 100) == 100             # a hole (lost before the capture point)
    assert c.add(seq(0), 100) == 0                 # retransmission
    assert c.add(seq(50), 200) == 100              # fills the hole, overlaps both sides
    assert c.add(seq(300), 10) == 10
    assert (c.starts, c.ends) == ([0], [310])
