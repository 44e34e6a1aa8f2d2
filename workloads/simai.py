"""Importer for SimAI / AICB workload description files -> schema ``Profile``.

File format (see workloads/data/simai/PROVENANCE.md and docs/schema.md, "SimAI mapping"):

  line 1   policy token (HYBRID_TRANSFORMER_FWD_IN_BCKWD, MICRO, ...) then ``key: value`` pairs
           (model_parallel_NPU_group = TP, ep, pp, vpp, ga, all_gpus, pp_comm, checkpoints...)
  line 2   number of layer rows
  rows     12 whitespace-separated fields:
           name dep fwd_ticks fwd_type fwd_bytes ig_ticks ig_type ig_bytes wg_ticks wg_type
           wg_bytes update_ticks

One tick is one nanosecond (SimAI's simulator clock); profiles are in seconds.

Collective groups follow SimAI's parser (astra-sim ``Workload::initialize_workload``): a plain
type name in the forward / input-gradient slot is the tensor-parallel (TP) group, in the
weight-gradient slot the data-parallel (DP) group; the suffix ``_EP`` is the expert-parallel
group and ``_DP_EP`` the data-parallel group of the experts.  ``MICRO`` files run their
collective over every rank of the job.

Aggregation (one iteration as SimAI runs it: forward over all rows, then backward over the
rows in reverse, input-gradient then weight-gradient per row):

  1. compute  = sum of forward times
  2. forward collectives, one phase per (op, group), bytes summed, overlap 0 (blocking in SimAI)
  3. pipeline send of ga * vpp * pp_comm bytes to the next stage (pp > 1): every micro-batch
     (ga of them) crosses each of the stage's vpp virtual-stage boundaries once, as in
     SimAI-analytical's exposed pipeline time (2 * vpp * ga * pp_comm per iteration)
  4. input-gradient collectives, one per (op, group), overlap 0 (blocking in SimAI)
  5. pipeline send of the activation gradients, ga * vpp * pp_comm bytes (pp > 1)
  6. compute  = sum of input-gradient + weight-gradient times
  6b. pipeline bubble (pp > 1): compute-free idle time of (pp - 1) / (ga * vpp) times the
     iteration's compute (the interleaved 1F1B bubble fraction SimAI-analytical uses)
  7. weight-gradient collectives, one per (op, group); ``overlap`` = byte-weighted mean of
     the fraction of step 6 that is still to run when SimAI issues them (they are
     non-blocking there and run alongside the rest of the backward pass); most-overlapped
     first, since engines apply ``overlap`` to the collective right after a compute phase

Numbers are read as leniently as SimAI reads them (``std::stoi`` stops at a decimal point):
an integer field may be written as an integral float or in scientific notation
(``pp_comm: 8388608.0``, ``ga: 1.6e1``); a fractional value where an integer is expected is an
error.  When line 2's row count disagrees with the rows present, the rows present are
imported and ``SimAIWorkload.warnings`` holds one line naming both numbers (printed once per
file by ``report_warnings``); only a file with no layer row at all is refused.

Blocking collectives sit on the critical path wherever they are placed, so moving them out
of the backward pass (steps 2-5) keeps the iteration time of a bandwidth model while letting
the overlapped gradient collectives directly follow the compute they overlap.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

from .profile import Collective, Compute, Group, Profile, ScenarioError, one_line

TICK_S = 1e-9          # one SimAI tick = 1 ns
DATA_DIR = Path(__file__).resolve().parent / "data" / "simai"
N_FIELDS = 12
MAX_PARALLEL = 1 << 24  # bound on tp, ep, pp, vpp, ga, all_gpus (far above any real job)

# Short names for the shipped files (``simai:<name>`` in a scenario's ``model:``).  The file
# stem without its ``workload_``/``aicb_`` prefix, lower-cased, is accepted as well.
ALIASES: Dict[str, str] = {
    "gpt7b_64g": "workload_gpt7b_64g.txt",
    "gpt13b_128g": "workload_gpt13b_128g.txt",
    "ep_test": "workload_ep_test.txt",
    "moe_analytical": "workload_analytical.txt",
    "micro_allreduce_tp8": "microAllReduce.txt",
    "gpt13b_megatron_a100": "aicb_G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt",
    "gpt13b_megatron_sp_a100": "aicb_G13B-M1-C02_GPT13B_megatron_tp8_pp1_mbs1_sp_A100.txt",
    "llama7b_megatron_a100": "aicb_L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt",
    "llama7b_deepspeed_a100": "aicb_L7B-D1-C02_Llama7B_deepspeed_zero3_A100.txt",
    "micro_all_reduce": "aicb_micro_all_reduce.txt",
    "micro_all_gather": "aicb_micro_all_gather.txt",
    "micro_all_to_all": "aicb_micro_all_to_all.txt",
    "micro_multi_all_reduce": "aicb_micro_muti_all_reduce.txt",
}

_OPS = {  # SimAI base type -> schema op (longest prefix first: ALLREDUCEALLTOALL)
    "ALLREDUCEALLTOALL": None,  # not supported by the schema; rejected with a clear message
    "ALLREDUCE": "allreduce",
    "ALLGATHER": "allgather",
    "REDUCESCATTER": "reducescatter",
    "ALLTOALL": "alltoall",
    "BROADCAST": "broadcast",
}
_SCOPES = ("", "_EP", "_DP_EP")
_KNOWN_POLICIES = {"HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_TRANSFORMER", "MICRO", "DATA"}
_INT_KEYS = {"model_parallel_NPU_group": "tp", "ep": "ep", "pp": "pp", "vpp": "vpp",
             "ga": "ga", "all_gpus": "all_gpus", "pp_comm": "pp_comm"}


class SimAIError(ScenarioError):
    """A SimAI file that cannot be imported.  str() is one line: '<file> line <n>: <problem>'."""


@dataclass(frozen=True)
class CommSlot:
    op: str            # schema op
    scope: str         # 'tp', 'dp', 'ep', 'dp_ep', 'all'
    bytes: float


@dataclass(frozen=True)
class LayerRow:
    line: int
    name: str
    fwd_s: float
    fwd: Optional[CommSlot]
    ig_s: float
    ig: Optional[CommSlot]
    wg_s: float
    wg: Optional[CommSlot]


@dataclass
class SimAIWorkload:
    """A parsed file: header values and layer rows, before any mapping to ranks."""
    path: Path
    policy: str
    tp: int = 1
    ep: int = 1
    pp: int = 1
    vpp: int = 1
    ga: int = 1
    all_gpus: Optional[int] = None
    pp_comm: float = 0.0
    rows: List[LayerRow] = field(default_factory=list)
    declared_rows: Optional[int] = None     # line 2's count (None: the file has no count line)
    warnings: List[str] = field(default_factory=list)

    @property
    def bubble_fraction(self) -> float:
        """Pipeline bubble as a fraction of the iteration's compute: (pp-1) / (ga * vpp)."""
        return (self.pp - 1) / (self.ga * self.vpp) if self.pp > 1 else 0.0

    @property
    def name(self) -> str:
        return self.path.name

    def world(self, workers: Optional[int] = None) -> int:
        """Ranks of the job: ``workers`` if given, else the header's all_gpus, else the
        smallest world the header allows (tp * pp * ep)."""
        if workers is not None:
            return workers
        if self.all_gpus:
            return self.all_gpus
        return self.tp * self.pp * self.ep


