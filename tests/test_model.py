"""The shared contention model: closed forms, estimation."""
import math

import numpy as np
import pytest

from scheduling.base import ClusterState, Decision, JobState, state_from_scenario
from scheduling.estimate import estimate_from_measurements, estimate_job, estimate_period
from scheduling.evaluate import simulate
from scheduling.fluid import BYTES_PER_GBIT, SimJob
from scheduling.links import isolated_iteration_time
from scheduling.model import link_loads, predict
from workloads.cluster import Cluster, ClusterSpec
from workloads.scenario import (Collective, Compute, JobSpec, Placement, Profile, Scenario,
                                resolve)


def scenario(jobs, racks=2, hosts=2, spines=1, gph=1, host=100.0, up=100.0):
    cl = ClusterSpec(racks=racks, hosts_per_rack=hosts, spines=spines, gpus_per_host=gph,
                     host_link_gbps=host, uplink_gbps=up)
    js = [JobSpec(name=n, iterations=10, placement=Placement(slots=s),
                  profile=Profile(phases=[Compute(op="compute", seconds=c),
                                          Collective(op="allreduce", bytes=b)]))
          for n, s, c, b in jobs]
    return state_from_scenario(resolve(Scenario(name="t", cluster=cl, jobs=js)))


def comm_time(nbytes, gbps=100.0):
    """2-worker ring all-reduce: each direction carries 2(n-1)/n * M = M bytes."""
    return nbytes / (gbps * BYTES_PER_GBIT)


def test_single_job_is_analytical():
    st = scenario([("A", ["r0h0", "r1h0"], 0.05, 300e6)])
    t = 0.05 + comm_time(300e6)
    assert isolated_iteration_time(st.jobs[0], st.cluster) == pytest.approx(t)
    assert predict(st).iter_s["A"] == pytest.approx(t)
    # 4-worker ring across racks on a 50 Gb/s uplink: slowest link = the uplink
    st = scenario([("A", ["r0h0", "r0h1", "r1h0", "r1h1"], 0.02, 400e6)], up=50.0)
    per_flow = 2 * 3 / 4 * 400e6
    assert predict(st).iter_s["A"] == pytest.approx(0.02 + per_flow / (50 * BYTES_PER_GBIT))


def test_two_identical_jobs_fair_share():
    st = scenario([("A", ["r0h0", "r1h0"], 0.05, 300e6), ("B", ["r0h1", "r1h1"], 0.05, 300e6)])
    p = predict(st)
    for n in "AB":
        assert p.iter_s[n] == pytest.approx(0.05 + 2 * comm_time(300e6))
        assert p.slowdown[n] == pytest.approx((0.05 + 2 * comm_time(300e6)) / (0.05 + comm_time(300e6)))


def test_strict_priority_interleaves_when_compute_covers_comm():
    c, b = 0.05, 300e6          # c >= b/C = 0.024
    st = scenario([("A", ["r0h0", "r1h0"], c, b), ("B", ["r0h1", "r1h1"], c, b)])
    p = predict(st, {"A": Decision("A", priority=0), "B": Decision("B", priority=1)})
    for n in "AB":
        assert p.iter_s[n] == pytest.approx(c + comm_time(b))


def test_strict_priority_comm_heavy_high_job_unaffected():
    c, b = 0.01, 300e6          # c < b/C: the low job cannot fit in the gaps
    st = scenario([("A", ["r0h0", "r1h0"], c, b), ("B", ["r0h1", "r1h1"], c, b)])
    p = predict(st, {"A": Decision("A", priority=0), "B": Decision("B", priority=1)})
    assert p.iter_s["A"] == pytest.approx(c + comm_time(b))
    assert p.iter_s["B"] > c + 2 * comm_time(b)      # worse than under fair sharing


def test_starvation_gives_infinite_time():
    jobs = [SimJob(0.0, ("L",), (1.0,), 1.0, 0), SimJob(0.1, ("L",), (1.0,), 1.0, 1)]
    T = simulate(jobs, {"L": 1.0})
    assert T[0] == pytest.approx(1.0)
    assert math.isinf(T[1])


