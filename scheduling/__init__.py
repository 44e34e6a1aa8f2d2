"""Scheduling policies: one interface (``Policy.decide(ClusterState) -> Decisions``), a registry.

    from scheduling import get_policy, POLICIES    # (scheduling.registry)
    policy = get_policy("harmonics")           # or fair, optimal, crux, cassini
    decisions = policy.decide(state)           # job name -> Decision

Python (numpy; the model's event loop compiled with numba, with a pure-Python fallback): no
Mininet, no os-ken.
"""
from __future__ import annotations

from .base import (ClusterState, Decision, Decisions, JobState, Policy, decisions_from_json,
                   decisions_to_json, job_state, state_from_scenario)
from .registry import POLICIES, POLICY_NAMES, get_policy

__all__ = ["POLICIES", "POLICY_NAMES", "get_policy", "Policy", "Decision", "Decisions",
           "ClusterState", "JobState", "job_state", "state_from_scenario", "decisions_to_json",
           "decisions_from_json"]