# ---------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------

def _err(path: Path, line: int, msg: str) -> SimAIError:
    return SimAIError(f"{path.name} line {line}: {msg}")


def parse_integer(tok: str) -> Optional[int]:
    """``tok`` as an integer, also when written as an integral float or in scientific
    notation ('8388608.0', '1e6', '4.0E+1'); None if it is not a finite integral number."""
    try:
        return int(tok)
    except ValueError:
        pass
    try:
        v = float(tok)
    except ValueError:
        return None
    if not math.isfinite(v) or v != math.floor(v):
        return None
    return int(v)


def _int(path: Path, line: int, key: str, tok: Optional[str], minimum: int,
         maximum: Optional[int] = None) -> int:
    if tok is None:
        raise _err(path, line, f"{key} has no value")
    v = parse_integer(tok)
    if v is None:
        raise _err(path, line, f"{key} must be an integer, got {tok!r}")
    if v < minimum:
        raise _err(path, line, f"{key} must be at least {minimum}, got {tok}")
    if maximum is not None and v > maximum:
        raise _err(path, line, f"{key} must be at most {maximum}, got {tok}")
    return v


def _number(path: Path, line: int, what: str, tok: str) -> float:
    try:
        v = float(tok)
    except ValueError:
        raise _err(path, line, f"{what} must be a number, got {tok!r}") from None
    if not math.isfinite(v) or v < 0:
        raise _err(path, line, f"{what} must be a non-negative number, got {tok!r}")
    return v


