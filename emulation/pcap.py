"""Packet-capture analysis: which job put how many bytes on a link, when, with which DSCP,
and how that compares with what the trace says must cross the link.

    python -m emulation.pcap RUN/pcap/tor0-sp0.pcap --scenario RUN/scenario.yaml \
        [--ports MAP] [--bin 0.1] [--t0 EPOCH] [--link 'tor0>sp0'] [--csv OUT.csv]

Jobs are told apart by TCP port: a packet belongs to job k if its source or destination
port lies in [port_base_k, port_base_k + n_k) (every worker connection has a listen port
at one end, see emulation/worker.py).  The port map comes from the run's job specs
(found next to --scenario, or given with --ports as a spec, a directory of specs, a JSON
map {"jobA": [20000, 2]} or inline 'jobA=20000:2,jobB=20100:2'); failing that from
emulation.jobspec.default_port_bases.

Bytes are TCP payload computed from the IP total length (so GSO/GRO super-frames up to
64 KB, and truncated captures, count in full):
  wire bytes    every payload byte captured (retransmissions included)
  unique bytes  sequence-space bytes seen at least once per connection (retransmissions
                of data already seen on this link are not counted again)
The trace comparison uses unique bytes.

Library:
  analyze_pcap(path, jobs, bin_s=0.1, t0=None) -> PcapAnalysis
  load_port_map(source) -> List[JobPorts]
  expected_link_bytes(resolved, link, ...) / expected_job_bytes(resolved, ...)
  relative_error(measured, expected), compare_bytes(measured, expected)
"""
from __future__ import annotations

import argparse
import bisect
import csv
import json
import math
import re
import socket
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .jobspec import FORMAT as SPEC_FORMAT, default_port_bases, scaled_phases


class PcapError(RuntimeError):
    """The capture (or the port map) cannot be used.  str() is one line."""


@dataclass(frozen=True)
class JobPorts:
    name: str
    port_base: int
    ranks: int

    @property
    def ports(self) -> range:
        return range(self.port_base, self.port_base + self.ranks)


@dataclass
class JobTraffic:
    name: str
    port_base: int
    ranks: int
    packets: int = 0
    bytes: int = 0                 # wire payload bytes (retransmissions included)
    unique_bytes: int = 0          # sequence-space bytes, each counted once per connection
    by_direction: Dict[Tuple[str, str], int] = field(default_factory=dict)  # (src ip, dst ip)
    dscp: Dict[int, int] = field(default_factory=dict)                      # DSCP -> packets
    series: np.ndarray = field(default_factory=lambda: np.zeros(0))         # bytes per bin


@dataclass
class PcapAnalysis:
    path: str
    linktype: int
    bin_s: float
    t0: Optional[float]            # absolute time (epoch s) of the first bin's start
    t_first: Optional[float]       # first / last packet time (epoch s)
    t_last: Optional[float]
    packets: int                   # all records
    tcp_packets: int               # IPv4 TCP records
    unmatched_packets: int         # TCP records of no job
    unmatched_bytes: int
    ambiguous_packets: int         # ports of two jobs (counted for the destination port's)
    jobs: Dict[str, JobTraffic]

    def times(self) -> np.ndarray:
        """Start of every bin, seconds after t0."""
        n = max((len(j.series) for j in self.jobs.values()), default=0)
        return np.arange(n) * self.bin_s

    def bytes_series(self, job: str) -> np.ndarray:
        s = self.jobs[job].series
        n = len(self.times())
        return np.pad(s, (0, n - len(s)))

    def throughput_mbps(self, job: str) -> np.ndarray:
        """Payload throughput of the job per bin, Mbit/s."""
        return self.bytes_series(job) * 8.0 / self.bin_s / 1e6

    def measured(self, which: str = "unique") -> Dict[str, int]:
        return {n: (j.unique_bytes if which == "unique" else j.bytes) for n, j in self.jobs.items()}

    def to_csv(self, path: Union[str, Path]) -> None:
        """time_s (bin start after t0) and one Mbit/s column per job."""
        names = list(self.jobs)
        cols = [self.throughput_mbps(n) for n in names]
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["time_s"] + [f"{n}_mbps" for n in names])
            for i, t in enumerate(self.times()):
                w.writerow([f"{t:.6f}"] + [f"{c[i]:.6f}" for c in cols])


# ---------------------------------------------------------------------------
# port maps
# ---------------------------------------------------------------------------

