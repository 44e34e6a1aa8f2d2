"""Flow-level simulator: closed forms, enforcement of decisions, determinism, generators."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest

from scheduling.base import Decision, Policy
from simulation.engine import SimConfig, simulate
from simulation.topology import leaf_spine, lingjun_cluster, lingjun_racks
from simulation.waterfill import waterfill, waterfill_guaranteed, waterfill_update
from simulation.workload import arrivals, generate
from workloads.cluster import Cluster
from workloads.scenario import dump_scenario, parse_scenario, resolve

GB = 1e9 / 8  # bytes/s per Gb/s


def scenario(jobs, racks=2, hosts=2, spines=1, gpus=1, host_gbps=100, up_gbps=100, epoch=0.1,
             guarantee=None):
    return resolve(parse_scenario({
        "name": "t", "backend": "simulation",
        "cluster": {"racks": racks, "hosts_per_rack": hosts, "spines": spines,
                    "gpus_per_host": gpus, "host_link_gbps": host_gbps, "uplink_gbps": up_gbps,
                    "class_guarantee": guarantee},
        "emulation": {"epoch_s": epoch, "time_scale": 1.0},
        "simulation": {"compute_jitter": 0.0},     # the noiseless fluid model's closed forms
        "jobs": jobs}))


def dp_job(name, slots, c, nbytes, iters=10, overlap=0.0, arrival=0.0):
    return {"name": name, "iterations": iters, "arrival_s": arrival,
            "placement": {"slots": slots},
            "profile": {"phases": [{"op": "compute", "seconds": c},
                                   {"op": "allreduce", "bytes": nbytes, "overlap": overlap}]}}


class Static(Policy):
    """Test policy: fixed decisions."""
    name = "static"

    def __init__(self, **decisions):
        self.d = decisions

    def decide(self, state):
        return {j.name: Decision(j.name, **self.d.get(j.name, {})) for j in state.jobs}


# ---------------------------------------------------------------------------
# water-filling
# ---------------------------------------------------------------------------

def _reference_fill(n, classes, rows, cols, vals, cap):
    """Sequential progressive filling, one bottleneck at a time (slow and obvious)."""
    rates = np.zeros(n)
    resid = dict(enumerate(cap))
    for c in sorted(set(classes)):
        ents = [e for e in range(n) if classes[e] == c]
        use = {e: {} for e in ents}
        for r, k, v in zip(rows, cols, vals):
            if classes[r] == c:
                use[r][k] = use[r].get(k, 0) + v
        frozen, level = set(), 0.0
        while len(frozen) < len(ents):
            w = {}
            for e in ents:
                if e not in frozen:
                    for k, v in use[e].items():
                        w[k] = w.get(k, 0) + v
            t = {k: (resid[k] - sum(use[e].get(k, 0) * rates[e] for e in frozen)) / w[k] - level
                 for k in w}
            k0 = min(t, key=t.get)
            level += max(t[k0], 0.0)
            for e in ents:
                if e not in frozen and k0 in use[e]:
                    rates[e] = level
                    frozen.add(e)
        for e in ents:
            for k, v in use[e].items():
                resid[k] -= v * rates[e]
    return rates


def _random_incidence(rng, n, k, most):
    """Entities 0..n-1 each on 1..``most`` distinct constraints of 0..k-1, 1-3 flows each."""
    rows, cols, vals = [], [], []
    for e in range(n):
        for c in rng.choice(k, size=int(rng.integers(1, min(k, most) + 1)), replace=False):
            rows.append(e)
            cols.append(int(c))
            vals.append(float(rng.integers(1, 4)))
    return rows, cols, vals


def test_waterfill_matches_sequential_filling():
    rng = np.random.default_rng(7)
    for _ in range(60):
        n, k = int(rng.integers(1, 25)), int(rng.integers(1, 15))
        rows, cols, vals = _random_incidence(rng, n, k, 5)
        classes = rng.integers(0, 3, size=n)
        cap = rng.uniform(1, 10, size=k)
        got = waterfill(n, classes, np.array(rows), np.array(cols), np.array(vals), cap)
        want = _reference_fill(n, list(classes), rows, cols, vals, list(cap))
        assert np.allclose(got, want, rtol=1e-9, atol=1e-12)


def test_incremental_waterfill_equals_reference():
    """The fast path (reuse the previous allocation below the first level an added or removed
    entity can change) gives the reference allocation on random instances, through chains of
    updates, with one or several classes, ties (equal capacities) and zero-capacity links."""
    rng = np.random.default_rng(11)
    checked_fast = 0
    for trial in range(150):
        k = int(rng.integers(1, 12))
        ncls = 1 if trial % 2 == 0 else 3
        cap = rng.uniform(1, 10, size=k)
        if trial % 5 == 1:
            cap = np.round(cap)                       # ties
        if trial % 7 == 3:
            cap[0] = 0.0                              # a failed link
        ents = []                                     # (class, {col: count})

        def new_ent():
            use = {}
            for c in rng.choice(k, size=int(rng.integers(1, min(k, 4) + 1)), replace=False):
                use[int(c)] = float(rng.integers(1, 4))
            return int(rng.integers(0, ncls)), use

        def coo(es):
            rows, cols, vals = [], [], []
            for e, (_, use) in enumerate(es):
                for c, v in sorted(use.items()):
                    rows.append(e), cols.append(c), vals.append(v)
            return (np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64),
                    np.array(vals), np.array([c for c, _ in es]))

        ents = [new_ent() for _ in range(int(rng.integers(1, 20)))]
        rows, cols, vals, classes = coo(ents)
        rates = waterfill(len(ents), classes, rows, cols, vals, cap)
        for _ in range(6):
            removed = []
            for _ in range(int(rng.integers(0, 3))):
                if len(ents) > 1:
                    i = int(rng.integers(0, len(ents)))
                    removed.append((float(rates[i]), ents[i][0]))
                    ents.pop(i)
                    rates = np.delete(rates, i)
            n_add = int(rng.integers(0, 3))
            ents += [new_ent() for _ in range(n_add)]
            prev = np.concatenate([rates, np.zeros(n_add)])
            is_new = np.zeros(len(ents), dtype=bool)
            is_new[len(ents) - n_add:] = True
            rows, cols, vals, classes = coo(ents)
            got = waterfill_update(len(ents), classes, rows, cols, vals, cap, prev, is_new, removed)
            want = _reference_fill(len(ents), list(classes), list(rows), list(cols), list(vals),
                                   list(cap))
            assert np.allclose(got, want, rtol=1e-9, atol=1e-12), (trial, got, want)
            full = waterfill(len(ents), classes, rows, cols, vals, cap)
            assert np.allclose(got, full, rtol=1e-9, atol=1e-12)
            checked_fast += 1
            rates = got
    assert checked_fast > 500


def _reference_guaranteed(n, classes, rows, cols, vals, cap, n_links, share):
    """The two stages of a guaranteed share told apart: every lower-class entity filled
    against its class's share of each link (one sequential filling), then strict priority
    over what is left, each entity's increment added."""
    top = min(classes[e] for e in set(rows))
    key = {}
    g_rows, g_cols, g_vals, g_cap = [], [], [], []
    for r, k, v in zip(rows, cols, vals):
        if classes[r] == top:
            continue
        for kk, c in [(("link", k), cap[k])] + ([(("share", classes[r], k), share * cap[k])]
                                                 if k < n_links else []):
            if kk not in key:
                key[kk] = len(g_cap)
                g_cap.append(c)
            g_rows.append(r)
            g_cols.append(key[kk])
            g_vals.append(v)
    lower = sorted(set(g_rows))
    pos = {e: i for i, e in enumerate(lower)}
    base = np.zeros(n)
    if lower:
        base[lower] = _reference_fill(len(lower), [0] * len(lower), [pos[r] for r in g_rows],
                                      g_cols, g_vals, g_cap)
    resid = list(cap)
    for r, k, v in zip(rows, cols, vals):
        resid[k] -= v * base[r]
    return base + _reference_fill(n, list(classes), rows, cols, vals, [max(x, 0.0) for x in resid])


