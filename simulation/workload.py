"""Workload generators for large simulated runs: job mixes, arrivals, placements -> Scenario.

* Job sizes: drawn from a heavy-tailed mix of powers of two (many small jobs, a few large
  ones; mean about 20 GPUs), shrunk if needed so that every job fits at once (the schema's
  placements are static and exclusive: a GPU slot belongs to one job for the whole run).
* Models: the zoo (``workloads.zoo``) when it knows models, else the synthetic data-parallel
  profiles of ``SYNTHETIC_MODELS`` (parameter counts of well-known models, gradient bytes per
  parameter, per-iteration compute time on an A100 at a typical per-GPU batch).
* Arrivals: all at 0, a Poisson process, or a cluster trace (``simulation.arrivals``):
  ``csv:FILE`` reads any CSV of jobs (start times, optional ends and GPU requests, which then
  become the job sizes); ``openb`` is the shipped Alibaba OpenB trace
  (``simulation/data/openb2023``; see its PROVENANCE.md): consecutive creation times of GPU
  tasks from a seed-chosen point of the trace, their gaps rescaled so that the mean gap is
  ``mean_interarrival_s`` (the trace's mean gap is ~418 s; our jobs run for seconds to
  minutes).  OpenB's own GPU counts are not used as job sizes: 99 % of its tasks use one GPU
  or less (caveat in the provenance).
* Placements, as explicit slots: ``packed`` (jobs largest first; a job takes whole free
  hosts in as few racks as possible, best fit; a sub-host remainder goes on a partly used
  host), ``first-fit`` (jobs in order; whole free hosts in cluster order, so jobs straddle
  rack boundaries, as a host-granular scheduler without rack awareness does) or
  ``fragmented`` (the cluster has churned: the job's GPUs come in chunks of 1-4 GPUs from
  random hosts in random racks; tensor-parallel groups stay inside a host).
"""
from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from workloads.cluster import Cluster, ClusterSpec
from workloads.scenario import Scenario, ScenarioError, dump_scenario, parse_scenario

import simulation.arrivals as traces

DATA_DIR = Path(__file__).resolve().parent / "data"
OPENB_TASKS = traces.OPENB_TASKS


@dataclass(frozen=True)
class SyntheticModel:
    name: str
    params: float            # parameters
    grad_bytes: float        # bytes per parameter in the gradient all-reduce
    compute_s: float         # forward + backward per iteration, A100, typical per-GPU batch
    overlap: float = 0.0     # fraction of the compute the all-reduce may overlap (DDP buckets)
    tp: int = 1              # tensor-parallel degree (inside a host), 1 = pure data parallel
    min_gpus: int = 1

    def profile(self, workers: int) -> dict:
        phases: List[dict] = [{"op": "compute", "seconds": self.compute_s}]
        if self.tp > 1 and workers % self.tp == 0 and workers >= self.tp:
            dp = workers // self.tp
            # TP all-reduces of activations inside the host (free on the network), then the
            # data-parallel gradient all-reduce of each TP shard across hosts
            act = 2.0 * 4096 * 2048 * 2 * 32       # hidden x seq x bytes x layers (order of GBs per step)
            phases.append({"op": "allreduce", "bytes": float(act),
                           "group": {"size": self.tp, "stride": 1}})
            if dp > 1:
                phases.append({"op": "allreduce",
                               "bytes": float(self.params * self.grad_bytes / self.tp),
                               "group": {"size": dp, "stride": self.tp},
                               "overlap": self.overlap})
        elif workers > 1:
            phases.append({"op": "allreduce", "bytes": float(self.params * self.grad_bytes),
                           "overlap": self.overlap})
        return {"phases": phases}


SYNTHETIC_MODELS: Dict[str, SyntheticModel] = {m.name: m for m in [
    SyntheticModel("resnet50", 25.6e6, 4, 0.100, 0.3),
    SyntheticModel("vgg16", 138.4e6, 4, 0.140, 0.0),
    SyntheticModel("bert-large", 340e6, 2, 0.250, 0.0),
    SyntheticModel("vit-large", 304e6, 2, 0.300, 0.2),
    SyntheticModel("gpt2-xl", 1.56e9, 2, 1.200, 0.0, min_gpus=8),
    SyntheticModel("llama7b-tp8", 6.7e9, 2, 4.000, 0.0, tp=8, min_gpus=16),
]}

# job size mix (GPUs: weight); mean ~20 GPUs
SIZE_MIX: Dict[int, float] = {1: 0.10, 2: 0.08, 4: 0.12, 8: 0.25, 16: 0.20, 32: 0.13, 64: 0.08, 128: 0.04}


