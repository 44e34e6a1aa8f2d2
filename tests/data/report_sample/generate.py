"""Regenerate the small sample results directory used by tests/test_report.py.

    .venv/bin/python tests/data/report_sample/generate.py

Two policies (fair, harmonics), two jobs (jobA, jobB: one worker in each rack, one spine),
6 iterations each, written in the emulator's formats: scenario.yaml, iterations.csv,
summary.csv (computed as emulation/runner.py's collect does), run.json, decisions.jsonl,
specs/*.json (real job specs, emulation.jobspec.job_spec) and captures/tor0-sp0.pcap,
captures/tor1-sp0.pcap (headers only; the IP total length carries the payload size, as
in the emulator's snaplen-128 captures).  Traffic follows the iterations' communication
phases: under fair sharing the two jobs split the link; under harmonics jobA (class 0)
gets most of it while jobB (class 1) waits.  The numbers are made up (deterministic), not
measured: they exist to test the report, not the policies.
"""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]

import sys  # noqa: E402

sys.path.insert(0, str(REPO))

from emulation.jobspec import job_spec  # noqa: E402
from workloads.scenario import dump_scenario, parse_scenario, resolve  # noqa: E402

T0 = 1717000000.0          # absolute start of both jobs (emulated clock)
ITERS = 6
ISOLATED = {"jobA": 0.044, "jobB": 0.044}
SCENARIO = {
    "name": "report-sample",
    "description": "Sample results for tests/test_report.py: two data-parallel jobs across "
                   "two racks share one spine.",
    "backend": "emulation",
    "policies": ["fair", "harmonics"],
    "cluster": {"racks": 2, "hosts_per_rack": 2, "spines": 1, "gpus_per_host": 1,
                "host_link_gbps": 100, "uplink_gbps": 100},
    "emulation": {"bandwidth_scale": 2000, "time_scale": 10, "epoch_s": 1.0},
    "jobs": [{"name": n, "iterations": ITERS, "placement": {"slots": s},
              "profile": {"phases": [{"op": "compute", "seconds": 0.02},
                                     {"op": "allreduce", "bytes": "300MB"}]}}
             for n, s in (("jobA", ["r0h0", "r1h0"]), ("jobB", ["r0h1", "r1h1"]))],
}
# trace seconds of each iteration's communication phase, per policy and job
COMM = {"fair": {"jobA": 0.040, "jobB": 0.041},
        "harmonics": {"jobA": 0.027, "jobB": 0.036}}
PRIORITY = {"fair": {"jobA": 0, "jobB": 0}, "harmonics": {"jobA": 0, "jobB": 1}}
DSCP = {0: 46, 1: 34}
DECISION_MS = {"fair": [0.06, 0.05, 0.07, 0.05], "harmonics": [3.1, 2.4, 2.7, 0.4]}


def iterations(policy: str, rng) -> list:
    rows = []
    for job in ("jobA", "jobB"):
        t = 0.0
        for it in range(ITERS):
            comm = COMM[policy][job] * (1.6 if it == 0 else 1.0) * (1 + 0.04 * rng.standard_normal())
            for rank in (0, 1):
                d = 0.0004 * rank
                rows.append((job, rank, it) + tuple(round(x, 6) for x in
                                                    (t + d, 0.02, comm - d, t + 0.02 + comm)))
            t += 0.02 + comm
    return rows