def _from_json(data, where: str) -> List[JobPorts]:
    if isinstance(data, dict) and data.get("format") == SPEC_FORMAT:
        return [JobPorts(data["job"], int(data["port_base"]), int(data["num_ranks"]))]
    if isinstance(data, dict):
        out = []
        for name, v in data.items():
            if isinstance(v, dict) and "port_base" in v:
                n = v.get("ranks", v.get("num_ranks", v.get("n")))
                out.append(JobPorts(name, int(v["port_base"]), int(n)))
            elif isinstance(v, (list, tuple)) and len(v) == 2:
                out.append(JobPorts(name, int(v[0]), int(v[1])))
            else:
                raise PcapError(f"{where}: job {name!r}: expected [port_base, ranks] "
                                f"or {{'port_base': .., 'ranks': ..}}")
        return out
    raise PcapError(f"{where}: not a port map or a job spec")


def _specs_under(d: Path) -> List[JobPorts]:
    out = []
    for p in sorted(d.rglob("*.json")):
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("format") == SPEC_FORMAT:
            out += _from_json(data, str(p))
    return out


def load_port_map(source) -> List[JobPorts]:
    """Jobs' port ranges from: a list of JobPorts, a dict {job: (port_base, ranks)}, a job
    spec file, a JSON port-map file, a directory holding job specs, a scenario YAML (its
    directory's job specs, else default_port_bases) or an inline 'job=base:n,...'."""
    if isinstance(source, (list, tuple)) and all(isinstance(j, JobPorts) for j in source):
        return list(source)
    if isinstance(source, Mapping):
        return _from_json(dict(source), "port map")
    s = str(source)
    p = Path(s)
    if p.is_dir():
        jobs = _specs_under(p)
        if not jobs:
            raise PcapError(f"{p}: no job spec (*.json, {SPEC_FORMAT}) found")
        return _dedupe(jobs)
    if p.is_file() and p.suffix in (".yaml", ".yml"):
        jobs = _specs_under(p.parent)
        if jobs:
            return _dedupe(jobs)
        from workloads.scenario import ScenarioError, load_scenario, resolve
        try:
            rs = resolve(load_scenario(p))
        except ScenarioError as e:
            raise PcapError(str(e)) from None
        return [JobPorts(j.name, b, len(j.workers)) for j in rs.jobs
                for b in [default_port_bases(rs.jobs)[j.name]]]
    if p.is_file():
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError) as e:
            raise PcapError(f"{p}: not a JSON port map ({e})") from None
        return _from_json(data, str(p))
    m = re.fullmatch(r"\s*([A-Za-z][\w-]*=\d+:\d+)(\s*,\s*[A-Za-z][\w-]*=\d+:\d+)*\s*", s)
    if m:
        out = []
        for item in s.split(","):
            name, rng = item.strip().split("=")
            b, n = rng.split(":")
            out.append(JobPorts(name, int(b), int(n)))
        return out
    raise PcapError(f"{s}: not a file, a directory or an inline port map like 'jobA=20000:2'")


def _dedupe(jobs: List[JobPorts]) -> List[JobPorts]:
    seen: Dict[str, JobPorts] = {}
    for j in jobs:
        if j.name in seen and seen[j.name] != j:
            raise PcapError(f"job {j.name!r} has two different port ranges in the job specs")
        seen[j.name] = j
    return list(seen.values())


# ---------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------

_ETH, _RAW, _NULL, _LOOP, _SLL, _SLL2, _IPV4, _RAW14 = 1, 101, 0, 108, 113, 276, 228, 14


def _l3_offset(linktype: int, d: bytes) -> int:
    """Offset of the IPv4 header, or -1."""
    if linktype == _ETH:
        off = 12
        while len(d) >= off + 2:
            et = (d[off] << 8) | d[off + 1]
            if et in (0x8100, 0x88A8, 0x9100):
                off += 4
                continue
            return off + 2 if et == 0x0800 else -1
        return -1
    if linktype == _SLL:
        return 16 if len(d) >= 16 and d[14:16] == b"\x08\x00" else -1
    if linktype == _SLL2:
        return 20 if len(d) >= 20 and d[0:2] == b"\x08\x00" else -1
    if linktype in (_RAW, _IPV4, 12, _RAW14):
        return 0 if d and d[0] >> 4 == 4 else -1
    if linktype in (_NULL, _LOOP):
        if len(d) < 4:
            return -1
        fam = struct.unpack("<I", d[:4])[0]
        if fam > 0xFFFF:
            fam = struct.unpack(">I", d[:4])[0]
        return 4 if fam == 2 else -1
    return -1


