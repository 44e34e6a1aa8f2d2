"""Harmonics' settings: one frozen ``HarmonicsConfig`` (the policy's stages and limits, and the
tunables of the rack's search), given to the policy and passed down to every Local Scheduler.

    HarmonicsPolicy()                                   # the defaults below
    HarmonicsPolicy(HarmonicsConfig(use_bound=False))   # or get_policy("harmonics", use_bound=False)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from ..common import DEFAULT_CAP_FRACS, SHIFT_PHASES


@dataclass(frozen=True)
class HarmonicsConfig:
    # -- the stages of an epoch (HarmonicsPolicy) ----------------------------------------
    cap_fracs: Tuple[float, ...] = tuple(DEFAULT_CAP_FRACS)   # rate caps a job is offered
    max_rounds: int = 3              # rounds (and phase / proposal rounds) of a cold epoch
    exhaustive_limit: int = 256      # a group's choices searched exhaustively up to this many
    max_passes: int = 3              # coordinate-descent passes over a larger group
    wire: bool = True                # messages really cross as JSON (the tier boundary)
    reuse: bool = True               # unchanged state at an epoch boundary: keep the decisions
    span_weight: bool = False        # a job's excess slowdown weighted by its racks in a rack's cost
    compound: str = "product"        # the Coordinator's compounding of per-rack slowdowns
    cross_caps: bool = False         # rate caps for rack-spanning jobs too
    incremental: bool = True         # keep the evaluator's sub-problem cache across epochs
    screen: float = 1 / 3            # screening runs' share of the model's event budget (1: off)
    screen_keep: int = 2             # options of a screening that reach the full model
    large_group: int = 8             # groups larger than this: closed-form proxy
    wide_span: int = 4               # a job on more racks is offered the highest class only (0: off)
    # the wide-order rule: a wide job whose isolated iteration is longer than this times the
    # shortest isolated iteration among the wide jobs it may share a link with is offered
    # class 1 only, and the narrow jobs that may share a link with it classes 1..K-1
    # (0: off; docs/harmonics.md)
    wide_order: float = 2.0
    # ... and only below a neighbour that will end first (less remaining work at isolated
    # pace; where no end is known, nobody goes below).  False: below any such neighbour,
    # whatever the ends (the rule before the time-bounded runs showed long wide jobs held
    # below short ones for good; docs/harmonics.md)
    wide_order_ends: bool = True
    # the short-job rule: a job whose isolated iteration is shorter than this times the
    # longest isolated communication of the jobs it may share a link with is offered the
    # highest class only (0: off; docs/harmonics.md)
    short_top: float = 0.25
    shift_phases: int = SHIFT_PHASES  # 1: no phase stage (no start-time shifts)
    propose: bool = True             # the proposal stage (halo views, joint proposals)
    warm: bool = True                # incremental epochs start from the last decisions
    joint_jobs: int = 8              # joint stage for components of at most this many jobs
    warm_rounds: int = 1             # rounds of a warm epoch (a descent step each)
    warm_phase_rounds: int = 1       # phase rounds of a warm epoch (a cold one: max_rounds)
    # while a warm epoch's last round still moved a job, up to this many following epochs
    # go on with its descent (the same movable jobs), even if no input changed
    carry_epochs: int = 2
    # -- tunables of the rack's search ---------------------------------------------------
    # the closed-form proxy of large groups (RackView._proxy): a job's free fraction below
    # the higher classes is floored at this (under saturated higher classes it is scored
    # 1/proxy_free_min slower); "product": the free fractions of its links multiply, "max":
    # its worst link alone (the default; measured side by side in docs/harmonics.md)
    proxy_free_min: float = 0.05
    proxy_block: str = "max"
    # relative slack of the lower bound of a job's slowdown (RackView._lb): the model
    # detects a completion at 1e-9 of the remaining work, so an iteration may end a hair early
    lb_margin: float = 1e-6
    use_bound: bool = True           # the lower-bound pruning of LocalSearch._solve_group (exact)
    screen_bound: bool = True        # ... also before screening runs (changes which options reach the top)
    # phase stage: a job slowed by more than this (its slowdown - 1) is also offered every
    # class with every phase ("probe"): it may do better tied with a neighbour at another
    # phase than below it (comm-heavy jobs that never fit in the higher job's gaps)
    probe_min: float = 0.05
    # proposal stage: a halo group is searched only if one of its jobs (a ghost included) is
    # slowed by more than this in the halo view (the probe's threshold)
    propose_min: float = 0.05
    # the proxy scores a large group's summary candidates in batches of at most this many
    proxy_chunk: int = 64
    # the guard: a Local Scheduler's solve, and the Coordinator over a component, never keep
    # a plan their view scores worse than fair sharing's
    guard: bool = True

    def is_wide(self, racks: int) -> bool:
        """A job on ``racks`` racks is *wide* (the wide-job rule, ``wide_span``)."""
        return 0 < self.wide_span < racks

    def __post_init__(self):
        object.__setattr__(self, "cap_fracs", tuple(self.cap_fracs))


DEFAULT = HarmonicsConfig()
