"""Scheduling policies: registry, Crux compression, CASSINI shift search, optimal bounds,
Harmonics consistency."""
import itertools
import json
import random

import numpy as np
import pytest

from scheduling.bench import mix_scenario, quality_cases, random_case
from scheduling import POLICIES, get_policy, state_from_scenario
from scheduling.base import decisions_from_json, decisions_to_json
from scheduling.common import SHIFT_PHASES, shiftable
from scheduling.cassini import (best_link_shifts, circle_units, compatibility,
                                            demand_profile)
from scheduling.crux import (best_cut_for_order, compress_priorities, cut_weight,
                                         random_topological_order)
from scheduling.harmonics import CoordinatorMessage, ProposalReport, RackSummary
from scheduling.harmonics.joint import JointOffer, JointReport
from scheduling.model import predict
from workloads.scenario import resolve


def small_states(n, max_jobs=3, seed0=0):
    return [state_from_scenario(resolve(random_case(seed0 + s, max_jobs))) for s in range(n)]


def test_registry():
    assert set(POLICIES) == {"fair", "optimal", "crux", "cassini", "harmonics"}
    for n in POLICIES:
        assert get_policy(n).name == n
    assert get_policy("optimal", time_limit_s=3).time_limit_s == 3
    with pytest.raises(KeyError):
        get_policy("nope")


def test_every_policy_decides_every_job_and_round_trips_json():
    st = state_from_scenario(resolve(quality_cases()[7]))
    for n in POLICIES:
        d = (get_policy(n, time_limit_s=1.0) if n == "optimal" else get_policy(n)).decide(st)
        assert set(d) == {j.name for j in st.jobs}
        assert all(0 <= x.priority < st.num_classes for x in d.values())
        assert decisions_from_json(decisions_to_json(d)) == d


# ---------------------------------------------------------------- Crux compression

def random_dag(rng, n, p=0.5):
    return [(u, v, round(rng.uniform(0.1, 5.0), 3)) for u in range(n) for v in range(u + 1, n)
            if rng.random() < p]


def brute_force_cut(n, edges, K):
    best = 0.0
    for lv in itertools.product(range(K), repeat=n):
        w = cut_weight(lv, edges)
        if w is not None and w > best:
            best = w
    return best


@pytest.mark.parametrize("seed", range(25))
def test_crux_compression_equals_brute_force(seed):
    rng = random.Random(seed)
    n, K = rng.randint(2, 6), rng.randint(1, 4)
    edges = random_dag(rng, n, rng.uniform(0.2, 0.9))
    # relabel so that node order is not the topological order
    perm = list(range(n))
    rng.shuffle(perm)
    edges = [(perm[u], perm[v], w) for u, v, w in edges]
    bf = brute_force_cut(n, edges, K)
    levels, w = compress_priorities(n, edges, K, exhaustive=True)
    assert w == pytest.approx(bf)
    assert cut_weight(levels, edges) == pytest.approx(w)
    assert max(levels) < K
    # m = 10 random orders: a valid compression, never above the optimum
    lv10, w10 = compress_priorities(n, edges, K, m=10, seed=seed)
    assert cut_weight(lv10, edges) == pytest.approx(w10)
    assert w10 <= bf + 1e-9
    # the DP over one order is exact among the contiguous splits of that order
    order = random_topological_order(n, edges, rng)
    w1, lv1 = best_cut_for_order(order, edges, K)
    best = 0.0
    for cuts in itertools.combinations(range(1, n), min(K - 1, n - 1)):
        for k in range(0, len(cuts) + 1):
            for sub in itertools.combinations(cuts, k):
                bounds = [0, *sub, n]
                lv = [0] * n
                for s in range(len(bounds) - 1):
                    for p in range(bounds[s], bounds[s + 1]):
                        lv[order[p]] = s
                best = max(best, cut_weight(lv, edges))
    assert w1 == pytest.approx(best)
    assert cut_weight(lv1, edges) == pytest.approx(w1)


# ---------------------------------------------------------------- CASSINI