def _comm(path: Path, line: int, slot: str, type_tok: str, size_tok: str,
          policy: str) -> Optional[CommSlot]:
    size = _number(path, line, f"{slot} comm size", size_tok)
    if type_tok == "NONE":
        return None  # SimAI ignores the size of a NONE slot (some files put one there)
    for base, op in _OPS.items():
        if type_tok.startswith(base) and type_tok[len(base):] in _SCOPES:
            if op is None:
                raise _err(path, line, f"{slot} comm type {type_tok} is not supported "
                                       f"(the schema has no combined all-reduce/all-to-all)")
            suffix = type_tok[len(base):]
            if suffix == "_EP":
                scope = "ep"
            elif suffix == "_DP_EP":
                scope = "dp_ep"
            elif policy == "MICRO":
                scope = "all"
            else:
                scope = "dp" if slot == "weight-grad" else "tp"
            return CommSlot(op, scope, size)
    known = ", ".join(f"{b}[_EP|_DP_EP]" for b, o in _OPS.items() if o)
    raise _err(path, line, f"unknown {slot} comm type {type_tok!r} (known: NONE, {known})")


def parse_file(path: Union[str, Path]) -> SimAIWorkload:
    """Parse a SimAI workload file; SimAIError (one line naming file and line) if malformed."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise SimAIError(f"{path.name}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise SimAIError(f"{path.name}: not a text file") from None
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise _err(path, 1, "empty header (expected a parallelism policy such as "
                            "HYBRID_TRANSFORMER_FWD_IN_BCKWD or MICRO)")
    toks = lines[0].split()
    policy = toks[0]
    if policy not in _KNOWN_POLICIES:
        raise _err(path, 1, f"unknown parallelism policy {policy!r} (known: "
                            f"{', '.join(sorted(_KNOWN_POLICIES))})")
    wl = SimAIWorkload(path=path, policy=policy)
    for i, tok in enumerate(toks[1:], start=1):
        key = tok[:-1] if tok.endswith(":") else tok
        if key in _INT_KEYS:
            nxt = toks[i + 1] if i + 1 < len(toks) else None
            minimum = 0 if key in ("pp_comm",) else 1
            v = _int(path, 1, key, nxt, minimum, None if key == "pp_comm" else MAX_PARALLEL)
            setattr(wl, _INT_KEYS[key], float(v) if key == "pp_comm" else v)
    if wl.pp > 1 and wl.pp_comm == 0:
        raise _err(path, 1, f"pp is {wl.pp} but pp_comm (bytes between stages) is missing or 0")
    if len(lines) < 2 or not lines[1].strip():
        raise _err(path, 2, "expected the number of layer rows, file ends")
    count_toks = lines[1].split()
    first_row = 3
    if len(count_toks) == N_FIELDS:     # no count line: the rows start on line 2
        count, first_row = None, 2
    else:
        count = parse_integer(count_toks[0]) if len(count_toks) == 1 else None
        if count is None:
            raise _err(path, 2, f"expected the number of layer rows, got {lines[1].strip()!r}")

    rows: List[LayerRow] = []
    for lineno in range(first_row, len(lines) + 1):
        raw = lines[lineno - 1]
        if not raw.strip():
            continue
        f = raw.split()
        if len(f) != N_FIELDS:
            raise _err(path, lineno, f"expected {N_FIELDS} fields, got {len(f)}")
        if parse_integer(f[1]) is None:
            raise _err(path, lineno, f"dependency must be an integer, got {f[1]!r}")
        rows.append(LayerRow(
            line=lineno, name=f[0],
            fwd_s=_number(path, lineno, "forward compute time", f[2]) * TICK_S,
            fwd=_comm(path, lineno, "forward", f[3], f[4], policy),
            ig_s=_number(path, lineno, "input-grad compute time", f[5]) * TICK_S,
            ig=_comm(path, lineno, "input-grad", f[6], f[7], policy),
            wg_s=_number(path, lineno, "weight-grad compute time", f[8]) * TICK_S,
            wg=_comm(path, lineno, "weight-grad", f[9], f[10], policy),
        ))
        _number(path, lineno, "update time", f[11])
    if not rows:
        raise _err(path, len(lines) + 1, "no layer row (expected rows of 12 fields after the "
                                         "row count on line 2)")
    wl.rows, wl.declared_rows = rows, count
    if count is None:
        wl.warnings.append(f"{path.name}: line 2 holds a layer row, not the row count; "
                           f"imported the {len(rows)} rows present")
    elif count != len(rows):
        wl.warnings.append(f"{path.name}: header declares {count} layer rows (line 2) but "
                           f"{len(rows)} are present; imported the {len(rows)} present")
    return wl


_REPORTED: set = set()


def report_warnings(wl: SimAIWorkload, stream=None) -> None:
    """Print each of ``wl``'s warnings once per process ('warning: ...', one line each)."""
    for w in wl.warnings:
        key = (str(wl.path.resolve()), w)
        if key not in _REPORTED:
            _REPORTED.add(key)
            print(f"warning: {one_line(w)}", file=stream or sys.stderr)


