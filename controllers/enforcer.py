"""The enforcer: makes the network follow the policy's decisions.

  marks    a flow's DSCP is its job's priority class (scheduling/classes.py), set at the
           flow's first ToR; jobs without a decision: best effort, no mark
  meters   a job's rate cap on a link is an OpenFlow meter at the first ToR of every flow of
           the job that crosses the link (a spine downlink's cap split between the ToRs that
           feed it)
  paths    a decision's pinned spine for a flow's pair; a flow whose job is no longer pinned
           returns to the hash route (controllers/fabric.py ``choose_spine``)
  shifts   start-time shifts, DSCP for the hosts and phase control's corrections go to the
           workers' control files (controllers/control_channel.py)

A job the policy leaves out of a decision keeps its last one (scheduling/epochs.py); a job
that ended loses its decision, and with it its meters.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, Mapping, Optional, Tuple

from scheduling.base import Decision
from scheduling.classes import priority_dscp

from .fabric import Links, choose_spine
from .state import FlowKey, NetState

MeterKey = Tuple[int, str, str]          # (dpid, job, link id)
MIN_BURST_BITS = 8 * 64 * 8              # 8 GSO super-frames (64 KB), in kbit


def meter_kbps(gbps: float, bandwidth_scale: float) -> int:
    """A trace-Gb/s cap as an emulated meter rate (kb/s, at least 8)."""
    return max(8, int(gbps * 1e6 / bandwidth_scale))


def meter_burst(kbps: int, burst_s: float) -> int:
    """A meter's burst (kbit): ``burst_s`` at its rate, and at least 8 GSO super-frames (64 KB)
    so TCP can hold the rate (see docs/fidelity.md for the measurement behind it)."""
    return int(max(MIN_BURST_BITS, kbps * burst_s))


def changed_jobs(old: Mapping[str, Decision], new: Mapping[str, Decision]) -> set:
    """The jobs whose decision is new, different or gone."""
    return {j for j in set(old) | set(new) if old.get(j) != new.get(j)}


def repath(spine: Optional[int], pinned: bool, pin: Optional[int], src_host: str, dst_host: str,
           rack: int, dst_rack: int, down_links: Links, spines: int) -> Tuple[Optional[int], bool]:
    """(spine, pinned) of an installed cross-rack flow whose job's decision changed to one
    that names ``pin`` for its pair (None: no pin): onto the pin unless a link of it is down;
    back to ``choose_spine``'s route if it was pinned and is no longer; else as it is."""
    want = pin
    if want is not None and ((rack, want) in down_links or (dst_rack, want) in down_links):
        want = None  # never pin onto a dead link
    if want is not None and want != spine:
        return want, True
    if want is None and pinned:
        return choose_spine(pin, src_host, dst_host, rack, dst_rack, down_links, spines)
    return spine, pinned