def test_rate_cap_and_spines():
    st = scenario([("A", ["r0h0", "r1h0"], 0.05, 300e6)], spines=2)
    caps = {l.id: 50.0 for l in st.cluster.links}
    p = predict(st, {"A": Decision("A", rate_caps_gbps=caps)})
    assert p.iter_s["A"] == pytest.approx(0.05 + comm_time(300e6, 50.0))
    # two jobs on different spines do not contend; on the same spine they do
    st = scenario([("A", ["r0h0", "r1h0"], 0.05, 300e6), ("B", ["r0h1", "r1h1"], 0.05, 300e6)],
                  spines=2, host=100.0, up=100.0)
    apart = predict(st, {"A": Decision("A", spine=0), "B": Decision("B", spine=1)})
    same = predict(st, {"A": Decision("A", spine=0), "B": Decision("B", spine=0)})
    assert apart.mean_slowdown == pytest.approx(1.0)
    assert same.mean_slowdown > 1.2


def test_shift_interleaves_under_fair_sharing():
    c, b = 0.05, 300e6
    st = scenario([("A", ["r0h0", "r1h0"], c, b), ("B", ["r0h1", "r1h1"], c, b)])
    p = predict(st, {"B": Decision("B", shift_s=comm_time(b))})
    assert p.mean_slowdown == pytest.approx(1.0)


def test_shared_host_link_with_several_gpus_per_host():
    # two 2-GPU jobs whose workers share hosts r0h0 and r0h1: host links are shared
    st = scenario([("A", ["r0h0/0", "r0h1/0"], 0.05, 300e6), ("B", ["r0h0/1", "r0h1/1"], 0.05, 300e6)],
                  racks=1, hosts=2, gph=2)
    p = predict(st)
    assert p.iter_s["A"] == pytest.approx(0.05 + 2 * comm_time(300e6))


def test_link_loads():
    c, b = 0.05, 300e6
    st = scenario([("A", ["r0h0", "r1h0"], c, b)])
    load = link_loads(st)
    up = st.cluster.link_index["tor0>sp0"]
    assert load[up] == pytest.approx(b * 8 / 1e9 / (c + comm_time(b)))
    assert load.shape == (len(st.cluster.links),)


def onoff(period_bins, active_bins, n_bins, rate):
    return [rate if (k % period_bins) < active_bins else 0.0 for k in range(n_bins)]


def test_estimation_from_binned_bytes():
    bin_s = 0.01
    # period 0.2 s = 20 bins, active 5 bins at 1e7 B/bin on one pair, 2e7 on another
    s1 = onoff(20, 5, 400, 1e7)
    s2 = onoff(20, 5, 400, 2e7)
    est = estimate_job({("r0h0", "r1h0"): s1, ("r1h0", "r0h0"): s2}, bin_s)
    assert est.period_s == pytest.approx(0.2, rel=0.03)
    assert est.active_fraction == pytest.approx(0.25, abs=0.01)
    assert est.pair_bytes[("r0h0", "r1h0")] == pytest.approx(5e7, rel=0.03)
    assert est.pair_bytes[("r1h0", "r0h0")] == pytest.approx(1e8, rel=0.03)
    assert est.compute_s == pytest.approx(0.15, rel=0.05)
    # noisy, non-integer period
    rng = np.random.default_rng(0)
    t = np.arange(600) * bin_s
    x = ((t % 0.137) < 0.04) * 1e7 + rng.uniform(0, 1e5, size=t.size)
    assert estimate_period(x, bin_s) == pytest.approx(0.137, rel=0.03)
    # no periodicity: constant traffic
    assert estimate_period([1.0] * 100, bin_s) is None
    out = estimate_from_measurements({"A": {("a", "b"): s1}}, bin_s)
    assert set(out) == {"A"}


