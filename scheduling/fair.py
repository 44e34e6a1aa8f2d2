"""Fair sharing: no intervention (one class, no caps, default ECMP paths)."""
from __future__ import annotations

from .base import ClusterState, Decisions, Decision, Policy


class FairPolicy(Policy):
    name = "fair"
    uses_priorities = False

    def decide(self, state: ClusterState) -> Decisions:
        return {j.name: Decision(job=j.name, priority=0, reason="fair: no intervention")
                for j in state.jobs}
