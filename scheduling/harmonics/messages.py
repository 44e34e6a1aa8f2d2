"""The messages that cross between the tiers (plain dataclasses, JSON on the wire)."""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field, fields
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..common import Opt
from ..fluid import SimJob


@dataclass
class OptionCost:
    """One alternative decision for a rack-spanning job, as one rack sees it."""
    priority: int
    spine: Optional[int]
    cap: float
    own: float        # the job's predicted slowdown on this rack's links
    local_others: float   # summed slowdown of the rack-local jobs that may share a link with it
    shift: int = 0    # start-time shift phase (common.shift_seconds)


@dataclass
class JobSummary:
    job: str
    preferred: int                 # index into options of the rack's preferred decision
    options: List[OptionCost]      # same order in every rack (priority, spine, cap, shift)
    uplink_gbps: float             # the job's mean demand on this rack's ToR-spine links
    compute_s: float = 0.0         # the job's compute per iteration (its profile)
    iso_s: float = 0.0             # its isolated iteration time (global, default paths)
    local_peers: int = 0           # rack-local jobs that may share one of its links here
    # the other rack-spanning jobs that may share a link with it on this rack, and their
    # slowdowns under each option (options x len(cross))
    cross: List[str] = field(default_factory=list)
    cross_costs: Optional[np.ndarray] = None
    matrix: Optional[np.ndarray] = None   # costs() as received (decoded messages)

    def costs(self) -> np.ndarray:
        """options x (2 + len(cross)): own, local_others, then each ``cross`` job's slowdown."""
        if self.matrix is not None:
            return self.matrix
        m = np.empty((len(self.options), 2 + len(self.cross)))
        m[:, 0] = [o.own for o in self.options]
        m[:, 1] = [o.local_others for o in self.options]
        if self.cross:
            m[:, 2:] = self.cross_costs
        return m


class OptionList(Sequence):
    """A summary's options beside its cost matrix: rows ``(priority, spine, cap, shift)``,
    and their wire form ``packed`` (``pack_options``), each ``OptionCost`` built when read
    (the Coordinator reads the cost matrix and only the options it picks)."""

    def __init__(self, rows, m: np.ndarray, packed: Optional[str] = None):
        """``rows``: a list of rows, or None: decoded from ``packed`` when first read."""
        self._rows, self._m, self.packed = rows, m, packed

    def __len__(self) -> int:
        return len(self._m)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if self._rows is None:
            self._rows = _unpack_options(self.packed)
        p, sp, c, sh = self._rows[i]
        return OptionCost(p, sp, c, float(self._m[i, 0]), float(self._m[i, 1]), sh)

    def find(self, row: tuple) -> Optional[int]:
        """The index of the first option whose (priority, spine, cap, shift) equals ``row``,
        or None (no ``OptionCost`` built on the way)."""
        if self._rows is None:
            self._rows = _unpack_options(self.packed)
        for k in range(len(self)):
            if self._rows[k] == row:
                return k
        return None


def pack_options(rows) -> str:
    """Option rows on the wire, base64 of (priority, spine or -1 for ECMP, shift) per row as
    little-endian int16, then every row's cap as little-endian float64 (exact)."""
    rows = list(rows)
    ints = np.array([(p, -1 if sp is None else sp, sh) for p, sp, _, sh in rows], dtype="<i2")
    caps = np.array([c for _, _, c, _ in rows], dtype="<f8")
    return base64.b64encode(ints.tobytes() + caps.tobytes()).decode("ascii")


def _unpack_options(s: str) -> List[tuple]:
    """``pack_options``'s rows (read-only: one list per distinct wire form, kept in
    ``_UNPACKED``: the racks send the same few option lists again and again)."""
    rows = _UNPACKED.get(s)
    if rows is None:
        if len(_UNPACKED) > 4096:
            _UNPACKED.clear()
        rows = _UNPACKED[s] = _decode_options(s)
    return rows


_UNPACKED: Dict[str, List[tuple]] = {}


def _decode_options(s: str) -> List[tuple]:
    raw = base64.b64decode(s)
    n = len(raw) // 14
    ints = np.frombuffer(raw[:6 * n], dtype="<i2").reshape(n, 3).tolist()
    caps = np.frombuffer(raw[6 * n:], dtype="<f8").tolist()
    return [(p, None if sp < 0 else sp, c, sh) for (p, sp, sh), c in zip(ints, caps)]


