"""Command line: ``python -m workloads {import,validate,models} ...``.

  import FILE [--workers N] [--gpu A100] [--package P]
                                           a SimAI/AICB or ASTRA-sim file as a profile: groups
                                           per phase, bytes sent per worker per iteration
  validate SCENARIO                        check a scenario; exit 2 and one line on error
  models                                   the model zoo with its numbers

Errors are one line on stderr with exit status 2; never a traceback.
"""
from __future__ import annotations

import argparse
import math
import sys
from typing import Dict, List, Optional

from .flows import collective_flows
from .scenario import (Collective, Group, Profile, ScenarioError, groups_of, load_scenario,
                       resolve)


def _gb(b: float) -> str:
    if b >= 1e9:
        return f"{b / 1e9:.3f} GB"
    if b >= 1e6:
        return f"{b / 1e6:.3f} MB"
    if b >= 1e3:
        return f"{b / 1e3:.3f} kB"
    return f"{b:.0f} B"


def _secs(s: float) -> str:
    if s >= 1 or s == 0:
        return f"{s:.6f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.3f} us"


def _members(g: Group, n: int) -> str:
    if g.size is None or g.size >= n:
        return f"one group of all {n} ranks"
    grps = groups_of(g, n)
    shown = " ".join("[" + " ".join(map(str, m)) + "]" for m in grps[:4])
    more = f" ... ({len(grps)} groups)" if len(grps) > 4 else ""
    return f"{len(grps)} groups of {g.size}, stride {g.stride}: {shown}{more}"


def _sent_per_rank(c: Collective, n: int) -> List[float]:
    """Bytes each rank of one group sends (all groups of a collective are alike)."""
    size = n if c.group.size is None else c.group.size
    one = c.model_copy(update={"group": Group(size=size, stride=1)})
    sent = [0.0] * size
    for f in collective_flows(one, size):
        sent[f.src] += f.bytes
    return sent


def _span(v: List[float]) -> str:
    lo, hi = min(v), max(v)
    return _gb(hi) if math.isclose(lo, hi, rel_tol=1e-9, abs_tol=1e-6) else f"{_gb(lo)}-{_gb(hi)}"


def _profile_lines(p: Profile, n: int, labels: Optional[List[str]] = None) -> List[str]:
    out = [f"  compute      {_secs(p.compute_s)} per iteration"]
    by_op: Dict[str, float] = {}
    for c in p.collectives:
        by_op[c.op] = by_op.get(c.op, 0.0) + c.bytes
    for op, b in by_op.items():
        out.append(f"  {op:<12} {_gb(b)}")
    per_kind: Dict[str, List[float]] = {}
    total = [0.0]
    for i, ph in enumerate(p.phases):
        kind = f"{labels[i]}: " if labels else ""
        if isinstance(ph, Collective):
            sent = _sent_per_rank(ph, n)
            ov = f", overlap {ph.overlap:g}" if ph.overlap else ""
            out.append(f"    phase {i}: {kind}{ph.op} {_gb(ph.bytes)} on {_members(ph.group, n)}{ov}; "
                       f"sent per worker {_span(sent)}")
            if labels:
                acc = per_kind.setdefault(labels[i], [0.0, 0.0])
                acc[0] += min(sent)
                acc[1] += max(sent)
            total[0] += max(sent)
        else:
            out.append(f"    phase {i}: {kind.replace('compute: ', '')}compute {_secs(ph.seconds)}")
    for kind, (lo, hi) in per_kind.items():
        out.append(f"  {kind:<12} {_span([lo, hi])} sent per worker per iteration")
    out.append(f"  {'total':<12} {_gb(total[0])} sent per worker per iteration (busiest rank)")
    return out


