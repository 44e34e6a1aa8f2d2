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
                  skip: float = 1.0, cc: Optional[str] = None,
                  started: Optional[list] = None) -> List[FlowResult]:
    """Run one TCP flow per (src, dst) pair concurrently; goodput measured at each receiver."""
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
    if started is not None:
        started.append(time.time())
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


# ---------------------------------------------------------------------------
# every pair at once: connection set-up under a burst of new flows
# ---------------------------------------------------------------------------
PROBE_PORT = 46000
PROBE_BYTES = 64 * 1024


def _probe_main(argv=None) -> int:
    """Inside a host: listen on PORT; at START (epoch s) connect to every peer at once, send
    PROBE_BYTES and wait for the peer's one-byte reply; print JSON per peer: connect_s
    (SYN to established: ARP, the controller's packet-ins and flow set-up included) and
    done_s (start to the reply), or the error, within WINDOW seconds."""
    import argparse
    import socket
    import threading

    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--peers", required=True, help="ip,ip,...")
    ap.add_argument("--start", type=float, required=True)
    ap.add_argument("--window", type=float, required=True)
    a = ap.parse_args(argv)
    peers = [p for p in a.peers.split(",") if p]
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", a.port))
    ls.listen(64)
    ls.settimeout(0.5)
    end = a.start + a.window
    served = []

    def serve_one(c):
        try:
            c.settimeout(max(0.1, end - time.time()))
            while c.recv(65536):
                pass
            c.sendall(b"k")
            served.append(1)
        except OSError:
            pass
        finally:
            c.close()

    def server():
        while time.time() < end + 1:
            try:
                c, _ = ls.accept()
            except OSError:
                continue
            threading.Thread(target=serve_one, args=(c,), daemon=True).start()

    threading.Thread(target=server, daemon=True).start()
    res = {}

    def client(ip):
        t0 = time.time()
        s = socket.socket()
        try:
            s.settimeout(max(0.1, end - t0))
            s.connect((ip, a.port))
            t1 = time.time()
            s.sendall(b"x" * PROBE_BYTES)
            s.shutdown(socket.SHUT_WR)
            if s.recv(1) != b"k":
                raise OSError("no reply")
            res[ip] = {"connect_s": round(t1 - t0, 4), "done_s": round(time.time() - t0, 4)}
        except OSError as e:
            res[ip] = {"error": str(e) or type(e).__name__}
        finally:
            s.close()

    time.sleep(max(0.0, a.start - time.time()))
    ts = [threading.Thread(target=client, args=(ip,)) for ip in peers]
    for t in ts:
        t.start()
    for t in ts:
        t.join(max(0.1, end + 1 - time.time()))
    # keep answering the peers (every host expects as many as it connects to) until the window ends
    while len(served) < len(peers) and time.time() < end + 1:
        time.sleep(0.05)
    print(json.dumps(res), flush=True)
    return 0


@dataclass
class PairSetup:
    src: str
    dst: str
    connect_s: Optional[float]
    done_s: Optional[float]
    error: str = ""