def _pack(m: np.ndarray) -> str:
    """A float matrix on the wire: little-endian float64, row-major, base64 (exact values)."""
    return base64.b64encode(np.ascontiguousarray(m, dtype="<f8").tobytes()).decode("ascii")


def _unpack(s: str) -> np.ndarray:
    """``_pack``'s values, flat (read-only, on the decoded bytes)."""
    return np.frombuffer(base64.b64decode(s), dtype="<f8")


@dataclass
class RackSummary:
    """Local Scheduler -> Coordinator, once per round."""
    rack: int
    epoch: int
    round: int
    jobs: List[JobSummary]         # rack-spanning jobs only
    uplink_demand_gbps: float      # aggregate demand of the rack's rack-spanning jobs
    local_jobs: int                # rack-local jobs (never described to the Coordinator)

    def to_json(self) -> str:
        """Compact wire form, one column per field of the jobs (``jobs``: their names; no
        object per job to build and parse): each job's options as packed rows
        (``pack_options``) and its costs as one matrix (``JobSummary.costs``: own,
        local_others, each ``cross`` job's slowdown), every job's matrix in one block,
        row-major and in job order, of little-endian float64 in base64 (``rows``: each
        matrix's rows; exact, and no float formatting: at 2,048 fragmented GPUs a round
        carries ~200,000 costs)."""
        js = self.jobs
        mats = [j.costs() for j in js]
        head = json.dumps({
            "rack": self.rack, "epoch": self.epoch, "round": self.round,
            "uplink_demand_gbps": self.uplink_demand_gbps, "local_jobs": self.local_jobs,
            "jobs": [j.job for j in js], "preferred": [j.preferred for j in js],
            "uplink_gbps": [j.uplink_gbps for j in js], "compute_s": [j.compute_s for j in js],
            "iso_s": [j.iso_s for j in js], "local_peers": [j.local_peers for j in js],
            "cross": [j.cross for j in js],
            "options": [j.options.packed if isinstance(j.options, OptionList)
                        and j.options.packed is not None else pack_options(
                            (o.priority, o.spine, o.cap, o.shift) for o in j.options)
                        for j in js],
            "rows": [len(m) for m in mats]})
        # the costs last, spliced in: exactly what json.dumps would write (base64 needs no
        # escaping), without its scan of the block (most of the message)
        costs = _pack(np.concatenate([m.ravel() for m in mats]) if mats else np.zeros(0))
        return f'{head[:-1]}, "costs": "{costs}"}}'

    @classmethod
    def from_json(cls, s: str) -> "RackSummary":
        d = json.loads(s)
        flat = _unpack(d["costs"])
        jobs = []
        k = 0
        for job, pref, up, comp, iso, peers, cross, opts, rows in zip(
                d["jobs"], d["preferred"], d["uplink_gbps"], d["compute_s"], d["iso_s"],
                d["local_peers"], d["cross"], d["options"], d["rows"]):
            cols = 2 + len(cross)
            m = flat[k:k + rows * cols].reshape(rows, cols)
            k += rows * cols
            jobs.append(JobSummary(job, pref, OptionList(None, m, opts), up, comp, iso, peers,
                                   cross, m[:, 2:], m))
        return cls(d["rack"], d["epoch"], d["round"], jobs, d["uplink_demand_gbps"],
                   d["local_jobs"])


@dataclass
class Assignment:
    job: str
    priority: int
    spine: Optional[int]
    cap: float
    shift: int = 0

    @property
    def opt(self) -> Opt:
        return Opt(self.priority, self.spine, self.cap, self.shift)


@dataclass
class CoordinatorMessage:
    """Coordinator -> every Local Scheduler a job touches: the one decision of each
    rack-spanning job."""
    epoch: int
    round: int
    assignments: List[Assignment]
    probe: List[str] = field(default_factory=list)   # phase stage: jobs offered every class
    # proposal stage: the ghosts this rack's halo view holds, the other racks' proposals it
    # is asked to cost, the proposals accepted
    ghosts: List[GhostJob] = field(default_factory=list)
    proposals: List[Proposal] = field(default_factory=list)
    accepted: List[str] = field(default_factory=list)
    joint: List[int] = field(default_factory=list)   # joint stage: the component's racks

    def to_json(self) -> str:
        """Assignments, ghosts and proposals as rows of their fields (``_row``): no
        ``asdict`` deep copy, no key per field."""
        return json.dumps({"epoch": self.epoch, "round": self.round,
                           "assignments": _assignment_rows(self.assignments),
                           "probe": self.probe, "ghosts": [_row(g) for g in self.ghosts],
                           "proposals": [_proposal_row(p) for p in self.proposals],
                           "accepted": self.accepted, "joint": self.joint})

    @classmethod
    def from_json(cls, s: str) -> "CoordinatorMessage":
        d = json.loads(s)
        return cls(d["epoch"], d["round"], [Assignment(*a) for a in d["assignments"]],
                   d["probe"], [GhostJob(*g) for g in d["ghosts"]],
                   [_proposal(p) for p in d["proposals"]], d["accepted"], d["joint"])


