"""The sweep file: a base scenario (or a generator call), the axes of a grid over it, the
policies, the seeds and the metrics to aggregate.  See docs/schema.md ("Sweeps").

    from analysis.sweep_spec import load_sweep
    sw = load_sweep("sweeps/oversubscription.yaml")     # SweepError: one line, file:line: field
    for cell in sw.cells: ...                           # one Cell per (axis point, seed)

A cell is one point of the grid: a value on every axis and a seed.  Each cell is run under
every policy; a (cell, policy) pair is one run.  Everything that can be checked before any run
is checked here: unknown keys, types, policies, metrics, override paths, and every cell's
overridden scenario (or generator call) against its own schema.  Generating a cell's scenario
happens in the run itself, so an impossible combination (more jobs than GPUs) is a failed cell,
recorded while the others go on.
"""
from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Tuple, Union

import yaml
from pydantic import (BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError,
                      field_validator, model_validator)

from workloads.cluster import MAX_CLASS_GUARANTEE
from workloads.scenario import ScenarioError, _format_error, parse_scenario


class SweepError(ValueError):
    """A sweep file that is malformed or impossible.  str() is one line: file:line: field: why."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# comparison.csv columns (analysis.comparison.POLICY_COLS) a sweep can aggregate
METRICS = ["mean_iter_s", "p99_iter_s", "mean_jct_s", "makespan_s", "mean_comm_s", "mean_slowdown",
           "jobs_finished", "decision_ms_mean", "decision_ms_max", "epochs", "corun_iter_s",
           "corun_slowdown"]
DEFAULT_METRICS = ["mean_iter_s", "p99_iter_s", "mean_jct_s", "mean_slowdown"]
Scalar = Union[bool, int, float, str]


class GenCluster(_Strict):
    """The cluster of a generator call (``python -m simulation generate``'s options)."""
    topology: Literal["leaf-spine", "lingjun"] = "leaf-spine"
    racks: PositiveInt = 32
    hosts_per_rack: PositiveInt = 8
    spines: PositiveInt = 4
    gpus_per_host: PositiveInt = 8
    host_link_gbps: PositiveFloat = 200.0
    uplink_gbps: Optional[PositiveFloat] = None
    oversubscription: PositiveFloat = 2.0
    gpu: str = "A100"
    class_guarantee: Optional[float] = Field(None, ge=0.0, le=MAX_CLASS_GUARANTEE)


class Generate(_Strict):
    """A call of ``simulation.workload.generate``; the seed comes from the sweep's seeds."""
    cluster: GenCluster = GenCluster()
    jobs: PositiveInt = 100
    iterations: PositiveInt = 100
    placement: Literal["packed", "first-fit", "fragmented"] = "first-fit"
    arrivals: Literal["none", "poisson", "openb"] = "none"
    mean_interarrival_s: PositiveFloat = 1.0
    epoch_s: PositiveFloat = 2.0
    synthetic: bool = False
    models: Optional[List[str]] = Field(None, min_length=1)


class Base(_Strict):
    scenario: Optional[str] = Field(None, description="a scenario file, relative to the sweep file")
    generate: Optional[Generate] = None

    @model_validator(mode="after")
    def _one(self):
        if (self.scenario is None) == (self.generate is None):
            raise ValueError("give exactly one of scenario or generate")
        return self


class Options(_Strict):
    """compare's per-run options."""
    decision_timeout: Optional[PositiveFloat] = None
    decision_budget: Optional[PositiveFloat] = None
    max_time: Optional[PositiveFloat] = None
    until: Optional[PositiveFloat] = None
    isolated: Literal["measured", "analytical"] = "measured"


Axis = Union[List[Scalar], Dict[Union[int, float, str], Dict[str, Any]]]


class SweepSpec(_Strict):
    name: Optional[str] = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    base: Base
    policies: List[str] = Field(min_length=1)
    seeds: List[int] = Field([0], min_length=1)
    axes: Dict[str, Axis] = Field(default_factory=dict)
    metrics: List[str] = Field(default_factory=lambda: list(DEFAULT_METRICS), min_length=1)
    options: Options = Options()
    cell_plots: bool = False

    @field_validator("seeds", "policies", "metrics")
    @classmethod
    def _unique(cls, v):
        dup = [x for x in v if v.count(x) > 1]
        if dup:
            raise ValueError(f"{dup[0]!r} given twice")
        return v

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, v):
        for m in v:
            if m not in METRICS:
                raise ValueError(f"unknown metric {m!r} (known: {', '.join(METRICS)})")
        return v

    @field_validator("axes")
    @classmethod
    def _axes(cls, v):
        for name, vals in v.items():
            if not re.fullmatch(r"[A-Za-z0-9_*.-]+", name):
                raise ValueError(f"axis {name!r}: use a field path such as cluster.oversubscription")
            if not vals:
                raise ValueError(f"axis {name!r} has no values")
            if isinstance(vals, list) and len(set(map(repr, vals))) != len(vals):
                raise ValueError(f"axis {name!r} lists a value twice")
        return v


