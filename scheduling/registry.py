"""The policy registry: the one list of policy names (in a defined order) and their classes.

    from scheduling.registry import get_policy, POLICIES, POLICY_NAMES
    policy = get_policy("harmonics")           # or fair, optimal, crux, cassini

Modules of the package import the registry from here, never from ``scheduling`` itself.
"""
from __future__ import annotations

from typing import Dict, Tuple, Type

from .base import Policy
from .cassini import CassiniPolicy
from .crux import CruxPolicy
from .evaluate import warm_up
from .fair import FairPolicy
from .harmonics.policy import HarmonicsPolicy
from .optimal import OptimalPolicy

POLICIES: Dict[str, Type[Policy]] = {
    "fair": FairPolicy,
    "optimal": OptimalPolicy,
    "crux": CruxPolicy,
    "cassini": CassiniPolicy,
    "harmonics": HarmonicsPolicy,
}
POLICY_NAMES: Tuple[str, ...] = tuple(POLICIES)      # fair, optimal, crux, cassini, harmonics
# the order of tables that compare every policy against the best one (optimal last)
REPORT_ORDER: Tuple[str, ...] = tuple(n for n in POLICY_NAMES if n != "optimal") + ("optimal",)


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
