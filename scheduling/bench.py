"""Scheduling-time and quality benchmark of the policies.

    python -m scheduling.bench                 # decision time per epoch at 64 .. 16,384 GPUs
                                                # + the quality table
    python -m scheduling.bench --scale-only    # decision times only
    python -m scheduling.bench --quality       # quality table only
    python -m scheduling.bench --sizes 64 1024 --optimal-limit 30
    python -m scheduling.bench --quality --wide-cases 50 --wide-limit 10

The quality part also scores ``--wide-cases`` widened random cases (``cases.wide_case``) and
prints ``mean slowdown harmonics/optimal``, ``cases worse than fair`` and ``cases more than 3%
above the best policy``; the scale part ends with the line ``decision time at 2048 GPUs
fragmented: harmonics COLD s cold, INCR s incremental, CRIT s critical path`` and the
closed-form proxy's error against the model on sampled groups of that state.

Decision time = CPU time (``time.process_time``: on a shared machine, what one core of one's
own would take; optimal's time limit stays wall time) of one cold ``Policy.decide`` (first
epoch: nothing cached); Harmonics also reports its critical path (the slowest rack per phase + the Coordinator:
its time if the racks' Local Schedulers ran in parallel), an incremental epoch (the next epoch
after one job's compute time changed by 20%: sub-problems whose inputs did not change are not
simulated again) and a reuse epoch (state unchanged: the decisions are kept).  The headline
(and the optimal/harmonics ratio) is the cold epoch.
Scenarios are built through the schema objects (workloads.scenario), 8 GPUs per host.
Figures are measured, never tuned: a different machine gives different numbers.
"""
from __future__ import annotations

import argparse
import copy
import gc
import math
import random
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

from workloads.cluster import ClusterSpec
from workloads.scenario import JobSpec, Placement, Scenario, resolve
from scheduling.base import state_from_scenario
from scheduling.registry import REPORT_ORDER, get_policy
from scheduling.cases import _profile, quality_cases, random_case, wide_case  # noqa: F401
from scheduling.evaluate import warm_up
from scheduling.links import isolated_iteration_time
from scheduling.model import predict

# racks, hosts per rack, spines for each cluster size (8 GPUs per host)
TOPOLOGIES = {
    64: (2, 4, 2),
    256: (4, 8, 2),
    1024: (8, 16, 4),
    4096: (16, 32, 8),
    16384: (64, 32, 8),
}
GPUS_PER_HOST = 8
HOST_GBPS = 200.0
OVERSUB = 2.0




