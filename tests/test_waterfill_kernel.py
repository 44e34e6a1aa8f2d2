"""The compiled water-filling (simulation.wfkernel) against the numpy one it replaces: the
same rates bit for bit (the simulator's outputs must not change), on random flow sets with
several priority classes, ties, zero capacities, and sorted (the engine's order: the
kernel's entity-major path) and unsorted incidence entries (its entry-order path)."""
import math

import numpy as np

import simulation.waterfill as wf
from simulation.waterfill import waterfill, waterfill_numpy, waterfill_update


def _random_problem(rng, trial):
    n = int(rng.integers(1, 60))
    k = int(rng.integers(1, 30))
    rows, cols, vals = [], [], []
    for e in range(n):
        lo = 0 if trial % 7 == 0 else 1          # some entities with no constraint
        ks = rng.choice(k, size=int(rng.integers(lo, min(k, 5) + 1)), replace=False)
        for c in sorted(ks.tolist()):
            rows.append(e)
            cols.append(c)
            vals.append(float(rng.integers(1, 4)))
    rows = np.array(rows, dtype=np.int64)
    cols = np.array(cols, dtype=np.int64)
    vals = np.array(vals, dtype=float)
    if trial % 3 == 0 and len(rows):
        p = rng.permutation(len(rows))
        rows, cols, vals = rows[p], cols[p], vals[p]
    cap = rng.uniform(0.5, 10.0, k) * (rng.random(k) > 0.05)
    if trial % 5 == 0:
        cap = np.round(cap)                       # ties between constraints
    classes = rng.integers(0, 1 if trial % 2 else 3, n)
    return n, classes, rows, cols, vals, cap


def test_kernel_equals_numpy_filling_bit_for_bit(monkeypatch):
    monkeypatch.setattr(wf, "KERNEL_MIN_NNZ", 0)          # every call through the kernel
    rng = np.random.default_rng(11)
    for trial in range(600):
        n, classes, rows, cols, vals, cap = _random_problem(rng, trial)
        got = waterfill(n, classes, rows, cols, vals, cap)
        ref = waterfill_numpy(n, classes, rows, cols, vals, cap)
        assert got.tobytes() == ref.tobytes(), trial


def _update_reference(n, classes, rows, cols, vals, cap, prev, is_new, removed):
    """waterfill_update as it was before the kernel (numpy free step), for the comparison."""
    prev = np.where(is_new, 0.0, prev)
    changed = [c for _, c in removed] + [int(c) for c in np.unique(classes[is_new])]
    if not changed:
        return prev.copy()
    c0 = min(changed)
    lam = min([r for r, c in removed if c == c0], default=math.inf)
    hi = classes < c0
    new0 = is_new & (classes == c0)
    if new0.any():
        from simulation.waterfill import _first_fill_level
        nzr = prev[rows] * vals
        m = hi[rows]
        res_hi = cap - np.bincount(cols[m], weights=nzr[m], minlength=len(cap)) if hi.any() else cap
        lam = min(lam, _first_fill_level(rows, cols, vals, res_hi, prev, classes == c0, new0))
    fixed = hi | ((classes == c0) & ~is_new & (prev < lam * (1.0 - 1e-12)))
    if not fixed.any():
        return waterfill_numpy(n, classes, rows, cols, vals, cap)
    rates = np.zeros(n)
    fm = fixed[rows]
    residual = cap - np.bincount(cols[fm], weights=prev[rows][fm] * vals[fm], minlength=len(cap))
    np.maximum(residual, 0.0, out=residual)
    rates[fixed] = prev[fixed]
    free = ~fixed
    if free.any():
        pos = np.cumsum(free) - 1
        um = ~fm
        rates[free] = waterfill_numpy(int(free.sum()), classes[free], pos[rows[um]], cols[um],
                                      vals[um], residual)
    return rates


def _assemble(ents):
    rows, cols, vals = [], [], []
    for i, (ks, vs, _) in enumerate(ents):
        rows += [i] * len(ks)
        cols += ks
        vals += vs
    return (np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64), np.array(vals),
            np.array([c for _, _, c in ents], dtype=np.int64))