@pytest.mark.parametrize("seed", range(12))
def test_cassini_link_shifts_maximise_compatibility(seed):
    rng = random.Random(seed)
    J = rng.choice([2, 3])
    periods = [rng.choice([0.1, 0.2, 0.3]) for _ in range(J)]
    unit, pu, L = circle_units(periods, angles_per_period=8)
    cap = 1.0
    prof = np.stack([demand_profile(p, rng.uniform(0.3, 0.8) * p, rng.uniform(0.4, 1.0), L)
                     for p in pu])
    s, score = best_link_shifts(prof, pu, cap)
    assert s[0] == 0
    assert compatibility(prof, s, cap) == pytest.approx(score)
    bf = max(compatibility(prof, [0, *rest], cap)
             for rest in itertools.product(*[range(p) for p in pu[1:]]))
    assert score == pytest.approx(bf)
    # the heuristic path (no exhaustive search) is valid and not above the optimum
    s2, score2 = best_link_shifts(prof, pu, cap, exhaustive_limit=0)
    assert score2 <= bf + 1e-12
    assert compatibility(prof, s2, cap) == pytest.approx(score2)


def test_cassini_interleaves_identical_pair():
    st = state_from_scenario(resolve(quality_cases()[0]))
    d = get_policy("cassini").decide(st)
    assert all(x.priority == 0 for x in d.values())
    assert predict(st, d).mean_slowdown == pytest.approx(1.0)


# ---------------------------------------------------------------- optimal

def test_optimal_never_worse_than_other_policies():
    # optimal's space has classes, spines, caps and shift phases; CASSINI's shifts are not on
    # its grid in general, but the grid's interleavings match them on these cases
    states = small_states(14, max_jobs=3)
    for st in states:
        opt = get_policy("optimal", time_limit_s=60)
        d = opt.decide(st)
        assert opt.proven_optimal
        assert "proven_optimal=True" in next(iter(d.values())).reason
        best = predict(st, d).mean_slowdown
        for n in ("fair", "crux", "cassini", "harmonics"):
            assert best <= predict(st, get_policy(n).decide(st)).mean_slowdown + 1e-9, n


def test_optimal_time_limit_is_reported():
    st = state_from_scenario(resolve(quality_cases()[8]))
    opt = get_policy("optimal", time_limit_s=0.0)
    d = opt.decide(st)
    assert opt.proven_optimal is False
    assert "proven_optimal=False" in next(iter(d.values())).reason
    assert set(d) == {j.name for j in st.jobs}


# ---------------------------------------------------------------- Harmonics

def _check_consistent(st, h, d):
    by = {j.name: j for j in st.jobs}
    for name, js in by.items():
        if not js.spans_racks or name not in {n for v in h.rack_views.values() for n in v}:
            continue
        views = [v[name] for v in h.rack_views.values() if name in v]
        assert len(views) >= 2, name                  # every rack it touches holds it
        assert all(v == views[0] for v in views), name
        dec = d[name]
        assert (dec.priority, dec.spine) == (views[0].priority, views[0].spine)
        assert dec.shift_s == pytest.approx(views[0].shift * js.iso_iter_s / SHIFT_PHASES)
        if views[0].cap < 1.0:
            use = {l.id for l in st.cluster.links}
            assert dec.rate_caps_gbps and set(dec.rate_caps_gbps) <= use
        else:
            assert dec.rate_caps_gbps == {}
        assert "coordinator" in dec.reason


@pytest.mark.parametrize("which", ["mix-256", "random"])
def test_harmonics_one_consistent_decision_per_rack_spanning_job(which):
    states = ([state_from_scenario(resolve(mix_scenario(256)))] if which == "mix-256"
              else small_states(10, max_jobs=4, seed0=100))
    for st in states:
        h = get_policy("harmonics")
        d = h.decide(st)
        _check_consistent(st, h, d)
        # the messages really are JSON and carry the coordinator's decision
        assert h.messages
        for m in h.messages:
            obj = json.loads(m)
            if "assignments" in obj:
                msg = CoordinatorMessage.from_json(m)
                for a in msg.assignments:
                    assert a.job in d
            elif "boundary" in obj:
                ProposalReport.from_json(m)
            elif "offer" in obj:
                JointOffer.from_json(m)
            elif "plan" in obj:
                JointReport.from_json(m)
            else:
                RackSummary.from_json(m)
        last = [CoordinatorMessage.from_json(m) for m in h.messages
                if json.loads(m).get("assignments")]
        if last:
            for a in last[-1].assignments:
                assert (d[a.job].priority, d[a.job].spine) == (a.priority, a.spine)


