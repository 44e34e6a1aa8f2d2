"""Compute-time noise of real GPUs (kernel launch variance, stragglers): each iteration a job's
compute phases all take 1 + N(0, sigma) of their declared time, at least 0. The draws of a
job come from one seeded generator ([scenario seed, the job's index in the scenario]), one
draw per iteration, so the simulator and every rank of an emulated job see the same sequence.
"""
from __future__ import annotations

from typing import Dict

import numpy as np


class ComputeNoise:
    def __init__(self, sigma: float, seed: int):
        self.sigma = float(sigma)
        self.seed = int(seed)
        self._rng: Dict[int, np.random.Generator] = {}

    def factor(self, job_idx: int) -> float:
        """The next iteration's factor for job ``job_idx`` (1.0 when sigma is 0: no draw)."""
        if self.sigma <= 0.0:
            return 1.0
        g = self._rng.get(job_idx)
        if g is None:
            g = self._rng[job_idx] = np.random.default_rng([self.seed, job_idx])
        return max(0.0, 1.0 + self.sigma * float(g.standard_normal()))
