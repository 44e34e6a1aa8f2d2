"""The simulator's settings (``SimConfig``, none of them part of the scenario schema) and the
constants the engine's parts share."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

GBPS_TO_BYTES = 1e9 / 8.0

# event kinds (ordering at equal times follows insertion order)
_ARRIVE, _COMPUTE_END, _COLL_START, _ITER_START, _EPOCH, _FAULT, _POLL = range(7)


@dataclass
class SimConfig:
    """Simulation settings (none of them is part of the scenario schema)."""
    epoch_s: Optional[float] = None          # policy epoch, trace seconds; None: emulation.epoch_s / time_scale
    bin_s: Optional[float] = None            # links.csv bin width; None: the epoch
    num_classes: int = 4                     # strict-priority classes the network enforces
    default_class: int = 0                   # class of a job the policy has not decided on
    decision_timeout_s: Optional[float] = None   # a decision slower than this is dropped
    max_timeouts: int = 1                    # after this many timed-out decisions the policy is no longer called
    decision_budget_s: Optional[float] = None  # total decision time after which the policy is no longer called
    max_time_s: Optional[float] = None       # stop at this trace time (jobs left unfinished)
    until_s: Optional[float] = None          # time-bounded run: every job iterates until this trace time (its iteration count ignored)
    intra_host_gbps: Optional[float] = None  # None: same-host transfers are free
    isolated: bool = True                    # simulate every job alone for slowdown_vs_isolated
    measured_view: bool = True               # False: policies always see declared profiles
    estimate_profiles: bool = False          # estimates replace declared bytes/compute too (controller's option)
    progress: bool = False                   # progress lines on stderr
    iterations_override: Optional[int] = None
    warmup_iterations: int = 1               # left out of the means, as the emulator does
    poll_s: Optional[float] = None           # counter polling for the policy's view; None: epoch / 50
    compute_jitter: Optional[float] = None   # per-iteration compute jitter; None: the scenario's (simulation.compute_jitter)
    phase_control: Optional[object] = None   # True/False, or "observe" (measure, never correct); None: the scenario's