def _cmd_import(a) -> int:
    from . import astra
    from .simai import describe, parse_file, report_warnings, to_profile
    from .zoo import _LLM_H100_SPEEDUP, PEAK_FLOPS
    if a.gpu not in PEAK_FLOPS:
        raise ScenarioError(f"--gpu: no compute times for {a.gpu!r} (known: {', '.join(PEAK_FLOPS)})")
    scale = 1.0 if a.gpu == "A100" else 1.0 / _LLM_H100_SPEEDUP
    if astra.policy_of(a.file):
        m = astra.build(astra.parse_file(a.file), a.workers, scale, a.package)
        print("\n".join(astra.describe(m)))
        print("\n".join(_profile_lines(m.profile, m.workers, m.labels)))
        return 0
    if a.package is not None:
        raise ScenarioError(f"--package applies only to the ASTRA-sim policies "
                            f"{', '.join(astra.POLICIES)}")
    wl = parse_file(a.file)
    report_warnings(wl)
    prof = to_profile(wl, a.workers, compute_scale=scale)
    print(describe(wl, a.workers))
    print("\n".join(_profile_lines(prof, wl.world(a.workers))))
    return 0


def _cmd_validate(a) -> int:
    sc = load_scenario(a.scenario)
    rs = resolve(sc)
    cl = rs.cluster
    print(f"{a.scenario}: OK  scenario {sc.name!r}, backend {sc.backend}, {sc.cluster.racks} racks, "
          f"{cl.num_hosts} hosts, {cl.num_gpus} GPU slots ({sc.cluster.gpu}), {len(rs.jobs)} jobs")
    for j in rs.jobs:
        src = f"model {j.spec.model}" if j.spec.model else "profile"
        nbytes = sum(c.bytes for c in j.profile.collectives)
        print(f"  {j.name}: {len(j.workers)} workers on racks {j.racks(cl)}, {src}, "
              f"compute {j.profile.compute_s:.4f} s, collectives {_gb(nbytes)} per iteration, "
              f"{j.spec.iterations} iterations")
    return 0


def _cmd_models(a) -> int:
    from .zoo import MODELS, iteration_compute_s
    print(f"{'model':<14} {'params':>9} {'grads(16b)':>11} {'A100 s':>8} {'H100 s':>8}  parallelism")
    for e in MODELS.values():
        print(f"{e.name:<14} {e.params / 1e9:>8.3f}B {_gb(e.params * 2):>11} "
              f"{iteration_compute_s(e, 'A100'):>8.4f} {iteration_compute_s(e, 'H100'):>8.4f}  "
              f"TP={e.tp} PP={e.pp} EP={e.ep}; {e.batch_note}")
    from .simai import ALIASES
    print("SimAI: " + ", ".join(f"simai:{k}" for k in sorted(ALIASES)))
    from .astra import shipped
    print("ASTRA-sim samples: " + ", ".join(f"simai:{f.stem}" for f in shipped()))
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's own status)
        self.exit(2, f"{self.prog}: {message}\n")


def main(argv: Optional[List[str]] = None) -> int:
    ap = _Parser(prog="python -m workloads", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    p = sub.add_parser("import", help="summarise a SimAI/AICB workload file")
    p.add_argument("file")
    p.add_argument("--workers", type=int, default=None,
                   help="ranks of the job (default: the file's all_gpus, else TP*PP*EP; "
                        "8 for the ASTRA-sim policies MODEL, HYBRID_*)")
    p.add_argument("--gpu", default="A100")
    p.add_argument("--package", type=int, default=None,
                   help="ASTRA-sim files: ranks per package, the logical topology's dimension 0 "
                        "(default: the header's npus_per_package, else the largest divisor of "
                        "the worker count not above its square root)")
    p.set_defaults(fn=_cmd_import)
    p = sub.add_parser("validate", help="validate a scenario YAML")
    p.add_argument("scenario")
    p.set_defaults(fn=_cmd_validate)
    p = sub.add_parser("models", help="list the model zoo")
    p.set_defaults(fn=_cmd_models)
    a = ap.parse_args(argv)
    for opt in ("workers", "package"):
        if getattr(a, opt, None) is not None and getattr(a, opt) < 1:
            print(f"error: --{opt} must be at least 1", file=sys.stderr)
            return 2
    try:
        return a.fn(a)
    except (ScenarioError, KeyError) as e:
        msg = e.args[0] if isinstance(e, KeyError) else str(e)
        print(f"error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