@pytest.mark.parametrize("compiled", [False, True])
def test_guaranteed_shares_match_the_two_stages(compiled, monkeypatch):
    import simulation.waterfill as wf
    if compiled:     # the compiled filling at every size (simulation.wfkernel)
        monkeypatch.setattr(wf, "KERNEL_MIN_NNZ", 0)
    rng = np.random.default_rng(11)
    for case in range(60):
        n, k = int(rng.integers(2, 20)), int(rng.integers(2, 12))
        rows, cols, vals = _random_incidence(rng, n, k, 4)
        classes = rng.integers(0, 4, size=n)
        cap = rng.uniform(1, 10, size=k)
        n_links = k - int(rng.integers(0, 2))           # the last constraint may be virtual
        share = [0.05, 0.1, 0.25][case % 3]
        got = waterfill_guaranteed(n, classes, np.array(rows), np.array(cols), np.array(vals),
                                   cap, n_links, share)
        want = _reference_guaranteed(n, list(classes), rows, cols, vals, list(cap), n_links, share)
        assert np.allclose(got, want, rtol=1e-9, atol=1e-12), case
        load = np.bincount(cols, weights=got[rows] * np.array(vals), minlength=k)
        assert np.all(load <= cap * (1 + 1e-9))
        # no share: strict priority itself
        strict = waterfill(n, classes, np.array(rows), np.array(cols), np.array(vals), cap)
        assert np.array_equal(waterfill_guaranteed(n, classes, np.array(rows), np.array(cols),
                                                   np.array(vals), cap, n_links, 0.0), strict)


