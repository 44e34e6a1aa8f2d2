"""Synthetic workers on loopback: bytes per flows.py, iterations, shifts, failures."""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from emulation.jobspec import (JobSpecError, collectives_of, default_port_bases, job_spec,
                               write_job_spec)
from runs.control import write_control
from runs.logs import LOG_HEADER, read_worker_log
from workloads.flows import collective_flows
from workloads.jitter import ComputeNoise
from workloads.scenario import parse_scenario, resolve

REPO = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------
# helpers (also used by test_pcap.py)
# ---------------------------------------------------------------------------

def make_resolved(jobs, hosts=4, emulation=None):
    """A one-rack scenario with the given job dicts, resolved.  Compute is replayed exactly
    (compute_jitter 0, not the default noise): these tests check the trace's own times;
    the noise has its own test below."""
    emu = {"compute_jitter": 0.0, **(emulation or {"bandwidth_scale": 1, "time_scale": 1})}
    sc = parse_scenario({
        "name": "t", "cluster": {"racks": 1, "hosts_per_rack": hosts, "gpus_per_host": 2,
                                 "host_link_gbps": 100, "uplink_gbps": 100},
        "emulation": emu,
        "jobs": jobs})
    return resolve(sc)


def job_dict(name, n, phases, iterations=3):
    return {"name": name, "iterations": iterations,
            "placement": {"slots": [f"r0h{i}" for i in range(n)]},
            "profile": {"phases": phases}}


