"""Contention cases the quality benchmark and the tests score every policy on (under the
shared model): the nine standard cases, the narrow random cases of the first benchmark
(``random_case``) and the widened ones (``wide_case``: up to 4 racks, oversubscription 1:1 to
4:1, all-reduce, all-to-all and pipeline jobs, up to 8 jobs)."""
from __future__ import annotations

import random
from typing import List, Tuple

from workloads.cluster import ClusterSpec
from workloads.scenario import (Collective, Compute, JobSpec, Placement, Profile, Scenario)


def _profile(compute_s: float, nbytes: float, op: str = "allreduce") -> Profile:
    return Profile(phases=[Compute(op="compute", seconds=compute_s),
                           Collective(op=op, bytes=nbytes)])


def _case(name: str, racks: int, hosts: int, spines: int, gph: int, jobs: List[Tuple[str, List[str], float, float]],
          host_gbps: float = 100.0, uplink_gbps: float = 100.0) -> Scenario:
    cl = ClusterSpec(racks=racks, hosts_per_rack=hosts, spines=spines, gpus_per_host=gph,
                     host_link_gbps=host_gbps, uplink_gbps=uplink_gbps)
    js = [JobSpec(name=n, iterations=100, placement=Placement(slots=s),
                  profile=_profile(c, b)) for n, s, c, b in jobs]
    return Scenario(name=name, backend="simulation", cluster=cl, jobs=js)


def quality_cases() -> List[Scenario]:
    """Pairs and mixes of jobs sharing uplinks, different periods and sizes.
    300 MB on 100 Gb/s = 24 ms of ring traffic per direction."""
    C = []
    C.append(_case("pair-identical", 2, 2, 1, 1, [
        ("A", ["r0h0", "r1h0"], 0.05, 300e6), ("B", ["r0h1", "r1h1"], 0.05, 300e6)]))
    C.append(_case("pair-comm-heavy", 2, 2, 1, 1, [
        ("A", ["r0h0", "r1h0"], 0.01, 300e6), ("B", ["r0h1", "r1h1"], 0.01, 300e6)]))
    C.append(_case("pair-periods-1to2", 2, 2, 1, 1, [
        ("A", ["r0h0", "r1h0"], 0.026, 300e6), ("B", ["r0h1", "r1h1"], 0.076, 300e6)]))
    C.append(_case("pair-sizes", 2, 2, 1, 1, [
        ("A", ["r0h0", "r1h0"], 0.05, 100e6), ("B", ["r0h1", "r1h1"], 0.08, 600e6)]))
    C.append(_case("pair-two-spines", 2, 2, 2, 1, [
        ("A", ["r0h0", "r1h0"], 0.03, 300e6), ("B", ["r0h1", "r1h1"], 0.03, 300e6)]))
    C.append(_case("trio-one-uplink", 2, 3, 1, 1, [
        ("A", ["r0h0", "r1h0"], 0.06, 300e6), ("B", ["r0h1", "r1h1"], 0.06, 200e6),
        ("C", ["r0h2", "r1h2"], 0.09, 400e6)]))
    C.append(_case("trio-periods", 2, 3, 1, 1, [
        ("A", ["r0h0", "r1h0"], 0.02, 150e6), ("B", ["r0h1", "r1h1"], 0.05, 300e6),
        ("C", ["r0h2", "r1h2"], 0.11, 300e6)]))
    # 4 GPUs per host: jobs share host links and uplinks
    C.append(_case("mix-shared-hosts", 2, 2, 2, 4, [
        ("A", ["r0h0/0", "r0h0/1", "r1h0/0", "r1h0/1"], 0.05, 300e6),
        ("B", ["r0h0/2", "r0h0/3", "r0h1/0", "r0h1/1"], 0.04, 200e6),
        ("C", ["r0h1/2", "r0h1/3", "r1h1/0", "r1h1/1"], 0.08, 500e6),
        ("D", ["r1h0/2", "r1h0/3", "r1h1/2", "r1h1/3"], 0.03, 150e6)]))
    C.append(_case("mix-3-racks", 3, 2, 2, 2, [
        ("A", ["r0h0/0", "r1h0/0"], 0.04, 300e6), ("B", ["r1h1/0", "r2h0/0"], 0.05, 300e6),
        ("C", ["r0h1/0", "r2h1/0"], 0.06, 400e6), ("D", ["r0h0/1", "r1h1/1", "r2h1/1"], 0.1, 200e6)],
        uplink_gbps=50.0))
    return C