# zoo models a generated mix draws from, by job size (GPUs): small jobs train the smaller
# models; gpt3-175b (20 s iterations, 64-GPU multiples) only when asked for explicitly
ZOO_MIX_SMALL = ("resnet50", "vgg16", "bert-large", "gpt2-1.5b")
ZOO_MIX_LARGE = ("bert-large", "gpt2-1.5b", "llama-7b", "gpt3-13b", "mixtral-8x7b")


def _zoo_models() -> List[str]:
    """Model names the zoo knows (empty while the zoo is a placeholder)."""
    try:
        from workloads import zoo
    except ImportError:
        return []
    models = getattr(zoo, "MODELS", None)
    if isinstance(models, dict):
        return sorted(models)
    return []


# ---------------------------------------------------------------------------
# Sizes, models
# ---------------------------------------------------------------------------

def draw_sizes(n_jobs: int, capacity: int, rng: random.Random, fill: float = 0.95,
               mix: Optional[Dict[int, float]] = None) -> List[int]:
    mix = mix or SIZE_MIX
    sizes_k = sorted(mix)
    w = [mix[k] for k in sizes_k]
    sizes = [rng.choices(sizes_k, weights=w)[0] for _ in range(n_jobs)]
    budget = max(n_jobs, int(capacity * fill))
    if n_jobs > capacity:
        raise ScenarioError(f"{n_jobs} jobs do not fit on {capacity} GPUs")
    while sum(sizes) > budget:
        i = max(range(n_jobs), key=lambda k: (sizes[k], -k))
        if sizes[i] == 1:
            break
        sizes[i] //= 2
    return sizes


def pick_model(size: int, rng: random.Random, zoo: Sequence[str] = (), gpu: str = "A100",
               models: Optional[Sequence[str]] = None) -> Tuple[Optional[str], Optional[dict]]:
    """(zoo model name, None) or (None, synthetic profile dict) for a job of ``size`` GPUs:
    a uniform choice among the models of the job's size class whose parallelism fits."""
    if zoo:
        from workloads.zoo import profile_for
        pool = list(models) if models else list(ZOO_MIX_SMALL if size < 16 else ZOO_MIX_LARGE)
        if size >= 8 and not models:
            pool.append("llama-7b")
        pool = [m for m in dict.fromkeys(pool) if m.split()[0] in zoo]
        fits = []
        for m in pool:
            try:
                profile_for(m, size, gpu)
                fits.append(m)
            except (KeyError, ValueError):
                continue
        if fits:
            return rng.choice(fits), None
    cands = [m for m in SYNTHETIC_MODELS.values() if size >= m.min_gpus]
    if size >= 16:
        cands = [m for m in cands if m.params >= 300e6] or cands
    m = rng.choice(cands)
    return None, {"model": m.name, "profile": m.profile(size)}


# ---------------------------------------------------------------------------
# Arrivals
# ---------------------------------------------------------------------------

def openb_arrival_gaps() -> List[float]:
    """Gaps (s) between consecutive creations of GPU tasks inside the trace's main window."""
    tr, _ = traces.load("openb")
    return [b.start_s - a.start_s for a, b in zip(tr.jobs, tr.jobs[1:])]


def is_trace(kind: str) -> bool:
    return kind in traces.PRESETS or kind.startswith("csv:")


def arrivals(n: int, kind: str, rng: random.Random, mean_interarrival_s: float = 1.0) -> List[float]:
    """Arrival times of ``n`` jobs: 'none', 'poisson', or a trace ('openb', 'csv:FILE') with
    its gaps scaled to a mean of ``mean_interarrival_s``."""
    if kind == "none" or n == 0:
        return [0.0] * n
    if kind == "poisson":
        t, out = 0.0, []
        for i in range(n):
            out.append(t)
            t += rng.expovariate(1.0 / mean_interarrival_s)
        return out
    if kind == "trace":
        kind = "openb"
    if is_trace(kind):
        tr, _ = traces.load(kind)
        return traces.sample(tr, n, rng, capacity_gpus=1, mean_interarrival_s=mean_interarrival_s,
                             sizes_from_trace=False).times
    raise ScenarioError(f"arrivals: unknown kind {kind!r} (none, poisson, openb, csv:FILE)")


# ---------------------------------------------------------------------------
# Placement
# ---------------------------------------------------------------------------