def test_harmonics_large_fragmented_groups_bounded_work_and_consistent():
    """Fragmented placement: every rack's jobs form one interaction group of ~20 rack-spanning
    jobs.  Groups above ``large_group`` are scored with the closed-form proxy: the work is
    bounded by counts (no timing), the decision stays consistent, and says so in its reason."""
    from simulation.workload import generate
    from workloads.cluster import ClusterSpec
    spec = ClusterSpec(racks=6, hosts_per_rack=8, spines=4, gpus_per_host=8,
                       host_link_gbps=200.0, uplink_gbps=200.0, gpu="A100")
    st = state_from_scenario(resolve(generate(spec, 24, seed=1, placement="fragmented")))
    h = get_policy("harmonics")
    d = h.decide(st)
    s = h.stats
    assert s["proxy_groups"] >= 1
    # the model is not run on the large groups (scored with the model, this state needs
    # about 3,700 simulations of groups of up to 12 jobs)
    assert s["simulations"] <= 200 and s["local_evals"] <= 200
    # closed-form scorings: per rack and round at most (passes + 2) x jobs x options
    O = st.num_classes * (st.cluster.spec.spines + 1)
    bound = h.config.max_rounds * (h.config.max_passes + 2) * O * sum(len(v) for v in h.rack_views.values())
    assert 0 < s["proxy_evals"] <= bound
    _check_consistent(st, h, d)
    assert any("closed-form" in x.reason for x in d.values())
    assert set(d) == {j.name for j in st.jobs}


def test_harmonics_reuses_decisions_when_state_unchanged():
    st = state_from_scenario(resolve(mix_scenario(64)))
    h = get_policy("harmonics")
    d1 = h.decide(st)
    d2 = h.decide(st)
    assert h.stats["reused"] == 1 and d1 == d2


def test_harmonics_beats_fair_on_standard_pairs():
    for sc in quality_cases()[:5]:
        st = state_from_scenario(resolve(sc))
        h = predict(st, get_policy("harmonics").decide(st)).mean_slowdown
        f = predict(st, get_policy("fair").decide(st)).mean_slowdown
        assert h <= f + 1e-9, sc.name