def free_port_base(n, lo=21000, hi=31000):
    rnd = random.Random()
    for _ in range(200):
        base = rnd.randrange(lo, hi - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


def write_spec(tmp_path, rs, job_index=0, start_in=1.0, port_base=None, **kw):
    job = rs.jobs[job_index]
    n = len(job.workers)
    port_base = port_base if port_base is not None else free_port_base(n)
    path = tmp_path / f"{job.name}.json"
    spec = write_job_spec(job, rs.cluster, rs.scenario.emulation, path, port_base=port_base,
                          start_at=time.time() + start_in, control_dir=tmp_path / "control",
                          log_path=tmp_path / f"{job.name}.csv",
                          ip_of=lambda h: "127.0.0.1", **kw)
    return path, spec


def start_workers(spec_path, n, ranks=None):
    return {r: subprocess.Popen([sys.executable, "-m", "emulation.worker", "--spec", str(spec_path),
                                 "--rank", str(r)], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for r in (range(n) if ranks is None else ranks)}


def wait_all(procs, timeout):
    deadline = time.time() + timeout
    codes = {}
    try:
        for r, p in procs.items():
            codes[r] = p.wait(timeout=max(0.1, deadline - time.time()))
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    return codes


def expected_bytes(spec):
    """(sent, received) per rank per iteration from workloads/flows.py (emulated bytes)."""
    sent, recv = defaultdict(int), defaultdict(int)
    for _, c in collectives_of(spec):
        for f in collective_flows(c, spec["num_ranks"]):
            sent[f.src] += f.bytes
            recv[f.dst] += f.bytes
    return sent, recv


def wait_for_line(log, pred, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        rows = read_worker_log(log)
        if any(pred(r) for r in rows):
            return rows
        time.sleep(0.05)
    raise AssertionError(f"no matching log line within {timeout}s: {read_worker_log(log)}")


# ---------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------

def test_allreduce_alltoall_bytes_and_iterations(tmp_path):
    n, iters = 4, 3
    rs = make_resolved([job_dict("jobA", n, [
        {"op": "compute", "seconds": 0.02},
        {"op": "allreduce", "bytes": 4_000_000},
        {"op": "compute", "seconds": 0.02},
        {"op": "alltoall", "bytes": 1_200_000, "overlap": 0.5}], iterations=iters)])
    path, spec = write_spec(tmp_path, rs)
    codes = wait_all(start_workers(path, n), 30)
    assert codes == {r: 0 for r in range(n)}
    rows = read_worker_log(spec["log_path"])
    assert Path(spec["log_path"]).read_text().splitlines()[0] == LOG_HEADER
    sent, recv = expected_bytes(spec)
    # flows.py: ring all-reduce sends 2(n-1)/n * M per rank; all-to-all (n-1)/n * M
    assert sent[0] == 2 * 3 * 1_000_000 + 3 * 300_000
    for r in range(n):
        ok = [x for x in rows if x["rank"] == r and x["status"] == "ok"]
        assert [x["iteration"] for x in ok] == list(range(iters))
        for x in ok:
            assert x["sent_bytes"] == sent[r] and x["recv_bytes"] == recv[r]
            assert x["end_s"] > x["start_s"] >= -0.01
            assert x["compute_s"] == pytest.approx(0.04)
            assert x["comm_s"] > 0
        done = [x for x in rows if x["rank"] == r and x["status"] == "done"]
        assert len(done) == 1 and done[0]["iteration"] == iters
        assert done[0]["sent_bytes"] == iters * sent[r]
        assert [x for x in rows if x["rank"] == r and x["status"] == "ready"]
    assert not [x for x in rows if x["status"] in ("fail", "stopped")]


def test_every_op_with_groups_matches_flows(tmp_path):
    n = 4
    rs = make_resolved([job_dict("jobB", n, [
        {"op": "allreduce", "bytes": 1_000_000, "group": {"size": 2}},
        {"op": "allgather", "bytes": 800_000, "group": {"size": 2, "stride": 2}},
        {"op": "reducescatter", "bytes": 600_000},
        {"op": "sendrecv", "bytes": 300_000},
        {"op": "broadcast", "bytes": 500_000},
        {"op": "alltoall", "bytes": 400_000, "group": {"size": 2}}], iterations=2)])
    path, spec = write_spec(tmp_path, rs)
    codes = wait_all(start_workers(path, n), 30)
    assert codes == {r: 0 for r in range(n)}, [p for p in codes]
    sent, recv = expected_bytes(spec)
    rows = read_worker_log(spec["log_path"])
    for r in range(n):
        ok = [x for x in rows if x["rank"] == r and x["status"] == "ok"]
        assert len(ok) == 2
        assert all(x["sent_bytes"] == sent[r] and x["recv_bytes"] == recv[r] for x in ok)
    # the broadcast chain's last rank sends nothing in it; rank 0 receives nothing from it
    assert sent[3] < sent[0]


def test_spec_scaling_and_rounding(tmp_path):
    rs = make_resolved([job_dict("jobC", 3, [
        {"op": "compute", "seconds": 0.05},
        {"op": "allreduce", "bytes": "300MB"}])],
        emulation={"bandwidth_scale": 2000, "time_scale": 10})
    em = rs.scenario.emulation
    spec = job_spec(rs.jobs[0], rs.cluster, em, port_base=20000, start_at=123.0,
                    control_dir=tmp_path, log_path=tmp_path / "l.csv")
    comp, ar = spec["phases"]
    assert comp["seconds"] == pytest.approx(0.5) and comp["trace_seconds"] == 0.05
    # 300 MB / (2000/10) = 1.5 MB, rounded to a multiple of the group size (3)
    assert ar["bytes"] == 1_500_000 and ar["bytes"] % 3 == 0 and ar["trace_bytes"] == 3e8
    assert spec["scale"]["bytes_scale"] == 200
    assert [r["port"] for r in spec["ranks"]] == [20000, 20001, 20002]
    assert spec["ranks"][1]["ip"] == rs.cluster.host_ip("r0h1")
    assert spec["control_path"] == str(tmp_path / "jobC.json")
    with pytest.raises(JobSpecError, match="ephemeral"):
        job_spec(rs.jobs[0], rs.cluster, em, port_base=40000, start_at=0, control_dir=tmp_path,
                 log_path=tmp_path / "l.csv")
    bases = default_port_bases(rs.jobs)
    assert bases == {"jobC": 20000}


def test_control_shift_delays_next_iteration(tmp_path):
    n, iters = 2, 5
    rs = make_resolved([job_dict("jobS", n, [
        {"op": "compute", "seconds": 0.15},
        {"op": "allreduce", "bytes": 200_000}], iterations=iters)])
    path, spec = write_spec(tmp_path, rs, start_in=2.5)   # all connected well before start
    write_control(spec["control_path"], shift_s=0.4, seq=1)           # before start: iteration 0
    procs = start_workers(path, n)
    wait_for_line(spec["log_path"], lambda r: r["status"] == "ok" and r["iteration"] == 0, 15)
    write_control(spec["control_path"], shift_s=0.7, seq=2, at_iteration=3)
    codes = wait_all(procs, 30)
    assert codes == {0: 0, 1: 0}
    rows = read_worker_log(spec["log_path"])
    for r in range(n):
        ok = sorted((x for x in rows if x["rank"] == r and x["status"] == "ok"),
                    key=lambda x: x["iteration"])
        assert len(ok) == iters
        assert ok[0]["start_s"] == pytest.approx(0.4, abs=0.15)
        assert ok[0]["shift_s"] == pytest.approx(0.4)
        gaps = [ok[i]["start_s"] - ok[i - 1]["end_s"] for i in range(1, iters)]
        assert gaps[2] == pytest.approx(0.7, abs=0.15), gaps      # before iteration 3
        assert ok[3]["shift_s"] == pytest.approx(0.7)
        for i in (0, 1, 3):
            assert gaps[i] < 0.1, gaps
        # the shift is applied once
        assert sum(x["shift_s"] for x in ok) == pytest.approx(1.1)


def test_killed_rank_makes_the_others_fail_in_bounded_time(tmp_path):
    n = 4
    rs = make_resolved([job_dict("jobK", n, [
        {"op": "compute", "seconds": 0.05},
        {"op": "allreduce", "bytes": 2_000_000}], iterations=10_000)])
    path, spec = write_spec(tmp_path, rs, io_timeout_s=3.0)
    procs = start_workers(path, n)
    wait_for_line(spec["log_path"], lambda r: r["status"] == "ok" and r["iteration"] >= 1, 15)
    t0 = time.time()
    procs[2].kill()
    procs[2].wait()
    codes = wait_all({r: p for r, p in procs.items() if r != 2}, 20)
    elapsed = time.time() - t0
    assert elapsed < 20
    assert all(c not in (0, None) for c in codes.values()), codes
    rows = read_worker_log(spec["log_path"])
    for r in (0, 1, 3):
        fails = [x for x in rows if x["rank"] == r and x["status"] == "fail"]
        assert len(fails) == 1, rows[-8:]
        assert fails[0]["detail"]
        assert fails[0]["end_s"] is not None


def test_stalled_peer_times_out_and_sigterm_is_prompt(tmp_path):
    n = 3
    rs = make_resolved([job_dict("jobT", n, [
        {"op": "compute", "seconds": 0.05},
        {"op": "alltoall", "bytes": 600_000}], iterations=10_000)])
    path, spec = write_spec(tmp_path, rs, io_timeout_s=2.0)
    procs = start_workers(path, n)
    wait_for_line(spec["log_path"], lambda r: r["status"] == "ok" and r["iteration"] >= 1, 15)
    os.kill(procs[1].pid, signal.SIGSTOP)   # alive but silent: only the timeout can tell
    try:
        t0 = time.time()
        codes = wait_all({0: procs[0]}, 20)
        assert codes[0] == 1 and time.time() - t0 < 20
        rows = read_worker_log(spec["log_path"])
        fail = [x for x in rows if x["rank"] == 0 and x["status"] == "fail"]
        assert fail and ("no progress" in fail[0]["detail"] or "rank" in fail[0]["detail"])
    finally:
        os.kill(procs[1].pid, signal.SIGCONT)
    # SIGTERM ends a worker promptly with a 'stopped' line
    t0 = time.time()
    procs[1].terminate()
    codes = wait_all({1: procs[1], 2: procs[2]}, 20)
    assert codes[1] == 128 + signal.SIGTERM and time.time() - t0 < 10
    assert codes[2] != 0
    rows = read_worker_log(spec["log_path"])
    assert [x for x in rows if x["rank"] == 1 and x["status"] == "stopped"]


def test_missing_peer_misses_connect_deadline(tmp_path):
    rs = make_resolved([job_dict("jobM", 2, [{"op": "allreduce", "bytes": 1000}])])
    path, spec = write_spec(tmp_path, rs, connect_timeout_s=1.5)
    t0 = time.time()
    codes = wait_all(start_workers(path, 2, ranks=[0]), 20)
    assert codes[0] == 1 and time.time() - t0 < 10
    rows = read_worker_log(spec["log_path"])
    assert rows[-1]["status"] == "fail" and "connect deadline" in rows[-1]["detail"]


def test_bad_spec_and_unknown_congestion_control(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = subprocess.run([sys.executable, "-m", "emulation.worker", "--spec", str(bad), "--rank", "0"],
                       cwd=REPO, capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and "not valid JSON" in r.stderr
    rs = make_resolved([job_dict("jobX", 2, [{"op": "allreduce", "bytes": 1000}])])
    path, spec = write_spec(tmp_path, rs)
    spec["tcp_cc"] = "no-such-cc"
    path.write_text(json.dumps(spec))
    codes = wait_all(start_workers(path, 2, ranks=[0]), 20)
    assert codes[0] == 2
    assert "no-such-cc" in read_worker_log(spec["log_path"])[-1]["detail"]


def test_overlap_starts_collectives_inside_the_compute(tmp_path, monkeypatch):
    """In-process: a collective with overlap f starts (1-f) into the preceding compute, the
    compute goes on alongside, and the next phase waits for both."""
    from emulation.worker import Worker
    rs = make_resolved([job_dict("jobO", 2, [
        {"op": "compute", "seconds": 0.4},
        {"op": "allreduce", "bytes": 1000, "overlap": 0.75},
        {"op": "alltoall", "bytes": 1000},
        {"op": "compute", "seconds": 0.2},
        {"op": "broadcast", "bytes": 1000, "overlap": 0.5}])])
    spec = job_spec(rs.jobs[0], rs.cluster, rs.scenario.emulation, port_base=21000,
                    start_at=time.time(), control_dir=tmp_path, log_path=tmp_path / "l.csv")
    w = Worker(spec, 0)
    starts = {}

    def fake(plan):
        starts[plan.op] = time.time()
        time.sleep(0.05)

    monkeypatch.setattr(w, "run_collective", fake)
    t0 = time.time()
    compute_s, comm_s = w.run_iteration()
    t1 = time.time()
    rel = {k: v - t0 for k, v in starts.items()}
    assert rel["allreduce"] == pytest.approx(0.1, abs=0.04)      # (1 - 0.75) * 0.4
    assert rel["alltoall"] == pytest.approx(0.4, abs=0.04)       # after the compute: overlap 0
    # the second compute starts when the alltoall (0.40-0.45) is over: 0.45 + (1 - 0.5) * 0.2
    assert rel["broadcast"] == pytest.approx(0.55, abs=0.04)
    assert t1 - t0 == pytest.approx(0.65, abs=0.05)              # 0.45 + 0.2
    assert compute_s == pytest.approx(0.6) and comm_s == pytest.approx(0.15, abs=0.03)
    w.close()


def test_compute_jitter_draws_the_simulators_sequence_on_every_rank(tmp_path):
    """With compute_jitter, every rank of a job stretches each iteration's compute by the same
    factor, the one the simulator draws for that job (workloads/jitter.py, seeded by the
    scenario's seed and the job's index); the declared compute is 0.04 s an iteration."""
    n, iters = 2, 6
    rs = make_resolved([job_dict("jobA", n, [
        {"op": "compute", "seconds": 0.02},
        {"op": "allreduce", "bytes": 400_000},
        {"op": "compute", "seconds": 0.02}], iterations=iters)])
    path, spec = write_spec(tmp_path, rs)
    spec.update(compute_jitter=0.2, jitter_seed=[7, 3])
    path.write_text(json.dumps(spec))
    codes = wait_all(start_workers(path, n), 30)
    assert codes == {r: 0 for r in range(n)}
    noise = ComputeNoise(0.2, 7)
    want = [0.04 * noise.factor(3) for _ in range(iters)]
    rows = read_worker_log(spec["log_path"])
    for r in range(n):
        got = [x["compute_s"] for x in rows if x["rank"] == r and x["status"] == "ok"]
        assert got == pytest.approx(want, abs=1e-6)       # the log keeps microseconds
    assert max(want) - min(want) > 0.004          # the factors really differ
