"""The "limit" row of a comparison: how far each policy is from what the cluster allows.

Per job j, with T0_j its isolated iteration time (measured by the back end when the results
carry it, else the shared model's):

    limit_j = T0_j * max(1, rho_j),   rho_j = max over j's link groups g of rho_g,
    rho_g   = sum over the jobs m that use g of B_mg / (C_g * T0_m)

B_mg: m's bytes per iteration on g; a link group is a host link (one direction) or all the
ToR-spine uplinks of one rack in one direction (C_g their summed capacity), so that rho_g does
not depend on the spines a policy picks.  rho_g is the load g would carry if every job using
it ran at its isolated pace: where it exceeds 1 the link cannot carry that, and since
sum_m B_mg / T_m <= C_g in steady state, the jobs on g cannot all be slowed by less than
rho_g (their u-weighted harmonic mean slowdown, u_m = B_mg / (C_g T0_m) / rho_g, is at least
rho_g).  limit_j is therefore the iteration time j would have if its most loaded link group
were shared with every job slowed alike, and T0_j where nothing is oversubscribed: no policy
can bring all the jobs of a group below it at once; one job may go below it only by slowing
another.  Jobs count as sharing g if their lifetimes at isolated pace (arrival + iterations x
T0) overlap.  Gap of a policy = its mean iteration time / the mean of limit_j.  On the
emulator C_g is the payload rate: the shaped rate less the frames' headers.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, Mapping, Optional, Set


def _groups(scenario_yaml: Path):
    """(resolved scenario, cluster state, group capacities at payload 1, job -> {group: bytes
    per iteration}); None if the scenario cannot be resolved."""
    try:
        from scheduling import state_from_scenario
        from scheduling.links import job_link_bytes, link_capacities
        from workloads.scenario import load_scenario, resolve
        rs = resolve(load_scenario(scenario_yaml))
    except Exception:          # a report must not fail on a scenario of another schema
        return None
    st = state_from_scenario(rs)
    cl = st.cluster
    cap = link_capacities(cl)
    rack_of = {t: r for r, t in enumerate(cl.tors)}

    def group(l) -> tuple:
        link = cl.links[l]
        if link.kind == "uplink":
            return ("uplinks of rack", rack_of.get(link.src, link.src), "up")
        if link.kind == "downlink":
            return ("uplinks of rack", rack_of.get(link.dst, link.dst), "down")
        return (link.id,)
    gcap: Dict[tuple, float] = {}
    for link in cl.links:
        g = group(link.index)
        gcap[g] = gcap.get(g, 0.0) + cap[link.index]
    use: Dict[str, Dict[tuple, float]] = {}
    for js in st.jobs:
        b, _ = job_link_bytes(js, cl)
        per: Dict[tuple, float] = {}
        for l, x in b.items():
            g = group(l)
            per[g] = per.get(g, 0.0) + x
        use[js.name] = per
    return rs, st, gcap, use


def link_neighbours(scenario_yaml: Path) -> Dict[str, Set[str]]:
    """job -> the other jobs that use one of its link groups (a host link in one direction,
    or the uplinks of a rack in one direction: independent of the spines a policy picks);
    {} if the scenario cannot be resolved."""
    g = _groups(scenario_yaml)
    if g is None:
        return {}
    use = g[3]
    return {n: {m for m in use if m != n and any(x in use[m] for x in per)}
            for n, per in use.items()}


def job_limits(scenario_yaml: Path, isolated: Optional[Mapping[str, float]] = None,
               payload_fraction: float = 1.0) -> Dict[str, dict]:
    """job -> {"isolated_s", "rho", "group", "limit_s"}; {} if the scenario cannot be
    resolved (the report then shows no limit row).  ``payload_fraction``: the share of a
    link's rate that carries the jobs' bytes (the emulator's frames carry headers too:
    emulation.qos.TCP_PAYLOAD_PER_FRAME; 1 for the fluid simulator)."""
    g = _groups(scenario_yaml)
    if g is None:
        return {}
    rs, st, gcap, use = g
    gcap = {k: v * payload_fraction for k, v in gcap.items()}
    iso, life = {}, {}
    arrivals = {j.name: j.spec.arrival_s for j in rs.jobs}
    iters = {j.name: j.spec.iterations for j in rs.jobs}
    for js in st.jobs:
        t0 = (isolated or {}).get(js.name, math.nan)
        if not (t0 > 0):
            t0 = js.iso_iter_s
        iso[js.name] = t0
        a = arrivals.get(js.name, 0.0)
        life[js.name] = (a, a + iters.get(js.name, 1) * t0)
    out = {}
    for n, per in use.items():
        best, where = 0.0, None
        for g in per:
            rho = (sum(use[m].get(g, 0.0) / (gcap[g] * iso[m]) for m in use
                      if g in use[m] and iso[m] > 0
                      and life[m][0] < life[n][1] and life[n][0] < life[m][1])) if gcap[g] > 0 else 0.0
            if rho > best:
                best, where = rho, g
        out[n] = {"isolated_s": iso[n], "rho": best,
                  "group": " ".join(str(x) for x in where) if where else "",
                  "limit_s": iso[n] * max(1.0, best)}
    return out

