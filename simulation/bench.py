"""Simulator speed: wall time, events/s and peak memory at 256, 2,048 and 16,384 GPUs.

  python -m simulation.bench [--policy fair] [--placement first-fit] [--large-iterations 10]

Each size runs in its own process (so peak RSS is that run's; its progress, simulated time,
events and jobs done, is shown on stderr every 15 s; Ctrl-C stops it), on a generated mix
(``simulation.workload.generate``: zoo models, heavy-tailed job sizes, all jobs arriving at 0):

  256 GPUs     4 racks x 8 hosts x 8 GPUs, 2 spines,   12 jobs, 100 iterations
  2,048 GPUs  32 racks x 8 hosts x 8 GPUs, 4 spines,  100 jobs, 100 iterations
  16,384 GPUs 128 racks x 16 hosts x 8 GPUs, 8 spines, 800 jobs, --large-iterations

Then, when 16,384 is among the sizes, the next size's run (``--headroom`` alone;
``--no-headroom`` skips it): 16,384 GPUs,
1,000 jobs, 100 iterations, fragmented placement, under Harmonics, printed as
``16384 GPUs, 1000 jobs, 100 iterations, fragmented, harmonics: <seconds> s (cpu ...)``.

Links 200 Gb/s per host, ToR uplinks sized for 2:1 oversubscription.  The policy (default
fair, through the registry) is called every epoch with the measured view, so the timing
includes the epoch machinery.  The last line is exactly
``2048 GPUs, 100 jobs, 100 iterations: <seconds> s`` (wall time of the simulation, isolated
runs included; the cpu column shows how much of it was this process's own CPU time, which is
what to look at on a shared machine).  ``--placement fragmented`` gives the worst case.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import threading
import time
from typing import Optional, Tuple

PROGRESS_EVERY_S = 15.0      # a child's progress line on stderr at most this often

SIZES = {
    256: dict(racks=4, hosts=8, spines=2, jobs=12),
    2048: dict(racks=32, hosts=8, spines=4, jobs=100),
    16384: dict(racks=128, hosts=16, spines=8, jobs=800),
}


def run_one(gpus: int, iterations: int, policy: str, placement: str, seed: int,
            jobs: Optional[int] = None, progress: bool = False) -> dict:
    from workloads.scenario import resolve
    from .__main__ import load_policy
    from .engine import SimConfig, simulate
    from .topology import leaf_spine
    from .workload import generate
    p = dict(SIZES[gpus], **({"jobs": jobs} if jobs else {}))
    t0 = time.perf_counter()
    spec = leaf_spine(p["racks"], p["hosts"], p["spines"], gpus_per_host=8, host_link_gbps=200.0,
                      oversubscription=2.0)
    sc = generate(spec, p["jobs"], iterations=iterations, seed=seed, placement=placement,
                  name=f"bench-{gpus}")
    rs = resolve(sc)
    t_gen = time.perf_counter() - t0
    t1 = time.perf_counter()
    c1 = time.process_time()
    res = simulate(rs, load_policy(policy), SimConfig(isolated=True, progress=progress),
                   policy_name=policy)
    wall = time.perf_counter() - t1
    cpu = time.process_time() - c1
    st = res.stats
    return {"gpus": gpus, "jobs": p["jobs"], "iterations": iterations, "policy": policy,
            "placement": placement, "generate_s": t_gen, "wall_s": wall, "cpu_s": cpu,
            "engine_s": st["wall_s"], "events": st["events"], "rate_updates": st["rate_updates"],
            "events_per_s": st["events"] / st["wall_s"] if st["wall_s"] > 0 else float("nan"),
            "epochs": st["epochs"], "sim_time_s": st["sim_time_s"],
            "decision_cpu_s": st["decision_total_s"], "rate_update_cpu_s": st["rate_update_s"],
            "jobs_finished": st["jobs_finished"],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}


def _child(cmd, timeout: float, label: str) -> Tuple[Optional[int], str, str]:
    """Run one size in its own process, its simulator's progress (``[sim ...]`` lines)
    passed on to stderr every ``PROGRESS_EVERY_S`` seconds, prefixed with ``label``.
    Returns (exit code, or None if it timed out and was killed; stdout; its last stderr
    line)."""
    p = subprocess.Popen(cmd + ["--progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    last = [""]

    def pump():
        shown = time.monotonic()
        for line in p.stderr:
            line = line.rstrip("\n")
            if not line:
                continue
            last[0] = line
            now = time.monotonic()
            if line.startswith("[sim ") and now - shown >= PROGRESS_EVERY_S:
                shown = now
                print(f"  {label}: {line.split('] ', 1)[-1]}", file=sys.stderr, flush=True)

    th = threading.Thread(target=pump, daemon=True)
    th.start()
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        th.join()
        return None, "", last[0]
    finally:
        if p.poll() is None:        # interrupted: the child goes with us
            p.kill()
            p.wait()
    out = p.stdout.read()
    th.join()
    return p.returncode, out, last[0]


def headroom(seed: int, timeout: float) -> int:
    """The next size (issue 16): 16,384 GPUs, 1,000 jobs, 100 iterations, fragmented, under
    Harmonics, end to end in its own process; prints wall and CPU seconds and where they went."""
    cmd = [sys.executable, "-m", "simulation.bench", "--one", "16384", "--jobs", "1000",
           "--iterations", "100", "--policy", "harmonics", "--placement", "fragmented",
           "--seed", str(seed)]
    rc, out, err = _child(cmd, timeout, "headroom")
    if rc is None:
        print(f"16384 GPUs, 1000 jobs, 100 iterations, fragmented, harmonics: "
              f"timed out after {timeout:.0f} s")
        return 1
    if rc != 0:
        print("16384 GPUs, 1000 jobs, 100 iterations, fragmented, harmonics: failed: "
              + (err or "?"))
        return 1
    r = json.loads(out.strip().splitlines()[-1])
    print(f"16384 GPUs, 1000 jobs, 100 iterations, fragmented, harmonics: {r['wall_s']:.2f} s "
          f"(cpu {r['cpu_s']:.2f} s, of which the policy's decisions {r['decision_cpu_s']:.2f} s, "
          f"the rate updates {r['rate_update_cpu_s']:.2f} s; "
          f"generate {r['generate_s']:.2f} s, {r['events']} events, "
          f"{r['rate_updates']} rate updates, {r['epochs']} epochs, "
          f"peak RSS {r['peak_rss_mb']:.0f} MB)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulation.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="fair")
    ap.add_argument("--placement", default="first-fit", choices=["packed", "first-fit", "fragmented"])
    ap.add_argument("--iterations", type=int, default=100, help="iterations at 256 and 2,048 GPUs")
    ap.add_argument("--large-iterations", type=int, default=10, help="iterations at 16,384 GPUs")
    ap.add_argument("--sizes", default="256,16384,2048", help="comma-separated; 2048 is printed last")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=1800.0, help="per size, seconds")
    ap.add_argument("--headroom", action="store_true",
                    help="only the next size's run: 16,384 GPUs, 1,000 jobs, 100 iterations, "
                         "fragmented placement, under Harmonics")
    ap.add_argument("--no-headroom", action="store_true", help="skip that run")
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--jobs", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--progress", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one is not None:
        it = a.large_iterations if a.one == 16384 and a.jobs is None else a.iterations
        print(json.dumps(run_one(a.one, it, a.policy, a.placement, a.seed, a.jobs,
                                 progress=a.progress)))
        return 0
    if a.headroom:
        return headroom(a.seed, a.timeout)
    sizes = [int(s) for s in a.sizes.split(",") if s]
    sizes = [s for s in sizes if s != 2048] + ([2048] if 2048 in sizes else [])
    print(f"{'GPUs':>6} {'jobs':>5} {'iters':>5} {'wall s':>8} {'cpu s':>8} {'events':>9} {'events/s':>9} "
          f"{'rate upd':>9} {'sim s':>9} {'peak RSS MB':>11}   policy={a.policy} placement={a.placement}")
    last = None
    for g in sizes:
        if g not in SIZES:
            print(f"unknown size {g} (known: {', '.join(map(str, SIZES))})", file=sys.stderr)
            return 2
        cmd = [sys.executable, "-m", "simulation.bench", "--one", str(g), "--policy", a.policy,
               "--placement", a.placement, "--iterations", str(a.iterations),
               "--large-iterations", str(a.large_iterations), "--seed", str(a.seed)]
        rc, out, err = _child(cmd, a.timeout, f"{g} GPUs")
        if rc is None:
            print(f"{g:>6} timed out after {a.timeout:.0f} s")
            continue
        if rc != 0:
            print(f"{g:>6} failed: {err or rc}")
            continue
        r = json.loads(out.strip().splitlines()[-1])
        print(f"{r['gpus']:>6} {r['jobs']:>5} {r['iterations']:>5} {r['wall_s']:8.2f} {r['cpu_s']:8.2f} {r['events']:>9} "
              f"{r['events_per_s']:9.0f} {r['rate_updates']:>9} {r['sim_time_s']:9.1f} "
              f"{r['peak_rss_mb']:11.1f}", flush=True)
        if g == 2048:
            last = r
    if not a.no_headroom and 16384 in sizes:
        headroom(a.seed, a.timeout)
    if last is not None:
        print(f"2048 GPUs, {last['jobs']} jobs, {last['iterations']} iterations: {last['wall_s']:.2f} s")
    return 0


def _main() -> int:
    try:
        return main()
    except KeyboardInterrupt:          # the running size's process was killed on the way out
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(_main())