# ---------------------------------------------------------------------------
# Mapping to the schema
# ---------------------------------------------------------------------------

def _groups(wl: SimAIWorkload, n: int) -> Dict[str, Group]:
    """Rank layout: TP fastest, then DP, then pipeline stage (Megatron order).  Expert
    parallel groups are ``ep`` consecutive DP ranks; the experts' DP groups stride over them."""
    where = f"{wl.name}: "
    if n % (wl.tp * wl.pp):
        raise SimAIError(f"{where}{n} workers do not split into TP={wl.tp} x PP={wl.pp} "
                         f"(use a multiple of {wl.tp * wl.pp})")
    dp = n // (wl.tp * wl.pp)
    if wl.ep > 1 and dp % wl.ep:
        raise SimAIError(f"{where}{n} workers give DP={dp}, not a multiple of EP={wl.ep} "
                         f"(use a multiple of {wl.tp * wl.pp * wl.ep} workers)")
    g = {
        "tp": Group(size=wl.tp, stride=1),
        "dp": Group(size=dp, stride=wl.tp),
        "ep": Group(size=wl.ep, stride=wl.tp),
        "dp_ep": Group(size=max(dp // wl.ep, 1), stride=wl.tp * wl.ep),
        "pp": Group(size=wl.pp, stride=wl.tp * dp),
        "all": Group(),
    }
    # ZeRO-3 style files (TP=1) put the DP parameter gathers into the fwd/ig slots, which the
    # parser maps to the (trivial) TP group; with TP=1 the only meaningful group is DP.
    if wl.tp == 1:
        g["tp"] = g["dp"]
    return g


def to_profile(wl: SimAIWorkload, workers: Optional[int] = None,
               compute_scale: float = 1.0) -> Profile:
    """The aggregated per-iteration profile of ``wl`` for a job of ``workers`` ranks
    (default: the file's all_gpus).  ``compute_scale`` multiplies every compute time
    (e.g. < 1 for a faster GPU than the one the file was recorded on)."""
    n = wl.world(workers)
    groups = _groups(wl, n)

    def add(acc: Dict[Tuple[str, str], float], c: Optional[CommSlot]) -> None:
        if c is not None and c.bytes > 0:
            acc[(c.op, c.scope)] = acc.get((c.op, c.scope), 0.0) + c.bytes

    fwd: Dict[Tuple[str, str], float] = {}
    ig: Dict[Tuple[str, str], float] = {}
    for r in wl.rows:
        add(fwd, r.fwd)
        add(ig, r.ig)

    # backward: rows in reverse, ig compute, (ig comm), wg compute, wg comm issued.
    bwd_total = sum(r.ig_s + r.wg_s for r in wl.rows)
    wg_bytes: Dict[Tuple[str, str], float] = {}
    wg_weighted: Dict[Tuple[str, str], float] = {}
    elapsed = 0.0
    for r in reversed(wl.rows):
        elapsed += r.ig_s + r.wg_s
        c = r.wg
        if c is None or c.bytes <= 0:
            continue
        remaining = (bwd_total - elapsed) / bwd_total if bwd_total > 0 else 0.0
        k = (c.op, c.scope)
        wg_bytes[k] = wg_bytes.get(k, 0.0) + c.bytes
        wg_weighted[k] = wg_weighted.get(k, 0.0) + c.bytes * max(remaining, 0.0)

    fwd_s = sum(r.fwd_s for r in wl.rows) * compute_scale
    phases: list = [Compute(op="compute", seconds=round(fwd_s, 12))]
    phases += [Collective(op=op, bytes=b, group=groups[s]) for (op, s), b in fwd.items()]
    pp_bytes = wl.pp_comm * wl.ga * wl.vpp if wl.pp > 1 else 0.0
    if pp_bytes:
        phases.append(Collective(op="sendrecv", bytes=pp_bytes, group=groups["pp"]))
    phases += [Collective(op=op, bytes=b, group=groups[s]) for (op, s), b in ig.items()]
    if pp_bytes:
        phases.append(Collective(op="sendrecv", bytes=pp_bytes, group=groups["pp"]))
    phases.append(Compute(op="compute", seconds=round(bwd_total * compute_scale, 12)))
    bubble = (sum(r.fwd_s for r in wl.rows) + bwd_total) * compute_scale * wl.bubble_fraction
    if bubble > 0:   # pipeline bubble: the stage idles, no traffic of this job
        phases.append(Compute(op="compute", seconds=round(bubble, 12)))
    wg = [(round(min(max(wg_weighted[k] / b, 0.0), 1.0), 4), i, k, b)
          for i, (k, b) in enumerate(wg_bytes.items())]
    for ov, _, k, b in sorted(wg, key=lambda t: (-t[0], t[1])):  # most-overlapped first
        phases.append(Collective(op=k[0], bytes=b, group=groups[k[1]], overlap=ov))
    return Profile(phases=phases)


def resolve_name(name: str) -> Path:
    """Path of a shipped file from its alias or stem, or an existing path; KeyError otherwise."""
    p = Path(name)
    if (p.suffix == ".txt" or "/" in name) and p.is_file():
        return p
    key = name.lower()
    if key in ALIASES:
        return DATA_DIR / ALIASES[key]
    for f in sorted(DATA_DIR.glob("*.txt")):
        stem = f.stem.lower()
        for pre in ("workload_", "aicb_"):
            if stem.startswith(pre):
                stem = stem[len(pre):]
        if key in (stem, f.stem.lower(), f.name.lower()):
            return f
    from . import astra  # ASTRA-sim samples (workloads/data/astra) by file name or stem
    found = astra.find_shipped(name)
    if found is not None:
        return found
    raise KeyError(f"unknown SimAI workload {name!r}; shipped: {', '.join(sorted(ALIASES))} "
                   f"(or give a path to a .txt file)")


def shipped() -> List[Path]:
    return sorted(DATA_DIR.glob("*.txt"))


def import_file(path: Union[str, Path], workers: Optional[int] = None,
                compute_scale: float = 1.0) -> Profile:
    from . import astra  # ASTRA-sim-only policies (MODEL, HYBRID_DLRM, ...) are mapped there
    if astra.policy_of(path):
        return astra.import_file(path, workers, compute_scale)
    wl = parse_file(path)
    report_warnings(wl)
    return to_profile(wl, workers, compute_scale)


# ---------------------------------------------------------------------------
# Summaries (CLI, docs, tests)
# ---------------------------------------------------------------------------

def summarize(profile: Profile) -> Dict[str, object]:
    """compute seconds and bytes per collective type of one iteration."""
    by_op: Dict[str, float] = {}
    for c in profile.collectives:
        by_op[c.op] = by_op.get(c.op, 0.0) + c.bytes
    return {"compute_s": profile.compute_s, "bytes": by_op,
            "phases": len(profile.phases), "collectives": len(profile.collectives)}


def describe(wl: SimAIWorkload, workers: Optional[int] = None) -> str:
    n = wl.world(workers)
    dp = n // (wl.tp * wl.pp) if n % (wl.tp * wl.pp) == 0 else None
    return (f"{wl.name}: {wl.policy}, {len(wl.rows)} layer rows, TP={wl.tp} PP={wl.pp} "
            f"VPP={wl.vpp} EP={wl.ep} GA={wl.ga} all_gpus={wl.all_gpus or '-'}; "
            f"mapped to {n} workers"
            + (f" (DP={dp})" if dp else ""))
