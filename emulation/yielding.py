"""Which processes yield their core to the emulation at once: their CPU time counts as the
fidelity monitor's headroom (emulation/fidelity.py)."""
from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import List

SCHED_IDLE_POLICY = 5


def _autogroups() -> bool:
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return False


def yielding_pids() -> List[int]:
    """The processes that give their core to any normal one at once: nice 19 or SCHED_IDLE
    and, where the kernel shares CPU between sessions first (autogroups), their session's
    autogroup at nice 19 too (a niced process in a normal session still gets that session's
    share: docs/fidelity.md, "The kernel's autogroups")."""
    groups = _autogroups()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
            if not (int(st[16]) >= 19 or int(st[38]) == SCHED_IDLE_POLICY) or st[0] == "Z":
                continue
            if groups:
                with open(f"/proc/{d}/autogroup") as f:
                    if f.read().split()[-1] != "19":
                        continue
        except (OSError, IndexError, ValueError):
            continue
        out.append(int(d))
    return out


class Every:
    """``fn()``'s value, looked up again at most every ``period`` seconds (a role's PIDs that
    are costly to list)."""

    def __init__(self, fn, period: float = 1.0):
        self.fn, self.period, self.at, self.value = fn, period, -math.inf, None

    def __call__(self):
        now = time.monotonic()
        if now - self.at >= self.period:
            self.value, self.at = self.fn(), now
        return self.value