def connect_all_pairs(ec: EmulatedCluster, window: float = 15.0) -> List[PairSetup]:
    """Every host connects to every other host at the same moment (n x (n-1) new flows, each
    set up by the controller), sends 64 KB and waits for a reply; per ordered pair the
    connection set-up time and the time to the reply, within ``window`` seconds."""
    hosts = ec.cluster.hosts
    start = time.time() + 1.0 + 0.05 * len(hosts)
    procs = {}
    for h in hosts:
        peers = ",".join(ec.cluster.host_ip(p) for p in hosts if p != h)
        procs[h] = ec.popen(h, [sys.executable, "-m", "emulation.stackcheck", "probe", "--port", str(PROBE_PORT),
                                "--peers", peers, "--start", str(start), "--window", str(window)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    by_ip = {ec.cluster.host_ip(h): h for h in hosts}
    out = []
    for h, p in procs.items():
        try:
            so, se = p.communicate(timeout=window + 30)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = "", "timed out"
        try:
            res = json.loads(so.strip().splitlines()[-1])
        except (ValueError, IndexError):
            res = {}
        for ip, dst in by_ip.items():
            if dst == h:
                continue
            r = res.get(ip, {"error": (se or "no result").strip()[-120:]})
            out.append(PairSetup(h, dst, r.get("connect_s"), r.get("done_s"), r.get("error", "")))
    return out


@dataclass
class UplinkLoad:
    link: str
    flows: int
    mbps: float
    rate_mbps: float


def uplink_pairs(c) -> List[Tuple[str, str]]:
    """One cross-rack flow per host such that the hash route (workloads.cluster.default_spine,
    what the fabric takes for fair sharing) spreads every ToR's flows over all its uplinks:
    host i of a rack sends to a host of another rack whose pair hashes to spine i mod spines.
    Among those it takes a host that receives nothing yet, on the spine's least-used downlink,
    in the nearest rack after its own, so the downlinks and the receivers are loaded evenly too."""
    from workloads.cluster import default_spine
    n, racks, pairs = c.spec.spines, c.spec.racks, []
    taken, down = set(), {}
    for r in range(racks):
        others = [b for k in range(1, racks) for b in c.hosts_in_rack((r + k) % racks)]
        for i, a in enumerate(c.hosts_in_rack(r)):
            want = [b for b in others if default_spine(a, b, n) == i % n] or others
            b = min(want, key=lambda b: (b in taken, down.get((default_spine(a, b, n), c.rack_of(b)), 0),
                                         others.index(b)))
            taken.add(b)
            key = (default_spine(a, b, n), c.rack_of(b))
            down[key] = down.get(key, 0) + 1
            pairs.append((a, b))
    return pairs


def uplink_flows(ec: EmulatedCluster, seconds: float) -> Tuple[List[FlowResult], List[UplinkLoad]]:
    """Concurrent cross-rack flows on every uplink: every host sends one flow across racks
    (``uplink_pairs``: racks x hosts flows at once, every uplink of every ToR in use); per uplink (ToR -> spine egress) the flows the controller put on it
    and the rate the uplink carried, from its qdisc's byte counter (sampled every 0.2 s by
    the fidelity monitor) from 1 s after the last flow started to the flows' end."""
    from .fidelity import Monitor
    c = ec.cluster
    pairs = uplink_pairs(c)
    up_mbps = ec.emu.link_mbps(c.spec.uplink_gbps)
    devs = {ec.intf_name(f"{t}>{sp}"): (f"{t}>{sp}", up_mbps) for t in c.tors for sp in c.spines}
    mon = Monitor(devs, period=0.2).start()
    started: list = []
    try:
        flows = measure_flows(ec, pairs, seconds, started=started)
    finally:
        mon.stop()
    t0, t1 = started[0] + 1.0, started[0] + seconds - 0.2
    win = [x for x in mon.samples if t0 <= x["t"] <= t1]
    loads = []
    for dev, (lid, _) in devs.items():
        tor, sp = lid.split(">")
        r, s_ = c.tors.index(tor), c.spines.index(sp)
        n = sum(1 for f in flows if f.spine == s_ and c.rack_of(f.src) == r)
        mbps = 0.0
        if len(win) >= 2 and dev in win[0]["q"] and dev in win[-1]["q"]:
            mbps = ((win[-1]["q"][dev]["bytes"] - win[0]["q"][dev]["bytes"]) * 8
                    / max(1e-9, win[-1]["t"] - win[0]["t"]) / 1e6)
        loads.append(UplinkLoad(lid, n, mbps, up_mbps))
    return flows, loads


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "probe":
        sys.exit(_probe_main(sys.argv[2:]))
    sys.exit("usage: python -m emulation.stackcheck probe --port P --peers IP,... --start T --window S")
