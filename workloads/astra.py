"""ASTRA-sim text workloads whose parallelism policy the SimAI importer does not read.

Policies handled here (``POLICIES``): ``MODEL``, ``HYBRID_DATA_MODEL``, ``HYBRID_MODEL_DATA``,
``HYBRID_CUSTOMIZED``, ``HYBRID_DLRM`` (and its ``HYBRID_DLRM_ENHANCED`` variant) and
``DISTRIBUTED_INFERENCE``.  ``DATA``, ``MICRO`` and the ``HYBRID_TRANSFORMER*`` policies are
read by ``workloads/simai.py``, whose ``import_file`` hands the policies above to this module.

File layout (ASTRA-sim's ``Workload::initialize_workload`` reads it token by token):

  line 1   policy keyword; ``HYBRID_DLRM <k>``: k = index of the last bottom-MLP layer;
           optional ``npus_per_package: P`` (this importer's extension, see below)
  line 2   number of layer rows
  rows     name dep fwd_ticks fwd_type fwd_bytes ig_ticks ig_type ig_bytes wg_ticks wg_type
           wg_bytes update_ticks, and for HYBRID_CUSTOMIZED a 13th token: the layer's policy

One tick is 1 ns (ASTRA-sim's clock period); profiles are in seconds.

Which ranks take part in a collective.  ASTRA-sim marks, per layer and per slot (forward,
input-gradient, weight-gradient), which dimensions of its logical topology a collective spans.
Here a job of n ranks is a two-level topology: dimension 0 = packages of P consecutive ranks
(``Group(P, 1)``), the higher dimensions = the n/P packages (``Group(n/P, P)``).  Per policy:

  DATA (a customized row), HYBRID_DLRM rows 1..   fwd -, ig -, wg all ranks
  MODEL, DISTRIBUTED_INFERENCE                    fwd all, ig all, wg -
  HYBRID_DATA_MODEL                               fwd/ig dimension 0, wg the higher dimensions
  HYBRID_MODEL_DATA                               fwd/ig the higher dimensions, wg dimension 0
  HYBRID_DLRM row 0 (the embedding)               fwd, ig, wg all ranks

A slot with no dimension, and a slot the policy's iteration loop never issues (the first
layer's input gradient; MODEL's weight gradients; HYBRID_DLRM's forward collectives other than
the embedding all-to-all and its input-gradient collectives other than the embedding's), moves
no data; ``Mapping.ignored`` lists them.  P comes from ``package`` (CLI ``--package``), else the
header's ``npus_per_package: P``, else the largest divisor of n not above sqrt(n).

docs/schema.md ("ASTRA-sim mapping") states the iteration order each policy follows and how
the importer aggregates it into phases, with worked examples.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

from .profile import Collective, Compute, Group, Profile, ScenarioError

TICK_S = 1e-9
DATA_DIR = Path(__file__).resolve().parent / "data" / "astra"
DEFAULT_WORKERS = 8
N_FIELDS = 12

POLICIES = ("MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_CUSTOMIZED",
            "HYBRID_DLRM", "HYBRID_DLRM_ENHANCED", "DISTRIBUTED_INFERENCE")
LAYER_POLICIES = ("DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA")
_OPS = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather", "REDUCESCATTER": "reducescatter",
        "ALLTOALL": "alltoall"}
_FIELDS = ("layer name", "dependency", "forward compute time", "forward comm type",
           "forward comm size", "input-gradient compute time", "input-gradient comm type",
           "input-gradient comm size", "weight-gradient compute time", "weight-gradient comm type",
           "weight-gradient comm size", "weight-update time", "layer parallelism policy")
# scope of each slot (fwd, ig, wg) per layer policy: 'all', 'dim0', 'upper' or None
_SCOPES: Dict[str, Tuple[Optional[str], Optional[str], Optional[str]]] = {
    "DATA": (None, None, "all"),
    "MODEL": ("all", "all", None),
    "DISTRIBUTED_INFERENCE": ("all", "all", None),
    "HYBRID_DATA_MODEL": ("dim0", "dim0", "upper"),
    "HYBRID_MODEL_DATA": ("upper", "upper", "dim0"),
    "ALL": ("all", "all", "all"),
}
KINDS = ("forward", "input-grad", "weight-grad")
_LB = "last bottom-MLP layer"


class AstraError(ScenarioError):
    """A file that cannot be imported; str() is one line naming file, line and field."""


@dataclass(frozen=True)
class Slot:
    op: str
    bytes: float
    token: str          # the file's type name


@dataclass(frozen=True)
class Row:
    line: int
    name: str
    times: Tuple[float, float, float]        # fwd, ig, wg compute seconds
    slots: Tuple[Optional[Slot], Optional[Slot], Optional[Slot]]
    policy: str                              # the layer's own policy (its scopes)


@dataclass
class AstraWorkload:
    path: Path
    policy: str
    rows: List[Row] = field(default_factory=list)
    last_bottom: Optional[int] = None        # HYBRID_DLRM
    package: Optional[int] = None            # header npus_per_package

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class Use:
    """One collective of one row as the policy's loop issues it."""
    kind: str           # forward | input-grad | weight-grad
    row: int
    op: str
    bytes: float
    scope: str          # all | dim0 | upper


