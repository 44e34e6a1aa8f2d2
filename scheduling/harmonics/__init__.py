"""Harmonics: a Local Scheduler per rack and a lightweight Global Coordinator.

See docs/harmonics.md for the design (problem of each tier, messages, complexity, epoch).

Decision space (the same as ``optimal``'s): per job a priority class (< num_classes), a spine
(None = ECMP hash, or one spine for all its cross-rack flows), a rate cap fraction from
``cap_fracs`` (applied to every link the job uses) and, for a job tied in a class with a link
neighbour, a start-time shift phase (``common.shiftable``).  Objective: mean slowdown under
the shared contention model.  Classes, spines and caps are chosen in rounds; a phase stage
then sets the shifts and tries the slowed jobs ("probes") tied with a neighbour at each phase;
a proposal stage last: racks exchange their boundary jobs (rack-local jobs that meet a
rack-spanning one) as ghosts, search joint class orders in these halo views, and the
Coordinator accepts the proposals the racks they touch judge best.

Tiers and what crosses between them (plain dataclasses, JSON-serialisable):
  LocalScheduler(r)  --RackSummary-->  GlobalCoordinator  --CoordinatorMessage-->  LocalScheduler(r)
  (proposal stage: --ProposalReport--> with GhostJob, Proposal and ViewCost rows)
A rack's view of the model contains only the links it owns (``Cluster.links_of_rack``); a
rack-spanning job is bounded there by its global isolated pace (its slowest link may lie
elsewhere).  Every rack-spanning job's decision is made once, by the Coordinator, and every
rack enforces that one decision.  The Coordinator compounds a rack-spanning job's slowdown over
its racks (independent blocking by each rack's local jobs multiplies; ``compound="product"``)
without evaluating the model.  Cost savers that keep the rack's search exact: equivalent
options evaluated once (free spines; classes with the same order relative to every link
neighbour), choices whose summed per-job lower bounds cannot beat the incumbent not evaluated
(``_lb``), memo per group, held solves reused when the held decisions did not change, the
evaluator's sub-problem cache kept across epochs (``incremental``); one approximate one:
rack-local moves screened on a third of the event budget, the best two evaluated in full.
Interaction groups of more than ``large_group`` jobs (fragmented placements: a whole rack in
one group) are not scored with the model but with a closed-form load proxy (``_proxy``);
the decisions of the jobs concerned say so in their reason.
"""
from __future__ import annotations

from .coordinator import GlobalCoordinator
from .local import LocalScheduler
from .messages import (Assignment, CoordinatorMessage, GhostJob, JobSummary, OptionCost,
                       Proposal, ProposalReport, RackSummary, ViewCost)
from .params import HarmonicsConfig
from .policy import HarmonicsPolicy

__all__ = ["Assignment", "CoordinatorMessage", "GhostJob", "GlobalCoordinator", "HarmonicsConfig",
           "HarmonicsPolicy", "JobSummary", "LocalScheduler", "OptionCost", "Proposal",
           "ProposalReport", "RackSummary", "ViewCost"]
