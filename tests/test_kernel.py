"""The compiled event simulation (scheduling/kernel.py) against the pure-Python
reference (fluid._simulate_py): the same results, bit for bit."""
import math
import random
import struct

import pytest

from scheduling import evaluate, kernel
from scheduling.evaluate import simulate
from scheduling.fluid import SimJob, _simulate_py

INF = float("inf")

pytestmark = pytest.mark.skipif(not kernel.AVAILABLE, reason="numba is not installed")


def _random_group(rng: random.Random):
    """2-8 jobs on a pool of 6 links: random capacities, priorities 0-3, some rate bounds,
    shifts, zero compute, jobs without communication (bmax 0 / no links).  Half the groups
    draw from small sets of round values (ties, exact cycles), half from continuous ones."""
    discrete = rng.random() < 0.5
    pool = list(range(6))
    if discrete:
        cap = {l: rng.choice([1.25e10, 6.25e9, 2.5e9]) for l in pool}
    else:
        cap = {l: rng.uniform(1e9, 2e10) for l in pool}
    jobs = []
    for _ in range(rng.randint(2, 8)):
        links = tuple(rng.sample(pool, rng.randint(0, 4)))
        if discrete:
            B = tuple(rng.choice([1.0, 2.0, 3.0]) * 1e8 for _ in links)
            comp = rng.choice([0.0, 0.01, 0.02, 0.03, 0.05])
            shift = rng.choice([0.0, 0.0, 0.0, 0.005, 0.01])
            lam = rng.choice([INF, INF, INF, 5e8, 2e9])
        else:
            B = tuple(rng.uniform(1e7, 5e8) for _ in links)
            comp = rng.choice([0.0, rng.uniform(0.001, 0.1), rng.uniform(0.001, 0.1)])
            shift = rng.choice([0.0, 0.0, rng.uniform(0.0, 0.05)])
            lam = rng.choice([INF, INF, rng.uniform(1e8, 5e9)])
        bmax = max(B) if B else rng.choice([0.0, 1e8])
        if rng.random() < 0.1:
            bmax = 0.0                      # a job that never communicates
        elif B and rng.random() < 0.2:
            bmax *= rng.choice([1.5, 2.0])  # heaviest pair not on these links
        jobs.append(SimJob(comp, links, B, bmax, rng.randint(0, 3), lam, shift))
    max_events = rng.choice([None, None, None, 10, 25, 200])
    return jobs, cap, max_events


def _bits(xs):
    """Exact comparison that also treats nan as equal to nan."""
    return [struct.pack("<d", x) for x in xs]


@pytest.mark.parametrize("chunk", range(10))
def test_kernel_equals_python(chunk, monkeypatch):
    monkeypatch.delenv("HARMONICS_NO_JIT", raising=False)
    assert evaluate._jit_kernel() is kernel
    for seed in range(chunk * 40, chunk * 40 + 40):      # 400 groups in all
        rng = random.Random(seed)
        jobs, cap, me = _random_group(rng)
        want = _simulate_py(jobs, cap, me)
        got = simulate(jobs, cap, me)
        assert _bits(got) == _bits(want), (seed, got, want)
        assert all(isinstance(v, float) for v in got)


def test_kernel_exact_cycles_and_fallback_both_exercised():
    """The groups above exercise both ends of the event loop: an exact cycle and the
    second-half mean.  A run that found a cycle gives the same result with one more event
    allowed (a rough classification: a run that stops early, e.g. all starved, counts as a
    cycle too)."""
    cycles = fallbacks = 0
    for seed in range(400):
        jobs, cap, me = _random_group(random.Random(seed))
        comm = [j for j in jobs if j.bmax > 0 and (j.links or j.lam_max < INF)]
        if not comm:
            continue
        n = me if me is not None else 60 + 30 * len(comm)
        # with one more event allowed, a run that found a cycle gives the same result
        if simulate(jobs, cap, n) == simulate(jobs, cap, n + 1):
            cycles += 1
        else:
            fallbacks += 1
    assert cycles > 50 and fallbacks > 50


def test_starvation_and_no_jit_switch(monkeypatch):
    """HARMONICS_NO_JIT=1 (read at call time) selects the Python path."""
    jobs = [SimJob(0.0, ("L",), (1.0,), 1.0, 0), SimJob(0.1, ("L",), (1.0,), 1.0, 1)]
    calls = []
    real = kernel.simulate_group
    monkeypatch.setattr(kernel, "simulate_group", lambda *a: calls.append(1) or real(*a))
    monkeypatch.delenv("HARMONICS_NO_JIT", raising=False)
    T = simulate(jobs, {"L": 1.0})
    assert calls and T[0] == 1.0 and math.isinf(T[1])
    calls.clear()
    monkeypatch.setenv("HARMONICS_NO_JIT", "1")
    assert evaluate._jit_kernel() is None
    assert simulate(jobs, {"L": 1.0}) == T
    assert not calls
    # numba missing: the Python path too
    monkeypatch.delenv("HARMONICS_NO_JIT")
    monkeypatch.setattr(evaluate, "_KERNEL", False)
    assert evaluate._jit_kernel() is None
    assert simulate(jobs, {"L": 1.0}) == T
    assert not calls


def test_large_groups_use_python(monkeypatch):
    monkeypatch.delenv("HARMONICS_NO_JIT", raising=False)
    calls = []
    real = kernel.simulate_group
    monkeypatch.setattr(kernel, "simulate_group", lambda *a: calls.append(1) or real(*a))
    jobs = [SimJob(0.01 * (1 + i % 3), ("L",), (1e8,), 1e8, i % 2)
            for i in range(kernel.MAX_JOBS + 1)]
    assert simulate(jobs, {"L": 1.25e10}, 50) == _simulate_py(jobs, {"L": 1.25e10}, 50)
    assert not calls
    assert simulate(jobs[:kernel.MAX_JOBS], {"L": 1.25e10}, 50) == \
        _simulate_py(jobs[:kernel.MAX_JOBS], {"L": 1.25e10}, 50)
    assert calls


def _round_cases():
    rng = random.Random(7)
    vals = [0.0, 1.0, 1e-9, -1e-9, 0.5, 1 / 256, 3 / 256, 255 / 256, 12345 + 1 / 256,
            2.675, 0.12345675, 0.12345665, 1e-7, 5e-8, 1.5e-7, 2.5e-7, 4.4e8, 4.6e8, 1e12,
            INF, -INF]
    for _ in range(3000):
        vals.append(rng.random() * 10 ** rng.randint(-9, 3))
        # decimal half-way points k.5e-7 and their neighbouring doubles
        h = float(f"{rng.randint(0, 10**8)}.5e-7")
        vals += [h, math.nextafter(h, 0.0), math.nextafter(h, INF)]
        # exact binary ties: v * 1e7 is a half-integer
        vals.append(rng.randint(0, 10**6) * 2 + 1)
        vals[-1] = vals[-1] / 256
    return vals


def test_round7_matches_cpython():
    for v in _round_cases():
        r, _ = kernel._round7(v)
        if abs(v) < 4.5e8:
            assert struct.pack("<d", r) == struct.pack("<d", round(v, 7)), v
    r, _ = kernel._round7(float("nan"))
    assert math.isnan(r)
