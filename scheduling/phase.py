"""Phase control: holding the start-time offsets a policy decided (pure; both back ends).

A shift decided once does not hold: between two periodic jobs sharing a link under fair
sharing, the offset of their communication phases is neutrally stable (an offset d gives
both jobs the same iteration time, so nothing pulls it back), and any noise random-walks it
back into collision.  This module measures each job's offset against the decided one every
epoch and orders corrections: a one-time delay of the next iteration start of the job that
is ahead.  Delays only, no compute is skipped.  The control law is documented in
docs/phase-control.md; in short:

* Groups.  Jobs a shift-deciding policy put in the same priority class and that may share a
  link form a group (connected components).  The group's reference is its first job in name
  order; every other job's phase is measured against it.  A group in which no job has a
  shift is measured but not held (the policy decided nothing about its phases).
* Unified circle.  Two jobs with periods P_j and P_r whose ratio is close to a small
  rational q/p (p, q <= ``max_ratio``) see the same pattern every p*P_j = q*P_r; the relative
  alignment of the pattern is fixed by their offset modulo the beat g = P_j/q = P_r/p.  For
  equal periods g is the period.  Jobs whose periods have no such ratio with the reference
  have no offset to hold and are left alone (reported with ``error`` None).
* Decided phase.  A policy decides shifts on the periods it models (each job's isolated
  iteration time, ``period_decl``); the decided offset is that phase of the model's beat,
  held as the same phase of the measured beat: D = ((shift_j - shift_r) mod g_d) / g_d * g.
* Error.  e_j = wrap(((t_j - t_r) mod g - D) / g), in [-1/2, 1/2):
  t_j is one of job j's iteration starts, t_r the reference's nearest start before it; the
  offsets of j's last ``average`` starts since the group's last correction took effect are
  averaged on the circle.
* Correction.  Only delays: choose the anchor a among the group's jobs (reference included,
  e_r = 0) that minimises the total delay sum_j ((e_a - e_j) mod 1) * g_j, then delay every
  job whose wrapped distance to the anchor exceeds the tolerance by ``gain`` times it.
* No oscillation.  The correction enters one iteration later; until every job of a group has
  started the iteration its correction was ordered for, the group is measured but not
  corrected again (no double correction of one error).  Between corrections the error obeys
  e' = (1 - gain) e + noise: with 0 < gain <= 1 it decays monotonically, never overshoots.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from statistics import median
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np


@dataclass(frozen=True)
class PhaseConfig:
    gain: float = 1.0             # fraction of the measured error corrected at once (0, 1]
    tolerance: float = 0.04       # dead band: errors below this fraction of the beat are left
    max_ratio: int = 4            # largest p, q of a period ratio q/p that is held
    ratio_tolerance: float = 0.1   # relative mismatch allowed between P_j/P_r and q/p
    history: int = 8              # iteration durations in a job's period estimate
    average: int = 1              # iteration starts whose offsets are averaged into one error
    hold: bool = True             # False: measure only (an A/B's "without control" side)
    min_starts: int = 4           # iteration starts a job needs before its phase is measured

    def __post_init__(self):
        if not 0.0 < self.gain <= 1.0:
            raise ValueError("phase control gain must be in (0, 1]")
        if not 0.0 <= self.tolerance < 0.5:
            raise ValueError("phase control tolerance must be in [0, 0.5)")


@dataclass
class JobPhaseInput:
    """What the phase controller knows of one running job at an epoch."""
    name: str
    starts: Sequence[float]       # iteration start times, oldest first (seconds, common clock)
    first_iteration: int          # iteration number of starts[0]
    shift_s: float                # the decided start-time shift (seconds, same unit)
    priority: int
    links: frozenset              # links the job may use
    period_decl: Optional[float] = None   # the period the policy decided on (the model's
                                          # isolated iteration time); None: the measured one


@dataclass
class JobPhase:
    job: str
    ref: Optional[str]            # the job it is measured against (None: the reference)
    period_s: Optional[float]
    beat_s: Optional[float]       # g: the unified-circle beat against the reference
    offset_s: Optional[float]     # measured offset mod g
    decided_s: Optional[float]    # decided offset mod g
    error: Optional[float]        # wrapped, as a fraction of the beat; None: not held

    def to_dict(self) -> dict:
        return {"ref": self.ref, "period_s": self.period_s, "beat_s": self.beat_s,
                "offset_s": self.offset_s, "decided_s": self.decided_s, "error": self.error}


@dataclass
class Correction:
    job: str
    delay_s: float                # one-time delay of the next iteration start
    error: float                  # the job's error against the anchor, fraction of the beat
    at_iteration: int             # the iteration it is ordered for (the back end decides)

    def to_dict(self) -> dict:
        return {"job": self.job, "delay_s": self.delay_s, "error": self.error,
                "at_iteration": self.at_iteration}


@dataclass
class PhaseStep:
    phases: Dict[str, JobPhase] = field(default_factory=dict)
    corrections: List[Correction] = field(default_factory=list)


def period_of(starts: Sequence[float], history: int) -> Optional[float]:
    """Median of the last ``history`` iteration durations (start to next start)."""
    tail = list(starts)[-history - 1:]
    d = [b - a for a, b in zip(tail[:-1], tail[1:])]
    d = [x for x in d if x > 0]
    return median(d) if d else None


@lru_cache(maxsize=None)
def _lowest_terms(max_ratio: int) -> Tuple[Tuple[int, int], ...]:
    """(q, p), p and q <= max_ratio, q/p in lowest terms, p-major (the order of the search)."""
    return tuple((q, p) for p in range(1, max_ratio + 1) for q in range(1, max_ratio + 1)
                 if math.gcd(q, p) == 1)


def small_ratio(pj: float, pr: float, max_ratio: int, tol: float) -> Optional[Tuple[int, int]]:
    """(q, p) with pj/pr ~= q/p, p and q <= max_ratio, the simplest first; None if none."""
    x = pj / pr
    best = None
    for q, p in _lowest_terms(max_ratio):     # a ratio not in lowest terms was seen already
        if abs(x - q / p) <= tol * (q / p):
            if best is None or p + q < best[0] + best[1]:
                best = (q, p)
    return best


def wrap(x: float) -> float:
    """x modulo 1 into [-1/2, 1/2)."""
    return (x + 0.5) % 1.0 - 0.5


def groups(jobs: Sequence[JobPhaseInput]) -> List[List[JobPhaseInput]]:
    """Jobs of one class that may share a link, transitively; name order inside a group."""
    jobs = sorted(jobs, key=lambda j: j.name)
    parent = list(range(len(jobs)))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    first: Dict[tuple, int] = {}            # (class, link) -> first job seen on it
    for i, j in enumerate(jobs):
        for link in j.links:
            k = first.setdefault((j.priority, link), i)
            if k != i:
                parent[find(i)] = find(k)
    out: Dict[int, List[JobPhaseInput]] = {}
    for i, j in enumerate(jobs):
        out.setdefault(find(i), []).append(j)
    return list(out.values())


class IncrementalGroups:
    """``groups`` kept across calls: the same partition and order, with only the classes
    (priorities) whose jobs changed recomputed, and there only the components that did.
    A job added to a class merges the components on its links; a job gone (or with another
    class or other links) re-partitions only its former component.  ``update`` returns the
    groups of job names, as ``groups`` orders them (by the first name of each group; names in
    order inside a group)."""

    def __init__(self):
        self.jobs: Dict[str, Tuple[int, frozenset]] = {}     # name -> (class, links)
        self.comp_of: Dict[str, int] = {}                    # name -> component id
        self.comps: Dict[int, set] = {}                      # component id -> names
        self.on: Dict[tuple, set] = {}                       # (class, link) -> names on it
        self.nid: Dict[tuple, int] = {}                      # (class, link) -> node id
        self.nodes: Dict[str, np.ndarray] = {}               # name -> its node ids
        self._next = 0

    def _new_comp(self, names) -> int:
        cid = self._next
        self._next += 1
        self.comps[cid] = set(names)
        for n in names:
            self.comp_of[n] = cid
        return cid

    def _remove(self, gone: Sequence[str]) -> None:
        """Drop the jobs ``gone`` and re-partition what is left of their components, all at
        once (``_partition``)."""
        rest: set = set()
        for name in gone:
            prio, links = self.jobs.pop(name)
            del self.nodes[name]
            for l in links:
                s = self.on[(prio, l)]
                s.discard(name)
                if not s:
                    del self.on[(prio, l)]
            cid = self.comp_of.pop(name)
            if cid in self.comps:
                rest |= self.comps.pop(cid)
        rest.difference_update(gone)
        for part in self._partition(sorted(rest)):
            self._new_comp(part)

    def _partition(self, names: List[str]) -> List[List[str]]:
        """Connected components of ``names`` (jobs linked by a (class, link) they share):
        a sparse-graph labelling over the jobs' cached node ids."""
        if not names:
            return []
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components
        arrs = [self.nodes[n] for n in names]
        nodes = np.concatenate(arrs)
        n, m = len(names), len(self.nid)
        jobs = np.repeat(np.arange(n), [len(x) for x in arrs])
        g = coo_matrix((np.ones(len(nodes), dtype=np.int8), (jobs, n + nodes)), shape=(n + m, n + m))
        _, lab = connected_components(g, directed=False)
        parts: Dict[int, list] = {}
        for i, x in enumerate(lab[:n].tolist()):
            parts.setdefault(x, []).append(names[i])
        return list(parts.values())

    def _add(self, name: str, prio: int, links: frozenset) -> None:
        self.jobs[name] = (prio, links)
        nid = self.nid
        self.nodes[name] = np.array([nid.setdefault((prio, l), len(nid)) for l in links],
                                    dtype=np.int64)
        touched = set()
        for l in links:
            s = self.on.setdefault((prio, l), set())
            if s:
                touched.add(self.comp_of[next(iter(s))])
            s.add(name)
        if not touched:
            self._new_comp([name])
            return
        big = max(touched, key=lambda c: (len(self.comps[c]), -c))
        keep = self.comps[big]
        for c in touched:
            if c != big:
                for n in self.comps.pop(c):
                    self.comp_of[n] = big
                    keep.add(n)
        keep.add(name)
        self.comp_of[name] = big

    def update(self, jobs: Sequence[JobPhaseInput]) -> List[List[str]]:
        now = {j.name: (j.priority, j.links) for j in jobs}
        gone = [n for n, v in self.jobs.items()
                if n not in now or now[n][0] != v[0] or not (now[n][1] is v[1] or now[n][1] == v[1])]
        if gone:
            self._remove(gone)
        for n in sorted(now):
            if n not in self.jobs:
                self._add(n, now[n][0], now[n][1])
        return sorted((sorted(c) for c in self.comps.values()), key=lambda g: g[0])