def test_guaranteed_share_is_kept_and_lent():
    one = dict(rows=np.array([0, 1]), cols=np.array([0, 0]), vals=np.array([1.0, 1.0]))
    # both backlogged on one link: the lower class keeps its share
    assert np.allclose(waterfill_guaranteed(2, np.array([0, 1]), **one, capacity=np.array([10.0]),
                                            n_links=1, share=0.1), [9.0, 1.0])
    # the higher class bounded elsewhere (constraint 1): the lower class takes what it leaves
    r = waterfill_guaranteed(2, np.array([0, 1]), np.array([0, 0, 1]), np.array([0, 1, 0]),
                             np.array([1.0, 1.0, 1.0]), np.array([10.0, 3.0]), 1, 0.1)
    assert np.allclose(r, [3.0, 7.0])
    # every lower class keeps its own share; classes are ranked among those present
    r = waterfill_guaranteed(3, np.array([1, 2, 3]), np.array([0, 1, 2]), np.array([0, 0, 0]),
                             np.array([1.0, 1.0, 1.0]), np.array([10.0]), 1, 0.1)
    assert np.allclose(r, [8.0, 1.0, 1.0])


def test_waterfill_priority_and_counts():
    # entity 0: 2 flows on link 0; entity 1: 1 flow: per-flow fairness gives 2/3 vs 1/3
    r = waterfill(2, np.array([0, 0]), np.array([0, 1]), np.array([0, 0]), np.array([2.0, 1.0]),
                  np.array([9.0]))
    assert np.allclose(r, [3.0, 3.0])           # rate per flow: 9 / 3 flows
    # strict priority: class 0 takes everything it can use
    r = waterfill(2, np.array([1, 0]), np.array([0, 1, 1]), np.array([0, 0, 1]),
                  np.array([1.0, 1.0, 1.0]), np.array([10.0, 4.0]))
    assert np.allclose(r, [6.0, 4.0])


# ---------------------------------------------------------------------------
# closed forms
# ---------------------------------------------------------------------------

def test_one_job_alone_is_analytical():
    # 4 ranks alternating racks: every ring edge crosses, 2 flows share each uplink
    c, m = 0.03, 200e6
    rs = scenario([dp_job("a", ["r0h0", "r1h0", "r0h1", "r1h1"], c, m, iters=5)])
    res = simulate(rs, None)
    per_flow = 2 * 3 / 4 * m
    rate = min(100 * GB, 100 * GB / 2)
    want = c + per_flow / rate
    for t in res.iteration_times("a"):
        assert t == pytest.approx(want, rel=1e-9)
    s = res.summary_by_job()["a"]
    assert s["slowdown_vs_isolated"] == pytest.approx(1.0)
    assert s["mean_comm_s"] == pytest.approx(per_flow / rate)
    assert s["jct_s"] == pytest.approx(5 * want)


def test_overlap_starts_collective_inside_compute():
    c, m, o = 0.05, 100e6, 0.6
    rs = scenario([dp_job("a", ["r0h0", "r1h0"], c, m, iters=3, overlap=o)])
    comm = m / (100 * GB)                # n=2: each rank sends M
    want = max(c, (1 - o) * c + comm)
    for t in simulate(rs, None).iteration_times("a"):
        assert t == pytest.approx(want, rel=1e-9)


def test_two_identical_jobs_fair_share():
    c, m = 0.02, 300e6
    b = m / (100 * GB)
    rs = scenario([dp_job("a", ["r0h0", "r1h0"], c, m), dp_job("b", ["r0h1", "r1h1"], c, m)])
    for pol in (None, Static()):
        res = simulate(rs, pol)
        for j in "ab":
            for t in res.iteration_times(j):
                assert t == pytest.approx(c + 2 * b, rel=1e-9)
            assert res.summary_by_job()[j]["slowdown_vs_isolated"] == pytest.approx((c + 2 * b) / (c + b))