class _Coverage:
    """Sequence-space coverage of one directed TCP connection: merged [start, end) runs."""
    __slots__ = ("base", "top", "starts", "ends")

    def __init__(self, base: int):
        self.base = base
        self.top = 0
        self.starts: List[int] = []
        self.ends: List[int] = []

    def add(self, seq: int, length: int) -> int:
        """Record a segment; return how many of its bytes are new."""
        rel = (seq - self.base) & 0xFFFFFFFF
        # unwrap next to the highest byte seen
        start = rel + ((self.top - rel + (1 << 31)) >> 32 << 32)
        end = start + length
        self.top = max(self.top, end)
        st, en = self.starts, self.ends
        if en and start == en[-1]:          # in order: extend the last run
            en[-1] = end
            return length
        if not st or start > en[-1]:
            st.append(start)
            en.append(end)
            return length
        # overlap or a hole filled: merge
        i = bisect.bisect_right(en, start)  # first run ending after start
        new = 0
        cur = start
        j = i
        while j < len(st) and st[j] <= end:
            if st[j] > cur:
                new += st[j] - cur
            cur = max(cur, en[j])
            j += 1
        if cur < end:
            new += end - cur
        lo = min(start, st[i]) if i < len(st) and st[i] <= end else start
        hi = max(end, en[j - 1]) if j > i else end
        st[i:j] = [lo]
        en[i:j] = [hi]
        return new


def _open(path: str):
    from scapy.error import Scapy_Exception
    from scapy.utils import RawPcapReader
    p = Path(path)
    if not p.exists():
        raise PcapError(f"{path}: cannot read (no such file)")
    if p.is_dir():
        raise PcapError(f"{path}: cannot read (is a directory)")
    try:
        return RawPcapReader(str(p))
    except Scapy_Exception as e:
        raise PcapError(f"{path}: not a pcap/pcapng capture ({e})") from None
    except (OSError, EOFError) as e:
        raise PcapError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})") from None