class PhaseController:
    """Measures phase errors and orders corrections; keeps which corrections are pending."""

    def __init__(self, config: Optional[PhaseConfig] = None):
        self.cfg = config or PhaseConfig()
        self.pending: Dict[str, int] = {}         # job -> iteration its correction applies at
        self.settled: Dict[str, float] = {}       # job -> start of its last corrected iteration
        self._group_key: tuple = ()
        self._group_names: List[List[str]] = []
        self._group_of: Dict[str, int] = {}       # job -> its group's index in _group_names
        self._grouping = IncrementalGroups()
        self.total_delay_s: Dict[str, float] = {}
        self.count: Dict[str, int] = {}

    def _measure(self, j: JobPhaseInput, r: JobPhaseInput, since: float,
                 pr: Optional[float]) -> JobPhase:
        """j's phase against the reference r (``pr``: r's ``period_of``)."""
        cfg = self.cfg
        pj = period_of(j.starts, cfg.history)
        none = JobPhase(j.name, r.name, pj, None, None, None, None)
        if pj is None or pr is None or min(len(j.starts), len(r.starts)) < cfg.min_starts:
            return none
        ratio = small_ratio(pj, pr, cfg.max_ratio, cfg.ratio_tolerance)
        if ratio is None:
            return none
        q, p = ratio
        g = 0.5 * (pj / q + pr / p)
        # the decided offset is a phase on the circle the policy decided on (its periods),
        # held as the same phase of the measured circle
        dj, dr = j.period_decl or pj, r.period_decl or pr
        gd = 0.5 * (dj / q + dr / p)
        decided = ((j.shift_s - r.shift_s) % gd) / gd * g
        # the offsets of j's last few starts (since the group's last correction took effect),
        # each against r's nearest start before it, averaged on the circle
        offs = []
        for tj in list(j.starts)[-cfg.average:]:
            before = [t for t in r.starts if t <= tj]
            if tj < since or not before:
                continue
            offs.append((tj - before[-1]) % g)
        if not offs:
            return JobPhase(j.name, r.name, pj, g, None, decided, None)
        ang = [2 * math.pi * o / g for o in offs]
        offset = (math.atan2(sum(map(math.sin, ang)), sum(map(math.cos, ang))) / (2 * math.pi) * g) % g
        ph = JobPhase(j.name, r.name, pj, g, offset, decided, wrap((offset - decided) / g))
        return ph

    def _groups(self, jobs: Sequence[JobPhaseInput],
                only: Optional[set] = None) -> List[List[JobPhaseInput]]:
        """The groups of ``jobs`` in order; only those with a job in ``only``, if given (the
        simulator steps at every counter poll, for the few jobs that started an iteration
        among ~1,000)."""
        key = tuple(sorted((j.name, j.priority, len(j.links)) for j in jobs))
        if key != self._group_key:
            self._group_key = key
            self._group_names = self._grouping.update(jobs)
            self._group_of = {n: i for i, g in enumerate(self._group_names) for n in g}
        names = self._group_names
        if only is not None:
            of = self._group_of
            names = [names[i] for i in sorted({of[n] for n in only if n in of})]
        by = {j.name: j for j in jobs}
        return [[by[n] for n in g] for g in names]

    def step(self, jobs: Sequence[JobPhaseInput], only: Optional[set] = None) -> PhaseStep:
        """Phases of the jobs of every held group (of the groups with a job in ``only``, if
        given: the jobs that started an iteration since the last step), and the corrections
        due now."""
        out = PhaseStep()
        for grp in self._groups(jobs, only):
            if len(grp) < 2 or all(abs(j.shift_s) < 1e-12 for j in grp):
                continue        # nothing decided to hold: no shift in the group
            ref = grp[0]
            pending = [self._pending(j) for j in grp]
            pr = period_of(ref.starts, self.cfg.history)
            out.phases[ref.name] = JobPhase(ref.name, None, pr, None, None, None, None)
            held = [ref]
            for j in grp[1:]:
                since = max(self.settled.get(j.name, -math.inf), self.settled.get(ref.name, -math.inf))
                ph = self._measure(j, ref, since, pr)
                out.phases[j.name] = ph
                if ph.error is not None:
                    held.append(j)
            if self.cfg.hold and len(held) >= 2 and not any(pending):
                out.corrections.extend(self._correct(held, out.phases))
        return out

    def _pending(self, j: JobPhaseInput) -> bool:
        at = self.pending.get(j.name)
        if at is None:
            return False
        latest = j.first_iteration + len(j.starts) - 1
        if latest >= at:
            del self.pending[j.name]
            k = at - j.first_iteration
            self.settled[j.name] = j.starts[k] if 0 <= k < len(j.starts) else j.starts[-1]
            return False
        return True

    def _correct(self, held: List[JobPhaseInput], phases: Dict[str, JobPhase]) -> List[Correction]:
        cfg = self.cfg
        err = {j.name: (phases[j.name].error or 0.0) for j in held}
        beat = {j.name: phases[held[1].name].beat_s if j is held[0] else phases[j.name].beat_s
                for j in held}
        best, best_cost = None, math.inf
        for a in held:
            cost = sum(((err[a.name] - err[j.name]) % 1.0) * beat[j.name] for j in held)
            if cost < best_cost - 1e-12:
                best, best_cost = a, cost
        out = []
        for j in held:
            dist = wrap(err[best.name] - err[j.name])
            if abs(dist) <= cfg.tolerance:
                continue
            delay = cfg.gain * ((err[best.name] - err[j.name]) % 1.0) * beat[j.name]
            at = j.first_iteration + len(j.starts) + 1   # the back end may move it later
            out.append(Correction(j.name, delay, dist, at))
        return out

    def ordered(self, c: Correction, at_iteration: int) -> None:
        """The back end placed correction ``c`` before ``at_iteration``: hold the group until
        that iteration has started."""
        self.pending[c.job] = at_iteration
        self.total_delay_s[c.job] = self.total_delay_s.get(c.job, 0.0) + c.delay_s
        self.count[c.job] = self.count.get(c.job, 0) + 1


