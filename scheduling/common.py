"""Helpers shared by the policies: the decision space and decision construction."""
from __future__ import annotations

import itertools
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from .base import ClusterState, Decision
from .evaluate import connected_groups
from .model import ContentionModel

DEFAULT_CAP_FRACS: Tuple[float, ...] = (1.0, 0.5)
# start-time shifts: phase k delays the job's start by k / SHIFT_PHASES of its isolated
# iteration time; offered only to a job that shares its class with another job on one of its
# links (``shiftable``): across classes strict priority sets the relative timing
SHIFT_PHASES = 4


class Opt(NamedTuple):
    """One job's decision in the searched space: priority class, spine (None: ECMP hash),
    rate cap as a fraction of every link the job uses (1.0: no cap), start-time shift phase
    (``shift_seconds``)."""
    priority: int
    spine: Optional[int]
    cap: float
    shift: int = 0


def shift_seconds(model: ContentionModel, name: str, phase: int,
                  phases: int = SHIFT_PHASES) -> float:
    """The start-time shift of phase ``phase``: that many ``1/phases`` of the job's isolated
    iteration time (the same grid wherever the job is decided)."""
    if not phase:
        return 0.0
    return phase * model.iso_iter(name) / phases


def shiftable(prios: Sequence[int], links: Sequence[frozenset]) -> List[int]:
    """Indices of the jobs that may take a start-time shift: those that share their class with
    another job on one of their links.  The rule only needs the links where the two jobs meet,
    so a rack checks it on its own links (every link belongs to a rack) and the union over
    racks is the global rule."""
    out = []
    for i in range(len(prios)):
        for j in range(len(prios)):
            if i != j and prios[i] == prios[j] and not links[i].isdisjoint(links[j]):
                out.append(i)
                break
    return out


def spine_options(state: ClusterState, name: str, model: ContentionModel,
                  include_ecmp: bool = True) -> List[Optional[int]]:
    js = model.jobs[model.index[name]]
    if not js.spans_racks or state.cluster.spec.spines <= 1:
        return [None]
    opts: List[Optional[int]] = [None] if include_ecmp else []
    return opts + list(range(state.cluster.spec.spines))


def path_options(state: ClusterState, name: str, model: ContentionModel,
                 cap_fracs: Sequence[float], include_ecmp: bool = True) -> List[Tuple[Optional[int], float]]:
    return [(s, c) for s in spine_options(state, name, model, include_ecmp) for c in cap_fracs]


def make_decision(model: ContentionModel, name: str, opt: Opt, reason: str = "") -> Decision:
    caps: Dict[str, float] = {}
    if opt.cap < 1.0:
        use, _ = model.usage(name, opt.spine)
        for l in sorted(use):
            link = model.cluster.links[l]
            caps[link.id] = opt.cap * link.gbps
    return Decision(job=name, priority=int(opt.priority), rate_caps_gbps=caps, spine=opt.spine,
                    shift_s=shift_seconds(model, name, opt.shift), reason=reason)


def weak_orders(n: int, k: int) -> Iterator[Tuple[int, ...]]:
    """Every assignment of n jobs to priority levels 0..m-1 that uses all m <= k levels
    (strict priority depends only on the relative order, so these cover every distinct
    outcome of assigning k classes)."""
    if n == 0:
        yield ()
        return
    for t in itertools.product(range(min(n, k)), repeat=n):
        m = max(t) + 1
        if len(set(t)) == m:
            yield t


def has_comm(model: ContentionModel, name: str) -> bool:
    use, bmax = model.usage(name)
    return bool(use) and bmax > 0


def potential_links(state: ClusterState, model: ContentionModel, name: str) -> set:
    """Every link the job may use under any spine choice."""
    out = set()
    for s in spine_options(state, name, model, include_ecmp=True):
        out |= set(model.usage(name, s)[0])
    return out


def interaction_groups(names: Sequence[str], links_of: Dict[str, set]) -> List[List[str]]:
    """Jobs that may share a link, transitively."""
    return connected_groups(names, links_of.__getitem__)
