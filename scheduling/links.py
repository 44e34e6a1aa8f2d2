"""Per-link byte accounting of a job on the cluster: link capacities, a job's bytes per
iteration on every link of its paths, and its isolated times (default ECMP paths)."""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

from .fluid import BYTES_PER_GBIT


def link_capacities(cluster) -> Dict[int, float]:
    """Link index -> capacity in bytes/s."""
    return {l.index: l.gbps * BYTES_PER_GBIT for l in cluster.links}


def job_link_bytes(js, cluster, spine: Optional[int] = None,
                   flow_spines: Optional[Mapping[str, int]] = None) -> Tuple[Dict[int, float], float]:
    """(link index -> bytes per iteration, bytes of the heaviest pair) for a job whose
    cross-rack pairs use ``spine`` (None: ECMP hash) unless ``flow_spines`` says otherwise."""
    use: Dict[int, float] = {}
    bmax = 0.0
    for (a, b), nbytes in js.pair_bytes.items():
        if nbytes <= 0 or a == b:
            continue
        sp = spine
        if flow_spines:
            sp = flow_spines.get(f"{a}>{b}", spine)
        for l in cluster.path(a, b, sp):
            use[l] = use.get(l, 0.0) + nbytes
        bmax = max(bmax, nbytes)
    return use, bmax


def isolated_comm_time(js, cluster) -> float:
    use, bmax = job_link_bytes(js, cluster)
    if not use:
        return 0.0
    return max(b / (cluster.links[l].gbps * BYTES_PER_GBIT) for l, b in use.items())


def isolated_iteration_time(js, cluster) -> float:
    """The job alone on the cluster, default (ECMP) paths: compute + comm on its slowest link."""
    return js.compute_s + isolated_comm_time(js, cluster)