def job_links(cluster, pair_bytes: Mapping[Tuple[str, str], float]) -> frozenset:
    """Every link a job's host pairs may use, whatever spine their flows take."""
    out = set()
    spines = range(max(1, cluster.spec.spines))
    for (a, b), nbytes in pair_bytes.items():
        if nbytes <= 0 or a == b:
            continue
        for sp in spines:
            out.update(cluster.path(a, b, sp))
    return frozenset(out)


def phase_inputs(names: Sequence[str], starts: Mapping[str, Sequence[float]],
                 first: Mapping[str, int], decisions: Mapping, links: Mapping[str, frozenset],
                 periods: Optional[Mapping[str, float]] = None,
                 window: int = 12) -> List[JobPhaseInput]:
    """Inputs for the jobs that have a decision and at least two iteration starts."""
    out = []
    for n in names:
        s = list(starts.get(n, ()))
        d = decisions.get(n)
        if d is None or len(s) < 2:
            continue
        k = max(0, len(s) - window)
        out.append(JobPhaseInput(n, s[k:], first.get(n, 0) + k, float(d.shift_s or 0.0),
                                 int(d.priority), links.get(n, frozenset()),
                                 (periods or {}).get(n)))
    return out


# One row per epoch and job of a held group, in both back ends' phase.csv.
PHASE_COLS = ["epoch", "time_s", "job", "ref", "period_s", "beat_s", "offset_s", "decided_s",
              "error", "correction_s"]