@dataclass
class Mapping:
    workload: AstraWorkload
    workers: int
    package: int
    package_source: str
    groups: Dict[str, Group]
    profile: Profile
    labels: List[str]                        # one per profile phase
    uses: List[Use]
    ignored: List[str]


# ---------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------

def _err(path: Path, line: int, msg: str, fld: Optional[int] = None,
         what: Optional[str] = None) -> AstraError:
    """'<file> line L field F (what): msg'; row fields are named from ``_FIELDS``."""
    if what is None and fld and line >= 3 and fld <= len(_FIELDS):
        what = _FIELDS[fld - 1]
    where = (f" field {fld}" + (f" ({what})" if what else "")) if fld else ""
    return AstraError(f"{path.name} line {line}{where}: {msg}")


def policy_of(path: Union[str, Path]) -> Optional[str]:
    """The file's policy keyword if this module handles it, else None (unreadable too)."""
    try:
        with open(path, "rb") as f:
            first = f.readline(4096).decode("utf-8", "replace").split()
    except OSError:
        return None
    return first[0] if first and first[0] in POLICIES else None


def _time(path: Path, line: int, fld: int, tok: str) -> float:
    try:
        v = float(tok)
    except ValueError:
        raise _err(path, line, f"must be a number of ticks, got {tok!r}", fld) from None
    if not math.isfinite(v) or v < 0:
        raise _err(path, line, f"must be a non-negative number of ticks, got {tok!r}", fld)
    return v * TICK_S


def _slot(path: Path, line: int, fld: int, type_tok: str, size_tok: str) -> Optional[Slot]:
    try:
        size = float(size_tok)
    except ValueError:
        size = math.nan
    if not math.isfinite(size) or size < 0 or size != int(size):
        raise _err(path, line, f"must be a non-negative whole number of bytes, got {size_tok!r}",
                   fld + 1)
    if type_tok == "NONE":
        return None
    if type_tok not in _OPS:
        extra = (" (a combined all-reduce/all-to-all has no schema op)"
                 if type_tok == "ALLREDUCEALLTOALL" else "")
        raise _err(path, line, f"unknown collective {type_tok!r}{extra}; known: NONE, "
                               f"{', '.join(_OPS)}", fld)
    return Slot(_OPS[type_tok], size, type_tok)


