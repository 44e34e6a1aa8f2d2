"""The one interface every scheduling policy implements.

State in (what a policy may know at an epoch boundary), decisions out.  Pure Python:
no Mininet, no os-ken.  The controller (emulator) and the simulator build the same
``ClusterState`` from what they measured, call ``Policy.decide`` and enforce the result.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

from workloads.cluster import Cluster
from workloads.flows import host_pair_bytes
from workloads.scenario import ResolvedJob, ResolvedScenario

from .links import isolated_iteration_time  # the shared contention model's closed form

HostPair = Tuple[str, str]


@dataclass
class JobState:
    """One running job as a policy sees it.

    ``pair_bytes``: bytes per iteration between each ordered pair of hosts (declared by the
    trace, or estimated from counters).  ``compute_s``: compute per iteration that does not
    overlap communication.  ``period_s``/``active_fraction``: measured over the last epoch
    (None before the first measurement)."""
    name: str
    hosts: List[str]                       # host of each rank
    racks: List[int]                       # racks the job touches (sorted)
    compute_s: float
    pair_bytes: Dict[HostPair, float]
    iso_iter_s: float                      # isolated iteration time under the model
    gpus: int = 1
    period_s: Optional[float] = None
    active_fraction: Optional[float] = None
    iterations_left: Optional[int] = None  # iterations still to run; None: unknown (no end known)

    @property
    def spans_racks(self) -> bool:
        return len(self.racks) > 1


@dataclass
class ClusterState:
    cluster: Cluster
    jobs: List[JobState]
    num_classes: int = 4                    # priority classes the network enforces
    link_load_gbps: Optional[List[float]] = None   # measured, per link index
    epoch: int = 0
    time_s: float = 0.0


@dataclass
class Decision:
    """What a policy decides for one job.  ``priority``: 0 is the highest class.
    ``rate_caps_gbps``: link id -> cap for this job's traffic on that link.
    ``spine``: one spine for all the job's cross-rack flows (None: leave to ECMP),
    overridden per host pair by ``flow_spines`` ("src>dst" -> spine index).
    ``shift_s``: delay of the job's next iteration start (CASSINI-style)."""
    job: str
    priority: int = 0
    rate_caps_gbps: Dict[str, float] = field(default_factory=dict)
    spine: Optional[int] = None
    flow_spines: Dict[str, int] = field(default_factory=dict)
    shift_s: float = 0.0
    reason: str = ""

    def spine_for(self, src: str, dst: str) -> Optional[int]:
        return self.flow_spines.get(f"{src}>{dst}", self.spine)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Decision":
        return cls(**d)


Decisions = Dict[str, Decision]


def decisions_to_json(ds: Decisions) -> str:
    return json.dumps({k: v.to_dict() for k, v in sorted(ds.items())}, sort_keys=True)


def decisions_from_json(s: str) -> Decisions:
    return {k: Decision.from_dict(v) for k, v in json.loads(s).items()}


class Policy(ABC):
    """A scheduling policy: a strategy object, stateless between epochs unless it says so."""

    name: str = "?"
    uses_priorities: bool = True
    uses_shifts: bool = False

    @abstractmethod
    def decide(self, state: ClusterState) -> Decisions:
        ...


def job_state(job: ResolvedJob, cluster: Cluster, iso_iter_s: Optional[float] = None) -> JobState:
    """JobState from a job's declared trace (no measurements yet)."""
    st = JobState(
        name=job.name,
        hosts=job.hosts,
        racks=job.racks(cluster),
        compute_s=non_overlapped_compute(job.profile),
        pair_bytes=host_pair_bytes(job),
        iso_iter_s=0.0,
        gpus=len(job.workers),
    )
    # an iteration never ends before its compute does, whatever the overlap hides
    st.iso_iter_s = iso_iter_s if iso_iter_s is not None else max(
        job.profile.compute_s, isolated_iteration_time(st, cluster))
    return st


def non_overlapped_compute(profile) -> float:
    """Compute per iteration that no collective runs alongside: a collective with overlap f
    starts after (1 - f) of the compute phase before it, so f of that phase is hidden behind
    communication (exact when the collective outlasts that window, as on a busy network)."""
    from workloads.scenario import Collective, Compute

    total, prev = 0.0, None
    for p in profile.phases:
        if isinstance(p, Compute):
            total += p.seconds
            prev = p
        elif isinstance(p, Collective) and prev is not None and p.overlap > 0:
            total -= p.overlap * prev.seconds
            prev = None  # only the first collective after a compute phase overlaps it
    return max(total, 0.0)


def state_from_scenario(rs: ResolvedScenario, num_classes: int = 4) -> ClusterState:
    return ClusterState(rs.cluster, [job_state(j, rs.cluster) for j in rs.jobs], num_classes)
