"""Checks of a running emulated cluster: reachability, shaping, and path spreading.
Measured with real traffic; used by `python -m emulation check` and by the tests."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import List, Optional, Tuple

from .net import EmulatedCluster

FLOW_PORT_BASE = 47000


@dataclass
class FlowResult:
    src: str
    dst: str
    port: int
    mbps: float
    spine: Optional[int]


def ping_all(ec: EmulatedCluster) -> float:
    """Percentage of pings lost between all ordered host pairs (1 ping each, after ARP)."""
    return ec.net.pingAll(timeout="1")


def measure_flows(ec: EmulatedCluster, pairs: List[Tuple[str, str]], seconds: float,
                  skip: float = 1.0, cc: Optional[str] = None) -> List[FlowResult]:
    """Run one TCP flow per (src, dst) pair concurrently; goodput measured at each receiver."""
    # let the controller's per-flow rates (polled every second) see earlier flows end, so
    # that its least-loaded spine choice is not steered by traffic that already stopped
    time.sleep(2.5)
    py = sys.executable
    servers, clients = [], []
    for i, (src, dst) in enumerate(pairs):
        port = FLOW_PORT_BASE + i
        servers.append(ec.popen(dst, [py, "-m", "emulation.tcpflow", "serve", "--port", str(port),
                                      "--seconds", str(seconds), "--skip", str(skip)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                errors="replace"))
    time.sleep(0.3)
    for i, (src, dst) in enumerate(pairs):
        args = [py, "-m", "emulation.tcpflow", "send", "--to", ec.cluster.host_ip(dst),
                "--port", str(FLOW_PORT_BASE + i), "--seconds", str(seconds + 0.5)]
        if cc:
            args += ["--cc", cc]
        clients.append(ec.popen(src, args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                errors="replace"))
    # the flows are live: read the controller's per-flow spine choice now
    time.sleep(min(1.0, seconds / 2))
    flows = ec.controller_status().get("flows", [])
    out = []
    for i, ((src, dst), srv) in enumerate(zip(pairs, servers)):
        try:
            so, se = srv.communicate(timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            srv.kill()
            raise RuntimeError(f"flow {src}->{dst} did not finish")
        if srv.returncode != 0:
            raise RuntimeError(f"flow {src}->{dst} receiver failed: {se.strip()[-300:]}")
        res = json.loads(so.strip().splitlines()[-1])
        port = FLOW_PORT_BASE + i
        mine = [f for f in flows if f["dport"] == port and f["src"] == ec.cluster.host_ip(src)
                and f["dst"] == ec.cluster.host_ip(dst)]
        spine = max(mine, key=lambda f: f["since"])["spine"] if mine else None
        out.append(FlowResult(src, dst, port, res["mbps"], spine))
    for c in clients:
        try:
            c.wait(timeout=10)
        except subprocess.TimeoutExpired:
            c.kill()
    return out


def tcp_all_pairs(ec: EmulatedCluster, seconds: float = 0.6) -> List[FlowResult]:
    """Every ordered host pair exchanges TCP data: n-1 rounds of a cyclic shift, each host
    sending to a different host in every round."""
    hosts = ec.cluster.hosts
    n = len(hosts)
    results = []
    for k in range(1, n):
        pairs = [(hosts[i], hosts[(i + k) % n]) for i in range(n)]
        results += measure_flows(ec, pairs, seconds, skip=0.0)
    return results


def cross_rack_pairs(ec: EmulatedCluster, count: int) -> List[Tuple[str, str]]:
    """``count`` cross-rack pairs with distinct senders and receivers (rack 0 -> rack 1)."""
    a, b = ec.cluster.hosts_in_rack(0), ec.cluster.hosts_in_rack(1)
    return list(zip(a, b))[:count]