def _header(path: Path, toks: List[str], wl: AstraWorkload) -> None:
    i = 1
    if wl.policy in ("HYBRID_DLRM", "HYBRID_DLRM_ENHANCED"):
        if len(toks) < 2:
            raise _err(path, 1, f"{wl.policy} needs the index of the last bottom-MLP layer "
                                f"after the keyword", 2, _LB)
        try:
            wl.last_bottom = int(toks[1])
        except ValueError:
            raise _err(path, 1, f"must be an integer, got {toks[1]!r}", 2, _LB) from None
        i = 2
    while i < len(toks):
        key = toks[i].rstrip(":")
        if key != "npus_per_package":
            raise _err(path, 1, f"unexpected {toks[i]!r} (a {wl.policy} header takes "
                                f"only npus_per_package: P)", i + 1)
        nxt = toks[i + 1] if i + 1 < len(toks) else ""
        if not nxt.isdigit() or int(nxt) < 1:
            raise _err(path, 1, f"must be a positive integer, got {nxt!r}", i + 2,
                       "npus_per_package")
        wl.package = int(nxt)
        i += 2


def parse_file(path: Union[str, Path]) -> AstraWorkload:
    """Parse a file of one of ``POLICIES``; AstraError (one line) if malformed."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise AstraError(f"{path.name}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise AstraError(f"{path.name}: not a text file") from None
    toks = lines[0].split() if lines else []
    if not toks or toks[0] not in POLICIES:
        got = repr(toks[0]) if toks else "nothing"
        raise _err(path, 1, f"expected an ASTRA-sim policy ({', '.join(POLICIES)}), got {got}", 1)
    wl = AstraWorkload(path=path, policy=toks[0])
    _header(path, toks, wl)
    count_tok = lines[1].strip() if len(lines) > 1 else ""
    if not count_tok.isdigit() or int(count_tok) < 1:
        raise _err(path, 2, f"expected the number of layer rows (>= 1), got {count_tok!r}"
                   if count_tok else "expected the number of layer rows, file ends")
    count = int(count_tok)
    n_fields = N_FIELDS + (1 if wl.policy == "HYBRID_CUSTOMIZED" else 0)
    last = 2
    for lineno in range(3, len(lines) + 1):
        f = lines[lineno - 1].split()
        if not f:
            continue
        last = lineno
        if len(wl.rows) == count:
            raise _err(path, lineno, f"more layer rows than the {count} declared on line 2")
        if len(f) < n_fields:
            raise _err(path, lineno, f"missing: a {wl.policy} row has {n_fields} fields, this one "
                                     f"has {len(f)}", len(f) + 1)
        if len(f) > n_fields:
            raise _err(path, lineno, f"unexpected: a {wl.policy} row has {n_fields} fields, this "
                                     f"one has {len(f)}", n_fields + 1, "")
        try:
            int(f[1])
        except ValueError:
            raise _err(path, lineno, f"must be an integer, got {f[1]!r}", 2) from None
        times = (_time(path, lineno, 3, f[2]), _time(path, lineno, 6, f[5]),
                 _time(path, lineno, 9, f[8]))
        slots = (_slot(path, lineno, 4, f[3], f[4]), _slot(path, lineno, 7, f[6], f[7]),
                 _slot(path, lineno, 10, f[9], f[10]))
        _time(path, lineno, 12, f[11])
        pol = wl.policy
        if pol == "HYBRID_CUSTOMIZED":
            pol = f[12]
            if pol not in LAYER_POLICIES:
                raise _err(path, lineno, f"unknown layer policy {pol!r}; known: "
                                         f"{', '.join(LAYER_POLICIES)}", 13)
        elif pol.startswith("HYBRID_DLRM"):
            pol = "ALL" if not wl.rows else "DATA"
        wl.rows.append(Row(lineno, f[0], times, slots, pol))
    if len(wl.rows) < count:
        raise _err(path, last + 1, f"expected {count} layer rows (line 2), file ends after "
                                   f"{len(wl.rows)}")
    if wl.last_bottom is not None and not 1 <= wl.last_bottom <= count - 2:
        raise _err(path, 1, f"must be between 1 and {count - 2} (rows are numbered from 0 and "
                            f"at least one top layer must follow), got {wl.last_bottom}", 2, _LB)
    return wl


# ---------------------------------------------------------------------------
# Mapping onto a job's ranks
# ---------------------------------------------------------------------------

def default_package(n: int) -> int:
    """Largest divisor of n not above sqrt(n): the most balanced two-level split."""
    return max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)


def layout(wl: AstraWorkload, n: int, package: Optional[int] = None) -> Tuple[int, Dict[str, Group]]:
    p = _package(wl, n, package)[0]
    if n % p:
        raise AstraError(f"{wl.name}: {n} workers do not split into packages of {p} "
                         f"(dimension 0); use a multiple of {p} workers or another package size")
    return p, {"all": Group(), "dim0": Group(size=p, stride=1),
               "upper": Group(size=n // p, stride=p)}


def _package(wl: AstraWorkload, n: int, package: Optional[int]) -> Tuple[int, str]:
    if package:
        return package, "given"
    if wl.package:
        return wl.package, "header npus_per_package"
    return default_package(n), "default: largest divisor of the worker count <= its square root"


def _issued(wl: AstraWorkload) -> Tuple[List[Use], List[str]]:
    """Collectives the policy's iteration loop issues (with their scopes), and the slots it
    skips, as ASTRA-sim's Workload::iterate_* functions do."""
    uses: List[Use] = []
    ignored: List[str] = []
    dlrm = wl.policy.startswith("HYBRID_DLRM")
    for i, r in enumerate(wl.rows):
        scopes = _SCOPES[r.policy]
        for k, (slot, scope) in enumerate(zip(r.slots, scopes)):
            if slot is None:
                continue
            why = None
            if scope is None:
                why = f"a {r.policy} layer has no dimension for it"
            elif k == 1 and i == 0 and not dlrm:
                why = "the first layer sends no input gradient"
            elif dlrm and i > 0 and k < 2:
                why = f"{wl.policy} issues it only for row 0 (the embedding)"
            elif dlrm and k == 0 and slot.op != "alltoall":
                why = f"{wl.policy} issues a forward collective only if it is an all-to-all"
            elif wl.policy == "DISTRIBUTED_INFERENCE" and k > 0:
                why = "inference has no backward pass"
            if why:
                ignored.append(f"line {r.line} ({r.name}) {KINDS[k]} {slot.token} "
                               f"{slot.bytes:.0f} B: {why}")
            elif slot.bytes > 0:
                uses.append(Use(KINDS[k], i, slot.op, slot.bytes, scope))
    return uses, ignored


