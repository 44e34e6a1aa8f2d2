"""The engine's flow and rate state: routes and link incidence of the flow entities, the
entity pool, the max-min allocation (``simulation.waterfill``) and the progress of every
entity between events.  A mixin of ``simulation.engine.Engine``, whose __init__ sets up the
arrays it uses."""
from __future__ import annotations

import math
import time
from typing import Dict, List, Tuple

import numpy as np

from workloads.cluster import default_spine

from .jobs import _Coll, _Entity, _EntityTemplate, _Job
import simulation.waterfill as _wf   # (not `from . import`: no edge to the package)
from .waterfill import waterfill, waterfill_update

_rk = None


def _ratekernel():
    """``simulation.ratekernel`` (numba), imported on first use by a large run."""
    global _rk
    if _rk is None:
        import simulation.ratekernel as ratekernel
        _rk = ratekernel
    return _rk


class FlowRates:
    # -- paths / incidence --------------------------------------------------
    def _spine_for(self, job: _Job, a: str, b: str) -> int:
        d = job.decision
        s = None
        if d is not None:
            s = d.spine_for(a, b)
        nsp = self.cluster.spec.spines
        if s is None or not (0 <= int(s) < nsp):
            s = default_spine(a, b, nsp)
        s = int(s)
        if not self.link_up.all():
            # a failed link: fall back to the next spine whose links are up (ECMP reconvergence)
            for k in range(nsp):
                cand = (s + k) % nsp
                if all(self.link_up[i] for i in self._path(a, b, cand)):
                    return cand
        return s

    def _path(self, a: str, b: str, spine: int) -> List[int]:
        key = (a, b, spine)
        p = self._path_cache.get(key)
        if p is None:
            p = self.cluster.path(a, b, spine)
            self._path_cache[key] = p
        return p

    def _route_sig(self, job: _Job) -> tuple:
        """Everything a job's incidence depends on besides its templates (cached per job and
        route version)."""
        if job.sig_version != self.route_version:
            d = job.decision
            job.route_sig = (None if d is None else d.spine,
                             tuple(sorted(d.flow_spines.items())) if d is not None and d.flow_spines else (),
                             self.cap_by_job.get(job.idx, ()), self.link_up.tobytes())
            job.sig_version = self.route_version
        return job.route_sig

    def _incidence(self, job: _Job, tpl: _EntityTemplate) -> Tuple[np.ndarray, np.ndarray]:
        sig = self._route_sig(job)
        hit = self._inc_cache.get(id(tpl))
        if hit is not None and hit[0] == sig:
            return hit[1], hit[2]
        cols, vals = self._incidence_uncached(job, tpl)
        self._inc_cache[id(tpl)] = (sig, cols, vals)
        return cols, vals

    def _incidence_uncached(self, job: _Job, tpl: _EntityTemplate) -> Tuple[np.ndarray, np.ndarray]:
        acc: Dict[int, float] = {}
        cross = self.cluster.spec.racks > 1
        for (a, b), cnt in tpl.pairs:
            sp = self._spine_for(job, a, b) if cross and self.cluster.host_rack[a] != self.cluster.host_rack[b] else 0
            for li in self._path(a, b, sp):
                acc[li] = acc.get(li, 0.0) + cnt
        if self.cfg.intra_host_gbps:
            for h, cnt in tpl.intra:
                k = self.nv_base + self.host_index[h]
                acc[k] = acc.get(k, 0.0) + cnt
        if self.cap_index:
            for li, cnt in list(acc.items()):
                ci = self.cap_index.get((job.idx, li))
                if ci is not None:
                    acc[ci] = acc.get(ci, 0.0) + cnt
        if not acc:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        keys = sorted(acc)
        return np.array(keys, dtype=np.int64), np.array([acc[k] for k in keys], dtype=float)

    # -- entity pool --------------------------------------------------------
    def _grow(self):
        n = len(self.rem)
        m = n * 2
        for name in ("rem", "total", "rate", "nflows", "slot_job", "slot_len"):
            arr = getattr(self, name)
            new = np.zeros(m, dtype=arr.dtype)
            new[:n] = arr
            setattr(self, name, new)
        al = np.zeros(m, dtype=bool)
        al[:n] = self.alive
        self.alive = al
        self.ent += [None] * n
        self.ent_cols += [None] * n
        self.ent_vals += [None] * n
        self.free_slots = list(range(m - 1, n - 1, -1)) + self.free_slots

    def _add_entity(self, job: _Job, coll: _Coll, tpl: _EntityTemplate) -> bool:
        cols, vals = self._incidence(job, tpl)
        if len(cols) == 0:
            return False          # nothing on the network: takes no time
        if not self.free_slots:
            self._grow()
        s = self.free_slots.pop()
        e = _Entity(job, coll, tpl, s)
        self.ent[s] = e
        self.ent_cols[s] = cols
        self.ent_vals[s] = vals
        self.rem[s] = tpl.bytes
        self.total[s] = tpl.bytes
        self.rate[s] = 0.0
        self.nflows[s] = tpl.nflows
        self.slot_job[s] = job.idx
        self.slot_len[s] = len(cols)
        self.alive[s] = True
        job.slots.add(s)
        self.added_slots.add(s)
        self.dirty = True
        return True

    def _flush_progress(self, e: _Entity):
        s = e.slot
        sent = self.total[s] - self.rem[s]
        d = sent - e.sent_mark
        if d > 0:
            mp = e.job.m_pairs
            for pair, cnt in e.tpl.pairs:
                mp[pair] = mp.get(pair, 0.0) + d * cnt
        e.sent_mark = sent

    def _remove_entity(self, s: int):
        e = self.ent[s]
        if s in self.added_slots:
            self.added_slots.discard(s)      # never had a rate: nothing to undo
        else:
            self.removed_changes.append((float(self.rate[s]), int(self.job_cls[e.job.idx])))
        self.rem[s] = 0.0
        self._flush_progress(e)
        self.alive[s] = False
        self.rate[s] = 0.0
        self.ent[s] = None
        self.ent_cols[s] = None
        self.ent_vals[s] = None
        self.free_slots.append(s)
        e.job.slots.discard(s)
        self.dirty = True
        return e

    # -- rates -------------------------------------------------------------
    def _recompute(self):
        """The rates after what changed since the last allocation (its CPU time counted in
        ``rate_update_s``)."""
        t0 = time.thread_time()
        self._reallocate()
        self.rate_update_s += time.thread_time() - t0

    def _reallocate(self):
        self.rate_updates += 1
        full = self.full_recompute
        if self.class_guarantee > 0:
            # the incremental update rests on strict priority; with guaranteed shares it holds
            # only while a single class communicates, before and after
            cls = self.job_cls[self.slot_job[self.alive]]
            mixed = len(cls) > 0 and cls.min() != cls.max()
            full = full or mixed or self._mixed_last
            self._mixed_last = mixed
        added, removed = self.added_slots, self.removed_changes
        self.full_recompute = False
        self.added_slots = set()
        self.removed_changes = []
        ec, ev = self.ent_cols, self.ent_vals
        asm = self._asm
        if full or asm is None:
            # entities in slot order, incidence rebuilt from the per-entity arrays
            full = True
            idx = np.flatnonzero(self.alive)
            n_new = 0
            rows = cols = vals = None
            if len(idx):
                il = idx.tolist()
                rows = np.repeat(np.arange(len(idx)), self.slot_len[idx])
                cols = np.concatenate([ec[s] for s in il])
                vals = np.concatenate([ev[s] for s in il])
        else:
            # the previous incidence minus the entities gone, plus the new ones at the end
            # (a slot freed and reused since then counts as gone and new)
            p_idx, p_rows, p_cols, p_vals = asm
            new_sl = sorted(added)
            n_new = len(new_sl)
            if len(p_rows) >= _wf.KERNEL_MIN_NNZ:
                self._update_compiled(asm, new_sl, removed)
                return
            idx, rows, cols, vals = self._assemble_np(asm, new_sl)
        self._allocate(full, idx, rows, cols, vals, n_new, removed)

    def _update_compiled(self, asm, new_sl, removed):
        """The incremental update of a large run in one compiled call
        (``ratekernel.incremental``: the same steps as ``_assemble_np``, ``_allocate`` and
        ``waterfill_update``, bit for bit); ``_allocate`` where it does not apply."""
        ec, ev = self.ent_cols, self.ent_vals
        p_idx, p_rows, p_cols, p_vals = asm
        ns = np.array(new_sl, dtype=np.int64)
        nc = np.concatenate([ec[s] for s in new_sl]) if new_sl else p_cols[:0]
        nv = np.concatenate([ev[s] for s in new_sl]) if new_sl else p_vals[:0]
        rk = _ratekernel()
        idx, rows, cols, vals, outcome, load, job_rate = rk.incremental(
            p_idx, p_rows, p_cols, p_vals, self.alive, ns, self.slot_len, nc, nv, self.rate,
            self.slot_job, self.job_cls, self.capacity,
            np.array([r for r, _ in removed], dtype=float),
            np.array([c for _, c in removed], dtype=np.int64),
            self.nflows, len(self.jobs), self.L, self.polling)
        if outcome != rk.DONE:
            self._allocate(False, idx, rows, cols, vals, len(new_sl), removed)
            return
        self.incremental_updates += 1
        self.active_idx = idx
        self._asm = (idx, rows, cols, vals)
        self.load = load
        if self.polling:
            self.job_rate = job_rate
        self.dirty = False

    def _assemble_np(self, asm, new_sl):
        """The previous incidence minus the entities gone, plus the new ones at the end
        (numpy; ``ratekernel.assemble`` does the same for large runs)."""
        ec, ev = self.ent_cols, self.ent_vals
        p_idx, p_rows, p_cols, p_vals = asm
        keep = self.alive[p_idx]
        n_new = len(new_sl)
        if n_new:
            ns = np.array(new_sl, dtype=np.int64)
            stale = np.isin(p_idx, ns)
            keep &= ~stale
        pos = np.cumsum(keep) - 1
        kn = keep[p_rows]
        n_keep = int(pos[-1]) + 1 if len(pos) else 0
        idx = p_idx[keep]
        rows, cols, vals = pos[p_rows[kn]], p_cols[kn], p_vals[kn]
        if n_new:
            idx = np.concatenate([idx, ns])
            rows = np.concatenate([rows, np.repeat(np.arange(n_keep, n_keep + n_new),
                                                   self.slot_len[ns])])
            cols = np.concatenate([cols] + [ec[s] for s in new_sl])
            vals = np.concatenate([vals] + [ev[s] for s in new_sl])
        return idx, rows, cols, vals

    def _allocate(self, full, idx, rows, cols, vals, n_new, removed):
        """The allocation of the assembled incidence (full, or incremental after ``n_new``
        entities added at the end and the ``removed`` ones gone) and what follows from it."""
        self.active_idx = idx
        if len(idx) == 0:
            self._asm = None
            self.load = np.zeros(self.L)
            self.job_rate = np.zeros(len(self.jobs))
            self.dirty = False
            return
        self._asm = (idx, rows, cols, vals)
        jix = self.slot_job[idx]
        classes = self.job_cls[jix]
        if full and self.class_guarantee > 0:
            r = _wf.waterfill_guaranteed(len(idx), classes, rows, cols, vals, self.capacity,
                                         self.L, self.class_guarantee)
        elif full:
            r = waterfill(len(idx), classes, rows, cols, vals, self.capacity)
        else:
            # only entities added / removed since the last allocation: reuse it where max-min
            # fairness says it cannot have changed (exact, see waterfill_update)
            is_new = np.zeros(len(idx), dtype=bool)
            if n_new:
                is_new[len(idx) - n_new:] = True
            r = waterfill_update(len(idx), classes, rows, cols, vals, self.capacity,
                                 self.rate[idx], is_new, removed)
            self.incremental_updates += 1
        if len(rows) >= _wf.KERNEL_MIN_NNZ:
            load, job_rate = _ratekernel().after_fill(r, idx, rows, cols, vals, self.L, self.rate,
                                                      self.slot_job, self.nflows,
                                                      len(self.jobs), self.polling)
            self.load = load
            if self.polling:
                self.job_rate = job_rate
            self.dirty = False
            return
        r[~np.isfinite(r)] = 0.0
        self.rate[idx] = r
        real = cols < self.L
        self.load = np.bincount(cols[real], weights=r[rows[real]] * vals[real], minlength=self.L)
        if self.polling:
            self.job_rate = np.bincount(jix, weights=r * self.nflows[idx], minlength=len(self.jobs))
        self.dirty = False

    def _large(self) -> bool:
        """Whether the current incidence is large enough for the compiled per-event passes
        (``simulation.waterfill.KERNEL_MIN_NNZ`` entries, as the water-filling kernel)."""
        return self._asm is not None and len(self._asm[1]) >= _wf.KERNEL_MIN_NNZ

    def _finished(self, fslot: int) -> np.ndarray:
        """The active slots whose flow groups are done at ``now`` (within a relative 1e-9 and
        1e-6 bytes), and ``fslot``, the completion the loop advanced to, in any case."""
        idx = self.active_idx
        if self._large():
            return _ratekernel().finished(idx, self.rem, self.total, fslot)
        tol = 1e-9 * self.total[idx] + 1e-6
        fin = idx[self.rem[idx] <= tol]
        if fslot >= 0 and fslot not in set(fin.tolist()):
            fin = np.append(fin, fslot)
        return fin

    def _next_completion(self) -> Tuple[float, int]:
        idx = self.active_idx
        if len(idx) == 0:
            return math.inf, -1
        if self._large():
            t, k = _ratekernel().next_completion(idx, self.rate, self.rem)
            if k < 0:
                return math.inf, -1
            return self.now + t, int(idx[k])
        r = self.rate[idx]
        pos = r > 0
        if not pos.any():
            return math.inf, -1
        t = np.full(len(idx), math.inf)
        t[pos] = self.rem[idx][pos] / r[pos]
        k = int(np.argmin(t))
        return self.now + float(t[k]), int(idx[k])

    def _advance(self, t: float):
        dt = t - self.now
        if dt <= 0:
            return
        idx = self.active_idx
        big = self._large()
        if len(idx) and big:
            _ratekernel().advance(idx, self.rate, self.rem, dt, self.job_cum, self.job_rate,
                                  self.polling)
        elif len(idx):
            self.rem[idx] -= self.rate[idx] * dt
            if self.polling:
                self.job_cum += self.job_rate * dt
        if self.load.any():
            b0 = int(self.now // self.bin_s)
            t0 = self.now
            while True:
                bend = (b0 + 1) * self.bin_s
                seg = min(t, bend) - t0
                if seg > 0:
                    acc = self.bins.get(b0)
                    if acc is None:
                        acc = self.bins[b0] = np.zeros(self.L)
                    if big:
                        _ratekernel().add_load(acc, self.load, seg)
                    else:
                        acc += self.load * seg
                if t <= bend:
                    break
                t0 = bend
                b0 += 1
        self.now = t
