"""Harmonics' class rules (docs/harmonics.md): which classes an epoch leaves each job before
the Local Schedulers search, from the jobs' isolated times and the links they may share.

* the short-job rule (``short_jobs``): a job shorter than a fraction of a link neighbour's
  communication burst stays in the highest class;
* the wide-order rule (``wide_low``): a wide job (``HarmonicsConfig.is_wide``; the wide-job
  rule, ``RackView.classes``, offers such a job the highest class only) much longer than a
  wide link neighbour goes one class below it, and the narrow jobs that may share a link
  with it stay below the highest class too.

``class_limits`` combines them for ``HarmonicsPolicy``.  The rules work over arrays of the
(link, job) pairs (tens of thousands at 16,384 GPUs) with maxima, minima and comparisons
only, so they pick the same jobs as loops over the same floats would."""
from __future__ import annotations

import itertools
import math
from typing import Dict, Tuple

import numpy as np


def _link_pairs(names, pot) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every (link, job) pair of ``pot``, as arrays: the links, the jobs' positions in
    ``names`` (job by job, in that order), where each job's pairs start and how many
    it has."""
    lens = np.array([len(pot[n]) for n in names], dtype=np.int64)
    links = np.fromiter(itertools.chain.from_iterable(pot[n] for n in names),
                        dtype=np.int64, count=int(lens.sum()))
    starts = np.zeros(len(names), dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    return links, np.repeat(np.arange(len(names)), lens), starts, lens


def _per_job(red, vals: np.ndarray, starts: np.ndarray, lens, default: float) -> list:
    """``red`` (np.maximum or np.minimum) of each job's pairs' values (``_link_pairs``),
    ``default`` for a job with none: no arithmetic, so the same floats as Python's
    max / min over the pairs."""
    out = np.full(len(starts), default)
    has = lens > 0
    if has.any():
        out[has] = red.reduceat(vals, starts[has])
    return out.tolist()


def short_jobs(config, model, names, pot) -> frozenset:
    """The short-job rule (``config.short_top``): the jobs whose isolated iteration is
    shorter than ``short_top`` times the longest isolated communication time of the jobs
    they may share a link with.  Below such a neighbour, strict priority blocks a job
    for a whole burst of it, longer than the job's own iteration: the model's steady
    state charges the mean, the tail (p99) pays the burst.
    Over arrays of the (link, job) pairs (tens of thousands at 16,384 GPUs): only
    maxima and comparisons of the same floats, so the same jobs as a loop."""
    f = config.short_top
    if f <= 0 or not names:
        return frozenset()
    links, job, starts, lens = _link_pairs(names, pot)
    comm = np.array([model.iso_comm(n) for n in names], dtype=float)[job]
    L = int(links.max()) + 1 if len(links) else 0
    # per link the two longest comm times (a tie: the same twice; one job: 0.0 second)
    top = np.full(L, -np.inf)
    np.maximum.at(top, links, comm)
    is_top = comm == top[links]
    second = np.full(L, -np.inf)
    np.maximum.at(second, links[~is_top], comm[~is_top])
    second = np.where(np.bincount(links[is_top], minlength=L) >= 2, top, second)
    second = np.where(np.bincount(links, minlength=L) >= 2, second, 0.0)
    # the longest neighbour on a link: the top one, or the second if the job is the top
    a = top[links]
    nb = _per_job(np.maximum, np.where(a == comm, second[links], a), starts, lens, 0.0)
    return frozenset(n for n, x in zip(names, nb) if model.iso_iter(n) < f * x)


def remaining_s(model, name: str) -> float:
    """A job's remaining work at its isolated pace: its iterations left (``JobState.
    iterations_left``, from the back end's progress) times its isolated iteration; inf when
    the back end does not say (a time-bounded run, the emulator): a job whose end is not
    known is not expected to end."""
    left = model.jobs[model.index[name]].iterations_left
    return math.inf if left is None else max(0, left) * model.iso_iter(name)


def _min_before(links: np.ndarray, rem: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per (link, job) pair: the least ``t`` over the pairs of the same link whose ``rem``
    is strictly smaller (inf where there is none).  Sorted by (link, rem), a running minimum
    of ``t``'s ranks that each link restarts (the ranks of a later link are offset below
    every earlier one), read just before the pair's group of equal ``rem``: integers,
    minima and comparisons only, so the same floats as a loop."""
    n = len(links)
    out = np.full(n, math.inf)
    if not n:
        return out
    order = np.lexsort((rem, links))
    ls, rs, ts = links[order], rem[order], t[order]
    tv = np.sort(ts)
    rank = np.searchsorted(tv, ts)                 # an equal t: the same rank
    idx = np.arange(n)
    new_link = np.r_[True, ls[1:] != ls[:-1]]
    new_rem = new_link | np.r_[True, rs[1:] != rs[:-1]]
    seg = np.cumsum(new_link) - 1
    run = np.minimum.accumulate(rank - seg * n) + seg * n
    first = np.maximum.accumulate(np.where(new_rem, idx, 0))    # its group of equal rem
    start = np.maximum.accumulate(np.where(new_link, idx, 0))   # its link's first pair
    has = first > start
    res = np.full(n, math.inf)
    res[has] = tv[run[first[has] - 1]]
    out[order] = res
    return out


