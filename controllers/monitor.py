"""The monitor: polls the ToRs' per-flow byte counters every ``poll_s`` and sums them into
per-job bins, {job: {(src host, dst host): bytes}} per poll, which the epoch loop hands to
the policy's estimator (``measure``).  A per-flow entry found in a switch's table that this
controller did not install (it was restarted) is adopted.
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Dict, List, Optional, Tuple

from os_ken.lib import hub

from .fabric import T_FLOWS
from .state import FlowKey, NetState, key_of_match

LOG = logging.getLogger("harmonics.controller")

Bin = Dict[str, Dict[Tuple[str, str], float]]


def take_bin(flows) -> Bin:
    """The job flows' bytes since the last bin, by job and host pair (marks them binned)."""
    b: Bin = {}
    for f in flows:
        delta = f["bytes"] - f.get("binned", 0)
        f["binned"] = f["bytes"]
        if f.get("job") and delta > 0:
            pair = (f["src_host"], f["dst_host"])
            jb = b.setdefault(f["job"], {})
            jb[pair] = jb.get(pair, 0.0) + delta
    return b


def bin_series(bins: List[Bin]) -> Dict[str, Dict[Tuple[str, str], list]]:
    """job -> pair -> bytes per bin (0 where the pair sent nothing)."""
    series: Dict[str, Dict[Tuple[str, str], list]] = {}
    for i, b in enumerate(bins):
        for job, pairs in b.items():
            for pair, v in pairs.items():
                series.setdefault(job, {}).setdefault(pair, [0.0] * len(bins))[i] = v
    return series


def job_rates_mbps(bins: List[Bin], seconds: float) -> Dict[str, float]:
    """Each job's mean rate over the bins, which span ``seconds``."""
    out: Dict[str, float] = {}
    for b in bins:
        for job, pairs in b.items():
            out[job] = out.get(job, 0.0) + sum(pairs.values()) * 8 / seconds / 1e6
    return out


def counter_rate(prev_bytes: int, prev_t: Optional[float], nbytes: int, now: float) -> Optional[float]:
    """bit/s between two counter readings (None: no earlier reading, or no time between)."""
    if prev_t is None or not now > prev_t:
        return None
    return max(0, nbytes - prev_bytes) * 8 / (now - prev_t)


class Monitor:
    def __init__(self, net: NetState, poll_s: float, epoch_s: float, estimate_window_s: float):
        self.net = net
        self.cluster = net.cluster
        self.poll_s = poll_s
        self.epoch_s = epoch_s
        self.estimate_window_s = estimate_window_s
        self.bins: List[Bin] = []            # per poll since the last epoch
        self.window: List[Bin] = []          # the bins the estimator sees
        self.job_rate_mbps: Dict[str, float] = {}
        self.on_poll: Optional[Callable[[], None]] = None   # phase control's tick, every poll

    def poll_loop(self, stop) -> None:
        """Every poll_s: a bin, phase control's tick, and a flow-stats request to every ToR."""
        net = self.net
        while not stop.is_set():
            with net.lock:
                net_bin = take_bin(net.flows.values())
                self.bins.append(net_bin)
            if self.on_poll is not None:
                try:
                    with net.lock:
                        self.on_poll()     # phase control closes its loop every iteration
                except Exception:
                    LOG.exception("phase control failed")
            with net.lock:
                dps = [(dp, net.dpid_role[d]) for d, dp in net.datapaths.items()]
            for dp, role in dps:
                if role[0] == "tor":
                    parser = dp.ofproto_parser
                    dp.send_msg(parser.OFPFlowStatsRequest(dp, table_id=T_FLOWS))
            hub.sleep(self.poll_s)

    def flow_stats(self, dp, body) -> None:
        """A ToR's flow-stats reply: every per-flow entry's counter and rate."""
        now = time.time()
        net = self.net
        with net.lock:
            for st in body:
                key = key_of_match(st.match)
                if key is None:
                    continue
                f = net.flows.get(key) or self._adopt(dp, key, st)
                if f is None:
                    continue
                bps = counter_rate(f["bytes"], f["polled"], st.byte_count, now)
                if bps is not None:
                    f["bps"] = bps
                f["bytes"], f["polled"] = st.byte_count, now

    def _adopt(self, dp, key: FlowKey, st) -> Optional[dict]:
        """A per-flow entry this controller did not install (it was restarted): learn it."""
        net, c = self.net, self.cluster
        role = net.dpid_role.get(dp.id)
        src_host, dst_host = c.ip_to_host.get(key[0]), c.ip_to_host.get(key[1])
        if role is None or role[0] != "tor" or src_host is None or dst_host is None:
            return None
        spine = None
        for inst in st.instructions:
            for a in getattr(inst, "actions", []):
                port = getattr(a, "port", None)
                for s_ in range(c.spec.spines):
                    if port == c.tor_spine_port(s_) and c.crosses_racks(src_host, dst_host):
                        spine = s_
        f = {"spine": spine, "pinned": False, "rack": role[1], "dst_rack": c.rack_of(dst_host),
             "job": net.jobs.job_of(key), "src_host": src_host, "dst_host": dst_host, "since": time.time(),
             "bytes": st.byte_count, "polled": None, "bps": 0.0, "adopted": True}
        net.flows[key] = f
        net.count("flows_adopted")
        return f

    def measure(self) -> Dict[str, Dict[Tuple[str, str], list]]:
        """An epoch's measurement: the bins since the last epoch join the sliding window of
        the last estimate_window_s (several periods are needed for a period estimate); the
        rate shown (``job_rate_mbps``) is the last epoch's."""
        with self.net.lock:
            fresh, self.bins = self.bins, []
        self.window = (self.window + fresh)[-max(1, int(round(self.estimate_window_s / self.poll_s))):]
        self.job_rate_mbps = job_rates_mbps(fresh, self.epoch_s)
        return bin_series(self.window)
