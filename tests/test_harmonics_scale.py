"""Harmonics at scale: incremental epochs (warm start, racks whose inputs did not change
kept), the fair-sharing guard, and the summaries' wire form."""
import copy
import json

import numpy as np
import pytest

from scheduling.bench import mix_scenario
from scheduling import get_policy, state_from_scenario
from scheduling.harmonics import RackSummary
from workloads.scenario import resolve

from test_schedulers import _check_consistent, _next_epoch


def _fragmented(racks=6, jobs=24, seed=1):
    from simulation.workload import generate
    from workloads.cluster import ClusterSpec
    spec = ClusterSpec(racks=racks, hosts_per_rack=8, spines=4, gpus_per_host=8,
                       host_link_gbps=200.0, uplink_gbps=200.0, gpu="A100")
    return state_from_scenario(resolve(generate(spec, jobs, seed=seed, placement="fragmented")))


@pytest.mark.parametrize("which", ["fragmented", "mix-256"])
def test_warm_epoch_moves_only_changed_jobs_and_keeps_unchanged_racks(which):
    st = _fragmented() if which == "fragmented" else state_from_scenario(resolve(mix_scenario(256)))
    h = get_policy("harmonics")
    d0 = h.decide(st)
    cross = [j for j in st.jobs if j.spans_racks and d0[j.name].reason.count("coordinator")]
    k = next(i for i, j in enumerate(st.jobs) if j.name == cross[len(cross) // 2].name)
    changed = st.jobs[k]
    nxt = _next_epoch(st, k=k, factor=1.5)
    d1 = h.decide(nxt)
    s = h.stats
    assert s["warm"] == 1 and s["reused"] == 0
    # every rack the changed job does not touch keeps its Local Scheduler
    touched = {r for r, v in h.rack_views.items() if changed.name in v}
    assert s["racks_reused"] == s["racks"] - len(touched)
    _check_consistent(nxt, h, d1)
    # the rack-spanning jobs of the racks the changed job does not touch hold their decisions
    held = [j for j in cross if not set(j.racks) & set(changed.racks)]
    for j in held:
        assert (d1[j.name].priority, d1[j.name].spine) == (d0[j.name].priority, d0[j.name].spine)
    # and a policy without warm starts solves the epoch from scratch
    cold = get_policy("harmonics", warm=False)
    cold.decide(st)
    cold.decide(nxt)
    assert cold.stats["warm"] == 0


def test_an_unsettled_warm_descent_goes_on_in_the_next_epochs():
    # a warm epoch runs one descent round; while its last round still moved a job, the next
    # carry_epochs epochs go on with the same movable jobs even though no input changed,
    # then the unchanged state is answered from the last decisions again
    st = _fragmented(seed=2)
    h = get_policy("harmonics")
    h.decide(st)
    cross = [j for j in st.jobs if j.spans_racks]
    k = next(i for i, j in enumerate(st.jobs) if j.name == cross[len(cross) // 2].name)
    nxt = _next_epoch(st, k=k, factor=1.5)
    h.decide(nxt)
    assert h.stats["warm"] == 1 and h.stats["rounds"] == h.config.warm_rounds == 1
    assert h.stats["carried"] == 0
    for _ in range(h.config.carry_epochs):
        d = h.decide(nxt)
        assert h.stats["reused"] == 0 and h.stats["carried"] == 1
        _check_consistent(nxt, h, d)
    again = h.decide(nxt)
    assert h.stats["reused"] == 1 and again == d
    # without carrying, the unchanged state is answered at once
    h0 = get_policy("harmonics", carry_epochs=0)
    h0.decide(st)
    h0.decide(nxt)
    h0.decide(nxt)
    assert h0.stats["reused"] == 1


def test_warm_epoch_with_a_departure_and_an_arrival_is_consistent():
    st = _fragmented(seed=2)
    h = get_policy("harmonics")
    h.decide(st)
    import copy
    nxt = copy.deepcopy(st)
    nxt.epoch += 1
    gone = next(j for j in nxt.jobs if j.spans_racks)
    nxt.jobs = [j for j in nxt.jobs if j is not gone]
    d = h.decide(nxt)
    assert h.stats["warm"] == 1 and gone.name not in d
    _check_consistent(nxt, h, d)
    # back to the first state: the departed job is new again and is decided
    d2 = h.decide(st)
    assert gone.name in d2 and "coordinator" in d2[gone.name].reason
    _check_consistent(st, h, d2)


def test_rack_summary_costs_cross_the_wire_exactly():
    st = _fragmented(racks=4, jobs=16, seed=3)
    h = get_policy("harmonics")
    h.decide(st)
    sums = [m for m in h.messages if '"uplink_demand_gbps"' in m]
    assert sums
    for m in sums:
        s = RackSummary.from_json(m)
        assert s.to_json() == m          # the matrix is packed exactly (float64)
        for j in s.jobs:
            c = j.costs()
            assert c.shape == (len(j.options), 2 + len(j.cross))
            assert np.all(np.isfinite(c)) and np.all(c[:, 0] > 0)
            assert json.loads(m)["jobs"]


def test_joint_stage_never_worse_than_fair():
    """Small components are refined in the component view (the model): on widened cases the
    result is never worse than fair sharing under the model, in a cold and in a warm epoch."""
    from scheduling.cases import wide_case
    from scheduling.model import predict
    ran = 0
    for seed in range(30, 42):
        st = state_from_scenario(resolve(wide_case(seed)))
        h = get_policy("harmonics", reuse=False)
        d = h.decide(st)
        ran += h.stats["joint_components"]
        fair = predict(st, get_policy("fair").decide(st)).mean_slowdown
        assert predict(st, d).mean_slowdown <= fair * (1 + 1e-6), seed
        _check_consistent(st, h, d)
        # a warm epoch on the same state starts from this plan: still never worse than fair
        d2 = h.decide(st)
        assert h.stats["warm"] == 1
        assert predict(st, d2).mean_slowdown <= fair * (1 + 1e-6), seed
        _check_consistent(st, h, d2)
    assert ran > 0


def test_warm_epoch_with_arrivals_in_small_components():
    """A job arriving next to racks kept from the last epoch: the joint stage's lead rack may
    be a kept one, whose own model predates the new job; every warm epoch must decide every
    job, consistently (the regression: a KeyError on the new job)."""
    import copy
    from scheduling.cases import wide_case
    checked = 0
    for seed in range(0, 10):
        st = state_from_scenario(resolve(wide_case(seed)))
        for k in range(min(3, len(st.jobs))):
            first = copy.deepcopy(st)
            first.jobs = [j for i, j in enumerate(st.jobs) if i != k]
            h = get_policy("harmonics")
            h.decide(first)
            nxt = copy.deepcopy(st)
            nxt.epoch = 1
            d = h.decide(nxt)
            assert set(d) == {j.name for j in st.jobs}
            _check_consistent(nxt, h, d)
            checked += h.stats["warm"]
    assert checked > 0


def test_wide_jobs_are_offered_the_highest_class_only():
    """The wide-job rule: a job on more than ``wide_span`` racks is offered class 0 only, in
    every stage; the others keep every class."""
    st = _fragmented()
    h = get_policy("harmonics", wide_span=2, wide_order=0)
    d = h.decide(st)
    wide = {j.name for j in st.jobs if len(j.racks) > 2}
    assert wide and any(len(j.racks) <= 2 and j.spans_racks for j in st.jobs)
    for n in wide:
        assert d[n].priority == 0
        for view in h.rack_views.values():
            assert n not in view or view[n].priority == 0
    _check_consistent(st, h, d)


def _left(st, **left):
    st = copy.deepcopy(st)
    for j in st.jobs:
        j.iterations_left = left.get(j.name)
    return st


def test_wide_order_rule_lowers_the_long_wide_job_and_its_narrow_neighbours():
    # S and L both span 6 racks (wide) and share every host link; L's iteration is far more
    # than twice S's and S will end first (100 iterations left each), so the rule offers L
    # class 1 only and N (2 racks, on L's host links) classes 1..K-1; S stays in class 0.
    # Off (wide_order=0): the wide jobs are both in 0.  Without the joint stage, whose
    # fair-sharing start (the guard) may win in so small a component
    from scheduling.cases import _case
    hosts = [f"r{r}h0" for r in range(6)]
    sc = _case("wide-order", 6, 2, 1, 3, [
        ("S", hosts, 0.005, 30e6), ("L", hosts, 0.05, 300e6),
        ("N", ["r0h0", "r1h0"], 0.02, 100e6)])
    st = _left(state_from_scenario(resolve(sc)), S=100, L=100, N=100)
    h = get_policy("harmonics", joint_jobs=0)
    d = h.decide(st)
    assert h.stats["wide_low"] == 1
    assert (d["S"].priority, d["L"].priority) == (0, 1) and d["N"].priority >= 1
    _check_consistent(st, h, d)
    views = [L for _, L in h._prev[1].values()]      # the epoch's Local Schedulers
    assert views and all(list(L.classes("L")) == [1] for L in views)
    assert all(list(L.classes("N")) == list(range(1, st.num_classes)) for L in views if "N" in L.jobs)
    off = get_policy("harmonics", joint_jobs=0, wide_order=0)
    d0 = off.decide(st)
    assert off.stats["wide_low"] == 0 and d0["S"].priority == d0["L"].priority == 0
    # L goes below S only while S will end first: not when L's remaining work is the
    # smaller (3 iterations left against S's 100), nor when no end is known (None: a
    # time-bounded run, where a long job held below would lose the short one's bursts for good)
    for left in ({"S": 100, "L": 3, "N": 100}, {}):
        h2 = get_policy("harmonics", joint_jobs=0)
        d2 = h2.decide(_left(st, **left))
        assert h2.stats["wide_low"] == 0 and d2["S"].priority == d2["L"].priority == 0, left
        # wide_order_ends=False: the rule whatever the ends, as before
        h3 = get_policy("harmonics", joint_jobs=0, wide_order_ends=False)
        d3 = h3.decide(_left(st, **left))
        assert h3.stats["wide_low"] == 1 and (d3["S"].priority, d3["L"].priority) == (0, 1)


def test_min_before_is_the_least_over_the_pairs_that_end_sooner():
    from scheduling.harmonics.classrules import _min_before
    rng = np.random.default_rng(3)
    for _ in range(30):
        n = int(rng.integers(1, 40))
        links = rng.integers(0, 5, n)
        rem = rng.choice([1.0, 2.0, 3.0, np.inf], n)        # ties and unknown ends
        t = rng.random(n)
        want = [min([t[k] for k in range(n) if links[k] == links[i] and rem[k] < rem[i]],
                    default=np.inf) for i in range(n)]
        assert _min_before(links, rem, t).tolist() == want


def test_compiled_proxy_gives_the_numpy_proxys_decisions(monkeypatch):
    """The compiled proxy (``proxykernel``) computes the numpy expression's figures in the
    same order: the same decisions, cold and warm."""
    import scheduling.harmonics.rackview as rv
    from scheduling.harmonics import proxykernel
    if not proxykernel.available():
        pytest.skip("numba missing or HARMONICS_NO_JIT=1")
    st = _fragmented(seed=2)
    out = []
    for jit in (True, False):
        monkeypatch.setattr(rv, "proxy_jit_available", lambda jit=jit: jit)
        h = get_policy("harmonics")
        d0 = h.decide(st)
        assert h.stats["proxy_groups"] > 0
        d1 = h.decide(_next_epoch(st, k=len(st.jobs) // 2, factor=1.5))
        out.append(([v.to_dict() for _, v in sorted(d0.items())],
                    [v.to_dict() for _, v in sorted(d1.items())]))
    assert out[0] == out[1]


def test_sparse_proxy_kernel_is_the_dense_one_bit_for_bit():
    """``proxykernel.score`` (compiled, visiting only the links a row uses) gives the dense
    reference loop's (``_score``, run as Python) figures bit for bit: sparse and full rows,
    loads above 1 (the free-fraction floor), rows without traffic, the held assignment."""
    import numpy as np
    from scheduling.harmonics import proxykernel as pk
    if not pk.available():
        pytest.skip("numba missing or HARMONICS_NO_JIT=1")
    rng = np.random.default_rng(0)
    for trial in range(200):
        R, L, J, K, O = (int(rng.integers(1, n)) for n in (30, 12, 15, 5, 20))
        TT = rng.random((R, L)) * (rng.random((R, L)) < 0.3 if trial % 5 else 1.0)
        iso = rng.random(R) + 0.5
        TU = TT / iso[:, None] * rng.choice([1.0, 5.0, 20.0], size=(R, 1))
        args = (TU, TT, rng.random(R) - 0.2, rng.integers(0, R, J), rng.integers(0, K, J),
                rng.random(J), rng.random(J) + 0.1, rng.integers(-1, J, O),
                rng.integers(0, R, O), rng.integers(0, K, O), K, 0.05, 1e6)
        assert pk.score(*args).tobytes() == pk._score(*args).tobytes()


def test_short_job_rule_keeps_a_short_job_above_a_long_burst():
    # A's whole iteration (5 ms compute + 2.4 ms ring) is shorter than a quarter of B's 48 ms
    # of communication on the uplink they share: under the rule A is offered class 0 only
    from scheduling.cases import _case
    sc = _case("short-and-long", 2, 2, 1, 1, [
        ("A", ["r0h0", "r1h0"], 0.005, 30e6), ("B", ["r0h1", "r1h1"], 0.05, 600e6)])
    st = state_from_scenario(resolve(sc))
    h = get_policy("harmonics")
    d = h.decide(st)
    assert h.stats["short_jobs"] == 1 and d["A"].priority == 0
    _check_consistent(st, h, d)
    ruled = [L for _, L in h._prev[1].values()]      # the epoch's Local Schedulers
    off = get_policy("harmonics", short_top=0)
    off.decide(st)
    seen = [L for _, L in off._prev[1].values()]
    assert ruled and seen
    assert all(list(L.classes("A")) == [0] for L in ruled)
    assert all(len(L.classes("B")) == st.num_classes for L in ruled)
    assert off.stats["short_jobs"] == 0
    assert all(len(L.classes("A")) == st.num_classes for L in seen)