def wide_low(config, model, names, pot) -> frozenset:
    """The wide-order rule (``config.wide_order``): the wide jobs whose isolated iteration
    is longer than ``wide_order`` times the isolated iteration of a wide job they may share
    a link with *that will end before them* (less remaining work, ``remaining_s``).  Fair
    sharing stretches a short wide job the most: each of its many racks may hold it up,
    and it waits for the slowest; above a long neighbour it runs near its isolated pace,
    while the long one loses the short one's bursts, and only until the short one ends
    (shortest remaining work first).  Where no end is known nobody goes below: held below
    short neighbours that never end, a long wide job loses their bursts on every one of
    its racks for good, which the model's steady state does not pay for (docs/harmonics.md).
    Over arrays of the pairs, like ``short_jobs`` (minima and comparisons only)."""
    f = config.wide_order
    if f <= 0:
        return frozenset()
    wide = [n for n in names if config.is_wide(len(model.jobs[model.index[n]].racks))]
    if not wide:
        return frozenset()
    links, job, starts, lens = _link_pairs(wide, pot)
    its = [model.iso_iter(n) for n in wide]
    t = np.array(its, dtype=float)[job]
    shortest = np.full(int(links.max()) + 1 if len(links) else 0, math.inf)
    np.minimum.at(shortest, links, t)     # link -> shortest isolated iteration on it
    lo = _per_job(np.minimum, shortest[links], starts, lens, math.inf)
    low = [it > f * m for it, m in zip(its, lo)]       # below some wide neighbour
    if not config.wide_order_ends or not any(low):
        return frozenset(n for n, x in zip(wide, low) if x)
    # ... that will end first: only the links of those jobs can say (all their pairs)
    mine = np.isin(links, links[np.repeat(np.array(low), lens)])
    rem = np.array([remaining_s(model, n) for n in wide], dtype=float)[job]
    near = np.full(len(links), math.inf)
    near[mine] = _min_before(links[mine], rem[mine], t[mine])
    lo = _per_job(np.minimum, near, starts, lens, math.inf)
    return frozenset(n for n, it, m, x in zip(wide, its, lo, low) if x and it > f * m)


def class_limits(config, model, names, pot, K: int) -> Tuple[Dict[str, range], int, int]:
    """The classes the rules leave a job (``RackView.classes``; a job not in the map: every
    class, or class 0 for a wide job): class 0 for a short job; class 1 for a wide job
    the wide-order rule places below, and classes 1..K-1 for the narrow jobs that may
    share a link with one (above it they would hold it up on its racks as the wide
    rule's class-0 jobs would).  Also the numbers of short and of lowered wide jobs."""
    top = short_jobs(config, model, names, pot)
    low = wide_low(config, model, names, pot) - top
    limits: Dict[str, range] = {}
    if low:
        under = set().union(*[pot[n] for n in low])
        limits = {n: range(1, K) for n in names if n not in top and n not in low
                  and not config.is_wide(len(model.jobs[model.index[n]].racks))
                  and not under.isdisjoint(pot[n])}
        limits.update({n: range(1, 2) for n in low})
    limits.update({n: range(1) for n in top})
    return limits, len(top), len(low)
