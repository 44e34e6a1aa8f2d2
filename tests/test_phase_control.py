"""Phase control (scheduling.phase): the control law on synthetic timestamps, and
the simulator with compute noise, with and without the controller."""
import math
import random

import pytest

from scheduling.base import Decision
from scheduling.phase import (JobPhaseInput, PhaseConfig, PhaseController,
                                          phase_summary, small_ratio, wrap)
from simulation.engine import SimConfig, simulate
from workloads.scenario import load_scenario, parse_scenario, resolve

from conftest import REPO

LINK = frozenset({1})


class Plant:
    """Periodic jobs whose iteration starts the test writes down, with optional noise and a
    persistent drift per iteration; corrections delay a chosen iteration's start."""

    def __init__(self, periods, offsets, noise=0.0, drift=None, seed=0):
        self.P = dict(periods)
        self.t = dict(offsets)                     # next start of each job
        self.starts = {j: [] for j in self.P}
        self.delay = {}                            # (job, iteration) -> delay
        self.noise = noise
        self.drift = drift or {}
        self.rng = random.Random(seed)

    def run_until(self, t_end):
        for j in self.P:
            while self.t[j] <= t_end:
                k = len(self.starts[j])
                self.t[j] += self.delay.pop((j, k), 0.0)
                self.starts[j].append(self.t[j])
                self.t[j] += self.P[j] * (1 + self.noise * self.rng.gauss(0, 1)) + self.drift.get(j, 0.0)

    def inputs(self, shifts, decl=None, window=12):
        out = []
        for j, s in self.starts.items():
            k = max(0, len(s) - window)
            out.append(JobPhaseInput(j, s[k:], k, shifts.get(j, 0.0), 0, LINK, (decl or {}).get(j)))
        return out


def control(plant, ctl, shifts, epochs, epoch_s, decl=None):
    """Run the loop: every epoch the controller sees the starts and orders delays."""
    errors = []
    for e in range(1, epochs + 1):
        plant.run_until(e * epoch_s)
        step = ctl.step(plant.inputs(shifts, decl))
        errs = [ph.error for n, ph in step.phases.items() if ph.ref is not None]
        errors.append(errs[0] if errs else None)
        for c in step.corrections:
            at = len(plant.starts[c.job])            # the next iteration
            plant.delay[(c.job, at)] = c.delay_s
            ctl.ordered(c, at)
    return errors


def test_small_ratio_and_wrap():
    assert small_ratio(1.0, 1.02, 4, 0.05) == (1, 1)
    assert small_ratio(2.0, 1.0, 4, 0.05) == (2, 1)
    assert small_ratio(1.5, 1.0, 4, 0.05) == (3, 2)
    assert small_ratio(1.0, 1.37, 4, 0.02) is None
    assert wrap(0.7) == pytest.approx(-0.3)
    assert wrap(-0.2) == pytest.approx(-0.2)


def test_converges_from_a_large_error_without_overshoot():
    # decided: B half a period after A; B starts 0.2 periods after A instead
    plant = Plant({"A": 1.0, "B": 1.0}, {"A": 0.0, "B": 0.2})
    ctl = PhaseController(PhaseConfig(gain=0.7, tolerance=0.02))
    errors = [e for e in control(plant, ctl, {"B": 0.5}, 40, 2.0) if e is not None]
    assert abs(errors[0]) > 0.25
    assert abs(errors[-1]) <= 0.02
    # no oscillation: the error keeps its sign and never grows while it is corrected
    assert all(e <= 0 for e in errors) or all(e >= 0 for e in errors)
    mags = [abs(e) for e in errors]
    assert all(b <= a + 1e-9 for a, b in zip(mags, mags[1:]))
    # delays only, and the delays add up to the error that was removed (0.3 of a period)
    assert all(v > 0 for v in ctl.total_delay_s.values())
    assert sum(ctl.total_delay_s.values()) == pytest.approx(0.3, abs=0.03)


def test_holds_against_drift_and_noise():
    """B loses 2% of a period per iteration (it is slowed more than A), and both jitter: the
    controller holds the decided offset within the tolerance-sized band; without it the
    offset walks away."""
    def run(hold):
        plant = Plant({"A": 1.0, "B": 1.0}, {"A": 0.0, "B": 0.5}, noise=0.01,
                      drift={"B": 0.02}, seed=3)
        ctl = PhaseController(PhaseConfig(tolerance=0.03, hold=hold))
        return [e for e in control(plant, ctl, {"B": 0.5}, 60, 1.0) if e is not None]
    held, free = run(True), run(False)
    assert sum(abs(e) for e in held[5:]) / len(held[5:]) < 0.06
    assert max(abs(e) for e in free[30:]) > 0.3