def _random_group(rng, n_jobs, n_links):
    jobs = []
    for _ in range(n_jobs):
        k = rng.randint(1, min(3, n_links))
        links = tuple(rng.sample(range(n_links), k))
        B = tuple(rng.choice([1.0, 2.0, 3.0]) * 1e8 for _ in links)
        lam = rng.choice([INF_, INF_, 5e8])
        jobs.append(SimJob(rng.choice([0.0, 0.01, 0.03, 0.05]), links, B, max(B),
                           rng.randint(0, 2), lam, rng.choice([0.0, 0.0, 0.01])))
    cap = {l: rng.choice([1.25e10, 6.25e9]) for l in range(n_links)}
    return jobs, cap


INF_ = float("inf")


@pytest.mark.parametrize("seed", range(30))
def test_fast_allocator_equals_reference(seed):
    # the allocator specialised per simulation (and its cache shared across simulations)
    # gives exactly the reference allocate()'s rates
    import random

    from scheduling.fluid import _Alloc, allocate
    rng = random.Random(seed)
    jobs, cap = _random_group(rng, rng.randint(2, 6), rng.randint(1, 5))
    shared: dict = {}
    fast = _Alloc(jobs, cap, shared)
    plain = _Alloc(jobs, cap)
    for mask in range(1, 1 << len(jobs)):
        act = [j for j in range(len(jobs)) if (mask >> j) & 1]
        ref = allocate(jobs, act, cap)
        want = [ref.get(j, 0.0) for j in range(len(jobs))]
        assert plain.rates(mask) == want
        assert fast.rates(mask) == pytest.approx(want, rel=1e-12)
    # a second simulation object over the same jobs reuses the shared allocations
    again = _Alloc(list(reversed(jobs)), cap, shared)
    for mask in range(1, 1 << len(jobs)):
        rev = [(mask >> (len(jobs) - 1 - j)) & 1 for j in range(len(jobs))]
        rmask = sum(1 << j for j, b in enumerate(rev) if b)
        assert again.rates(rmask) == pytest.approx(list(reversed(fast.rates(mask))), rel=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_simulate_with_shared_allocations_matches(seed):
    import random
    rng = random.Random(100 + seed)
    jobs, cap = _random_group(rng, rng.randint(2, 5), rng.randint(1, 4))
    plain = simulate(jobs, cap)
    shared: dict = {}
    assert simulate(jobs, cap, alloc_cache=shared) == pytest.approx(plain, rel=1e-9)
    assert simulate(jobs, cap, alloc_cache=shared) == pytest.approx(plain, rel=1e-9)


def test_iso_comm_kept_across_models_by_traffic_signature():
    """``ContentionModel.iso_comm`` with a shared usage cache (a policy's epochs): the value
    of a fresh model's computation, kept under the job's traffic signature, so a job whose
    bytes change gets its own and a job whose traffic did not change is read back."""
    from scheduling.model import ContentionModel
    shared = {}
    a = scenario([("A", ["r0h0", "r1h0"], 0.05, 300e6), ("B", ["r0h1", "r1h1"], 0.05, 600e6)])
    m = ContentionModel(a, usage_cache=shared)
    assert m.iso_comm("A") == pytest.approx(comm_time(300e6))
    assert m.iso_comm("B") == pytest.approx(comm_time(600e6))
    assert sum(1 for k in shared if k[0] == "iso comm") == 2
    # the next epoch: B's bytes changed, A's did not
    b = scenario([("A", ["r0h0", "r1h0"], 0.05, 300e6), ("B", ["r0h1", "r1h1"], 0.05, 150e6)])
    m2 = ContentionModel(b, usage_cache=shared)
    fresh = ContentionModel(b)
    for n in "AB":
        assert m2.iso_comm(n) == fresh.iso_comm(n)
    assert m2.iso_comm("B") == pytest.approx(comm_time(150e6))
    assert sum(1 for k in shared if k[0] == "iso comm") == 3
