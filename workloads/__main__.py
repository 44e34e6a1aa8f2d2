"""Command line: ``python -m workloads {import,validate,models} ...``.

  import FILE [--workers N] [--gpu A100]   summary of a SimAI/AICB file as a profile
  validate SCENARIO                        check a scenario; exit 2 and one line on error
  models                                   the model zoo with its numbers

Errors are one line on stderr with exit status 2; never a traceback.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from .scenario import Collective, Profile, ScenarioError, load_scenario, resolve


def _gb(b: float) -> str:
    if b >= 1e9:
        return f"{b / 1e9:.3f} GB"
    if b >= 1e6:
        return f"{b / 1e6:.3f} MB"
    if b >= 1e3:
        return f"{b / 1e3:.3f} kB"
    return f"{b:.0f} B"


def _profile_lines(p: Profile, n: Optional[int] = None) -> List[str]:
    out = [f"  compute      {p.compute_s:.6f} s per iteration"]
    by_op = {}
    for c in p.collectives:
        by_op[c.op] = by_op.get(c.op, 0.0) + c.bytes
    for op, b in by_op.items():
        out.append(f"  {op:<12} {_gb(b)}")
    for i, ph in enumerate(p.phases):
        if isinstance(ph, Collective):
            g = ph.group
            grp = "all ranks" if g.size is None else f"groups of {g.size}, stride {g.stride}"
            ov = f", overlap {ph.overlap:g}" if ph.overlap else ""
            out.append(f"    phase {i}: {ph.op} {_gb(ph.bytes)} ({grp}{ov})")
        else:
            out.append(f"    phase {i}: compute {ph.seconds:.6f} s")
    return out


def _cmd_import(a) -> int:
    from .simai import describe, parse_file, report_warnings, to_profile
    from .zoo import _LLM_H100_SPEEDUP, PEAK_FLOPS
    if a.gpu not in PEAK_FLOPS:
        raise ScenarioError(f"--gpu: no compute times for {a.gpu!r} (known: {', '.join(PEAK_FLOPS)})")
    wl = parse_file(a.file)
    report_warnings(wl)
    scale = 1.0 if a.gpu == "A100" else 1.0 / _LLM_H100_SPEEDUP
    prof = to_profile(wl, a.workers, compute_scale=scale)
    print(describe(wl, a.workers))
    print("\n".join(_profile_lines(prof)))
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
                   help="ranks of the job (default: the file's all_gpus, else TP*PP*EP)")
    p.add_argument("--gpu", default="A100")
    p.set_defaults(fn=_cmd_import)
    p = sub.add_parser("validate", help="validate a scenario YAML")
    p.add_argument("scenario")
    p.set_defaults(fn=_cmd_validate)
    p = sub.add_parser("models", help="list the model zoo")
    p.set_defaults(fn=_cmd_models)
    a = ap.parse_args(argv)
    if getattr(a, "workers", None) is not None and a.workers < 1:
        print("error: --workers must be at least 1", file=sys.stderr)
        return 2
    try:
        return a.fn(a)
    except (ScenarioError, KeyError) as e:
        msg = e.args[0] if isinstance(e, KeyError) else str(e)
        print(f"error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