def write_run(policy: str, out: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    sc = parse_scenario(SCENARIO)
    rs = resolve(sc)
    out.mkdir(parents=True)
    (out / "scenario.yaml").write_text(dump_scenario(sc))
    (out / "specs").mkdir()
    (out / "captures").mkdir()
    ports = {"jobA": 20000, "jobB": 20100}
    for j in rs.jobs:
        spec = job_spec(j, rs.cluster, sc.emulation, port_base=ports[j.name], start_at=T0,
                        control_dir="control", log_path=f"logs/{j.name}.csv")
        (out / "specs" / f"{j.name}.json").write_text(json.dumps(spec, indent=1) + "\n")
    rows = iterations(policy, rng)
    with open(out / "iterations.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["job", "worker", "iteration", "start_s", "compute_s", "comm_s", "end_s"])
        for r in rows:
            w.writerow(list(r[:3]) + [f"{x:.6f}" for x in r[3:]])
    with open(out / "summary.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["job", "policy", "iterations", "mean_iter_s", "p99_iter_s", "mean_comm_s",
                    "jct_s", "slowdown_vs_isolated"])
        for job in ("jobA", "jobB"):
            # as runner.collect: every worker's iteration, iteration 0 left out
            mine = [r for r in rows if r[0] == job]
            its = [r[6] - r[3] for r in mine if r[2] >= 1]
            comm = [r[5] for r in mine if r[2] >= 1]
            mean = float(np.mean(its))
            w.writerow([job, policy, ITERS, f"{mean:.6f}", f"{np.percentile(its, 99):.6f}",
                        f"{np.mean(comm):.6f}", f"{max(r[6] for r in mine):.6f}",
                        f"{mean / ISOLATED[job]:.6f}"])
    (out / "run.json").write_text(json.dumps(
        {"scenario": sc.name, "policy": policy, "status": "ok", "failures": [],
         "isolated": ISOLATED, "note": "sample data made by tests/data/report_sample/generate.py"},
        indent=1) + "\n")
    # decisions: epochs every emulated second after the start; the last one after both ended
    ends = max(r[6] for r in rows) * 10
    with open(out / "decisions.jsonl", "w") as f:
        for k, ms in enumerate(DECISION_MS[policy]):
            t = 1.0 * (k + 1) + 0.003
            active = ["jobA", "jobB"] if t < ends else []
            dec = {j: {"job": j, "priority": PRIORITY[policy][j], "rate_caps_gbps": {}, "spine": None,
                       "flow_spines": {}, "shift_s": 0.0,
                       "reason": "fair: no intervention" if policy == "fair"
                       else ("class 0: shortest communication" if PRIORITY[policy][j] == 0
                             else "class 1: yields to jobA")} for j in active}
            f.write(json.dumps({"epoch": k, "time_s": t, "decision_ms": ms, "active_jobs": active,
                                "decisions": dec, "estimates": {},
                                "measured_mbps": {"jobA": 20.0, "jobB": 20.0} if active else {}},
                               sort_keys=True) + "\n")
    write_pcaps(policy, rows, out / "captures", rs)


def write_pcaps(policy: str, rows: list, d: Path, rs) -> None:
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap
    ip = {w.host: rs.cluster.host_ip(w.host) for j in rs.jobs for w in j.workers}
    hosts = {j.name: [w.host for w in j.workers] for j in rs.jobs}
    base = {"jobA": 20000, "jobB": 20100}
    # communication intervals in emulated seconds (rank 0's)
    comm = {job: [(10 * (r[3] + r[4]), 10 * r[6]) for r in rows if r[0] == job and r[1] == 0]
            for job in ("jobA", "jobB")}
    link_Bps = 100e9 / 2000 / 8            # 50 Mbit/s emulated, bytes per second
    step = 0.01
    end = max(e for v in comm.values() for _, e in v)
    sent = {"tor0-sp0": {"jobA": [], "jobB": []}, "tor1-sp0": {"jobA": [], "jobB": []}}
    for k in range(int(end / step) + 1):
        t = (k + 0.5) * step           # mid-step: no bin-edge rounding
        on = {j: any(a <= t < b for a, b in comm[j]) for j in comm}
        if on["jobA"] and on["jobB"]:
            pa, pb = PRIORITY[policy]["jobA"], PRIORITY[policy]["jobB"]
            t_dec = 1.003                   # classes hold from the first decision on
            if pa == pb or t < t_dec:
                share = {"jobA": 0.48, "jobB": 0.48}
            else:
                share = {"jobA": 0.93, "jobB": 0.03} if pa < pb else {"jobA": 0.03, "jobB": 0.93}
        else:
            share = {j: 0.95 if on[j] else 0.0 for j in comm}
        for j in comm:
            b = int(share[j] * link_Bps * step)
            if b:
                sent["tor0-sp0"][j].append((t, b))
                if k % 5 == 0:              # the other uplink: a lighter sample of the same
                    sent["tor1-sp0"][j].append((t, b))
    for link, per_job in sent.items():
        pkts = []
        for j, chunks in per_job.items():
            src, dst = hosts[j] if link == "tor0-sp0" else hosts[j][::-1]
            dport = base[j] + (1 if link == "tor0-sp0" else 0)
            seq = 1000
            for t, b in chunks:
                klass = PRIORITY[policy][j]
                tos = (DSCP[klass] << 2) if t >= 1.003 else 0
                while b > 0:
                    n = min(b, 60000)            # GSO-sized segments, as in the emulator
                    p = (Ether() / IP(src=ip[src], dst=ip[dst], tos=tos, len=20 + 20 + n) /
                         TCP(sport=41000 + base[j] % 1000, dport=dport, seq=seq, flags="A"))
                    p.time = T0 + t
                    pkts.append(p)
                    seq += n
                    b -= n
        pkts.sort(key=lambda p: float(p.time))
        wrpcap(str(d / f"{link}.pcap"), pkts)


def main() -> None:
    for p in ("fair", "harmonics", "compare.json", "scenario.yaml"):
        q = HERE / p
        if q.is_dir():
            shutil.rmtree(q)
        elif q.exists():
            q.unlink()
    write_run("fair", HERE / "fair", seed=1)
    write_run("harmonics", HERE / "harmonics", seed=2)
    shutil.copy(HERE / "fair" / "scenario.yaml", HERE / "scenario.yaml")
    (HERE / "compare.json").write_text(json.dumps(
        {"scenario": "report-sample", "backend": "emulation", "policies": ["fair", "harmonics"],
         "command": "tests/data/report_sample/generate.py (sample data)",
         "runs": {"fair": {"status": "ok"}, "harmonics": {"status": "ok"}}}, indent=1) + "\n")
    print(f"wrote {HERE}")


if __name__ == "__main__":
    main()