def _backward_order(wl: AstraWorkload) -> List[Tuple[str, int]]:
    """(compute kind, row) in the order the backward loop runs them."""
    n = len(wl.rows)
    if wl.policy == "DISTRIBUTED_INFERENCE":
        return []
    if wl.policy.startswith("HYBRID_DLRM"):   # wg(last), ig(last), ..., ig(1), wg(0)
        out = []
        for i in range(n - 1, -1, -1):
            out.append(("weight-grad", i))
            if i > 0:
                out.append(("input-grad", i))
        return out
    return [(k, i) for i in range(n - 1, -1, -1) for k in ("input-grad", "weight-grad")]


def _aggregate(uses: List[Use], groups: Dict[str, Group], overlap=None) -> List[Tuple[float, Collective, str]]:
    acc: Dict[Tuple[str, str, str], List[float]] = {}
    for u in uses:
        key = (u.kind, u.op, u.scope)
        b, w = acc.get(key, [0.0, 0.0])
        acc[key] = [b + u.bytes, w + u.bytes * (overlap(u) if overlap else 0.0)]
    out = []
    for (kind, op, scope), (b, w) in acc.items():
        ov = round(min(max(w / b, 0.0), 1.0), 4) if b else 0.0
        out.append((ov, Collective(op=op, bytes=b, group=groups[scope], overlap=ov), kind))
    return out


