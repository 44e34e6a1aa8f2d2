"""The cluster description: racks of GPU hosts, one ToR per rack, spine switches.

One object feeds the emulator (Mininet builder), the controller (routing, link
ids for counters) and the simulator/schedulers (capacities, paths).  It imports
neither Mininet nor os-ken.

Naming (stable, used everywhere, also in result files):
  host  r{rack}h{index}        e.g. r0h1
  ToR   tor{rack}              e.g. tor0
  spine sp{index}              e.g. sp1
Links are directed; a link id is "a>b" (e.g. "tor0>sp1" is rack 0's uplink to
spine 1, "sp1>tor0" the spine's downlink into rack 0).

Rates are in the real cluster's units (Gb/s).  The emulator scales them down
(see workloads.scenario.EmulationSpec).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import cached_property
from typing import List, Optional, Tuple, Union

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator


# four priority classes (the controller's and the simulator's default) can each keep a quarter
MAX_CLASS_GUARANTEE = 0.25


class ClusterSpec(BaseModel):
    """What the scenario YAML says under ``cluster:``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    racks: PositiveInt = Field(description="number of racks (one ToR each)")
    hosts_per_rack: Union[PositiveInt, List[PositiveInt]] = Field(
        description="hosts in every rack, or one number per rack")
    spines: PositiveInt = Field(1, description="spine switches; every ToR links to every spine")
    gpus_per_host: PositiveInt = Field(1, description="GPU slots per host; their workers share the host link")
    host_link_gbps: PositiveFloat = Field(description="host <-> ToR link rate, each direction")
    uplink_gbps: PositiveFloat = Field(description="ToR <-> spine link rate, each direction, per spine")
    gpu: str = Field("A100", description="GPU class, selects compute times of zoo models")
    class_guarantee: Optional[float] = Field(None, ge=0.0, le=MAX_CLASS_GUARANTEE, description=(
        "share of a shared link every priority class keeps while a higher class is backlogged "
        "(a minimum as a switch's ETS weights give, IEEE 802.1Qaz); the rest goes by strict "
        "priority. null: each back end's own, the emulator's htb 0.02 and the simulator's "
        "strict priority (0)"))

    @model_validator(mode="after")
    def _rack_sizes(self):
        if isinstance(self.hosts_per_rack, list) and len(self.hosts_per_rack) != self.racks:
            raise ValueError(
                f"hosts_per_rack lists {len(self.hosts_per_rack)} racks but racks is {self.racks}")
        return self

    def rack_sizes(self) -> List[int]:
        if isinstance(self.hosts_per_rack, list):
            return list(self.hosts_per_rack)
        return [self.hosts_per_rack] * self.racks


@dataclass(frozen=True)
class Link:
    index: int
    src: str
    dst: str
    gbps: float
    kind: str  # "host-up", "host-down", "uplink", "downlink"

    @property
    def id(self) -> str:
        return f"{self.src}>{self.dst}"


def link_id(src: str, dst: str) -> str:
    return f"{src}>{dst}"


