"""Scheduling policies: one interface (``Policy.decide(ClusterState) -> Decisions``), a registry.

    from scheduling import get_policy, POLICIES
    policy = get_policy("harmonics")           # or fair, optimal, crux, cassini
    decisions = policy.decide(state)           # job name -> Decision

Python (numpy; the model's event loop compiled with numba, with a pure-Python fallback): no
Mininet, no os-ken.
"""
from __future__ import annotations

from typing import Dict, Type

from .base import (ClusterState, Decision, Decisions, JobState, Policy, decisions_from_json,
                   decisions_to_json, job_state, state_from_scenario)
from .cassini import CassiniPolicy
from .crux import CruxPolicy
from .fair import FairPolicy
from .harmonics import HarmonicsPolicy
from .optimal import OptimalPolicy
from .model import warm_up

POLICIES: Dict[str, Type[Policy]] = {
    "fair": FairPolicy,
    "optimal": OptimalPolicy,
    "crux": CruxPolicy,
    "cassini": CassiniPolicy,
    "harmonics": HarmonicsPolicy,
}


def get_policy(name: str, **kw) -> Policy:
    """A fresh policy object by name; ``kw`` go to its constructor (e.g. time_limit_s for
    optimal).  KeyError names the known policies."""
    try:
        cls = POLICIES[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})") from None
    if name != "fair":      # policies that evaluate the model: compile / load its kernel now,
        warm_up()           # not inside the first epoch's decision (once per process)
    return cls(**kw)


__all__ = ["POLICIES", "get_policy", "Policy", "Decision", "Decisions", "ClusterState",
           "JobState", "job_state", "state_from_scenario", "decisions_to_json",
           "decisions_from_json"]