def test_strict_priority_pair_alternates():
    c, m = 0.05, 300e6                   # c >= b/C: they settle into alternation
    b = m / (100 * GB)
    assert c >= b
    rs = scenario([dp_job("a", ["r0h0", "r1h0"], c, m), dp_job("b", ["r0h1", "r1h1"], c, m)])
    res = simulate(rs, Static(a={"priority": 0}, b={"priority": 1}))
    ta, tb = res.iteration_times("a"), res.iteration_times("b")
    assert all(t == pytest.approx(c + b, rel=1e-9) for t in ta)
    assert tb[0] == pytest.approx(c + 2 * b, rel=1e-9)      # waits once for a
    assert all(t == pytest.approx(c + b, rel=1e-9) for t in tb[1:])


def test_guaranteed_share_slows_the_high_class_by_exactly_its_share():
    # the pair of test_strict_priority_pair_alternates on a cluster whose lower class keeps
    # g of the link: while both send, a gets (1 - g) C and b g C; then b gets all of it
    c, m, g = 0.05, 300e6, 0.2
    b = m / (100 * GB)
    rs = scenario([dp_job("a", ["r0h0", "r1h0"], c, m), dp_job("b", ["r0h1", "r1h1"], c, m)],
                  guarantee=g)
    res = simulate(rs, Static(a={"priority": 0}, b={"priority": 1}))
    ta, tb = res.iteration_times("a"), res.iteration_times("b")
    assert ta[0] == pytest.approx(c + b / (1 - g), rel=1e-9)
    assert tb[0] == pytest.approx(c + 2 * b, rel=1e-9)        # the link never idles
    strict = simulate(scenario([dp_job("a", ["r0h0", "r1h0"], c, m),
                                dp_job("b", ["r0h1", "r1h1"], c, m)], guarantee=0.0),
                      Static(a={"priority": 0}, b={"priority": 1}))
    assert strict.iteration_times("a")[0] == pytest.approx(c + b, rel=1e-9)


def test_strict_priority_pair_short_compute():
    # c < b/C: the high class is never slowed, the low class gets the gaps only
    c, m = 0.01, 300e6
    b = m / (100 * GB)
    rs = scenario([dp_job("a", ["r0h0", "r1h0"], c, m, iters=8),
                   dp_job("b", ["r0h1", "r1h1"], c, m, iters=8)])
    res = simulate(rs, Static(a={"priority": 0}, b={"priority": 1}))
    assert all(t == pytest.approx(c + b, rel=1e-9) for t in res.iteration_times("a"))
    # b only sends while a computes: c of every c+b period -> b needs b/c periods of a
    jb = res.summary_by_job()["b"]["jct_s"]
    ja = res.summary_by_job()["a"]["jct_s"]
    assert jb > ja


def test_rate_cap_and_spine_decisions_enforced():
    c, m = 0.02, 300e6
    b = m / (100 * GB)
    rs = scenario([dp_job("a", ["r0h0", "r1h0"], c, m)])
    res = simulate(rs, Static(a={"rate_caps_gbps": {"tor0>sp0": 25.0}}))
    # the cap binds from the first epoch (t=0) on the r0->r1 direction
    for t in res.iteration_times("a"):
        assert t == pytest.approx(c + m / (25 * GB), rel=1e-9)
    # two spines: on separate spines two jobs do not meet
    rs2 = scenario([dp_job("a", ["r0h0", "r1h0"], c, m), dp_job("b", ["r0h1", "r1h1"], c, m)],
                   spines=2)
    res = simulate(rs2, Static(a={"spine": 0}, b={"spine": 1}))
    for j in "ab":
        assert all(t == pytest.approx(c + b, rel=1e-9) for t in res.iteration_times(j))
    res = simulate(rs2, Static(a={"spine": 1}, b={"spine": 1}))
    assert all(t == pytest.approx(c + 2 * b, rel=1e-9) for t in res.iteration_times("a"))


def test_shift_applied_once_per_new_value():
    c, m = 0.02, 300e6
    b = m / (100 * GB)
    rs = scenario([dp_job("a", ["r0h0", "r1h0"], c, m, iters=20)], epoch=0.1)
    res = simulate(rs, Static(a={"shift_s": 0.013}))   # same value every epoch
    s = res.summary_by_job()["a"]
    assert s["jct_s"] == pytest.approx(20 * (c + b) + 0.013, rel=1e-9)


