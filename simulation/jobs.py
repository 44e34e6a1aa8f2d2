"""The jobs as the engine runs them: each iteration compiled into steps (compute, then a
collective as entity templates: network host pairs with their flow counts), and the runtime
objects of a job, a collective in flight and a flow entity."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from workloads.cluster import Cluster
from workloads.flows import collective_flows
from workloads.scenario import Collective, Compute, ResolvedJob, groups_of

COUPLED_OPS = ("allreduce", "allgather", "reducescatter", "broadcast")


# ---------------------------------------------------------------------------
# Job templates: collectives -> entity templates (host pairs with multiplicities)
# ---------------------------------------------------------------------------

@dataclass
class _EntityTemplate:
    pairs: List[Tuple[Tuple[str, str], int]]     # network host pairs and how many flows each
    intra: List[Tuple[str, int]]                 # same-host flows per host
    bytes: float                                 # per flow

    def __post_init__(self):
        self.nflows = sum(c for _, c in self.pairs)   # network flows, for the job's rate


@dataclass
class _Step:
    compute_s: float
    coll: Optional[List[_EntityTemplate]]        # None: no collective in this step
    overlap: float = 0.0


def _collective_templates(c: Collective, rj: ResolvedJob) -> List[_EntityTemplate]:
    n = len(rj.workers)
    hosts = [w.host for w in rj.workers]
    flows = collective_flows(c, n)
    if not flows:
        return []
    out: List[_EntityTemplate] = []
    if c.op in COUPLED_OPS:
        group_of = {}
        for gi, grp in enumerate(groups_of(c.group, n)):
            for r in grp:
                group_of[r] = gi
        by_group: Dict[int, List] = {}
        for f in flows:
            by_group.setdefault(group_of[f.src], []).append(f)
        for gi in sorted(by_group):
            fl = by_group[gi]
            pairs: Dict[Tuple[str, str], int] = {}
            intra: Dict[str, int] = {}
            for f in fl:
                a, b = hosts[f.src], hosts[f.dst]
                if a == b:
                    intra[a] = intra.get(a, 0) + 1
                else:
                    pairs[(a, b)] = pairs.get((a, b), 0) + 1
            # every edge of one ring carries the same bytes
            out.append(_EntityTemplate(sorted(pairs.items()), sorted(intra.items()), fl[0].bytes))
    else:
        # independent flows; merge those with the same host pair and size
        merged: Dict[Tuple[str, str, float], int] = {}
        for f in flows:
            key = (hosts[f.src], hosts[f.dst], f.bytes)
            merged[key] = merged.get(key, 0) + 1
        for (a, b, by), cnt in sorted(merged.items()):
            if a == b:
                out.append(_EntityTemplate([], [(a, cnt)], by))
            else:
                out.append(_EntityTemplate([((a, b), cnt)], [], by))
    return out


def compile_steps(rj: ResolvedJob) -> List[_Step]:
    steps: List[_Step] = []
    pending_compute: Optional[float] = None
    for p in rj.profile.phases:
        if isinstance(p, Compute):
            if pending_compute is not None:
                steps.append(_Step(pending_compute, None))
            pending_compute = p.seconds
        else:
            tpl = _collective_templates(p, rj)
            if pending_compute is not None:
                steps.append(_Step(pending_compute, tpl, p.overlap))
                pending_compute = None
            else:
                steps.append(_Step(0.0, tpl, 0.0))
    if pending_compute is not None:
        steps.append(_Step(pending_compute, None))
    return steps


# ---------------------------------------------------------------------------
# Runtime objects
# ---------------------------------------------------------------------------

class _Coll:
    __slots__ = ("job", "start", "left")

    def __init__(self, job, start, left):
        self.job = job
        self.start = start
        self.left = left


class _Job:
    def __init__(self, idx: int, rj: ResolvedJob, iterations: int, cluster: Cluster):
        self.idx = idx
        self.rj = rj
        self.name = rj.name
        self.steps = compile_steps(rj)
        self.iterations = iterations
        self.arrival = float(rj.spec.arrival_s)
        self.compute_per_iter = sum(s.compute_s for s in self.steps)
        self.cf = 1.0                        # this iteration's compute-time factor (jitter)
        self.it = 0
        self.step = 0
        self.waiting = 0
        self.iter_start = 0.0
        self.iter_comm = 0.0
        self.arrived = False
        self.done = False
        self.finish = None
        self.records: List[tuple] = []
        self.decision = None
        self.cls = 0
        self.pending_shift = 0.0
        self.last_shift = 0.0
        self.shift_total = 0.0
        self.colls: List[_Coll] = []
        self.slots: set = set()
        # measurement over the current epoch
        self.m_pairs: Dict[Tuple[str, str], float] = {}
        self.route_sig = None
        self.sig_version = -1


class _Entity:
    __slots__ = ("job", "coll", "tpl", "slot", "sent_mark")

    def __init__(self, job, coll, tpl, slot):
        self.job = job
        self.coll = coll
        self.tpl = tpl
        self.slot = slot
        self.sent_mark = 0.0