def analyze_pcap(path: Union[str, Path], jobs=None, bin_s: float = 0.1,
                 t0: Optional[float] = None, src_ips=None) -> PcapAnalysis:
    """Stream the capture once.  ``jobs``: anything load_port_map accepts (None: one
    pseudo-job 'tcp' holding all TCP).  Bins start at ``t0`` (epoch seconds; default the
    first packet); packets before t0 are counted in the totals but not in the series.
    ``src_ips``: count only packets from these addresses (one direction of a link: a
    capture on a ToR's uplink port sees both)."""
    if not bin_s > 0:
        raise PcapError(f"bin must be > 0 (got {bin_s})")
    catch_all = jobs is None
    job_list = [JobPorts("tcp", 0, 65536)] if catch_all else load_port_map(jobs)
    port_job: Dict[int, int] = {}
    for k, j in enumerate(job_list):
        for p in j.ports:
            if p in port_job and not catch_all:
                raise PcapError(f"port {p} is in the ranges of both {job_list[port_job[p]].name}"
                                f" and {j.name}")
            port_job[p] = k
    traffic = [JobTraffic(j.name, j.port_base, j.ranks) for j in job_list]
    src_filter = None if src_ips is None else {socket.inet_aton(a) for a in src_ips}
    series: List[List[int]] = [[] for _ in job_list]
    conns: Dict[Tuple[bytes, int, bytes, int], _Coverage] = {}
    reader = _open(str(path))
    base_linktype = getattr(reader, "linktype", None)
    nano = getattr(reader, "nano", False)
    n_pkts = n_tcp = unmatched = unmatched_bytes = ambiguous = 0
    t_first = t_last = None
    unpack_ip = struct.Struct("!BBH4xBB2x4s4s").unpack_from
    unpack_tcp = struct.Struct("!HHI4xB").unpack_from
    try:
        for data, meta in reader:
            n_pkts += 1
            if hasattr(meta, "tsresol"):        # pcapng
                linktype = meta.linktype
                if meta.tshigh is None:
                    continue
                ts = ((meta.tshigh << 32) | meta.tslow) / meta.tsresol
                wirelen = meta.wirelen
            else:
                linktype = base_linktype
                ts = meta.sec + meta.usec * (1e-9 if nano else 1e-6)
                wirelen = meta.wirelen
            if t_first is None:
                t_first = ts
                if t0 is None:
                    t0 = ts
            t_last = ts
            off = _l3_offset(linktype, data)
            if off < 0 or len(data) < off + 20:
                continue
            vihl, tos, tot_len, ttl, proto, src, dst = unpack_ip(data, off)
            if vihl >> 4 != 4 or proto != 6:
                continue
            if src_filter is not None and src not in src_filter:
                continue
            ihl = (vihl & 0x0F) * 4
            t = off + ihl
            if len(data) < t + 14:
                continue
            sport, dport, seq, doff = unpack_tcp(data, t)
            flags = data[t + 13]
            thl = (doff >> 4) * 4
            if tot_len == 0:                       # TSO/BIG TCP: length from the wire
                tot_len = wirelen - off
            payload = max(0, tot_len - ihl - thl)
            n_tcp += 1
            if catch_all:
                k = 0
            else:
                kd = port_job.get(dport)
                ks = port_job.get(sport)
                if kd is None and ks is None:
                    unmatched += 1
                    unmatched_bytes += payload
                    continue
                if kd is not None and ks is not None and kd != ks:
                    ambiguous += 1
                k = kd if kd is not None else ks
            jt = traffic[k]
            jt.packets += 1
            dscp = tos >> 2
            jt.dscp[dscp] = jt.dscp.get(dscp, 0) + 1
            key = (src, sport, dst, dport)
            cov = conns.get(key)
            if flags & 0x02 and cov is None:        # SYN: data starts at seq + 1
                cov = conns[key] = _Coverage((seq + 1) & 0xFFFFFFFF)
            if payload <= 0:
                continue
            if cov is None:
                cov = conns[key] = _Coverage(seq)
            jt.bytes += payload
            jt.unique_bytes += cov.add(seq, payload)
            d = (_ip(src), _ip(dst))
            jt.by_direction[d] = jt.by_direction.get(d, 0) + payload
            b = int((ts - t0) // bin_s)
            if b >= 0:
                s = series[k]
                if b >= len(s):
                    s.extend([0] * (b + 1 - len(s)))
                s[b] += payload
    finally:
        reader.close()
    nbins = max([len(s) for s in series] + [0])
    for jt, s in zip(traffic, series):
        jt.series = np.array(s + [0] * (nbins - len(s)), dtype=np.int64)
    return PcapAnalysis(str(path), base_linktype if base_linktype is not None else -1, bin_s,
                        t0, t_first, t_last, n_pkts, n_tcp, unmatched, unmatched_bytes,
                        ambiguous, {jt.name: jt for jt in traffic})


def _ip(b: bytes) -> str:
    return "%d.%d.%d.%d" % (b[0], b[1], b[2], b[3])


# ---------------------------------------------------------------------------
# what the trace says
# ---------------------------------------------------------------------------

def _emulated_flows(job, n_iter: int, emulation):
    """(src host, dst host, emulated bytes for n_iter iterations) of the job's flows, with the
    bytes exactly as the workers send them (jobspec rounding included)."""
    from workloads.flows import collective_flows
    from workloads.scenario import Collective, Group
    n = len(job.workers)
    for p in scaled_phases(job.profile, n, float(emulation.time_scale), float(emulation.bytes_scale)):
        if p["op"] == "compute":
            continue
        c = Collective(op=p["op"], bytes=p["bytes"], group=Group(**p["group"]),
                       overlap=p["overlap"])
        for f in collective_flows(c, n):
            yield job.workers[f.src].host, job.workers[f.dst].host, f.bytes * n_iter


def expected_link_bytes(resolved, link: Union[str, int], iterations: Optional[Mapping[str, int]] = None,
                        spine_of: Optional[Callable[[str, str, str], Optional[int]]] = None,
                        emulation=None) -> Dict[str, float]:
    """Emulated payload bytes every job must put on ``link`` (id like 'tor0>sp0' or an
    index) over its run, per the trace, workloads/flows.py and the spec's scaling.
    ``iterations``: per-job override (default the job's iterations).  ``spine_of(job, src,
    dst)`` picks the spine of a cross-rack pair (default: the cluster's ECMP hash).
    Multiply by emulation.bytes_scale for trace bytes."""
    cl = resolved.cluster
    em = emulation or resolved.scenario.emulation
    idx = link if isinstance(link, int) else cl.link_index.get(link)
    if idx is None:
        raise PcapError(f"no link {link!r} in the cluster")
    out = {}
    for job in resolved.jobs:
        it = (iterations or {}).get(job.name, job.spec.iterations)
        tot = 0.0
        for a, b, byt in _emulated_flows(job, it, em):
            if a == b:
                continue
            sp = spine_of(job.name, a, b) if spine_of else None
            if idx in cl.path(a, b, spine=sp):
                tot += byt
        out[job.name] = tot
    return out


def expected_job_bytes(resolved, iterations: Optional[Mapping[str, int]] = None,
                       emulation=None, include_same_host: bool = True) -> Dict[str, float]:
    """Emulated payload bytes every job sends in total over its run (all its connections;
    same-host pairs, which never reach a link, only with include_same_host)."""
    em = emulation or resolved.scenario.emulation
    out = {}
    for job in resolved.jobs:
        it = (iterations or {}).get(job.name, job.spec.iterations)
        out[job.name] = float(sum(b for s, d, b in _emulated_flows(job, it, em)
                                  if include_same_host or s != d))
    return out


def relative_error(measured: float, expected: float) -> float:
    """(measured - expected) / expected; 0 if both are 0, inf if only expected is."""
    if expected == 0:
        return 0.0 if measured == 0 else math.inf
    return (measured - expected) / expected


def compare_bytes(measured: Mapping[str, float], expected: Mapping[str, float]) -> Dict[str, dict]:
    """Per job: measured, expected and relative error (jobs of either side; missing = 0)."""
    out = {}
    for name in list(expected) + [n for n in measured if n not in expected]:
        m, e = float(measured.get(name, 0)), float(expected.get(name, 0))
        out[name] = {"measured": m, "expected": e, "rel_error": relative_error(m, e)}
    return out


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------

def _fmt_bytes(b: float) -> str:
    for unit, f in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(b) >= f:
            return f"{b / f:.3f} {unit}"
    return f"{b:.0f} B"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Per-job bytes, throughput and DSCP in a capture")
    ap.add_argument("pcap")
    ap.add_argument("--scenario", help="RUN_DIR/scenario.yaml (or a run directory)")
    ap.add_argument("--ports", help="port map: job spec, JSON map, directory of specs or "
                                    "'jobA=20000:2,jobB=20100:2' (default: from --scenario)")
    ap.add_argument("--bin", type=float, default=0.1, help="throughput bin, seconds")
    ap.add_argument("--t0", type=float, default=None, help="epoch time of the first bin")
    ap.add_argument("--link", help="compare with the trace's bytes for this link, e.g. 'tor0>sp0'")
    ap.add_argument("--csv", help="write the throughput time series (Mbit/s per job) here")
    args = ap.parse_args(argv)
    try:
        resolved = None
        sc_path = None
        if args.scenario:
            sc_path = Path(args.scenario)
            if sc_path.is_dir():
                sc_path = sc_path / "scenario.yaml"
            from workloads.scenario import ScenarioError, load_scenario, resolve
            try:
                resolved = resolve(load_scenario(sc_path))
            except ScenarioError as e:
                raise PcapError(str(e)) from None
        ports = args.ports or (str(sc_path) if sc_path else None)
        an = analyze_pcap(args.pcap, ports, bin_s=args.bin, t0=args.t0)
        if args.csv:
            an.to_csv(args.csv)
        bs = resolved.scenario.emulation.bytes_scale if resolved else None
        dur = (an.t_last - an.t_first) if an.t_first is not None else 0.0
        print(f"{an.path}: {an.packets} packets ({an.tcp_packets} TCP), {dur:.3f} s, "
              f"linktype {an.linktype}")
        for name, j in an.jobs.items():
            trace = f", trace {_fmt_bytes(j.unique_bytes * bs)}" if bs else ""
            dscp = " ".join(f"{k}:{v}" for k, v in sorted(j.dscp.items())) or "-"
            peak = an.throughput_mbps(name).max() if len(an.times()) else 0.0
            print(f"  {name} ports {j.port_base}-{j.port_base + j.ranks - 1}: {j.packets} pkts, "
                  f"wire {_fmt_bytes(j.bytes)}, unique {_fmt_bytes(j.unique_bytes)}{trace}, "
                  f"peak {peak:.2f} Mbit/s, DSCP {dscp}")
            for (a, b), v in sorted(j.by_direction.items()):
                if resolved:
                    a = resolved.cluster.ip_to_host.get(a, a)
                    b = resolved.cluster.ip_to_host.get(b, b)
                print(f"      {a} -> {b}: {_fmt_bytes(v)}")
        if an.unmatched_packets:
            print(f"  other TCP: {an.unmatched_packets} pkts, {_fmt_bytes(an.unmatched_bytes)}")
        if an.ambiguous_packets:
            print(f"  warning: {an.ambiguous_packets} packets match two jobs' port ranges")
        if args.link:
            if resolved is None:
                raise PcapError("--link needs --scenario")
            exp = expected_link_bytes(resolved, args.link)
            print(f"  vs trace on {args.link} (unique bytes):")
            for name, c in compare_bytes(an.measured("unique"), exp).items():
                print(f"    {name}: measured {_fmt_bytes(c['measured'])}, expected "
                      f"{_fmt_bytes(c['expected'])}, error {c['rel_error'] * 100:+.2f}%")
        if args.csv:
            print(f"  series -> {args.csv}")
    except PcapError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