def test_incremental_update_equals_numpy_reference_and_full_recompute(monkeypatch):
    monkeypatch.setattr(wf, "KERNEL_MIN_NNZ", 0)
    rng = np.random.default_rng(5)

    def entity(k, multi):
        ks = sorted(rng.choice(k, size=int(rng.integers(1, min(k, 4) + 1)), replace=False).tolist())
        return ks, [float(rng.integers(1, 4)) for _ in ks], int(rng.integers(0, 3 if multi else 1))

    checked = 0
    for trial in range(300):
        multi = trial % 2 == 0
        k = int(rng.integers(2, 25))
        cap = rng.uniform(1.0, 10.0, k)
        if trial % 4 == 0:
            cap = np.round(cap)
        ents = [entity(k, multi) for _ in range(int(rng.integers(2, 40)))]
        r, c, v, cl = _assemble(ents)
        prev = waterfill(len(ents), cl, r, c, v, cap)
        for _ in range(6):
            keep = list(range(len(ents)))
            removed = []
            for _ in range(min(int(rng.integers(0, 3)), len(keep) - 1)):
                j = keep.pop(int(rng.integers(len(keep))))
                removed.append((float(prev[j]), ents[j][2]))
            ents2 = [ents[j] for j in keep] + [entity(k, multi) for _ in range(int(rng.integers(0, 3)))]
            p2 = np.array([prev[j] for j in keep] + [0.0] * (len(ents2) - len(keep)))
            is_new = np.zeros(len(ents2), dtype=bool)
            is_new[len(keep):] = True
            r, c, v, cl = _assemble(ents2)
            got = waterfill_update(len(ents2), cl, r, c, v, cap, p2, is_new, removed)
            ref = _update_reference(len(ents2), cl, r, c, v, cap, p2, is_new, removed)
            assert got.tobytes() == ref.tobytes()
            with monkeypatch.context() as mp:       # the numpy path of waterfill_update
                mp.setattr(wf, "KERNEL_MIN_NNZ", 10 ** 9)
                got_np = waterfill_update(len(ents2), cl, r, c, v, cap, p2, is_new, removed)
            assert got_np.tobytes() == got.tobytes()
            full = waterfill(len(ents2), cl, r, c, v, cap)
            assert np.allclose(got, full, rtol=1e-9, atol=1e-12)
            ents, prev = ents2, got
            checked += 1
    assert checked == 1800


def test_first_fill_level_kernel_equals_numpy_bit_for_bit():
    """The incremental update's level under which no constraint of a new entity can fill,
    compiled (``updatekernel.first_fill_level``) and numpy (``waterfill._first_fill_level``)."""
    from simulation.waterfill import _first_fill_level
    from simulation.updatekernel import first_fill_level
    rng = np.random.default_rng(17)
    checked = 0
    for trial in range(400):
        n, classes, rows, cols, vals, cap = _random_problem(rng, trial)
        if len(rows) == 0 or np.bincount(rows, minlength=n).min() == 0:
            continue
        order = np.lexsort((cols, rows))             # the engine's order: grouped by entity
        rows, cols, vals = rows[order], cols[order], vals[order]
        prev = waterfill(n, classes, rows, cols, vals, cap)
        is_new = rng.random(n) < 0.2
        c0 = int(classes[is_new].min()) if is_new.any() else -1
        if c0 < 0:
            continue
        prev = np.where(is_new, 0.0, prev)
        in_c0 = classes == c0
        want = _first_fill_level(rows, cols, vals, cap, prev, in_c0, is_new & in_c0)
        got = first_fill_level(rows, cols, vals, cap, prev, classes.astype(np.int64), c0, is_new)
        assert np.float64(got).tobytes() == np.float64(want).tobytes(), trial
        checked += 1
    assert checked > 100


def _engine_run(placement, policy):
    from simulation.__main__ import load_policy
    from simulation.engine import SimConfig, simulate
    from simulation.topology import leaf_spine
    from simulation.workload import generate
    from workloads.scenario import resolve
    spec = leaf_spine(4, 8, 2, gpus_per_host=8, host_link_gbps=200.0, oversubscription=2.0)
    rs = resolve(generate(spec, 12, iterations=3, seed=3, placement=placement, name="k"))
    res = simulate(rs, load_policy(policy), SimConfig(isolated=False), policy_name=policy)
    return res.iterations, res.link_bins, [{k: v for k, v in d.items()} for d in res.decisions]


def test_engine_kernel_passes_equal_numpy_passes(monkeypatch):
    """The engine's compiled per-event passes (simulation.ratekernel: incremental assembly,
    load and job rates, next completion, progress) give the very same run as its numpy
    passes (every output bit for bit), under a policy that changes classes and caps."""
    for placement, policy in (("fragmented", "fair"), ("fragmented", "harmonics")):
        with monkeypatch.context() as mp:
            mp.setattr(wf, "KERNEL_MIN_NNZ", 10 ** 9)
            ref = _engine_run(placement, policy)
        with monkeypatch.context() as mp:
            mp.setattr(wf, "KERNEL_MIN_NNZ", 0)
            got = _engine_run(placement, policy)
        assert repr(got) == repr(ref)