def mix_scenario(gpus: int, seed: int = 1, fill: float = 0.9) -> Scenario:
    """A data-parallel job mix on a cluster of ``gpus`` GPUs: job sizes 4..256 GPUs (4-GPU jobs
    share hosts), compute 40-400 ms, all-reduce 25 MB-1.5 GB per iteration, packed placement in
    allocation order with random gaps, so that some jobs span racks and some share hosts."""
    racks, hosts, spines = TOPOLOGIES[gpus]
    rng = random.Random(seed)
    uplink = hosts * HOST_GBPS / (spines * OVERSUB)
    cluster = ClusterSpec(racks=racks, hosts_per_rack=hosts, spines=spines,
                          gpus_per_host=GPUS_PER_HOST, host_link_gbps=HOST_GBPS, uplink_gbps=uplink)
    slots = [f"r{r}h{h}/{g}" for r in range(racks) for h in range(hosts) for g in range(GPUS_PER_HOST)]
    sizes = [4, 8, 16, 16, 32, 32, 64, 64, 128, 256]
    jobs: List[JobSpec] = []
    pos = 0
    while pos < len(slots):
        size = rng.choice([s for s in sizes if s <= max(4, gpus // 4)])
        if pos + size > len(slots):
            break
        if rng.random() > fill:          # leave a gap of idle GPUs
            pos += rng.choice([4, 8])
            continue
        compute = math.exp(rng.uniform(math.log(0.04), math.log(0.4)))
        nbytes = math.exp(rng.uniform(math.log(25e6), math.log(1.5e9)))
        jobs.append(JobSpec(name=f"j{len(jobs)}", iterations=100,
                            placement=Placement(slots=slots[pos:pos + size]),
                            profile=_profile(round(compute, 4), round(nbytes))))
        pos += size
    return Scenario(name=f"mix-{gpus}", backend="simulation", cluster=cluster, jobs=jobs, seed=seed)


def _next_epoch(state):
    """The state of the next epoch: the same jobs, the middle job's compute time +20%."""
    nxt = copy.deepcopy(state)
    nxt.epoch = state.epoch + 1
    j = nxt.jobs[len(nxt.jobs) // 2]
    j.compute_s *= 1.2
    j.iso_iter_s = isolated_iteration_time(j, nxt.cluster)
    return nxt


def _timed(policy, state) -> Tuple[float, dict]:
    """(CPU seconds of this process, decisions) of one decision."""
    gc.collect()     # garbage of earlier sections (optimal's caches) is not this decision's
    t0 = time.process_time()
    d = policy.decide(state)
    return time.process_time() - t0, d


def _timed_cpu(policy, state) -> Tuple[float, float]:
    """(CPU seconds, wall seconds) of one decision: on a shared machine the CPU time is what
    one core of one's own would take."""
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    policy.decide(state)
    return time.process_time() - c0, time.perf_counter() - t0


def scale_section(sizes: Sequence[int], optimal_limits: Dict[int, float], out=print,
                  rows: Optional[List[Tuple[int, str, float]]] = None) -> Optional[float]:
    """The decision-time table; ``rows``: if given, (gpus, policy, decision ms) are appended
    for every figure of the table (``--csv``)."""
    out("== decision time per epoch (one core, cold epoch, CPU time) ==")
    out(f"{'GPUs':>6} {'jobs':>5} {'x-rack':>6} | {'fair':>8} {'crux':>8} {'cassini':>8} "
        f"{'harmonics':>10} {'(crit.path)':>11} {'(incr.)':>8} {'(reuse)':>8} | {'optimal':>18} "
        f"{'opt/harm':>10}")
    ratio_1024 = None
    for g in sizes:
        sc = mix_scenario(g)
        rs = resolve(sc)
        st = state_from_scenario(rs)
        cross = sum(1 for j in st.jobs if j.spans_racks)
        t = {}
        for name in ("fair", "crux", "cassini"):
            t[name], _ = _timed(get_policy(name), st)
        h = get_policy("harmonics")
        t["harmonics"], _ = _timed(h, st)
        crit = h.stats.get("critical_path_s", float("nan"))
        t_warm, _ = _timed(h, st)
        t_incr, _ = _timed(h, _next_epoch(st))
        if rows is not None:
            rows.extend((g, n, 1e3 * t[n]) for n in ("fair", "crux", "cassini", "harmonics"))
            rows.extend([(g, "harmonics-critical-path", 1e3 * crit),
                         (g, "harmonics-incremental", 1e3 * t_incr),
                         (g, "harmonics-reuse", 1e3 * t_warm)])
        opt_txt, ratio_txt = "skipped", "-"
        lim = optimal_limits.get(g)
        if lim is not None:
            o = get_policy("optimal", time_limit_s=lim)
            t_opt, _ = _timed(o, st)
            mark = "" if o.proven_optimal else " TIMEOUT"
            opt_txt = f"{t_opt:.3f}s{mark}"
            if rows is not None:
                rows.append((g, "optimal" if o.proven_optimal else "optimal-timeout", 1e3 * t_opt))
            ratio = t_opt / t["harmonics"]
            ratio_txt = f"{'>=' if not o.proven_optimal else ''}{ratio:.1f}"
            if g == 1024:
                ratio_1024 = ratio
                ratio_bound = not o.proven_optimal
        out(f"{g:>6} {len(st.jobs):>5} {cross:>6} | {t['fair']:>7.4f}s {t['crux']:>7.3f}s "
            f"{t['cassini']:>7.3f}s {t['harmonics']:>9.3f}s {crit:>10.3f}s {t_incr:>7.3f}s "
            f"{t_warm:>7.4f}s | "
            f"{opt_txt:>18} {ratio_txt:>10}")
        sys.stdout.flush()
    if ratio_1024 is not None and ratio_bound:
        out("(optimal hit its time limit at 1024 GPUs: the ratio is a lower bound)")
    return ratio_1024


def quality_section(optimal_limit: float, out=print) -> None:
    names = list(REPORT_ORDER)
    out("== quality: mean slowdown (iteration time / isolated) under the shared model ==")
    out(f"{'case':<18} " + " ".join(f"{n:>9}" for n in names) + f" {'harm/opt':>9}")
    tot = {n: 0.0 for n in names}
    unproven = 0
    for sc in quality_cases():
        st = state_from_scenario(resolve(sc))
        row = {}
        for n in names:
            p = get_policy(n, time_limit_s=optimal_limit) if n == "optimal" else get_policy(n)
            d = p.decide(st)
            row[n] = predict(st, d).mean_slowdown
            if n == "optimal" and not p.proven_optimal:
                unproven += 1
        for n in names:
            tot[n] += row[n]
        out(f"{sc.name:<18} " + " ".join(f"{row[n]:>9.4f}" for n in names)
            + f" {row['harmonics'] / row['optimal']:>9.4f}")
        sys.stdout.flush()
    k = len(quality_cases())
    out(f"{'MEAN':<18} " + " ".join(f"{tot[n] / k:>9.4f}" for n in names)
        + f" {tot['harmonics'] / tot['optimal']:>9.4f}")
    if unproven:
        out(f"({unproven} optimal result(s) hit the time limit: best found, not proven)")


def wide_section(cases: int, optimal_limit: float, seed0: int = 0, out=print) -> dict:
    """Quality on ``cases`` widened random cases (``wide_case``): every policy's mean slowdown
    under the model; optimal with ``optimal_limit`` s per case (the best found if it is not
    proven).  Prints the three figures of issue 16 and returns them."""
    names = list(REPORT_ORDER)
    out(f"== quality on {cases} widened random cases (wide_case {seed0}..{seed0 + cases - 1}: "
        f"2-4 racks, oversubscription 1:1-4:1, all-reduce / all-to-all / pipeline, up to 8 jobs) ==")
    out(f"{'case':<10} {'jobs':>4} " + " ".join(f"{n:>9}" for n in names) + f" {'harm/opt':>9}")
    ratios, worse, above, unproven = [], [], [], 0
    tot = {n: 0.0 for n in names}
    for seed in range(seed0, seed0 + cases):
        st = state_from_scenario(resolve(wide_case(seed)))
        row = {}
        for n in names:
            p = get_policy(n, time_limit_s=optimal_limit) if n == "optimal" else get_policy(n)
            row[n] = predict(st, p.decide(st)).mean_slowdown
            if n == "optimal" and not p.proven_optimal:
                unproven += 1
        for n in names:
            tot[n] += row[n]
        h = row["harmonics"]
        ratios.append(h / row["optimal"])
        if h > row["fair"] * (1 + 1e-9):
            worse.append(seed)
        best = min(row.values())
        if h > best * 1.03:
            above.append(seed)
        out(f"wide-{seed:<5} {len(st.jobs):>4} " + " ".join(f"{row[n]:>9.4f}" for n in names)
            + f" {h / row['optimal']:>9.4f}")
        sys.stdout.flush()
    out(f"{'MEAN':<10} {'':>4} " + " ".join(f"{tot[n] / cases:>9.4f}" for n in names))
    r = sum(ratios) / len(ratios)
    out(f"mean slowdown harmonics/optimal: {r:.4f}")
    out(f"cases worse than fair: {len(worse)}" + (f" ({', '.join(map(str, worse))})" if worse else ""))
    out(f"cases more than 3% above the best policy: {len(above)}"
        + (f" ({', '.join(map(str, above))})" if above else ""))
    if unproven:
        out(f"({unproven} optimal result(s) hit the {optimal_limit:g} s limit: best found, not proven)")
    return {"ratio": r, "worse": worse, "above": above, "unproven": unproven}


def fragmented_section(out=print, rows: Optional[List[Tuple[int, str, float]]] = None) -> dict:
    """Decision time on scenarios/sim-2048-fragmented.yaml: a cold epoch, an incremental one
    (one job's compute time +20%: ``_next_epoch``), the critical path of the cold epoch (the
    slowest rack per phase + the Coordinator), and the closed-form proxy's error against the
    model on sampled groups of the large racks (``proxy_error``)."""
    from pathlib import Path
    from workloads.scenario import load_scenario
    path = Path(__file__).resolve().parent.parent / "scenarios" / "sim-2048-fragmented.yaml"
    st = state_from_scenario(resolve(load_scenario(path)))
    h = get_policy("harmonics")
    t_cold, w_cold = _timed_cpu(h, st)
    crit = h.stats["critical_path_s"]
    t_incr, w_incr = _timed_cpu(h, _next_epoch(st))
    crit_incr = h.stats["critical_path_s"]
    out(f"decision time at 2048 GPUs fragmented: harmonics {t_cold:.3f} s cold, {t_incr:.3f} s "
        f"incremental, {crit:.3f} s critical path")
    out(f"(CPU time of this process; wall {w_cold:.3f} / {w_incr:.3f} s; the critical path is "
        f"the deciding thread's CPU time; incremental critical path {crit_incr:.3f} s; {h.stats['racks_reused']} of "
        f"{h.stats['racks']} racks kept their Local Scheduler)")
    t0 = time.perf_counter()
    get_policy("crux").decide(st)
    out(f"(crux on the same state: {time.perf_counter() - t0:.3f} s)")
    if rows is not None:
        rows.extend([(2048, "harmonics-fragmented", 1e3 * t_cold),
                     (2048, "harmonics-fragmented-incremental", 1e3 * t_incr),
                     (2048, "harmonics-fragmented-critical-path", 1e3 * crit)])
    err = proxy_error(st)
    out(f"closed-form proxy against the model on {err['samples']} sampled groups of "
        f"{err['jobs']} jobs (large racks of this state, random decisions): mean |error| of the "
        f"group's mean slowdown {100 * err['mean_abs_rel']:.1f}%, correlation {err['corr']:.2f}")
    return {"cold": t_cold, "incr": t_incr, "crit": crit}


def proxy_error(st, samples: int = 40, seed: int = 1) -> dict:
    """The closed-form proxy (large groups) against the model on ``samples`` random groups of
    6-14 jobs drawn from the large groups of ``st``'s racks, each job at a random option of
    its rack's option list; both in the rack's view (slowdowns capped at 50 so that a few
    starved jobs do not decide the figure)."""
    import numpy as np
    from scheduling.fluid import STARVED_SLOWDOWN
    h = get_policy("harmonics", warm=False)
    h.decide(st)
    large = [L for _, L in h._prev[1].values() if L.large]   # the epoch's Local Schedulers
    rng = random.Random(seed)
    m_, p_, sizes = [], [], []
    for _ in range(samples if large else 0):
        L = rng.choice(large)
        g = L.large[0]
        S = rng.sample(g, min(len(g), rng.randint(6, 14)))
        a = {n: rng.choice(L.options[n]) for n in S}
        ts = L.model.ev.times([L._sim(n, a[n]) for n in S])
        m_.append(np.mean([min(t / L.iso[n], STARVED_SLOWDOWN, 50.0) for n, t in zip(S, ts)]))
        p_.append(float(np.mean(np.minimum(L._proxy(S, a)[0], 50.0))))
        sizes.append(len(S))
    if not m_:
        return {"samples": 0, "jobs": "-", "mean_abs_rel": float("nan"), "corr": float("nan")}
    m, p = np.array(m_), np.array(p_)
    return {"samples": len(m), "jobs": f"{min(sizes)}-{max(sizes)}",
            "mean_abs_rel": float(np.mean(np.abs(p / m - 1))),
            "corr": float(np.corrcoef(m, p)[0, 1]) if len(m) > 1 else float("nan")}


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="*", default=sorted(TOPOLOGIES))
    ap.add_argument("--optimal-limit", type=float, default=30.0,
                    help="optimal's time limit per epoch at 64..1024 GPUs (skipped above)")
    ap.add_argument("--quality-limit", type=float, default=60.0, help="optimal's limit per quality case")
    ap.add_argument("--quality", action="store_true", help="quality table only")
    ap.add_argument("--scale-only", action="store_true", help="decision times only")
    ap.add_argument("--wide-cases", type=int, default=50, help="widened random cases scored")
    ap.add_argument("--wide-limit", type=float, default=10.0, help="optimal's limit per widened case")
    ap.add_argument("--csv", metavar="FILE",
                    help="also write the decision-time table as rows gpus,policy,decision_ms")
    a = ap.parse_args(argv)
    for s in a.sizes:
        if s not in TOPOLOGIES:
            ap.error(f"size {s} not in {sorted(TOPOLOGIES)}")
    w = warm_up()
    print("model kernel: " + ("pure Python (numba missing or HARMONICS_NO_JIT=1)" if w is None
                              else f"compiled (numba), loaded in {w:.2f} s, before any timing"))
    if not a.scale_only:
        quality_section(a.quality_limit)
        print()
        if a.wide_cases > 0:
            wide_section(a.wide_cases, a.wide_limit)
            print()
    if a.quality:
        return 0
    limits = {g: a.optimal_limit for g in a.sizes if g <= 1024}
    rows: Optional[List[Tuple[int, str, float]]] = [] if a.csv else None
    ratio = scale_section(a.sizes, limits, rows=rows)
    print()
    fragmented_section(rows=rows)
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("gpus,policy,decision_ms\n")
            for g, n, ms in rows:
                f.write(f"{g},{n},{ms:.3f}\n")
    if ratio is not None:
        print(f"decision-time ratio optimal/harmonics at 1024 GPUs: {ratio:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