@dataclass
class GhostJob:
    """A rack-local job of one rack as the other racks' halo views hold it (proposal stage):
    its traffic on the links it may share with rack-spanning jobs there, its held class and
    shift, its bound (rate cap, global isolated pace).  ``meets``: those rack-spanning jobs
    (the Coordinator sends the ghost to their racks)."""
    job: str
    rack: int
    priority: int
    shift_s: float
    compute_s: float
    links: List[int]
    bytes: List[float]
    bmax: float
    lam_max: Optional[float]       # None: unbounded
    meets: List[str]
    iso_s: float = 0.0             # its isolated iteration time

    def sim(self, priority: Optional[int] = None, shift_s: Optional[float] = None) -> SimJob:
        return SimJob(self.compute_s, tuple(self.links), tuple(self.bytes), self.bmax,
                      self.priority if priority is None else priority,
                      float("inf") if self.lam_max is None else self.lam_max,
                      self.shift_s if shift_s is None else shift_s)


@dataclass
class Proposal:
    """A rack's joint decision for one of its halo groups: the new decisions of the group's
    rack-spanning jobs (all of them, changed or not) and of its rack-local jobs that other
    racks hold as ghosts (``GhostJob``; job, class, shift in seconds)."""
    rack: int
    index: int
    assignments: List[Assignment]
    ghosts: List[Tuple[str, int, float]] = field(default_factory=list)

    @property
    def pid(self) -> str:
        return f"{self.rack}:{self.index}"


@dataclass
class ViewCost:
    """A rack's halo-view cost of one joint assignment: the summed slowdown of its rack-local
    jobs and each rack-spanning job's slowdown (only groups with a rack-spanning job)."""
    local: float
    cross: Dict[str, float] = field(default_factory=dict)


@dataclass
class ProposalReport:
    """Local Scheduler -> Coordinator in the proposal stage: its boundary (ghosts), or its
    proposals, and for every proposal it made or was asked about (``costs``, by
    ``Proposal.pid``) the halo-view cost before and after it, over the halo groups it
    touches."""
    rack: int
    epoch: int
    round: int
    boundary: List[GhostJob] = field(default_factory=list)
    proposals: List[Proposal] = field(default_factory=list)
    costs: Dict[str, List[ViewCost]] = field(default_factory=dict)   # [before, after]

    def to_json(self) -> str:
        """Like ``CoordinatorMessage.to_json``: rows of fields, no ``asdict``."""
        return json.dumps({"rack": self.rack, "epoch": self.epoch, "round": self.round,
                           "boundary": [_row(g) for g in self.boundary],
                           "proposals": [_proposal_row(p) for p in self.proposals],
                           "costs": {k: [[v.local, v.cross] for v in vs]
                                     for k, vs in self.costs.items()}})

    @classmethod
    def from_json(cls, s: str) -> "ProposalReport":
        d = json.loads(s)
        return cls(d["rack"], d["epoch"], d["round"], [GhostJob(*g) for g in d["boundary"]],
                   [_proposal(p) for p in d["proposals"]],
                   {k: [ViewCost(*x) for x in v] for k, v in d["costs"].items()})


def _row(x) -> list:
    """A flat dataclass (``Assignment``, ``GhostJob``) on the wire: its fields in order
    (``type(x)(*row)`` builds it back)."""
    return [getattr(x, f) for f in _FIELDS[type(x)]]


_FIELDS = {c: tuple(f.name for f in fields(c)) for c in (Assignment, GhostJob)}


def _assignment_rows(assignments: Sequence[Assignment]) -> list:
    """``_row`` of each assignment, the fields written out (a round's message carries one
    per rack-spanning job)."""
    return [[a.job, a.priority, a.spine, a.cap, a.shift] for a in assignments]


def _proposal_row(p: Proposal) -> list:
    return [p.rack, p.index, _assignment_rows(p.assignments), p.ghosts]


def _proposal(p: list) -> Proposal:
    return Proposal(p[0], p[1], [Assignment(*a) for a in p[2]], [tuple(g) for g in p[3]])
