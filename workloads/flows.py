"""Collectives decomposed into point-to-point flows: the one definition used by the
workers (what they send), the schedulers (bytes per link) and the simulator.

Conventions (bytes = the collective's ``bytes`` field M, group of n ranks in ring order):
  allreduce      ring, 2(n-1) steps; each rank sends M/n per step to its successor
  allgather      ring, n-1 steps of M/n  (M = gathered buffer)
  reducescatter  ring, n-1 steps of M/n  (M = input buffer)
  alltoall       one step; each rank sends M/n to every other rank (M = per-rank buffer)
  sendrecv       one step; rank i sends M to rank i+1 of its group (pipeline stages)
  broadcast      chain from the group's first rank, pipelined; every chain edge carries M
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

from .scenario import Collective, ResolvedJob, groups_of


@dataclass(frozen=True)
class Flow:
    src: int      # rank
    dst: int      # rank
    bytes: float  # per iteration (this collective), in the trace's units
    steps: int    # the transfer is cut into this many equal, synchronised steps


def collective_flows(c: Collective, n: int) -> List[Flow]:
    flows: List[Flow] = []
    for grp in groups_of(c.group, n):
        g = len(grp)
        if g < 2 or c.bytes == 0:
            continue
        if c.op in ("allreduce", "allgather", "reducescatter"):
            steps = 2 * (g - 1) if c.op == "allreduce" else g - 1
            per = c.bytes / g * steps
            for i in range(g):
                flows.append(Flow(grp[i], grp[(i + 1) % g], per, steps))
        elif c.op == "alltoall":
            for a in grp:
                for b in grp:
                    if a != b:
                        flows.append(Flow(a, b, c.bytes / g, 1))
        elif c.op == "sendrecv":
            for i in range(g - 1):
                flows.append(Flow(grp[i], grp[i + 1], c.bytes, 1))
        elif c.op == "broadcast":
            for i in range(g - 1):
                flows.append(Flow(grp[i], grp[i + 1], c.bytes, 1))
        else:  # pragma: no cover - schema forbids it
            raise ValueError(c.op)
    return flows


def host_pair_bytes(job: ResolvedJob) -> Dict[Tuple[str, str], float]:
    """Bytes per iteration the job sends between each ordered pair of distinct hosts
    (workers on the same host exchange data without touching the network)."""
    out: Dict[Tuple[str, str], float] = {}
    n = len(job.workers)
    for c in job.profile.collectives:
        for f in collective_flows(c, n):
            a, b = job.workers[f.src].host, job.workers[f.dst].host
            if a != b:
                out[(a, b)] = out.get((a, b), 0.0) + f.bytes
    return out