class Cluster:
    """Instantiated topology (pure data): nodes, directed links, equal-cost paths."""

    def __init__(self, spec: ClusterSpec):
        self.spec = spec
        self.rack_sizes = spec.rack_sizes()
        self.hosts: List[str] = []
        self.host_rack: dict[str, int] = {}
        for r, size in enumerate(self.rack_sizes):
            for h in range(size):
                name = host_name(r, h)
                self.hosts.append(name)
                self.host_rack[name] = r
        self.tors = [tor_name(r) for r in range(spec.racks)]
        self.spines = [spine_name(s) for s in range(spec.spines)]
        links: List[Link] = []

        def add(a, b, gbps, kind):
            links.append(Link(len(links), a, b, float(gbps), kind))

        for hname, r in self.host_rack.items():
            add(hname, self.tors[r], spec.host_link_gbps, "host-up")
            add(self.tors[r], hname, spec.host_link_gbps, "host-down")
        if spec.racks > 1:
            for t in self.tors:
                for s in self.spines:
                    add(t, s, spec.uplink_gbps, "uplink")
                    add(s, t, spec.uplink_gbps, "downlink")
        self.links: List[Link] = links
        self.link_index = {l.id: l.index for l in links}

    # -- naming -----------------------------------------------------------
    @property
    def num_hosts(self) -> int:
        return len(self.hosts)

    @property
    def num_gpus(self) -> int:
        return self.num_hosts * self.spec.gpus_per_host

    def rack_of(self, host: str) -> int:
        return self.host_rack[host]

    def hosts_in_rack(self, r: int) -> List[str]:
        return [host_name(r, h) for h in range(self.rack_sizes[r])]

    def host_ip(self, host: str) -> str:
        r, h = parse_host(host)
        return f"10.{r // 256}.{r % 256}.{h + 1}"

    def host_mac(self, host: str) -> str:
        r, h = parse_host(host)
        return "02:00:%02x:%02x:%02x:%02x" % ((r >> 8) & 0xFF, r & 0xFF, (h >> 8) & 0xFF, h & 0xFF)

    @cached_property
    def ip_to_host(self) -> dict:
        return {self.host_ip(h): h for h in self.hosts}

    @staticmethod
    def tor_dpid(r: int) -> int:
        return 0x1000 + r

    @staticmethod
    def spine_dpid(s: int) -> int:
        return 0x2000 + s

    # -- switch ports (the emulator wires exactly these; the controller routes by them) --
    @staticmethod
    def tor_host_port(h: int) -> int:
        """ToR port of the rack's h-th host."""
        return 1 + h

    def tor_spine_port(self, s: int) -> int:
        """ToR port of the uplink to spine s (after the largest rack's host ports)."""
        return 2 + max(self.rack_sizes) + s

    @staticmethod
    def spine_tor_port(r: int) -> int:
        """Spine port of the downlink to rack r."""
        return 1 + r

    def link_port(self, lid: str) -> Tuple[str, int]:
        """(switch, egress port) of a switch-originated link id such as 'tor0>sp1'."""
        a, b = lid.split(">")
        if a.startswith("tor"):
            r = int(a[3:])
            if b.startswith("sp"):
                return a, self.tor_spine_port(int(b[2:]))
            return a, self.tor_host_port(parse_host(b)[1])
        if a.startswith("sp"):
            return a, self.spine_tor_port(int(b[3:]))
        raise ValueError(f"{lid}: not a switch egress link")

    def oversubscription(self, rack: int = 0) -> float:
        hosts = self.rack_sizes[rack]
        up = self.spec.spines * self.spec.uplink_gbps
        return hosts * self.spec.host_link_gbps / up

    # -- paths ------------------------------------------------------------
    def link(self, src: str, dst: str) -> Link:
        return self.links[self.link_index[link_id(src, dst)]]

    def path(self, src_host: str, dst_host: str, spine: Optional[int] = None) -> List[int]:
        """Link indices from src_host to dst_host; ``spine`` picks the spine for cross-rack pairs."""
        if src_host == dst_host:
            return []
        rs, rd = self.host_rack[src_host], self.host_rack[dst_host]
        ts, td = self.tors[rs], self.tors[rd]
        if rs == rd:
            return [self.link_index[link_id(src_host, ts)], self.link_index[link_id(ts, dst_host)]]
        if spine is None:
            spine = default_spine(src_host, dst_host, self.spec.spines)
        s = self.spines[spine]
        return [self.link_index[link_id(src_host, ts)], self.link_index[link_id(ts, s)],
                self.link_index[link_id(s, td)], self.link_index[link_id(td, dst_host)]]

    def crosses_racks(self, src_host: str, dst_host: str) -> bool:
        return self.host_rack[src_host] != self.host_rack[dst_host]

    def links_of_rack(self, r: int) -> List[int]:
        """The links a rack's Local Scheduler owns: its host links and its ToR's uplinks
        and the spine downlinks into it."""
        t = self.tors[r]
        return [l.index for l in self.links if l.src == t or l.dst == t]


def host_name(rack: int, index: int) -> str:
    return f"r{rack}h{index}"


def tor_name(rack: int) -> str:
    return f"tor{rack}"


def spine_name(index: int) -> str:
    return f"sp{index}"


def parse_host(name: str) -> Tuple[int, int]:
    if not name.startswith("r") or "h" not in name:
        raise ValueError(f"not a host name: {name!r} (expected r<rack>h<index>)")
    r, h = name[1:].split("h", 1)
    return int(r), int(h)


def default_spine(src_host: str, dst_host: str, spines: int, salt: str = "") -> int:
    """Deterministic ECMP hash used where no controller/policy chose a path."""
    return zlib.crc32(f"{src_host}>{dst_host}{salt}".encode()) % spines