def test_unequal_periods_held_on_the_unified_circle():
    # A's period is twice B's: the pattern repeats every 2 s; the beat is 1 s
    plant = Plant({"A": 2.0, "B": 1.0}, {"A": 0.0, "B": 0.1})
    ctl = PhaseController(PhaseConfig(gain=0.7, tolerance=0.02))
    errors = control(plant, ctl, {"B": 0.4}, 40, 3.0)
    step = ctl.step(plant.inputs({"B": 0.4}))
    ph = step.phases["B"]
    assert ph.beat_s == pytest.approx(1.0, rel=1e-6)
    assert abs(ph.error) <= 0.02
    assert any(e is not None and abs(e) > 0.25 for e in errors)


def test_incommensurate_periods_and_unshifted_groups_are_left_alone():
    plant = Plant({"A": 1.0, "B": 1.37}, {"A": 0.0, "B": 0.3})
    ctl = PhaseController(PhaseConfig(ratio_tolerance=0.02))
    control(plant, ctl, {"B": 0.5}, 20, 2.0)
    assert not ctl.count
    step = ctl.step(plant.inputs({"B": 0.5}))
    assert step.phases["B"].error is None
    # no job of the group has a shift: the policy decided nothing about phases
    plant = Plant({"A": 1.0, "B": 1.0}, {"A": 0.0, "B": 0.3})
    ctl = PhaseController()
    control(plant, ctl, {}, 20, 2.0)
    assert not ctl.count and not ctl.step(plant.inputs({})).phases


def test_decided_phase_follows_the_measured_period():
    """The policy decided half of a 1.0 s period; the jobs run at 1.2 s: the held offset is
    half of 1.2 s, not 0.5 s."""
    plant = Plant({"A": 1.2, "B": 1.2}, {"A": 0.0, "B": 0.3})
    ctl = PhaseController(PhaseConfig(tolerance=0.01))
    control(plant, ctl, {"B": 0.5}, 30, 2.4, decl={"A": 1.0, "B": 1.0})
    ph = ctl.step(plant.inputs({"B": 0.5}, decl={"A": 1.0, "B": 1.0})).phases["B"]
    assert ph.decided_s == pytest.approx(0.6, rel=1e-6)
    assert ph.offset_s == pytest.approx(0.6, abs=0.02)


# ---------------------------------------------------------------------------
# the simulator: compute noise, with and without the controller
# ---------------------------------------------------------------------------

def pair(jitter, iters=120, seed=0):
    sc = load_scenario(REPO / "scenarios" / "pair-shared-spine.yaml")
    sc = sc.with_iterations(iters).model_copy(update={
        "seed": seed, "simulation": sc.simulation.model_copy(update={"compute_jitter": jitter})})
    return resolve(sc)


class Shifted:
    """B half an isolated period after A, in one class (what Harmonics decides here)."""
    name = "shifted"

    def decide(self, state):
        return {j.name: Decision(j.name, shift_s=0.022 if j.name == "jobB" else 0.0)
                for j in state.jobs}


def test_simulator_offset_drifts_without_control_and_is_held_with_it():
    rs = pair(0.1, seed=1)
    free = simulate(rs, Shifted(), SimConfig(phase_control="observe", isolated=False))
    held = simulate(rs, Shifted(), SimConfig(phase_control=True, isolated=False))
    pf, ph = phase_summary(free.phase), phase_summary(held.phase)
    assert ph["jobB"]["phase_error"] <= 0.10
    assert pf["jobB"]["phase_error"] > 1.5 * ph["jobB"]["phase_error"]
    assert ph["jobA"]["corrections"] + ph["jobB"]["corrections"] > 0
    assert pf["jobA"]["corrections"] + pf["jobB"]["corrections"] == 0
    mean = lambda r: sum(x["mean_iter_s"] for x in r.summary) / len(r.summary)
    assert mean(held) < mean(free)
    assert held.summary_by_job()["jobB"]["phase_error"] == pytest.approx(ph["jobB"]["phase_error"])


