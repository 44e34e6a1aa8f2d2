"""What the controller's parts (controllers/fabric.py, monitor.py, enforcer.py) share: the
cluster, the connected switches, the per-flow choices and the counters, under one lock; and
the run's jobs, recognised on the wire by their TCP ports.  No os-ken here.

A flow's record (``NetState.flows[key]``, key = (src ip, dst ip, proto, sport, dport)):
  spine      the spine of a cross-rack flow (None: within a rack)
  pinned     whether a decision chose the spine (else: the hash route)
  rack, dst_rack, src_host, dst_host, job (None: not a job's flow)
  since      when it was installed (or adopted)
  bytes, polled, bps   its counter at the last flow-stats poll, when, and the rate since
  binned     the bytes already counted in a bin (controllers/monitor.py)
  adopted    learnt from a switch's table (the controller was restarted), not installed
"""
from __future__ import annotations

import threading
import time
from typing import Dict, Iterable, Optional, Set, Tuple

from runs.control import is_done, spec_start_at
from workloads.cluster import Cluster

FlowKey = Tuple[str, str, int, int, int]   # src ip, dst ip, proto, sport, dport
IPPROTO_TCP = 6

COUNTERS = ("packet_in", "packet_in_arp", "packet_in_ipv4", "packet_in_other", "arp_replies",
            "flows_installed", "flows_removed", "switch_connects")


def dpid_roles(cluster: Cluster) -> Dict[int, Tuple[str, int]]:
    """dpid -> ("tor", rack) or ("spine", index)."""
    roles = {}
    for r in range(cluster.spec.racks):
        roles[Cluster.tor_dpid(r)] = ("tor", r)
    for s in range(cluster.spec.spines):
        roles[Cluster.spine_dpid(s)] = ("spine", s)
    return roles


def new_flow(*, spine: Optional[int], pinned: bool, rack: int, dst_rack: int, job: Optional[str],
             src_host: str, dst_host: str, since: float, nbytes: int = 0) -> dict:
    return {"spine": spine, "pinned": pinned, "rack": rack, "dst_rack": dst_rack, "job": job,
            "src_host": src_host, "dst_host": dst_host, "since": since,
            "bytes": nbytes, "polled": None, "bps": 0.0}


def flow_active(f: dict, now: float) -> bool:
    """A flow loads its path if it is new (no counters yet) or carried traffic lately."""
    return f["polled"] is None or f["bps"] > 1e4 or now - f["since"] < 2.0


def key_of_match(m) -> Optional[FlowKey]:
    """The flow key of an OpenFlow match of a per-flow entry (None: not one)."""
    if "ipv4_src" not in m:
        return None
    proto = m.get("ip_proto", 0)
    return (m["ipv4_src"], m["ipv4_dst"], proto, m.get("tcp_src", m.get("udp_src", 0)),
            m.get("tcp_dst", m.get("udp_dst", 0)))


class JobTable:
    """The run's jobs (the controller config's "jobs"): whose TCP ports are which (a job's
    rank r listens on port_base + r), when each starts, which have ended."""

    def __init__(self, jobs: Iterable[dict], done_dir: Optional[str] = None):
        self.jobs: Dict[str, dict] = {j["name"]: j for j in jobs}
        self.done_dir = done_dir
        self.port_job: Dict[int, str] = {}
        for j in self.jobs.values():
            for r in range(j["ranks"]):
                self.port_job[j["port_base"] + r] = j["name"]

    def __iter__(self):
        return iter(self.jobs)

    def job_of(self, key: FlowKey) -> Optional[str]:
        if key[2] != IPPROTO_TCP:
            return None
        return self.port_job.get(key[4]) or self.port_job.get(key[3])

    def start(self, name: str) -> Optional[float]:
        """The job's start time (absolute), from its spec once the runner has written it."""
        j = self.jobs[name]
        if j.get("start_at") is None and j.get("spec_path"):
            t = spec_start_at(j["spec_path"])
            if t is None:
                return None
            j["start_at"] = t
        return j.get("start_at")

    def active(self, now: float) -> Set[str]:
        """The jobs started by ``now`` and not done."""
        out = set()
        for name in self.jobs:
            t = self.start(name)
            if t is not None and t <= now and not is_done(self.done_dir, name):
                out.add(name)
        return out

    def run_start(self) -> Optional[float]:
        ts = [t for t in (self.start(n) for n in self.jobs) if t is not None]
        return min(ts) if ts else None


class NetState:
    """The network as the controller's parts see it; hold ``lock`` to read or change it."""

    def __init__(self, cluster: Cluster, jobs: JobTable):
        self.cluster = cluster
        self.jobs = jobs
        self.lock = threading.RLock()
        self.datapaths: Dict[int, object] = {}
        self.unknown_dpids: list = []
        self.flows: Dict[FlowKey, dict] = {}          # installed per-flow choices
        self.down_links: Set[Tuple[int, int]] = set()  # (rack, spine): that ToR-spine link is down
        self.counters: Dict[str, int] = {k: 0 for k in COUNTERS}
        self.dpid_role = dpid_roles(cluster)

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def tor_dp(self, rack: int):
        return self.datapaths.get(Cluster.tor_dpid(rack))

    def spines_in_use(self, now: Optional[float] = None) -> Dict[int, int]:
        """spine -> active cross-rack flows on it."""
        now = time.time() if now is None else now
        per: Dict[int, int] = {}
        for f in self.flows.values():
            if f["spine"] is not None and flow_active(f, now):
                per[f["spine"]] = per.get(f["spine"], 0) + 1
        return per
