"""The scenario / trace schema: one YAML file describes the cluster, the jobs, where
their workers sit, and what every iteration computes and communicates.

Used unchanged by the emulator, the controller, the schedulers and the simulator.
Units are the real cluster's: bytes, seconds, Gb/s.  See docs/schema.md.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Tuple, Union

import yaml
from pydantic import (Field, NonNegativeFloat, PositiveFloat, PositiveInt, ValidationError,
                      model_validator)

from .cluster import Cluster, ClusterSpec, parse_host
from .profile import (Bytes, Collective, CollectiveOp, Compute, Group, Phase, Profile,  # noqa: F401
                      ScenarioError, _Strict, one_line, parse_bytes)


class Placement(_Strict):
    """Explicit slots ('r0h1' or 'r0h1/3' for GPU 3) or a rule."""
    slots: Optional[List[str]] = None
    rule: Optional[Literal["packed", "spread", "random"]] = None
    seed: int = 0
    racks: Optional[List[int]] = Field(None, description="restrict a rule to these racks")

    @model_validator(mode="after")
    def _one(self):
        if (self.slots is None) == (self.rule is None):
            raise ValueError("give exactly one of slots or rule")
        return self


class JobSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
    workers: Optional[PositiveInt] = None
    iterations: PositiveInt
    arrival_s: NonNegativeFloat = 0.0
    model: Optional[str] = Field(None, description="a model of the zoo; gives the profile")
    profile: Optional[Profile] = None
    placement: Placement = Placement(rule="packed")

    @model_validator(mode="after")
    def _profile(self):
        if self.profile is None and self.model is None:
            raise ValueError("give a profile or a model")
        if self.placement.slots is not None and not self.placement.slots:
            raise ValueError("placement.slots is empty (a job needs at least one worker)")
        if self.workers is None and self.placement.slots is None:
            raise ValueError("workers is required unless placement lists slots")
        if self.workers is not None and self.placement.slots is not None \
                and len(self.placement.slots) != self.workers:
            raise ValueError(f"workers is {self.workers} but placement lists "
                             f"{len(self.placement.slots)} slots")
        return self

    @property
    def num_workers(self) -> int:
        return self.workers if self.workers is not None else len(self.placement.slots)


# Per-iteration compute-time jitter of both back ends (std of a multiplicative factor): the
# jitter at which the simulator's fair sharing on pair-shared-spine reproduces the emulator's
# measured one (58.1 +/- 2.8 ms over 3 runs against 58.5 ms simulated); the emulator's isolated
# spread alone (1%, 0.02 on compute) leaves out TCP's sharing noise under contention
# (docs/phase-control.md, "Noise in the simulator"). The emulator's workers draw the same
# factors (workloads/jitter.py), so both back ends run one noise model by default.
DEFAULT_COMPUTE_JITTER = 0.1


class EmulationSpec(_Strict):
    """How the real cluster is scaled onto the emulator.

    Emulated link rate (Mbit/s) = real rate (Gb/s) * 1000 / bandwidth_scale.
    Emulated time = real time * time_scale.  Bytes are scaled by
    bandwidth_scale / time_scale so that every phase (compute and communication)
    stretches by exactly time_scale and the compute/communication ratio is kept.
    """
    bandwidth_scale: PositiveFloat = 1000.0
    time_scale: PositiveFloat = 1.0
    tcp_cc: Literal["cubic", "reno", "bbr"] = "cubic"
    capture: List[str] = Field(default_factory=lambda: ["uplinks"],
                               description="'uplinks', 'hosts', 'none' or link ids like 'tor0>sp0'")
    epoch_s: PositiveFloat = Field(1.0, description="controller epoch, emulated seconds")
    max_host_link_mbps: PositiveFloat = 100.0
    gso_max_bytes: Optional[int] = Field(16384, ge=1500, le=65536,
                                         description="hosts' largest segmentation-offload frame (null: kernel default)")
    compute_jitter: float = Field(DEFAULT_COMPUTE_JITTER, ge=0.0, le=1.0, description=(
        "std of a per-iteration factor 1 + N(0, sigma) on every compute phase the workers "
        "replay, drawn as simulation.compute_jitter draws it (workloads/jitter.py); 0: compute "
        "replayed exactly"))

    @property
    def bytes_scale(self) -> float:
        return self.bandwidth_scale / self.time_scale

    def link_mbps(self, gbps: float) -> float:
        return gbps * 1000.0 / self.bandwidth_scale


class PhaseControlSpec(_Strict):
    """Holding decided start-time shifts (both back ends; docs/phase-control.md): every epoch
    each shifted job's offset is measured against the decided one and a job that is ahead
    is delayed once by ``gain`` times its error when the error exceeds ``tolerance``
    (fractions of the period)."""
    enabled: bool = True
    hold: bool = Field(True, description="false: measure and report the phases, correct nothing")
    gain: float = Field(1.0, gt=0.0, le=1.0)
    tolerance: float = Field(0.04, ge=0.0, lt=0.5)



class SimulationSpec(_Strict):
    """Simulator-only settings of a scenario."""
    compute_jitter: float = Field(DEFAULT_COMPUTE_JITTER, ge=0.0, le=1.0, description=(
        "std of the per-iteration factor (1 + N(0, jitter)) on every compute phase; "
        "0: the noiseless fluid model"))


class Event(_Strict):
    """Something that happens to the emulated cluster during a run (faults)."""
    at_s: NonNegativeFloat = Field(description="trace seconds after the run's start")
    kind: Literal["link-down", "link-up", "controller-restart"]
    link: Optional[str] = Field(None, pattern=r"^tor[0-9]+-sp[0-9]+$",
                                description="for link events: a ToR-spine link, e.g. tor0-sp1")
    down_s: NonNegativeFloat = Field(2.0, description="controller-restart: emulated seconds it stays down")

    @model_validator(mode="after")
    def _link(self):
        if self.kind.startswith("link") and self.link is None:
            raise ValueError(f"{self.kind} needs a link, e.g. tor0-sp1")
        return self


class Scenario(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    backend: Literal["emulation", "simulation"] = "emulation"
    policies: List[str] = Field(default_factory=lambda: ["fair", "optimal", "crux", "cassini", "harmonics"])
    cluster: ClusterSpec
    jobs: List[JobSpec] = Field(default_factory=list)
    emulation: EmulationSpec = EmulationSpec()
    seed: int = 0
    events: List[Event] = Field(default_factory=list, description="faults during an emulated run")
    phase_control: PhaseControlSpec = PhaseControlSpec()
    simulation: SimulationSpec = SimulationSpec()

    @model_validator(mode="after")
    def _names(self):
        _check_size(self.cluster)
        for i, e in enumerate(self.events):
            if e.link is not None:
                r, sp = (int(x) for x in e.link[3:].split("-sp"))
                if r >= self.cluster.racks or sp >= self.cluster.spines:
                    raise ValueError(f"events.{i}.link: {e.link} is not a link of this cluster")
        seen = set()
        for j in self.jobs:
            if j.name in seen:
                raise ValueError(f"job name {j.name!r} used twice")
            seen.add(j.name)
        return self

    def with_iterations(self, n: int) -> "Scenario":
        """This scenario with every job running ``n`` iterations (a shorter or longer run)."""
        return self.model_copy(update={"jobs": [j.model_copy(update={"iterations": n})
                                                for j in self.jobs]})


# Bounds far above any cluster the tools are meant for (the largest shipped scenario has 847
# hosts and 6,776 GPUs): past them a typo such as racks: 1e12 would exhaust memory instead
# of being reported.
MAX_HOSTS = 131_072
MAX_GPUS = 1_048_576
MAX_SPINES = 4_096


def check_cluster_size(hosts: int, gpus_per_host: int, spines: int) -> None:
    """ValueError (one line) past the limits above."""
    if hosts > MAX_HOSTS:
        raise ValueError(f"cluster: {hosts} hosts is more than this tool handles ({MAX_HOSTS})")
    if hosts * gpus_per_host > MAX_GPUS:
        raise ValueError(f"cluster: {hosts * gpus_per_host} GPU slots is more than this tool "
                         f"handles ({MAX_GPUS})")
    if spines > MAX_SPINES:
        raise ValueError(f"cluster.spines: {spines} is more than this tool handles ({MAX_SPINES})")


def _check_size(c: ClusterSpec) -> None:
    hosts = sum(c.hosts_per_rack) if isinstance(c.hosts_per_rack, list) else c.racks * c.hosts_per_rack
    check_cluster_size(hosts, c.gpus_per_host, c.spines)


@dataclass(frozen=True)
class Worker:
    job: str
    rank: int
    host: str
    gpu: int


def _format_error(err: ValidationError) -> str:
    e = err.errors()[0]
    loc = ".".join(str(x) for x in e["loc"] if not str(x).startswith("function-"))
    # discriminated unions put the tag into loc: drop tags such as 'compute'
    msg = e["msg"]
    if e["type"] == "extra_forbidden":
        msg = "unknown key"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    inp = e.get("input")
    shown = "" if e["type"] in ("extra_forbidden", "missing") or isinstance(inp, (dict, list)) \
        or "(got " in msg or "not a byte count" in msg else f" (got {inp!r})"
    return f"{loc}: {msg}{shown}" if loc else f"{msg}{shown}"


def parse_scenario(data: Any, source: str = "scenario") -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: expected a mapping at the top level")
    if "base" in data and "axes" in data and "jobs" not in data:
        raise ScenarioError(f"{source}: a sweep, not a scenario (run it with: python -m "
                            f"analysis sweep {source})")
    try:
        sc = Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(f"{source}: {_format_error(e)}") from None
    try:
        resolve(sc)  # placement and profiles must be possible
    except ScenarioError as e:
        raise ScenarioError(f"{source}: {e}") from None
    return sc


def load_scenario(path: Union[str, Path]) -> Scenario:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ScenarioError(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{path}: not a UTF-8 text file (byte {e.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(e, "problem", None) or e).split())
        raise ScenarioError(f"{path}:{where} not valid YAML ({problem})") from None
    except RecursionError:
        raise ScenarioError(f"{path}: not valid YAML (nested too deeply)") from None
    return parse_scenario(data, str(path))


def dump_scenario(sc: Scenario) -> str:
    return yaml.safe_dump(sc.model_dump(mode="json", exclude_none=True), sort_keys=False)


# ---------------------------------------------------------------------------
# Resolution: placements and profiles made concrete
# ---------------------------------------------------------------------------

@dataclass
class ResolvedJob:
    spec: JobSpec
    profile: Profile
    workers: List[Worker]

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def hosts(self) -> List[str]:
        return [w.host for w in self.workers]

    def racks(self, cluster: Cluster) -> List[int]:
        return sorted({cluster.rack_of(w.host) for w in self.workers})


@dataclass
class ResolvedScenario:
    scenario: Scenario
    cluster: Cluster
    jobs: List[ResolvedJob]

    def job(self, name: str) -> ResolvedJob:
        for j in self.jobs:
            if j.name == name:
                return j
        raise KeyError(name)


def _parse_slot(slot: str, cluster: Cluster) -> Tuple[str, int]:
    host, _, gpu = slot.partition("/")
    try:
        parse_host(host)
    except ValueError:
        raise ScenarioError(f"slot {slot!r} is not a host name like r0h1 or r0h1/2") from None
    if host not in cluster.host_rack:
        raise ScenarioError(f"slot {slot!r}: host {host} does not exist in the cluster "
                            f"({cluster.spec.racks} racks of {cluster.rack_sizes[0]} hosts)")
    g = int(gpu) if gpu.isdigit() else (None if gpu == "" else -1)
    if g is not None and not (0 <= g < cluster.spec.gpus_per_host):
        raise ScenarioError(f"slot {slot!r}: GPU index out of range (hosts have "
                            f"{cluster.spec.gpus_per_host} GPUs)")
    return host, g


def resolve(sc: Scenario) -> ResolvedScenario:
    """Concrete worker slots and profiles for every job; ScenarioError if impossible."""
    from .zoo import profile_for  # local import: the zoo is only needed to resolve

    cluster = Cluster(sc.cluster)
    free: Dict[str, List[int]] = {h: list(range(sc.cluster.gpus_per_host)) for h in cluster.hosts}
    jobs: Dict[str, List[Worker]] = {}

    def take(job: str, host: str, gpu: Optional[int]) -> Worker:
        slots = free[host]
        if gpu is None:
            if not slots:
                raise ScenarioError(f"jobs.{job}: host {host} has no free GPU left")
            gpu = slots[0]
        elif gpu not in slots:
            raise ScenarioError(f"jobs.{job}: GPU {host}/{gpu} is already taken")
        slots.remove(gpu)
        return Worker(job, 0, host, gpu)

    # explicit placements first, then rules in job order
    for j in sc.jobs:
        if j.placement.slots is not None:
            try:
                slots = [_parse_slot(s, cluster) for s in j.placement.slots]
            except ScenarioError as e:
                raise ScenarioError(f"jobs.{j.name}.placement.slots: {e}") from None
            jobs[j.name] = [take(j.name, h, g) for h, g in slots]
    for j in sc.jobs:
        if j.placement.slots is not None:
            continue
        n = j.num_workers
        racks = j.placement.racks if j.placement.racks is not None else list(range(sc.cluster.racks))
        for r in racks:
            if not 0 <= r < sc.cluster.racks:
                raise ScenarioError(f"jobs.{j.name}.placement.racks: rack {r} does not exist")
        avail = sum(len(free[h]) for r in racks for h in cluster.hosts_in_rack(r))
        if n > avail:
            raise ScenarioError(f"jobs.{j.name}.workers: needs {n} workers but only {avail} GPU slots are free"
                                f" in racks {racks}")
        rule = j.placement.rule
        order: List[str] = []
        if rule == "packed":
            # fill hosts in rack order, all GPUs of a host before the next host
            for r in racks:
                for h in cluster.hosts_in_rack(r):
                    order += [h] * len(free[h])
        elif rule == "spread":
            # round-robin over racks, one GPU at a time, hosts in order inside a rack
            # one GPU per host first, then the hosts' second GPUs, ...
            g = sc.cluster.gpus_per_host
            per_rack = [[h for k in range(g) for h in cluster.hosts_in_rack(r) if len(free[h]) > k]
                        for r in racks]
            i = 0
            while any(per_rack):
                lst = per_rack[i % len(per_rack)]
                if lst:
                    order.append(lst.pop(0))
                i += 1
        else:  # random
            pool = [h for r in racks for h in cluster.hosts_in_rack(r) for _ in range(len(free[h]))]
            random.Random(f"{sc.seed}/{j.placement.seed}/{j.name}").shuffle(pool)
            order = pool
        jobs[j.name] = [take(j.name, h, None) for h in order[:n]]

    resolved = []
    for j in sc.jobs:
        ws = [Worker(j.name, rank, w.host, w.gpu) for rank, w in enumerate(jobs[j.name])]
        if j.profile is not None:
            prof = j.profile
        else:
            try:
                prof = profile_for(j.model, len(ws), sc.cluster.gpu)
            except KeyError as e:
                raise ScenarioError(f"jobs.{j.name}.model: {e.args[0]}") from None
            except ValueError as e:  # incl. ScenarioError from an imported SimAI file
                raise ScenarioError(f"jobs.{j.name}.model: {e}") from None
        for i, p in enumerate(prof.phases):
            if isinstance(p, Collective):
                _check_group(p.group, len(ws), f"jobs.{j.name}.profile.phases.{i}.group")
        resolved.append(ResolvedJob(j, prof, ws))
    return ResolvedScenario(sc, cluster, resolved)


def _check_group(g: Group, n: int, where: str) -> None:
    size = g.size or n
    if n < 1 or size > n or n % (size * g.stride) != 0:
        raise ScenarioError(f"{where}: groups of {size} with stride {g.stride} do not tile {n} workers")


def groups_of(g: Group, n: int) -> List[List[int]]:
    """Partition ranks 0..n-1 into the collective's groups (ring order = list order)."""
    size = g.size or n
    block = size * g.stride
    out = []
    for b in range(0, n, block):
        for off in range(g.stride):
            out.append([b + off + k * g.stride for k in range(size)])
    return out