class SlotPool:
    def __init__(self, spec: ClusterSpec):
        self.cluster = Cluster(spec)
        self.g = spec.gpus_per_host
        self.free: Dict[str, List[int]] = {h: list(range(self.g)) for h in self.cluster.hosts}

    def take(self, host: str, k: int) -> List[str]:
        got = self.free[host][:k]
        self.free[host] = self.free[host][k:]
        return [f"{host}/{x}" for x in got]

    def whole_free_hosts(self, r: int) -> List[str]:
        return [h for h in self.cluster.hosts_in_rack(r) if len(self.free[h]) == self.g]

    def place_packed(self, n: int) -> List[str]:
        slots: List[str] = []
        nh, rest = divmod(n, self.g)
        if nh:
            racks = list(range(self.cluster.spec.racks))
            free = {r: self.whole_free_hosts(r) for r in racks}
            fit = [r for r in racks if len(free[r]) >= nh]
            if fit:   # best fit: the rack with the fewest free hosts that still fits
                r = min(fit, key=lambda r: (len(free[r]), r))
                chosen = free[r][:nh]
            else:     # span racks: the emptiest first
                chosen = []
                for r in sorted(racks, key=lambda r: (-len(free[r]), r)):
                    chosen += free[r][:nh - len(chosen)]
                    if len(chosen) == nh:
                        break
                if len(chosen) < nh:   # not enough whole hosts: fall back to any free GPUs
                    rest += (nh - len(chosen)) * self.g
            for h in chosen:
                slots += self.take(h, self.g)
        while rest:
            part = [h for h in self.cluster.hosts if 0 < len(self.free[h])]
            if not part:
                raise ScenarioError("placement: no free GPU left")
            # best fit on partly used hosts first, then fresh ones
            h = min(part, key=lambda h: (len(self.free[h]) == self.g, len(self.free[h]) < rest,
                                         len(self.free[h]), h))
            k = min(rest, len(self.free[h]))
            slots += self.take(h, k)
            rest -= k
        return slots

    def place_first_fit(self, n: int) -> List[str]:
        """Whole free hosts in cluster order (a job may straddle racks), the sub-host
        remainder on the first host with enough free GPUs."""
        slots: List[str] = []
        nh, rest = divmod(n, self.g)
        for h in self.cluster.hosts:
            if nh == 0:
                break
            if len(self.free[h]) == self.g:
                slots += self.take(h, self.g)
                nh -= 1
        rest += nh * self.g
        while rest:
            part = [h for h in self.cluster.hosts if len(self.free[h]) >= min(rest, self.g)] or \
                [h for h in self.cluster.hosts if self.free[h]]
            if not part:
                raise ScenarioError("placement: no free GPU left")
            h = part[0]
            k = min(rest, len(self.free[h]))
            slots += self.take(h, k)
            rest -= k
        return slots

    def place_fragmented(self, n: int, rng: random.Random, chunk: int = 0) -> List[str]:
        """Random hosts in random racks; ``chunk``: GPUs per host (0: random 1-4 per host)."""
        slots: List[str] = []
        while len(slots) < n:
            need = chunk if chunk else 1
            hosts = [h for h in self.cluster.hosts if len(self.free[h]) >= need]
            if not hosts:
                hosts = [h for h in self.cluster.hosts if self.free[h]]
            if not hosts:
                raise ScenarioError("placement: no free GPU left")
            h = rng.choice(hosts)
            k = min(chunk or rng.choice([1, 2, 2, 4]), n - len(slots), len(self.free[h]))
            slots += self.take(h, k)
        return slots


# ---------------------------------------------------------------------------
# The generator
# ---------------------------------------------------------------------------