def build(wl: AstraWorkload, workers: Optional[int] = None, compute_scale: float = 1.0,
          package: Optional[int] = None) -> Mapping:
    """Map ``wl`` onto a job of ``workers`` ranks (default ``DEFAULT_WORKERS``)."""
    n = workers or DEFAULT_WORKERS
    p, groups = layout(wl, n, package)
    src = _package(wl, n, package)[1]
    uses, ignored = _issued(wl)
    fwd = [u for u in uses if u.kind == "forward"]
    bwd = [u for u in uses if u.kind != "forward"]
    t = {(KINDS[k], i): r.times[k] * compute_scale for i, r in enumerate(wl.rows) for k in range(3)}
    phases: list = []
    labels: List[str] = []

    def compute(s: float, label: str) -> None:
        phases.append(Compute(op="compute", seconds=round(s, 12)))
        labels.append(label)

    def colls(items) -> None:
        for _, c, kind in items:
            phases.append(c)
            labels.append(kind)

    n_rows = len(wl.rows)
    if wl.policy.startswith("HYBRID_DLRM"):
        # the embedding all-to-all runs alongside the bottom MLP; the top MLP waits for it
        lb = wl.last_bottom
        head = sum(t[("forward", i)] for i in range(lb + 1))
        inner = head - t[("forward", 0)]
        compute(head, "compute: forward, rows 0.." + str(lb))
        colls(_aggregate(fwd, groups, lambda u: inner / head if head > 0 else 0.0))
        compute(sum(t[("forward", i)] for i in range(lb + 1, n_rows)),
                f"compute: forward, rows {lb + 1}..{n_rows - 1}")
    else:
        compute(sum(t[("forward", i)] for i in range(n_rows)), "compute: forward")
        colls(_aggregate(fwd, groups))
    order = _backward_order(wl)
    if order:
        total = sum(t[s] for s in order)
        done: Dict[Tuple[str, int], float] = {}
        elapsed = 0.0
        for s in order:
            elapsed += t[s]
            done[s] = elapsed
        issue = {}   # (kind, row) -> backward time elapsed when the loop issues it
        for u in bwd:
            if u.kind == "weight-grad":
                issue[(u.kind, u.row)] = done[("weight-grad", u.row)]
            elif wl.policy.startswith("HYBRID_DLRM"):   # issued after ig of row lb+1
                issue[(u.kind, u.row)] = done[("input-grad", wl.last_bottom + 1)]
        blocking = [u for u in bwd if (u.kind, u.row) not in issue]
        colls(_aggregate(blocking, groups))     # hybrid input gradients: waited per layer
        compute(total, "compute: backward")
        rest = [u for u in bwd if (u.kind, u.row) in issue]
        items = _aggregate(rest, groups,
                           lambda u: (total - issue[(u.kind, u.row)]) / total if total > 0 else 0.0)
        colls(sorted(items, key=lambda it: -it[0]))
    return Mapping(wl, n, p, src, groups, Profile(phases=phases), labels, uses, ignored)


def to_profile(wl: AstraWorkload, workers: Optional[int] = None, compute_scale: float = 1.0,
               package: Optional[int] = None) -> Profile:
    return build(wl, workers, compute_scale, package).profile


def import_file(path: Union[str, Path], workers: Optional[int] = None,
                compute_scale: float = 1.0, package: Optional[int] = None) -> Profile:
    return to_profile(parse_file(path), workers, compute_scale, package)


def shipped() -> List[Path]:
    return sorted(DATA_DIR.glob("*.txt"))


def find_shipped(name: str) -> Optional[Path]:
    """A shipped sample by file name or stem (case-insensitive), else None."""
    key = name.lower()
    for f in shipped():
        if key in (f.name.lower(), f.stem.lower()):
            return f
    return None


def describe(m: Mapping) -> List[str]:
    """Header lines of ``python -m workloads import`` for an ASTRA-sim file."""
    wl = m.workload
    extra = f", last bottom-MLP layer {wl.last_bottom}" if wl.last_bottom is not None else ""
    out = [f"{wl.name}: {wl.policy}{extra}, {len(wl.rows)} layer rows; mapped to {m.workers} "
           f"workers, dimension 0 = packages of {m.package} consecutive ranks ({m.package_source}), "
           f"higher dimensions = the {m.workers // m.package} packages"]
    if wl.policy == "HYBRID_CUSTOMIZED":
        out.append("  layer policies: " + ", ".join(f"{r.name}={r.policy}" for r in wl.rows))
    for msg in m.ignored:
        out.append(f"  not issued: {msg}")
    return out
