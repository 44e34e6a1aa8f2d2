"""The engine's policy glue: the controller's epoch step on the simulated network (the
counters polled for the policy's view, the decision and its time limits, enforcing it:
classes, rate caps, spines, shifts) and the scenario's fault events.  A mixin of
``simulation.engine.Engine``."""
from __future__ import annotations

import json
from typing import Dict, List

import numpy as np

from scheduling.classes import clamp_class

from .config import _EPOCH, _POLL, GBPS_TO_BYTES


class PolicyControl:
    # -- policy --------------------------------------------------------------
    def _poll(self):
        self.poll_rows.append(self.job_cum - self.job_cum_mark)
        self.job_cum_mark = self.job_cum.copy()
        if self.phase is not None and not self.policy_disabled and self.now >= self.controller_down_until:
            self.phase.tick(self.epoch_no)

    def _epoch(self):
        from .view import DecisionTimeout, measured_series
        t = self.now
        for s in np.flatnonzero(self.alive):
            self._flush_progress(self.ent[s])
        if self.polling and self.epoch_no > 0:
            self._poll()
        active = [j for j in self.jobs if j.arrived and not j.done]
        status = "ok"
        ms = 0.0
        decisions = None
        if t < self.controller_down_until:
            status = "controller down"
        elif self.policy is not None and not self.policy_disabled and active:
            if self.driver is None:
                from .view import make_driver
                self.driver = make_driver(self)
            measured = measured_series(self, active)
            # decision time = the deciding thread's CPU time of policy.decide (not wall
            # time: a loaded or paused machine would change the run); the timeout and the
            # budget count it (simulation/README.md)
            try:
                # a time-bounded run's jobs have no end (until_s): no iterations left to tell
                left = ({j.name: j.iterations - j.it for j in active}
                        if self.cfg.until_s is None else None)
                decisions, _ = self.driver.step(t, {j.name for j in active}, measured, self.poll_s,
                                                left)
            except DecisionTimeout:
                self.driver.epoch += 1
                decisions = None
                status = "timeout"
            ms = self.driver.policy.cpu_s * 1e3
            lim = self.cfg.decision_timeout_s
            if lim is not None and ms > lim * 1e3 and status == "ok":
                status = "timeout"       # finished, but too late: dropped all the same
                decisions = None
            if status == "timeout":
                self.timeouts += 1
                if self.timeouts >= self.cfg.max_timeouts:
                    self.policy_disabled = True
                    status = "timeout; policy no longer called"
            self.decision_total_s += ms / 1e3
            budget = self.cfg.decision_budget_s
            if budget is not None and self.decision_total_s > budget and not self.policy_disabled:
                self.policy_disabled = True
                status += "; decision budget spent, policy no longer called"
        elif self.policy_disabled:
            status = "disabled"
        elif self.policy is None:
            status = "no policy"
        # reset measurements
        for j in self.jobs:
            j.m_pairs = {}
        self.poll_rows = []
        self.job_cum_mark = self.job_cum.copy()
        self.epoch_rows.append({"epoch": self.epoch_no, "time_s": t, "decision_ms": ms,
                                "jobs": len(active), "status": status})
        if decisions is not None:
            self._apply(decisions, active)
        if self.phase is not None:
            self.phase.decisions_changed()
            if not self.policy_disabled and t >= self.controller_down_until:
                self.phase.tick(self.epoch_no)
        self.epoch_no += 1
        if self.jobs_done < len(self.jobs):
            if self.polling:
                for k in range(1, self.polls_per_epoch):
                    self.push(t + k * self.poll_s, _POLL)
            self.push(t + self.epoch_s, _EPOCH)

    def _apply(self, decisions, active):
        """Enforce this epoch's decisions.  A job the policy left out keeps its previous
        decision (class, caps, paths), as the switches keep their rules."""
        old_cls = self.job_cls.copy()
        old_cap = self.capacity
        for j in self.jobs:
            d = decisions.get(j.name) if j.arrived and not j.done else None
            if d is None:
                continue
            j.decision = d
            j.cls = clamp_class(d.priority, self.cfg.num_classes)
            self.job_cls[j.idx] = j.cls
            # a shift is applied once per new value (as the controller does)
            sh = float(d.shift_s or 0.0)
            if abs(sh - j.last_shift) > 1e-9:
                j.last_shift = sh
                if sh > 0:
                    j.pending_shift = sh
                    if self.phase is not None:
                        self.phase.shift_ordered(j)
            self.decision_rows.append({
                "epoch": self.epoch_no, "time_s": self.now, "job": j.name,
                "priority": j.cls, "spine": "" if d.spine is None else d.spine,
                "flow_spines": json.dumps(d.flow_spines, sort_keys=True) if d.flow_spines else "",
                "rate_caps_gbps": json.dumps(d.rate_caps_gbps, sort_keys=True) if d.rate_caps_gbps else "",
                "shift_s": d.shift_s or 0.0, "reason": d.reason or ""})
        caps: List[float] = []
        self.cap_index = {}
        cap_by_job: Dict[int, list] = {}
        for j in self.jobs:
            d = j.decision
            if d is None or j.done or not d.rate_caps_gbps:
                continue
            for lid, g in sorted(d.rate_caps_gbps.items()):
                li = self.cluster.link_index.get(lid)
                if li is None or g is None:
                    continue
                self.cap_index[(j.idx, li)] = self.cap_base_len + len(caps)
                cap_by_job.setdefault(j.idx, []).append((li, self.cap_base_len + len(caps)))
                caps.append(max(float(g), 1e-6) * GBPS_TO_BYTES)
        self.cap_by_job = {k: tuple(v) for k, v in cap_by_job.items()}
        self.capacity = np.concatenate([self.capacity[:self.cap_base_len], np.array(caps, dtype=float)])
        self.route_version += 1
        # the same classes, capacities and routes as before (e.g. a policy that keeps its
        # decisions): the allocation stands, and the next update may stay incremental
        same = (np.array_equal(old_cls, self.job_cls) and len(old_cap) == len(self.capacity)
                and np.array_equal(old_cap, self.capacity))
        self._reroute_all(keep_if_same=same)

    def _reroute_all(self, keep_if_same: bool = False):
        changed = not keep_if_same
        for s in np.flatnonzero(self.alive):
            e = self.ent[s]
            c, v = self._incidence(e.job, e.tpl)
            oc, ov = self.ent_cols[s], self.ent_vals[s]
            if not changed and not (c is oc and v is ov) and not (
                    np.array_equal(c, oc) and np.array_equal(v, ov)):
                changed = True
            self.ent_cols[s], self.ent_vals[s] = c, v
            self.slot_len[s] = len(c)
        if changed:
            self.dirty = True
            self.full_recompute = True

    # -- faults ----------------------------------------------------------------
    def _fault(self, ev):
        """Scenario events (``workloads.scenario.Event``), as the emulator fires them:
        link-down/up takes a ToR-spine link ("tor0-sp1", both directions) down or up; flows
        move to the next spine whose path is up (ECMP reconvergence).  controller-restart:
        the controller is gone for ``down_s`` emulated seconds (no epochs) and comes back
        without its decisions (default class, ECMP paths) until its next epoch."""
        kind = ev.kind
        if kind in ("link-down", "link-up"):
            tor, sp = ev.link.split("-")
            up = kind == "link-up"
            for lid in (f"{tor}>{sp}", f"{sp}>{tor}"):
                li = self.cluster.link_index.get(lid)
                if li is None:
                    continue
                self.link_up[li] = up
                self.capacity[li] = self.base_cap[li] if up else 0.0
            self.route_version += 1
            self._reroute_all()
        elif kind == "controller-restart":
            em = self.scenario.emulation if self.scenario is not None else None
            ts = float(em.time_scale) if em is not None else 1.0
            self.controller_down_until = self.now + float(ev.down_s) / ts
            self.driver = None
            for j in self.jobs:
                j.decision = None
                j.cls = clamp_class(self.cfg.default_class, self.cfg.num_classes)
                self.job_cls[j.idx] = j.cls
                j.last_shift = 0.0
            if self.phase is not None:
                self.phase.decisions_changed()
            self.cap_index = {}
            self.cap_by_job = {}
            self.capacity = self.capacity[:self.cap_base_len].copy()
            self.route_version += 1
            self._reroute_all()