def generate(spec: ClusterSpec, n_jobs: int, iterations: int = 100, seed: int = 0,
             placement: str = "packed", arrival: str = "none", mean_interarrival_s: float = 1.0,
             name: str = "sim-mix", fill: float = 0.95, epoch_s: float = 2.0,
             use_zoo: bool = True, description: str = "",
             policies: Optional[List[str]] = None,
             models: Optional[Sequence[str]] = None,
             trace: Optional["traces.ArrivalTrace"] = None,
             trace_gpus: Optional[float] = None) -> Scenario:
    """A validated Scenario (backend: simulation) of ``n_jobs`` jobs on ``spec``.  With a trace
    (``arrival`` 'openb' or 'csv:FILE'; ``trace`` if already read) ``mean_interarrival_s``
    None keeps the trace's arrival rate per GPU (simulation.arrivals)."""
    rng = random.Random(f"harmonics-sim/{seed}")
    cap = Cluster(spec).num_gpus
    sizes = draw_sizes(n_jobs, cap, rng, fill)
    zoo = _zoo_models() if use_zoo else []
    arrival_note = arrival
    if is_trace(arrival):
        preset = traces.PRESETS.get(arrival, traces.Preset(Path(arrival[4:])))
        if trace is None:
            trace, preset = traces.load(arrival)
        smp = traces.sample(trace, n_jobs, rng, cap, mean_interarrival_s, trace_gpus, fill,
                            sizes_from_trace=preset.sizes_from_trace)
        arr = smp.times
        if smp.sizes is not None:
            sizes = smp.sizes
        if arrival not in traces.PRESETS:   # presets keep their short note (mean gap below)
            arrival_note = (f"csv:{trace.path.name} from line {smp.first_line}, {smp.rule}"
                            + (f", {smp.shrunk} jobs halved to fit" if smp.shrunk else ""))
    else:
        arr = arrivals(n_jobs, arrival, rng, 1.0 if mean_interarrival_s is None else mean_interarrival_s)
    picks = [pick_model(sizes[i], rng, zoo, spec.gpu, models) for i in range(n_jobs)]
    pool = SlotPool(spec)
    # packed: the big jobs first (as a scheduler packing a batch would); otherwise job order
    order = sorted(range(n_jobs), key=lambda i: (-sizes[i], i)) if placement == "packed" \
        else list(range(n_jobs))
    slots: Dict[int, List[str]] = {}
    for i in order:
        if placement == "packed":
            slots[i] = pool.place_packed(sizes[i])
        elif placement == "first-fit":
            slots[i] = pool.place_first_fit(sizes[i])
        elif placement == "fragmented":
            tp = _tp_of(picks[i], spec.gpu)
            # tensor-parallel groups stay inside a host even on a fragmented cluster
            slots[i] = pool.place_fragmented(sizes[i], rng, chunk=min(tp, spec.gpus_per_host) if tp > 1 else 0)
        else:
            raise ScenarioError(f"placement: unknown kind {placement!r} "
                                f"(packed, first-fit, fragmented)")
    jobs = []
    for i in range(n_jobs):
        model, synth = picks[i]
        j = {"name": f"j{i:03d}", "iterations": iterations, "arrival_s": round(arr[i], 6),
             "placement": {"slots": slots[i]}}
        if model is not None:
            j["model"] = model
        else:
            j["profile"] = synth["profile"]
        jobs.append(j)
    used = sum(sizes)
    kinds = "zoo models" if zoo else "synthetic data-parallel profiles"
    csv_trace = arrival.startswith("csv:")
    size_kind = "trace" if csv_trace and trace.has_sizes else "heavy-tailed"
    desc = description or (
        f"Generated by simulation.workload.generate: {n_jobs} jobs on {used} of {cap} GPUs "
        f"({spec.racks} racks, {spec.spines} spines), {kinds}, {size_kind} sizes "
        f"(mean {used / max(n_jobs, 1):.1f} GPUs), {placement} placement, arrivals: {arrival_note}"
        + (f" (mean gap {mean_interarrival_s} s)" if arrival != "none" and not csv_trace else "")
        + f", {iterations} iterations each, seed {seed}.")
    data = {
        "name": name, "description": desc, "backend": "simulation",
        "cluster": spec.model_dump(mode="json"),
        "jobs": jobs,
        "emulation": {"epoch_s": epoch_s, "time_scale": 1.0},
        "seed": seed,
    }
    if policies is not None:
        data["policies"] = policies
    return parse_scenario(data, name)


def _tp_of(pick, gpu: str) -> int:
    model, synth = pick
    if synth is not None:
        return SYNTHETIC_MODELS[synth["model"]].tp
    from workloads.zoo import MODELS, _parse_model
    name, opts = _parse_model(model)
    e = MODELS.get(name.lower())
    return int(opts.get("tp", e.tp if e else 1))


def write_scenario(sc: Scenario, path: Path, header: str = "") -> None:
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    head = "".join(f"# {line}\n" for line in header.splitlines()) if header else ""
    tmp.write_text(head + dump_scenario(sc))
    tmp.replace(path)


# ---------------------------------------------------------------------------
# Data derivation (how simulation/data/openb2023/openb_gpu_tasks.csv was made)
# ---------------------------------------------------------------------------

OPENB_COLUMNS = ["name", "num_gpu", "gpu_milli", "creation_time", "scheduled_time", "deletion_time"]


def derive_openb(src: Path, dst: Path) -> int:
    """Keep the GPU tasks (num_gpu >= 1) of openb_pod_list_default.csv, six columns."""
    n = 0
    with open(src, newline="") as f, open(dst, "w", newline="") as g:
        w = csv.writer(g)
        w.writerow(OPENB_COLUMNS)
        for row in csv.DictReader(f):
            if int(row["num_gpu"]) >= 1:
                w.writerow([row[c] for c in OPENB_COLUMNS])
                n += 1
    return n