def _next_epoch(st, k=None, factor=1.2):
    import copy

    from scheduling.links import isolated_iteration_time
    nxt = copy.deepcopy(st)
    nxt.epoch = st.epoch + 1
    j = nxt.jobs[len(nxt.jobs) // 2 if k is None else k]
    j.compute_s *= factor
    j.iso_iter_s = isolated_iteration_time(j, nxt.cluster)
    return nxt


@pytest.mark.parametrize("which", ["mix-256", "random"])
def test_harmonics_incremental_epoch_equals_cold_solve(which):
    # the evaluator's sub-problem cache is kept across epochs: the next epoch must decide
    # exactly what a cold solve of that epoch decides, and stay consistent
    states = ([state_from_scenario(resolve(mix_scenario(256)))] if which == "mix-256"
              else small_states(6, max_jobs=4, seed0=200))
    for st in states:
        h = get_policy("harmonics", warm=False)   # warm starts: tests/test_harmonics_scale.py
        h.decide(st)
        nxt = _next_epoch(st)
        warm = h.decide(nxt)
        assert h.stats["reused"] == 0
        cold_policy = get_policy("harmonics", incremental=False)
        cold = cold_policy.decide(nxt)
        assert warm == cold
        _check_consistent(nxt, h, warm)
        # and a third epoch back to the first state: same as the first cold solve
        back = h.decide(st)
        assert back == get_policy("harmonics").decide(st)


def test_harmonics_incremental_epoch_simulates_only_changed_subproblems():
    # the rounds' sub-problem cache (the joint stage re-refines the changed job's component
    # in full: tests/test_harmonics_scale.py)
    st = state_from_scenario(resolve(mix_scenario(1024)))
    h = get_policy("harmonics", joint_jobs=0)
    h.decide(st)
    cold_sims = h.stats["simulations"]
    h.decide(_next_epoch(st))
    # the evaluator counts over its lifetime: the increment is what the new epoch simulated
    assert h.stats["simulations"] - cold_sims < cold_sims / 2


def test_coordinator_compounds_own_slowdown_over_racks():
    from scheduling.harmonics import GlobalCoordinator
    P = GlobalCoordinator._product
    # one rack: its view
    assert P([(1.3, 1)], 0.05, 0.1) == pytest.approx(1.3)
    # the blocking by rack-local jobs of two racks is independent: the unblocked fractions
    # multiply.  iso 0.1 = compute 0.05 + comm 0.05; views 1.2 and 1.3 stretch the comm by
    # 1.4 and 1.6: comm 0.05 * 1.4 * 1.6 = 0.112, slowdown (0.05 + 0.112) / 0.1
    assert P([(1.2, 1), (1.3, 2)], 0.05, 0.1) == pytest.approx(1.62)
    # blocking by rack-spanning jobs only (no local peers) is the same in both racks: max
    assert P([(1.2, 0), (1.3, 0)], 0.05, 0.1) == pytest.approx(1.3)
    assert P([(1.2, 1), (1.3, 0)], 0.05, 0.1) == pytest.approx(1.3)
    # never below the worst rack, starvation stays starvation
    assert P([(1.0, 1), (1.0, 1)], 0.05, 0.1) == pytest.approx(1.0)
    assert P([(1e6, 1), (1.1, 1)], 0.05, 0.1) >= 1e6


def test_harmonics_beats_fair_on_shared_hosts():
    # rack-spanning jobs blocked by different rack-local jobs in each rack: the compounded
    # estimate of the Coordinator (not the worst rack) must not pick a worse-than-fair plan
    sc = next(c for c in quality_cases() if c.name == "mix-shared-hosts")
    st = state_from_scenario(resolve(sc))
    h = predict(st, get_policy("harmonics").decide(st)).mean_slowdown
    f = predict(st, get_policy("fair").decide(st)).mean_slowdown
    assert h < f


def test_proposal_stage_reorders_a_cross_rack_cycle():
    """mix-shared-hosts: A and C span both racks, B (rack 0) and D (rack 1) are rack-local,
    neighbours share a host link: a cycle A-B-C-D.  Each rack's own view runs A and C at
    their isolated pace elsewhere and ranks the best plan below the rounds' plan; its halo
    view (the other rack's boundary job as a ghost) does not.  A rack proposes a joint class
    order, the other costs it, the Coordinator accepts it: within 3% of optimal."""
    sc = next(c for c in quality_cases() if c.name == "mix-shared-hosts")
    st = state_from_scenario(resolve(sc))
    # the proposal stage alone (the joint stage, which comes after it, takes this
    # 4-job component to optimal's figure by itself)
    h = get_policy("harmonics", joint_jobs=0)
    d = h.decide(st)
    v = predict(st, d).mean_slowdown
    rounds_only = predict(st, get_policy("harmonics", propose=False, joint_jobs=0
                                         ).decide(st)).mean_slowdown
    opt = get_policy("optimal", time_limit_s=120)
    best = predict(st, opt.decide(st)).mean_slowdown
    assert opt.proven_optimal
    assert h.stats["proposals_accepted"] >= 1
    assert v <= 1.03 * best < rounds_only
    _check_consistent(st, h, d)
    msgs = [json.loads(m) for m in h.messages]
    assert any(m.get("ghosts") for m in msgs) and any(m.get("proposals") for m in msgs)
    assert any(m.get("accepted") for m in msgs)


def test_coordinator_arbitrates_proposals_on_the_racks_views():
    """Gain = total before - total after over the racks that costed a proposal: rack-local
    jobs summed, a rack-spanning job once at its worst rack; at most one proposal per rack;
    a proposal that does not pay is not accepted."""
    from scheduling.harmonics import (Assignment, GlobalCoordinator, Proposal,
                                                  ViewCost)
    A = lambda j, k: Assignment(j, k, None, 1.0)   # noqa: E731
    cur = {"A": A("A", 0), "C": A("C", 1)}
    p0 = Proposal(0, 0, [A("A", 1), A("C", 0)], [("B", 2, 0.0)])
    p1 = Proposal(1, 0, [A("A", 2), A("C", 1)], [("D", 0, 0.0)])
    p2 = Proposal(2, 0, [A("E", 1)], [])
    V = ViewCost
    reports = [
        # rack 0 made p0: B 1.5 -> 1.2, A 1.1 -> 1.3, C 1.2 -> 1.1; and costed p1
        ProposalReport(0, 0, 9, proposals=[p0], costs={
            "0:0": [V(1.5, {"A": 1.1, "C": 1.2}), V(1.2, {"A": 1.3, "C": 1.1})],
            "1:0": [V(1.5, {"A": 1.1, "C": 1.2}), V(1.45, {"A": 1.1, "C": 1.2})]}),
        # rack 1 made p1 and costed p0: D 1.1 -> 1.0, A at its worst rack 1.4 -> 1.2
        ProposalReport(1, 0, 9, proposals=[p1], costs={
            "1:0": [V(1.1, {"A": 1.4, "C": 1.2}), V(1.1, {"A": 1.35, "C": 1.2})],
            "0:0": [V(1.1, {"A": 1.4, "C": 1.2}), V(1.0, {"A": 1.2, "C": 1.2})]}),
        # rack 2's proposal does not pay
        ProposalReport(2, 0, 9, proposals=[p2], costs={"2:0": [V(2.0, {"E": 1.0}),
                                                              V(2.1, {"E": 1.0})]}),
    ]
    new, acc = GlobalCoordinator(1).arbitrate(reports, dict(cur, E=A("E", 0)))
    # p0: before 1.5 + 1.1 + max(1.1, 1.4) + 1.2 = 5.2, after 1.2 + 1.0 + 1.3 + 1.2 = 4.7;
    # p1 gains 0.1 but shares racks 0 and 1 with p0; p2 loses
    assert acc == ["0:0"]
    assert (new["A"].priority, new["C"].priority, new["E"].priority) == (1, 0, 0)
    # each halo view holds a job's blocking in its other racks: worst rack, not compounded
    assert GlobalCoordinator._view_total([V(1.0, {"A": 1.1}), V(2.0, {"A": 1.4})]) == \
        pytest.approx(4.4)


def test_halo_view_equals_the_model_where_it_holds_every_link():
    """In mix-shared-hosts every link of rack 1 that A and C use is shared with D (and the
    reverse with B), so a rack's halo view holds the whole contention: the costs it reports
    for the plan before the proposal stage are the model's slowdowns of that plan."""
    sc = next(c for c in quality_cases() if c.name == "mix-shared-hosts")
    st = state_from_scenario(resolve(sc))
    plan = get_policy("harmonics", propose=False, joint_jobs=0).decide(st)
    model = predict(st, plan).slowdown
    h = get_policy("harmonics")
    h.decide(st)
    reps = [ProposalReport.from_json(m) for m in h.messages if '"boundary"' in m]
    reps = [r for r in reps if r.costs]
    first = min(r.round for r in reps)           # the first proposal round: the plan before
    seen = 0
    for r in (r for r in reps if r.round == first):
        for before, _ in [v for k, v in r.costs.items()][:1]:
            for j, x in before.cross.items():
                assert x == pytest.approx(model[j], rel=1e-6)
            local = {0: "B", 1: "D"}[r.rack]
            assert before.local == pytest.approx(model[local], rel=1e-6)
            seen += 1
    assert seen >= 2


def test_harmonics_lower_bound_pruning_is_exact():
    # the rack's early abandon (a choice whose summed per-job lower bounds reach the
    # incumbent is not evaluated) changes no decision; before the screening runs it may
    # change which options reach the full evaluation (measured: no change on these cases)
    states = small_states(12, max_jobs=4) + [state_from_scenario(resolve(mix_scenario(1024)))]
    for st in states:
        ref = get_policy("harmonics", use_bound=False).decide(st)
        assert get_policy("harmonics", screen_bound=False).decide(st) == ref
    p = get_policy("harmonics", screen_bound=False)
    p.decide(states[-1])
    assert p.stats["pruned"] > 0


def test_harmonics_lower_bound_holds_in_rack_views(monkeypatch):
    # every slowdown a rack's view computes is at least the bound the pruning uses
    import scheduling.harmonics as H
    st = state_from_scenario(resolve(mix_scenario(1024)))
    orig = H.LocalScheduler._slowdowns
    checked = []

    def check(self, group, a, budget=1.0):
        res = orig(self, group, a, budget)
        if budget == 1.0 and not self._is_large(group):
            for n, v in zip(group, res):
                assert v >= self._lb(n, a[n]) * (1.0 - self.config.lb_margin)
                checked.append(v)
        return res
    monkeypatch.setattr(H.LocalScheduler, "_slowdowns", check)
    get_policy("harmonics").decide(st)
    assert len(checked) > 100


# ---------------------------------------------------------------- start-time shifts

def test_shiftable_rule_needs_a_tied_link_neighbour():
    a, b, c = frozenset({1}), frozenset({1, 2}), frozenset({2})
    # one class: every job meets another on a link
    assert shiftable([0, 0, 0], [a, b, c]) == [0, 1, 2]
    # different classes, or no shared link: no shifts
    assert shiftable([0, 1, 2], [a, b, c]) == []
    assert shiftable([0, 0], [a, c]) == []
    assert shiftable([0, 0, 1], [a, b, c]) == [0, 1]


def test_shifts_interleave_a_comm_heavy_pair_consistently():
    """pair-comm-heavy: priorities cannot help (the low job never fits in the high one's
    10 ms gaps); a start-time shift of half a period interleaves the two jobs.  Optimal and
    Harmonics both find it (CASSINI's figure), Harmonics' Coordinator decides it once for the
    rack-spanning job and both racks hold it."""
    st = state_from_scenario(resolve(quality_cases()[1]))
    fair = predict(st, get_policy("fair").decide(st)).mean_slowdown
    cas = predict(st, get_policy("cassini").decide(st)).mean_slowdown
    opt = get_policy("optimal", time_limit_s=60)
    o = predict(st, opt.decide(st)).mean_slowdown
    h = get_policy("harmonics")
    d = h.decide(st)
    hv = predict(st, d).mean_slowdown
    assert opt.proven_optimal
    assert cas < fair - 0.2
    assert o <= cas + 1e-9
    assert hv == pytest.approx(o, rel=1e-9)
    shifted = [n for n, x in d.items() if x.shift_s > 0]
    assert len(shifted) == 1 and "shift phase" in d[shifted[0]].reason
    assert h.stats["shifted"] == 1 and h.stats["phase_rounds"] >= 1
    _check_consistent(st, h, d)
    # without the phase stage Harmonics is back at fair sharing's figure
    assert predict(st, get_policy("harmonics", shift_phases=1).decide(st)).mean_slowdown \
        == pytest.approx(fair)


def test_phase_stage_probes_a_starved_job_into_a_tie():
    """pair-shared-spine (the default scenario): the rounds favour jobA (1.0 / 2.0); the
    Coordinator names jobB to the phase stage, which moves it into jobA's class at a shift
    phase: 1.09 each, the optimum.  Without the probe Harmonics stays at 1.5."""
    from workloads.scenario import load_scenario
    from conftest import REPO
    from scheduling.harmonics import HarmonicsConfig
    st = state_from_scenario(resolve(load_scenario(REPO / "scenarios" / "pair-shared-spine.yaml")))
    opt = get_policy("optimal", time_limit_s=60)
    best = predict(st, opt.decide(st)).mean_slowdown
    h = get_policy("harmonics")
    d = h.decide(st)
    assert predict(st, d).mean_slowdown == pytest.approx(best, rel=1e-9)
    assert d["jobA"].priority == d["jobB"].priority
    assert d["jobB"].shift_s > 0 and d["jobA"].shift_s == 0
    probes = [json.loads(m) for m in h.messages if '"probe"' in m]
    assert any(p["probe"] == ["jobB"] for p in probes)
    _check_consistent(st, h, d)
    # without the probe (the joint stage alone also reaches 1.09 on this 2-job component)
    no_probe = HarmonicsConfig(probe_min=float("inf"))
    assert predict(st, get_policy("harmonics", config=no_probe, joint_jobs=0).decide(st)) \
        .mean_slowdown == pytest.approx(1.5)
    assert predict(st, get_policy("harmonics", config=no_probe).decide(st)).mean_slowdown \
        == pytest.approx(best, rel=1e-9)