def random_case(seed: int, max_jobs: int = 4) -> Scenario:
    """A small random contention case: 2-3 racks of 2-3 hosts, 1-2 spines, 1-4 GPUs per host,
    2..max_jobs jobs of 2-4 workers on random slots, compute 10-100 ms, 50-500 MB all-reduce."""
    rng = random.Random(seed)
    racks, hosts = rng.choice([2, 3]), rng.choice([2, 3])
    spines, gph = rng.choice([1, 2]), rng.choice([1, 2, 4])
    slots = [f"r{r}h{h}/{g}" for r in range(racks) for h in range(hosts) for g in range(gph)]
    rng.shuffle(slots)
    jobs = []
    for k in range(rng.randint(2, max_jobs)):
        n = rng.randint(2, 4)
        if len(slots) < n:
            break
        mine, slots = slots[:n], slots[n:]
        jobs.append((f"J{k}", sorted(mine), round(rng.uniform(0.01, 0.1), 4),
                     round(rng.uniform(50e6, 500e6))))
    return _case(f"random-{seed}", racks, hosts, spines, gph, jobs,
                 uplink_gbps=rng.choice([50.0, 100.0]))


def wide_case(seed: int, max_jobs: int = 8) -> Scenario:
    """A widened random contention case: 2-4 racks of 2-4 hosts, 1-2 spines, 1-4 GPUs per
    host, host links 100 Gb/s and uplinks sized for an oversubscription of 1:1 to 4:1
    (hosts x host link / (spines x uplink)); 2..max_jobs jobs of 2-8 workers on random slots
    (at most half the free slots each, while slots last):
    half ring all-reduce (50-500 MB), a quarter all-to-all (20-200 MB per rank), a quarter
    pipelines (send/recv of 50-300 MB between consecutive stages); compute 10-100 ms."""
    rng = random.Random(seed)
    racks, hosts = rng.choice([2, 3, 4]), rng.choice([2, 3, 4])
    spines, gph = rng.choice([1, 2]), rng.choice([1, 2, 4])
    oversub = rng.choice([1.0, 2.0, 3.0, 4.0])
    host_gbps = 100.0
    uplink = round(hosts * host_gbps / (spines * oversub), 3)
    slots = [f"r{r}h{h}/{g}" for r in range(racks) for h in range(hosts) for g in range(gph)]
    rng.shuffle(slots)
    cl = ClusterSpec(racks=racks, hosts_per_rack=hosts, spines=spines, gpus_per_host=gph,
                     host_link_gbps=host_gbps, uplink_gbps=uplink)
    js: List[JobSpec] = []
    for k in range(rng.randint(2, max_jobs)):
        if len(slots) < 2:
            break
        n = min(rng.randint(2, 8), max(2, len(slots) // 2))   # room for another job
        mine, slots = slots[:n], slots[n:]
        kind = rng.choice(["allreduce", "allreduce", "alltoall", "sendrecv"])
        lo, hi = {"allreduce": (50e6, 500e6), "alltoall": (20e6, 200e6),
                  "sendrecv": (50e6, 300e6)}[kind]
        prof = _profile(round(rng.uniform(0.01, 0.1), 4), round(rng.uniform(lo, hi)), kind)
        js.append(JobSpec(name=f"J{k}", iterations=100, placement=Placement(slots=sorted(mine)),
                          profile=prof))
    return Scenario(name=f"wide-{seed}", backend="simulation", cluster=cl, jobs=js, seed=seed)
