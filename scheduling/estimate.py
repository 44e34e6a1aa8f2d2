"""Estimating jobs' profiles (period, active fraction, bytes per iteration, compute time)
from the bytes the network saw during an epoch, and writing them into a ClusterState."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .links import isolated_iteration_time


@dataclass
class JobEstimate:
    period_s: Optional[float]        # None: no periodicity found in the epoch
    active_fraction: float           # fraction of time the job was sending
    pair_bytes: Dict[Tuple[str, str], float]   # bytes per iteration per host pair
    compute_s: Optional[float]       # period * (1 - active fraction): the silent gap
    iterations: float                # iterations seen in the epoch (epoch / period)


class PairSeries(Mapping):
    """One job's byte series per host pair held as one array: ``rows[i]`` is the series of
    ``pairs[i]`` (all of one length).  A read-only mapping pair -> series like the dicts the
    emulator's controller builds, but the estimator then sums whole arrays instead of one
    Python list per pair: on the simulator's 1,000-job runs that per-pair work was most of
    an epoch's overhead.  The sums are the same float operations in the same order, so the
    estimates are bit-identical to those from the dict of lists."""
    __slots__ = ("pairs", "rows", "_index")

    def __init__(self, pairs: Sequence[Tuple[str, str]], rows):
        self.pairs: List[Tuple[str, str]] = list(pairs)
        self.rows = np.ascontiguousarray(rows, dtype=float)     # (pairs x bins), row-major
        self._index: Optional[Dict[Tuple[str, str], int]] = None

    def __len__(self) -> int:
        return len(self.pairs)

    def __iter__(self) -> Iterator[Tuple[str, str]]:
        return iter(self.pairs)

    def __getitem__(self, pair):
        if self._index is None:
            self._index = {p: i for i, p in enumerate(self.pairs)}
        return self.rows[self._index[pair]]

    def scaled(self, k: float) -> "PairSeries":
        """Every byte count times ``k`` (the same product as ``b * k`` on each float)."""
        return PairSeries(self.pairs, self.rows * k)


def _pair_matrix(series: Mapping[Tuple[str, str], Sequence[float]]):
    """The series as one (pairs x bins) array; as a list of arrays if their lengths differ."""
    if isinstance(series, PairSeries):
        return series.rows
    rows = [np.asarray(s, dtype=float) for s in series.values()]
    return np.array(rows) if len({len(a) for a in rows}) == 1 else rows


def estimate_period(series: Sequence[float], bin_s: float, min_corr: float = 0.3) -> Optional[float]:
    """Period (s) of a byte-count time series by autocorrelation: the first lag that is a
    local maximum of the autocorrelation with a value >= ``min_corr`` and >= 0.8 of the
    highest such maximum; refined by a parabola through the peak.  None if none is found."""
    x = np.asarray(series, dtype=float)
    n = len(x)
    if n < 4 or not np.any(x > 0):
        return None
    x = x - x.mean()
    var = float(np.dot(x, x))
    if var <= 0:
        return None
    size = 1 << int(math.ceil(math.log2(2 * n)))
    f = np.fft.rfft(x, size)
    ac = np.fft.irfft(f * np.conj(f), size)[:n]
    # unbiased normalisation (fewer overlapping samples at long lags)
    ac = ac / var * n / np.maximum(n - np.arange(n), 1)
    hi = max(2, int(n * 0.75))
    peaks = [k for k in range(1, hi - 1) if ac[k] >= ac[k - 1] and ac[k] > ac[k + 1] and ac[k] >= min_corr]
    if not peaks:
        return None
    best = max(ac[k] for k in peaks)
    k = next(p for p in peaks if ac[p] >= 0.8 * best)
    y0, y1, y2 = ac[k - 1], ac[k], ac[k + 1]
    den = y0 - 2 * y1 + y2
    off = 0.5 * (y0 - y2) / den if den != 0 else 0.0
    return (k + max(-0.5, min(0.5, off))) * bin_s


def estimate_job(series: Mapping[Tuple[str, str], Sequence[float]], bin_s: float,
                 active_threshold: float = 0.05) -> JobEstimate:
    """Estimate one job's profile from what the network saw during an epoch.

    Input ``series``: for every ordered host pair (src host, dst host) of the job, the bytes
    the pair sent in each of consecutive time bins of ``bin_s`` seconds (all series of equal
    length, covering the epoch; a pair that sent nothing may be omitted), as a mapping of
    sequences or a ``PairSeries``.  Bytes are real-cluster bytes (the caller undoes any
    emulation scaling).

    Output: ``period_s`` from the autocorrelation of the job's total bytes per bin;
    ``active_fraction`` = share of bins whose total exceeds ``active_threshold`` x the peak
    bin; ``pair_bytes`` = each pair's bytes in the epoch / iterations in the epoch (epoch /
    period; if no period is found: the whole epoch counts as one iteration);
    ``compute_s`` = period x (1 - active_fraction)."""
    if not series:
        return JobEstimate(None, 0.0, {}, None, 0.0)
    m = _pair_matrix(series)
    n = max(len(a) for a in m)
    total = np.zeros(n)
    for a in m:                     # the series added one after the other, in order
        total[:len(a)] += a
    # each pair's bytes: a row's sum along the row is the np.sum of that series
    sums = m.sum(axis=1).tolist() if isinstance(m, np.ndarray) else [float(np.sum(a)) for a in m]
    epoch = n * bin_s
    peak = float(total.max()) if n else 0.0
    active = float(np.mean(total > active_threshold * peak)) if peak > 0 else 0.0
    period = estimate_period(total, bin_s)
    iters = epoch / period if period else 1.0
    pair_bytes = {p: b / iters for p, b in zip(series, sums) if b > 0}
    compute = period * (1.0 - active) if period else None
    return JobEstimate(period, active, pair_bytes, compute, iters)


def estimate_from_measurements(measured: Mapping[str, Mapping[Tuple[str, str], Sequence[float]]],
                               bin_s: float, active_threshold: float = 0.05) -> Dict[str, JobEstimate]:
    """``measured``: job name -> {(src host, dst host): bytes per bin} (see ``estimate_job``)."""
    return {job: estimate_job(s, bin_s, active_threshold) for job, s in measured.items()}


def apply_estimates(state, estimates: Mapping[str, JobEstimate], update_profile: bool = True) -> None:
    """Write estimates into the ClusterState's JobStates: period_s and active_fraction always;
    with ``update_profile`` also pair_bytes and compute_s where the estimate has them."""
    for js in state.jobs:
        e = estimates.get(js.name)
        if e is None:
            continue
        js.period_s = e.period_s
        js.active_fraction = e.active_fraction
        if update_profile and e.period_s:
            if e.pair_bytes:
                js.pair_bytes = dict(e.pair_bytes)
            if e.compute_s is not None:
                js.compute_s = e.compute_s
            js.iso_iter_s = isolated_iteration_time(js, state.cluster)