def phase_rows(epoch: int, time_s: float, step: "PhaseStep") -> List[dict]:
    delays: Dict[str, float] = {}
    for c in step.corrections:
        delays[c.job] = delays.get(c.job, 0.0) + c.delay_s
    return [{"epoch": epoch, "time_s": time_s, "job": n, **ph.to_dict(),
             "correction_s": delays.get(n, 0.0)} for n, ph in sorted(step.phases.items())]


def write_phase_csv(path, rows: Sequence[Mapping]) -> None:
    import csv

    def f(x):
        if x is None:
            return ""
        return f"{x:.6f}" if isinstance(x, float) else str(x)

    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(PHASE_COLS)
        for r in rows:
            w.writerow([f(r.get(c)) for c in PHASE_COLS])


def phase_summary(rows: Sequence[Mapping], warmup_epochs: int = 1) -> Dict[str, dict]:
    """job -> phase_error (mean absolute error over the epochs it was measured, the first
    ``warmup_epochs`` measurements left out; None: never measured) and corrections (count)."""
    errs: Dict[str, List[float]] = {}
    out: Dict[str, dict] = {}
    for r in rows:
        d = out.setdefault(r["job"], {"phase_error": None, "corrections": 0})
        if r.get("correction_s"):
            d["corrections"] += 1
        if r.get("error") is not None and r.get("ref"):
            errs.setdefault(r["job"], []).append(abs(float(r["error"])))
    for job, e in errs.items():
        e = e[warmup_epochs:] if len(e) > warmup_epochs else e
        out[job]["phase_error"] = sum(e) / len(e)
    return out