def test_no_jitter_is_the_noiseless_engine_and_the_controller_stays_idle():
    rs = pair(0.0, iters=40)
    a = simulate(rs, Shifted(), SimConfig(phase_control=False, isolated=False))
    b = simulate(rs, Shifted(), SimConfig(phase_control=True, isolated=False))
    assert a.iterations == b.iterations
    assert not any(r["correction_s"] for r in b.phase)


def test_jitter_is_seeded_and_changes_compute():
    rs = pair(0.1, iters=20, seed=5)
    a = simulate(rs, None, SimConfig(isolated=False))
    b = simulate(rs, None, SimConfig(isolated=False))
    c = simulate(pair(0.1, iters=20, seed=6), None, SimConfig(isolated=False))
    assert a.iterations == b.iterations
    assert a.iterations != c.iterations
    comp = [r[4] for r in a.iterations]
    assert len(set(round(x, 9) for x in comp)) > 5
    assert sum(comp) / len(comp) == pytest.approx(0.02, rel=0.1)


def test_scenario_schema_rejects_bad_phase_settings():
    from workloads.scenario import ScenarioError
    base = {"name": "x", "cluster": {"racks": 1, "hosts_per_rack": 2, "spines": 1}}
    for bad in ({"phase_control": {"gain": 0}}, {"phase_control": {"tolerance": 0.7}},
                {"simulation": {"compute_jitter": -0.1}}):
        with pytest.raises(ScenarioError):
            parse_scenario({**base, **bad})


# ---------------------------------------------------------------------------
# the emulator: a decided shift still holds after 30 iterations
# ---------------------------------------------------------------------------

@pytest.mark.stack
def test_emulated_shift_holds_after_30_iterations(emulation_ready, tmp_path):
    """Harmonics shifts jobB by half a period on pair-shared-spine; the controller measures
    the offset from the jobs' telemetry and corrects it: past iteration 30 the offset is
    still the decided one (within a quarter of the period on average; a collision is 0.5)."""
    import json
    import csv

    from emulation.runner import run_emulation

    sc = load_scenario(REPO / "scenarios" / "pair-shared-spine.yaml")
    sc = sc.with_iterations(45)
    rows = run_emulation(sc, "harmonics", tmp_path, isolated="analytical", quiet=True)
    with open(tmp_path / "phase.csv") as f:
        phase = [r for r in csv.DictReader(f) if r["job"] == "jobB" and r["error"]]
    with open(tmp_path / "telemetry" / "jobB.csv") as f:
        starts = [int(r["iteration"]) for r in csv.DictReader(f) if r["event"] == "iter"]
    assert starts == list(range(45))
    # one measurement per iteration start of either job: the last 16 cover iterations 37-44
    assert len(phase) >= 40
    late = [abs(float(r["error"])) for r in phase[-16:]]
    assert sum(late) / len(late) <= 0.25, late
    assert rows["jobB"]["phase_error"] <= 0.25
    assert rows["jobA"]["corrections"] + rows["jobB"]["corrections"] > 0
    recs = [json.loads(line) for line in open(tmp_path / "decisions.jsonl")]
    assert any(r.get("corrections") for r in recs)


def test_incremental_groups_match_from_scratch():
    """IncrementalGroups (kept across steps) gives exactly ``groups`` of the same jobs, over
    random additions, removals, class and link changes."""
    import random

    from scheduling.phase import IncrementalGroups, groups
    rng = random.Random(7)
    inc = IncrementalGroups()
    pool = {f"j{i:02d}": frozenset(rng.sample(range(30), rng.randint(0, 4))) for i in range(40)}
    cur = {}
    for _ in range(300):
        for _ in range(rng.randint(1, 4)):
            n = rng.choice(sorted(pool))
            r = rng.random()
            if r < 0.35:
                cur.pop(n, None)
            elif r < 0.5:
                pool[n] = frozenset(rng.sample(range(30), rng.randint(0, 4)))
                cur[n] = rng.randint(0, 2)
            else:
                cur[n] = rng.randint(0, 2)
        jobs = [JobPhaseInput(n, [0.0, 1.0], 0, 0.0, p, pool[n]) for n, p in cur.items()]
        rng.shuffle(jobs)
        want = [[j.name for j in g] for g in groups(jobs)]
        assert inc.update(jobs) == want