def test_fused_incremental_update_equals_numpy_steps(monkeypatch):
    """``ratekernel.incremental`` (assembly, update and loads in one compiled call) against
    the engine's numpy steps (``FlowRates._assemble_np``, the numpy ``waterfill_update``, the
    loads by ``np.bincount``), bit for bit, on random sequences of departures and arrivals
    (slots freed and reused in one step included), through all three outcomes."""
    from types import SimpleNamespace

    from simulation import ratekernel as rk
    from simulation.rates import FlowRates
    monkeypatch.setattr(wf, "KERNEL_MIN_NNZ", 10 ** 9)   # the reference: numpy throughout
    rng = np.random.default_rng(23)
    nslots, njobs = 48, 7
    outcomes = set()
    for trial in range(150):
        k = int(rng.integers(3, 16))
        n_links = k - 2                                  # the last two: rate caps
        cap = rng.uniform(1.0, 10.0, k)
        if trial % 3 == 0:
            cap = np.round(cap)
        job_cls = rng.integers(0, 1 if trial % 2 else 3, njobs).astype(np.int64)
        st = SimpleNamespace(ent_cols=[None] * nslots, ent_vals=[None] * nslots,
                             alive=np.zeros(nslots, dtype=bool),
                             slot_len=np.zeros(nslots, dtype=np.int64))
        slot_job = rng.integers(0, njobs, nslots).astype(np.int64)
        nflows = rng.integers(1, 4, nslots).astype(float)
        rate = np.zeros(nslots)

        def add(s):
            ks = np.sort(rng.choice(k, size=int(rng.integers(1, min(k, 4) + 1)), replace=False))
            st.ent_cols[s] = ks.astype(np.int64)
            st.ent_vals[s] = rng.integers(1, 4, len(ks)).astype(float)
            st.slot_len[s] = len(ks)
            st.alive[s] = True
            rate[s] = 0.0

        for s in rng.choice(nslots, size=int(rng.integers(2, 30)), replace=False):
            add(int(s))
        idx = np.flatnonzero(st.alive)
        rows = np.repeat(np.arange(len(idx)), st.slot_len[idx])
        cols = np.concatenate([st.ent_cols[s] for s in idx])
        vals = np.concatenate([st.ent_vals[s] for s in idx])
        rate[idx] = waterfill(len(idx), job_cls[slot_job[idx]], rows, cols, vals, cap)
        asm = (idx, rows, cols, vals)
        for step in range(6):
            live = np.flatnonzero(st.alive)
            removed, new = [], []
            for s in rng.choice(live, size=min(len(live), int(rng.integers(0, 4))), replace=False):
                removed.append((float(rate[s]), int(job_cls[slot_job[s]])))
                st.alive[s] = False
                rate[s] = 0.0
            free = np.flatnonzero(~st.alive)
            for s in rng.choice(free, size=min(len(free), int(rng.integers(0, 3))), replace=False):
                add(int(s))
                new.append(int(s))
            if step == 5 and trial % 10 == 0:            # everything gone
                removed += [(float(rate[s]), int(job_cls[slot_job[s]])) for s in np.flatnonzero(st.alive)]
                st.alive[:] = False
                new = []
            new.sort()
            ns = np.array(new, dtype=np.int64)
            nc = np.concatenate([st.ent_cols[s] for s in new]) if new else asm[2][:0]
            nv = np.concatenate([st.ent_vals[s] for s in new]) if new else asm[3][:0]
            rate_got = rate.copy()
            got = rk.incremental(*asm, st.alive, ns, st.slot_len, nc, nv, rate_got, slot_job,
                                 job_cls, cap, np.array([r for r, _ in removed], dtype=float),
                                 np.array([c for _, c in removed], dtype=np.int64), nflows,
                                 njobs, n_links, True)
            idx, rows, cols, vals = FlowRates._assemble_np(st, asm, new)
            for a, b in zip(got[:4], (idx, rows, cols, vals)):
                assert a.tobytes() == b.tobytes()
            outcomes.add(got[4])
            if len(idx) == 0:
                assert got[4] == rk.EMPTY
                break
            classes = job_cls[slot_job[idx]]
            is_new = np.zeros(len(idx), dtype=bool)
            is_new[len(idx) - len(new):] = True
            r = waterfill_update(len(idx), classes, rows, cols, vals, cap, rate[idx], is_new,
                                 removed)
            if got[4] == rk.FULL:                        # the caller fills from scratch
                full = waterfill(len(idx), classes, rows, cols, vals, cap)
                assert r.tobytes() == full.tobytes()
                assert rate_got.tobytes() == rate.tobytes()
            else:
                rate[idx] = r
                real = cols < n_links
                load = np.bincount(cols[real], weights=r[rows[real]] * vals[real], minlength=n_links)
                job_rate = np.bincount(slot_job[idx], weights=r * nflows[idx], minlength=njobs)
                assert rate_got.tobytes() == rate.tobytes()
                assert got[5].tobytes() == load.tobytes()
                assert got[6].tobytes() == job_rate.tobytes()
            rate[idx] = r
            asm = (idx, rows, cols, vals)
    assert outcomes == {rk.DONE, rk.EMPTY, rk.FULL}