def test_measured_view_estimates_period_and_bytes():
    c, m = 0.03, 200e6
    b = m / (100 * GB)
    seen = []

    class Recorder(Policy):
        name = "rec"

        def decide(self, state):
            seen.append({j.name: (j.period_s, dict(j.pair_bytes)) for j in state.jobs})
            return {}

    rs = scenario([dp_job("a", ["r0h0", "r1h0"], c, m, iters=60)], epoch=0.5)
    simulate(rs, Recorder())
    assert seen[0]["a"][0] is None                  # declared before any measurement
    period, pairs = seen[2]["a"]
    assert period == pytest.approx(c + b, rel=0.05)
    assert pairs[("r0h0", "r1h0")] == pytest.approx(m, rel=0.1)


def _burn(s):
    """Spend ``s`` seconds of this thread's CPU time (decision time is CPU time)."""
    t0 = time.thread_time()
    while time.thread_time() - t0 < s:
        pass


def test_decision_timeout_drops_and_stops_calling():
    calls = []

    class Slow(Policy):
        name = "slow"

        def decide(self, state):
            calls.append(1)
            _burn(0.3)
            return {j.name: Decision(j.name, priority=3) for j in state.jobs}

    rs = scenario([dp_job("a", ["r0h0", "r1h0"], 0.02, 100e6, iters=30)], epoch=0.05)
    res = simulate(rs, Slow(), SimConfig(decision_timeout_s=0.05))
    assert len(calls) == 1
    assert res.epochs[0]["status"].startswith("timeout")
    assert res.decisions == []
    assert res.stats["jobs_finished"] == 1


def test_decision_time_is_cpu_time_not_wall_time():
    """A decision that waits (wall time, no CPU: a loaded or paused machine) is not timed out,
    and its recorded decision time is its CPU time."""
    class Waits(Policy):
        name = "waits"

        def decide(self, state):
            time.sleep(0.1)
            return {j.name: Decision(j.name, priority=1) for j in state.jobs}

    rs = scenario([dp_job("a", ["r0h0", "r1h0"], 0.02, 100e6, iters=10)], epoch=0.05)
    res = simulate(rs, Waits(), SimConfig(decision_timeout_s=0.05, decision_budget_s=0.08))
    assert all(e["status"] == "ok" for e in res.epochs)
    assert len(res.epochs) > 2
    assert not res.stats["policy_disabled"]


# ---------------------------------------------------------------------------
# determinism, generators, topologies
# ---------------------------------------------------------------------------

def test_same_seed_same_results():
    spec = leaf_spine(4, 4, 2, gpus_per_host=4)
    a = generate(spec, 10, iterations=4, seed=5, placement="fragmented", arrival="poisson",
                 mean_interarrival_s=0.2)
    b = generate(spec, 10, iterations=4, seed=5, placement="fragmented", arrival="poisson",
                 mean_interarrival_s=0.2)
    assert dump_scenario(a) == dump_scenario(b)
    c = generate(spec, 10, iterations=4, seed=6, placement="fragmented")
    assert dump_scenario(a) != dump_scenario(c)
    r1 = simulate(resolve(a), Static(), SimConfig(isolated=False))
    r2 = simulate(resolve(b), Static(), SimConfig(isolated=False))
    assert r1.iterations == r2.iterations
    assert r1.link_bins == r2.link_bins


def test_generated_placements_fit_and_differ():
    spec = leaf_spine(4, 4, 2, gpus_per_host=8)
    cl = Cluster(spec)
    for pl in ("packed", "first-fit", "fragmented"):
        sc = generate(spec, 12, iterations=2, seed=1, placement=pl)
        rs = resolve(sc)
        slots = [(w.host, w.gpu) for j in rs.jobs for w in j.workers]
        assert len(slots) == len(set(slots)) <= cl.num_gpus
        if pl == "packed":
            # a job of whole hosts sits in one rack when it fits in one
            for j in rs.jobs:
                if len(j.workers) % 8 == 0 and len(j.workers) <= 32:
                    assert len(j.racks(cl)) == 1


def test_arrivals_from_trace_and_poisson():
    import random
    t = arrivals(50, "openb", random.Random(1), mean_interarrival_s=2.0)
    assert t[0] == 0.0 and all(b >= a for a, b in zip(t, t[1:]))
    p = arrivals(2000, "poisson", random.Random(1), mean_interarrival_s=0.5)
    assert np.mean(np.diff(p)) == pytest.approx(0.5, rel=0.1)