class Enforcer:
    def __init__(self, net: NetState, num_classes: int = 4, bandwidth_scale: float = 1000.0,
                 meter_burst_s: float = 0.2):
        self.net = net
        self.cluster = net.cluster
        self.num_classes = num_classes
        self.bandwidth_scale = bandwidth_scale
        self.meter_burst_s = meter_burst_s
        self.decisions: Dict[str, Decision] = {}
        self.meters: Dict[MeterKey, Tuple[int, int]] = {}  # -> (meter id, kbps)
        self._next_meter = 1
        self.channel = None          # controllers.control_channel.ControlChannel, if any

    # ---------------------------------------------------------------- a flow
    def pin(self, job: Optional[str], src_host: str, dst_host: str) -> Optional[int]:
        """The spine the job's decision pins for the pair (None: none)."""
        d = self.decisions.get(job or "")
        return d.spine_for(src_host, dst_host) if d is not None else None

    def flow_actions(self, dp, key: FlowKey, choice: dict) -> list:
        """DSCP of the flow's job's priority class (jobs without a decision: best effort)."""
        d = self.decisions.get(choice.get("job") or "")
        if d is None:
            return []
        return [dp.ofproto_parser.OFPActionSetField(ip_dscp=priority_dscp(d.priority, self.num_classes))]

    def flow_meter(self, dp, key: FlowKey, choice: dict) -> Optional[int]:
        """The meter of the tightest cap the flow's job has on a link of the flow's path."""
        job = choice.get("job")
        d = self.decisions.get(job or "")
        if d is None or not d.rate_caps_gbps:
            return None
        path = self._path_ids(choice)
        caps = [(self._share_of_cap(job, lid), lid) for lid in path if lid in d.rate_caps_gbps]
        if not caps:
            return None
        gbps, lid = min(caps)
        return self._meter(dp, job, lid, gbps)

    def _path_ids(self, f: dict) -> list:
        c = self.cluster
        return [c.links[i].id for i in c.path(f["src_host"], f["dst_host"], f["spine"])]

    def _share_of_cap(self, job: str, lid: str) -> float:
        """A cap on a link that several ToRs feed (a spine downlink) is split evenly between the
        ToRs whose flows of the job cross it: meters live at each flow's first ToR."""
        racks = set()
        for f in self.net.flows.values():
            if f.get("job") == job and lid in self._path_ids(f):
                racks.add(f["rack"])
        return self.decisions[job].rate_caps_gbps[lid] / max(1, len(racks))

    # ----------------------------------------------------------------- meters
    def _meter(self, dp, job: str, lid: str, gbps: float) -> int:
        kbps = meter_kbps(gbps, self.bandwidth_scale)
        parser, ofp = dp.ofproto_parser, dp.ofproto
        key = (dp.id, job, lid)
        have = self.meters.get(key)
        if have and have[1] == kbps:
            return have[0]
        mid = have[0] if have else self._next_meter
        if not have:
            self._next_meter += 1
        band = parser.OFPMeterBandDrop(rate=kbps, burst_size=meter_burst(kbps, self.meter_burst_s))
        dp.send_msg(parser.OFPMeterMod(dp, command=ofp.OFPMC_MODIFY if have else ofp.OFPMC_ADD,
                                       flags=ofp.OFPMF_KBPS | ofp.OFPMF_BURST, meter_id=mid,
                                       bands=[band]))
        self.meters[key] = (mid, kbps)
        return mid

    def _release_meters(self, jobs) -> None:
        for key in [k for k in self.meters if k[1] in jobs]:
            mid, _ = self.meters.pop(key)
            dp = self.net.datapaths.get(key[0])
            if dp is not None:
                dp.send_msg(dp.ofproto_parser.OFPMeterMod(dp, command=dp.ofproto.OFPMC_DELETE,
                                                          flags=0, meter_id=mid, bands=[]))

    def reset_meters(self, dp) -> None:
        """A switch (re)connected: meters are ours alone, start it from none (a restarted
        controller numbers them afresh; the flows that used old ones are re-learned from
        packet-ins)."""
        dp.send_msg(dp.ofproto_parser.OFPMeterMod(dp, command=dp.ofproto.OFPMC_DELETE, flags=0,
                                                  meter_id=dp.ofproto.OFPM_ALL, bands=[]))
        with self.net.lock:
            for k in [k for k in self.meters if k[0] == dp.id]:
                del self.meters[k]

    # --------------------------------------------------------------- decisions
    def apply_decisions(self, decisions: Dict[str, Decision],
                        reinstall: Callable[[FlowKey, dict], None]) -> None:
        """Make the network follow the decisions: re-mark, re-meter and re-path every installed
        flow of the jobs whose decision changed (``reinstall`` rewrites a flow's entry);
        release what ended jobs held."""
        net = self.net
        with net.lock:
            old = self.decisions
            self.decisions = dict(decisions)
            changed = changed_jobs(old, decisions)
            self._release_meters({j for j in changed if j not in decisions or
                                  not decisions[j].rate_caps_gbps})
            for key, f in list(net.flows.items()):
                if f.get("job") not in changed:
                    continue
                d = decisions.get(f["job"])
                if f["spine"] is not None and d is not None:
                    f["spine"], f["pinned"] = repath(
                        f["spine"], f.get("pinned"), d.spine_for(f["src_host"], f["dst_host"]),
                        f["src_host"], f["dst_host"], f["rack"], f["dst_rack"], net.down_links,
                        self.cluster.spec.spines)
                reinstall(key, f)

    def apply_shifts(self, decisions: Mapping[str, Decision], job_start: Callable[[str], Optional[float]],
                     declared: Mapping, started: Optional[Callable[[str], bool]] = None) -> dict:
        """The workers' control files (controllers.control_channel): DSCP, new start-time
        shifts, and phase control's samples and corrections for the epoch record.
        ``started``: whether a job has started (default: its start time has passed; a job
        whose start is not known yet counts as started, unless ``started`` says otherwise)."""
        if self.channel is None:
            return {}
        if started is None:
            def started(job):
                return (job_start(job) or 0.0) <= time.time()
        with self.net.lock:
            return self.channel.apply(decisions, started, declared)
