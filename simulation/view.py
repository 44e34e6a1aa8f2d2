"""What a policy sees in the simulator: exactly what the emulator's controller builds.

The epoch step is the controller's own (``scheduling.epochs.EpochDriver``): every epoch it
starts from the jobs' declared states (``base.job_state``: declared host-pair bytes, compute
time, isolated time under the shared model), keeps the active jobs, and runs the shared
estimator (``scheduling.estimate.estimate_from_measurements`` + ``apply_estimates``)
on the byte series measured during the last epoch: period and active fraction always,
and -- with ``estimate_profiles`` -- bytes per pair and compute time too.

The simulator's "counters" are polled every ``poll_s`` (epoch / ``POLLS_PER_EPOCH`` unless set):
each job's bytes per poll bin, and its bytes per host pair over the epoch.  The per-pair
series handed to the estimator are the job's total series scaled by each pair's share of the
epoch's bytes (the estimator uses the total series for period and activity, and per-pair
sums for bytes, so nothing it uses is changed by this).
"""
from __future__ import annotations

import signal
import threading
import time
from typing import Dict

import numpy as np

from scheduling.estimate import PairSeries

POLLS_PER_EPOCH = 50


class DecisionTimeout(Exception):
    pass


class _TimedPolicy:
    """Wraps a policy: decide() is interrupted after ``limit`` seconds of the process's CPU
    time (``ITIMER_PROF``: a loaded or paused machine does not count; main thread only; C
    code that never returns to Python is only caught when it does).  ``cpu_s``: the deciding
    thread's CPU time (``time.thread_time``) of the last call, what the engine's timeout and
    budget count (simulation/README.md)."""

    def __init__(self, policy, limit):
        self.policy = policy
        self.limit = limit
        self.name = getattr(policy, "name", "?")
        self.cpu_s = 0.0

    def decide(self, state):
        t0 = time.thread_time()
        try:
            return self._decide(state)
        finally:
            self.cpu_s = time.thread_time() - t0

    def _decide(self, state):
        lim = self.limit
        if lim is None or threading.current_thread() is not threading.main_thread() \
                or not hasattr(signal, "setitimer"):
            return self.policy.decide(state)

        def _raise(signum, frame):
            raise DecisionTimeout()
        old = signal.signal(signal.SIGPROF, _raise)
        signal.setitimer(signal.ITIMER_PROF, lim)
        try:
            return self.policy.decide(state)
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.signal(signal.SIGPROF, old)


def make_driver(engine):
    from scheduling.epochs import EpochDriver
    from workloads.scenario import ResolvedScenario
    rs = ResolvedScenario(engine.scenario, engine.cluster, [j.rj for j in engine.jobs])
    return EpochDriver(rs, _TimedPolicy(engine.policy, engine.cfg.decision_timeout_s),
                       num_classes=max(1, engine.cfg.num_classes), time_scale=1.0, bytes_scale=1.0,
                       estimate_profiles=engine.cfg.estimate_profiles)


def measured_series(engine, active) -> Dict[str, PairSeries]:
    """job -> {(src host, dst host): bytes per poll bin} over the last epoch."""
    out: Dict[str, PairSeries] = {}
    if not engine.cfg.measured_view or not engine.poll_rows:
        return out
    rows = np.array(engine.poll_rows)          # polls x jobs
    for j in active:
        series = rows[:, j.idx]
        if not j.m_pairs or float(series.sum()) <= 0:
            continue
        psum = sum(j.m_pairs.values())
        pairs = [p for p, b in j.m_pairs.items() if b > 0]
        share = np.array([j.m_pairs[p] / psum for p in pairs])
        # all the job's pairs in one array (row i: the series x pair i's share, the same
        # products as one pair at a time)
        out[j.name] = PairSeries(pairs, share[:, None] * series[None, :])
    return out