def test_lingjun_cluster():
    spec = lingjun_cluster()
    cl = Cluster(spec)
    assert spec.racks == 119 and spec.spines == 3 and cl.num_hosts == 847
    sizes = spec.rack_sizes()
    assert max(sizes) == 8 and sizes.count(8) == 68 and sizes.count(2) == 3
    assert cl.num_gpus == 847 * 8
    assert lingjun_racks()[0][:2] == ("P8", "S1")
    s2 = lingjun_cluster(gpus_per_host=4, host_link_gbps=100, uplink_gbps=50)
    assert s2.gpus_per_host == 4 and s2.uplink_gbps == 50


def test_link_down_reroutes_to_a_live_spine():
    from workloads.cluster import default_spine
    c, m = 0.02, 300e6
    b = m / (100 * GB)
    sp = default_spine("r0h0", "r1h0", 2)
    rs = resolve(parse_scenario({
        "name": "f", "backend": "simulation",
        "cluster": {"racks": 2, "hosts_per_rack": 1, "spines": 2, "host_link_gbps": 100,
                    "uplink_gbps": 100},
        "jobs": [dp_job("a", ["r0h0", "r1h0"], c, m, iters=5)],
        "simulation": {"compute_jitter": 0.0},
        "events": [{"at_s": 0.0, "kind": "link-down", "link": f"tor0-sp{sp}"}]}))
    res = simulate(rs, None)
    assert all(t == pytest.approx(c + b, rel=1e-9) for t in res.iteration_times("a"))
    assert not [r for r in res.link_bins if r["link"] in (f"tor0>sp{sp}", f"sp{sp}>tor0")]
    assert [r for r in res.link_bins if r["link"] == f"tor0>sp{1 - sp}"]


def test_controller_restart_clears_decisions_for_a_while():
    c, m = 0.05, 300e6
    b = m / (100 * GB)
    rs = resolve(parse_scenario({
        "name": "r", "backend": "simulation",
        "cluster": {"racks": 2, "hosts_per_rack": 2, "spines": 1, "host_link_gbps": 100,
                    "uplink_gbps": 100},
        "emulation": {"epoch_s": 0.1, "time_scale": 1.0},
        "jobs": [dp_job("a", ["r0h0", "r1h0"], c, m, iters=40)],
        "simulation": {"compute_jitter": 0.0},
        "events": [{"at_s": 1.0, "kind": "controller-restart", "down_s": 0.5}]}))
    res = simulate(rs, Static(a={"rate_caps_gbps": {"tor0>sp0": 25.0}}))
    st = {e["time_s"]: e["status"] for e in res.epochs}
    assert any(v == "controller down" for k, v in st.items() if 1.0 < k < 1.5)
    assert st[min(k for k in st if k >= 1.5)] == "ok"
    assert not [d for d in res.decisions if 1.0 < d["time_s"] < 1.5]
    ta = res.iteration_times("a")
    # capped, except while the restarted controller has not decided yet
    assert max(ta) == pytest.approx(c + m / (25 * GB), rel=1e-9)
    assert min(ta) == pytest.approx(c + b, rel=1e-9)


def test_fair_policy_equals_no_controller():
    spec = leaf_spine(2, 4, 2, gpus_per_host=4)
    sc = generate(spec, 6, iterations=4, seed=3, placement="fragmented")
    rs = resolve(sc)
    from scheduling import get_policy
    a = simulate(rs, None, SimConfig(isolated=False))
    b = simulate(rs, get_policy("fair"), SimConfig(isolated=False))
    assert [r[:3] for r in a.iterations] == [r[:3] for r in b.iterations]
    assert np.allclose([r[6] for r in a.iterations], [r[6] for r in b.iterations], rtol=1e-9)


def test_decision_budget_stops_calling():
    calls = []

    class Slowish(Policy):
        name = "slowish"

        def decide(self, state):
            calls.append(1)
            _burn(0.02)
            return {}

    rs = scenario([dp_job("a", ["r0h0", "r1h0"], 0.02, 100e6, iters=40)], epoch=0.02)
    res = simulate(rs, Slowish(), SimConfig(decision_budget_s=0.05))
    assert 3 <= len(calls) <= 4
    assert any("budget spent" in e["status"] for e in res.epochs)
    assert res.stats["policy_disabled"] and res.stats["jobs_finished"] == 1