@dataclass(frozen=True)
class Cell:
    """One grid point: a label per axis, the overrides they make, and a seed."""
    id: str
    labels: Tuple[Tuple[str, Any], ...]          # (axis name, value or label) in axis order
    overrides: Tuple[Tuple[str, Any], ...]       # (field path, value)
    seed: int
    base: dict = field(compare=False, hash=False)   # the overridden scenario / generator call

    def spec_hash(self, policy: str, options: dict) -> str:
        blob = json.dumps({"base": self.base, "seed": self.seed, "policy": policy,
                           "options": options}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class Sweep:
    spec: SweepSpec
    path: Path
    name: str
    kind: str                       # "generate" or "scenario"
    backend: str
    cells: List[Cell]
    axis_names: List[str]

    @property
    def options(self) -> dict:
        return self.spec.options.model_dump()


# ---------------------------------------------------------------------------
# errors with line numbers
# ---------------------------------------------------------------------------

def yaml_line(text: str, loc) -> Optional[int]:
    """1-based line of the deepest YAML node on the path ``loc`` (keys and list indices)."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = next(((k, v) for k, v in node.value if str(k.value) == str(key)), None)
            if nxt is None:
                break
            line, node = nxt[0].start_mark.line + 1, nxt[1]
        elif isinstance(node, yaml.SequenceNode) and str(key).isdigit() and int(key) < len(node.value):
            node = node.value[int(key)]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _err(path: Path, text: str, loc, msg: str) -> SweepError:
    line = yaml_line(text, loc) if text else None
    where = f"{path}:{line}" if line else f"{path}"
    return SweepError(f"{where}: {msg}")


# ---------------------------------------------------------------------------
# overrides
# ---------------------------------------------------------------------------

def set_path(d: dict, path: str, value: Any) -> None:
    """Set a dotted field path in nested dicts/lists: 'cluster.uplink_gbps', 'jobs.0.iterations',
    'jobs.*.iterations' (every list element).  Missing mapping keys are created."""
    keys = path.split(".")

    def go(node, i):
        k = keys[i]
        last = i == len(keys) - 1
        if isinstance(node, list):
            if k == "*":
                idx = range(len(node))
            elif k.isdigit() and int(k) < len(node):
                idx = [int(k)]
            else:
                raise KeyError(f"{'.'.join(keys[:i + 1])}: no such list element")
            for j in idx:
                if last:
                    node[j] = copy.deepcopy(value)
                else:
                    go(node[j], i + 1)
            return
        if not isinstance(node, dict):
            raise KeyError(f"{'.'.join(keys[:i])} is not a mapping or list")
        if last:
            node[k] = copy.deepcopy(value)
            return
        if k not in node or node[k] is None:
            node[k] = {}
        go(node[k], i + 1)

    go(d, 0)


def apply_oversubscription(sc: dict) -> None:
    """A scenario's virtual ``cluster.oversubscription`` becomes its uplink rate: the fullest
    rack's host rate / (spines x uplink rate) = the ratio, as the generator defines it."""
    cl = sc.get("cluster")
    if not isinstance(cl, dict) or "oversubscription" not in cl:
        return
    ratio = cl.pop("oversubscription")
    hpr = cl.get("hosts_per_rack", 1)
    hosts = max(hpr) if isinstance(hpr, list) and hpr else hpr
    if not isinstance(ratio, (int, float)) or isinstance(ratio, bool) or not ratio > 0:
        raise ScenarioError(f"cluster.oversubscription: must be a number > 0 (got {ratio!r})")
    cl["uplink_gbps"] = float(hosts) * float(cl["host_link_gbps"]) / (int(cl.get("spines", 1)) * ratio)


def _points(name: str, vals: Axis) -> List[Tuple[Any, List[Tuple[str, Any]]]]:
    """(label, overrides) of every point of an axis: a list sets the field ``name``; a mapping
    of label -> {path: value} sets several fields together."""
    if isinstance(vals, list):
        return [(v, [(name, v)]) for v in vals]
    return [(k, list(ov.items())) for k, ov in vals.items()]


def _slug(v: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", str(v)).strip("_") or "x"


def cell_id(labels, seed: int) -> str:
    short = [n.split(".")[-1] for n, _ in labels]
    names = short if len(set(short)) == len(short) else [n for n, _ in labels]
    parts = [f"{_slug(n)}-{_slug(v)}" for n, (_, v) in zip(names, labels)]
    return "__".join(parts + [f"seed-{seed}"])


# ---------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------

def _read(path: Path) -> Tuple[str, Any]:
    try:
        text = path.read_text()
    except OSError as e:
        raise SweepError(f"{path}: cannot read ({e.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else f"{path}"
        raise SweepError(f"{where}: not valid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(data, dict):
        raise SweepError(f"{path}: expected a mapping at the top level")
    return text, data


def _validate(path: Path, text: str, data: dict) -> SweepSpec:
    if "base" not in data and "jobs" in data:
        raise SweepError(f"{path}: a scenario, not a sweep (a sweep file has base, axes and "
                         f"policies, e.g. sweeps/oversubscription.yaml; to run one scenario "
                         f"under every policy: python -m analysis compare {path})")
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as e:
        first = _first_error(e)
        loc = [x for x in first.errors()[0]["loc"] if not str(x).startswith("function-")]
        raise _err(path, text, loc, _format_error(first)) from None


class _OneError:
    """The error to report first (shaped like a ValidationError for _format_error)."""

    def __init__(self, err: dict):
        self.err = err

    def errors(self):
        return [self.err]


def _first_error(e: ValidationError) -> _OneError:
    """An unknown key (a misspelt field) explains more than the 'Field required' it causes."""
    errs = e.errors()
    return _OneError(next((x for x in errs if x["type"] == "extra_forbidden"), errs[0]))


def _base_dict(sw: SweepSpec, path: Path, text: str) -> Tuple[str, dict, str]:
    """(kind, the base as a plain dict, backend)."""
    if sw.base.generate is not None:
        return "generate", sw.base.generate.model_dump(mode="json"), "simulation"
    f = Path(sw.base.scenario)
    f = f if f.is_absolute() else path.parent / f
    try:
        raw = yaml.safe_load(f.read_text())
    except OSError as e:
        raise _err(path, text, ["base", "scenario"], f"base.scenario: {f}: cannot read ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise _err(path, text, ["base", "scenario"], f"base.scenario: {f}: not valid YAML") from None
    try:
        sc = parse_scenario(raw, str(f))
    except ScenarioError as e:
        raise _err(path, text, ["base", "scenario"], f"base.scenario: {e}") from None
    return "scenario", raw, sc.backend


def cell_scenario(kind: str, base: dict, seed: int, name: str):
    """The Scenario of a cell: the generator called with the seed, or the overridden scenario
    with ``seed`` set.  Raises ScenarioError (e.g. more jobs than GPUs)."""
    if kind == "scenario":
        d = copy.deepcopy(base)
        d["seed"] = seed
        d["name"] = name
        apply_oversubscription(d)
        return parse_scenario(d, name)
    from simulation.topology import leaf_spine, lingjun_cluster
    from simulation.workload import generate
    g = Generate.model_validate(base)
    c = g.cluster
    if c.topology == "lingjun":
        spec = lingjun_cluster(gpus_per_host=c.gpus_per_host, host_link_gbps=c.host_link_gbps,
                               uplink_gbps=c.uplink_gbps or 400.0, gpu=c.gpu,
                               class_guarantee=c.class_guarantee)
    else:
        spec = leaf_spine(c.racks, c.hosts_per_rack, c.spines, gpus_per_host=c.gpus_per_host,
                          host_link_gbps=c.host_link_gbps, uplink_gbps=c.uplink_gbps,
                          oversubscription=c.oversubscription, gpu=c.gpu,
                          class_guarantee=c.class_guarantee)
    return generate(spec, g.jobs, iterations=g.iterations, seed=seed, placement=g.placement,
                    arrival=g.arrivals, mean_interarrival_s=g.mean_interarrival_s, name=name,
                    epoch_s=g.epoch_s, use_zoo=not g.synthetic, models=g.models)


def _check_cell(kind: str, d: dict) -> None:
    """The schema check of an overridden base (generation itself waits for the run)."""
    if kind == "generate":
        try:
            Generate.model_validate(d)
        except ValidationError as e:
            raise ScenarioError(_format_error(e)) from None
        return
    d = copy.deepcopy(d)
    apply_oversubscription(d)
    parse_scenario(d, "scenario")


def load_sweep(path) -> Sweep:
    """Read and check a sweep file; SweepError (one line) if anything is wrong."""
    from analysis.compare import known_policies
    path = Path(path)
    text, data = _read(path)
    sw = _validate(path, text, data)
    kind, base, backend = _base_dict(sw, path, text)
    known = known_policies(backend)
    for i, p in enumerate(sw.policies):
        if p not in known:
            raise _err(path, text, ["policies", i],
                       f"policies.{i}: unknown policy {p!r} for the {backend} back end "
                       f"(known: {', '.join(known)})")
    if backend != "simulation":          # as compare refuses them for an emulated scenario
        from analysis.compare import SIMULATOR_ONLY
        given = [k for k, _ in SIMULATOR_ONLY if getattr(sw.options, k, None) is not None]
        if given:
            raise _err(path, text, ["options", given[0]],
                       f"options.{given[0]}: a simulator option, and the base runs on the "
                       f"{backend} back end")
    name = sw.name or path.stem
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise _err(path, text, [], f"name: give a name (the file name {path.stem!r} cannot be one)")
    axes = [(n, _points(n, v)) for n, v in sw.axes.items()]
    cells: List[Cell] = []
    checked: Dict[str, None] = {}
    for combo in itertools.product(*[pts for _, pts in axes]):
        d = copy.deepcopy(base)
        labels = tuple((n, lab) for (n, _), (lab, _) in zip(axes, combo))
        ovs = tuple(ov for _, ovl in combo for ov in ovl)
        where = ", ".join(f"{n}={v}" for n, v in labels) or "the base"
        for (axis, _), (lab, ovl) in zip(axes, combo):
            for p, v in ovl:
                try:
                    set_path(d, p, v)
                except KeyError as e:
                    raise _err(path, text, ["axes", axis], f"axes.{axis}: {e.args[0]}") from None
        key = json.dumps(d, sort_keys=True, default=str)
        if key not in checked:
            try:
                _check_cell(kind, d)
            except ScenarioError as e:
                axis = next((n for n, _ in labels), None)
                raise _err(path, text, ["axes", axis] if axis else ["base"],
                           f"cell {where}: {e}") from None
            checked[key] = None
        for seed in sw.seeds:
            cells.append(Cell(cell_id(labels, seed), labels, ovs, seed, d))
    ids = [c.id for c in cells]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise _err(path, text, ["axes"], f"axes: two cells get the same name {dup!r}; "
                                         "use values that differ in letters or digits")
    return Sweep(sw, path, name, kind, backend, cells, [n for n, _ in axes])
