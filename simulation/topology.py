"""Topologies for large simulated runs, as ``workloads.cluster.ClusterSpec`` objects.

* ``leaf_spine(...)``: the schema's uniform leaf-spine.
* ``lingjun_cluster(...)``: the real production Clos of Alibaba's Lingjun data set
  (``simulation/data/lingjun2023/topo.csv``, see its PROVENANCE.md): 847 hosts under 119 ToRs
  under 3 aggregation switches.  Expressed as a leaf-spine: one rack per ToR (the rack's host
  count is the ToR's host count in the table), the 3 aggregation switches are the spines and
  every ToR links to every spine.  GPUs per host and link rates are not in the data: they
  are settings.
"""
from __future__ import annotations

import csv
import re
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from workloads.cluster import ClusterSpec

DATA_DIR = Path(__file__).resolve().parent / "data"
LINGJUN_TOPO = DATA_DIR / "lingjun2023" / "topo.csv"


def _num(s: str) -> Tuple[str, int]:
    m = re.fullmatch(r"([A-Za-z]*)(\d+)", s)
    return (m.group(1), int(m.group(2))) if m else (s, -1)


@lru_cache(maxsize=1)
def lingjun_racks() -> List[Tuple[str, str, int]]:
    """The ToRs of the Lingjun table as (PSW, ASW, hosts), in rack order: sorted by
    aggregation switch then ToR name, numerically (P8 < P10 < P12, S2 < S10).  A ToR is the
    pair (PSW, ASW): ASW names are reused under different PSWs."""
    counts: Dict[Tuple[str, str], int] = {}
    with open(LINGJUN_TOPO, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["PSW"].strip(), row["ASW"].strip())
            counts[key] = counts.get(key, 0) + 1
    order = sorted(counts, key=lambda k: (_num(k[0]), _num(k[1])))
    return [(p, a, counts[(p, a)]) for p, a in order]


def lingjun_cluster(gpus_per_host: int = 8, host_link_gbps: float = 200.0,
                    uplink_gbps: float = 400.0, gpu: str = "A100",
                    class_guarantee: Optional[float] = None) -> ClusterSpec:
    """The Lingjun production Clos as a ClusterSpec: 119 racks with their real host counts
    (847 hosts), 3 spines.  Defaults (assumptions, not in the data): 8 GPUs per host, one
    200 Gb/s host link, 400 Gb/s from every ToR to each of the 3 spines (a full 8-host rack is
    then 1600:1200, i.e. 1.33:1 oversubscribed).  ``class_guarantee``: the switches' minimum
    share per priority class (``ClusterSpec``)."""
    racks = lingjun_racks()
    spines = len({p for p, _, _ in racks})
    return ClusterSpec(racks=len(racks), hosts_per_rack=[n for _, _, n in racks], spines=spines,
                       gpus_per_host=gpus_per_host, host_link_gbps=host_link_gbps,
                       uplink_gbps=uplink_gbps, gpu=gpu, class_guarantee=class_guarantee)


def leaf_spine(racks: int, hosts_per_rack: int, spines: int, gpus_per_host: int = 8,
               host_link_gbps: float = 200.0, uplink_gbps: Optional[float] = None,
               oversubscription: float = 2.0, gpu: str = "A100",
               class_guarantee: Optional[float] = None) -> ClusterSpec:
    """A uniform leaf-spine; ``uplink_gbps`` defaults to the rate that gives
    ``oversubscription`` = hosts * host rate / (spines * uplink rate).  ``class_guarantee``:
    the switches' minimum share per priority class (``ClusterSpec``)."""
    if uplink_gbps is None:
        uplink_gbps = hosts_per_rack * host_link_gbps / (spines * oversubscription)
    return ClusterSpec(racks=racks, hosts_per_rack=hosts_per_rack, spines=spines,
                       gpus_per_host=gpus_per_host, host_link_gbps=host_link_gbps,
                       uplink_gbps=uplink_gbps, gpu=gpu, class_guarantee=class_guarantee)
