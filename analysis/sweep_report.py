"""A sweep's aggregation, purely from the files of its results directory.

  DIR/sweep.csv     one row per (cell, policy): the cell's axis values and seed, the run's
                    status and error, every metric of the sweep, each metric / fair's value in
                    the same cell (paired by seed), wall time and the Ray node that ran it
  DIR/sweep.md      per grid point (the cells that differ only in their seed): each policy's
                    mean over the seeds ± the half-width of its 95% confidence interval, the
                    same for the ratios to fair, the failed runs with their errors, the plots
  DIR/plots/M__vs__A.png   metric M against axis A, one line per policy, the 95% interval as a
                    band; the top row the metric, the bottom row its ratio to fair; one column
                    per combination of the other axes

Statistics are those of repeated comparisons (analysis.repeats.ci95): Student's t interval
over the seeds, counting the runs whose status is ok (a partial run, e.g. one with unfinished
jobs, is in sweep.csv but not in the means; a ratio needs fair's run of the cell to be ok).  A ratio's interval that excludes 1 is marked "*".
"""
from __future__ import annotations

import itertools
import json
import math
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from runs.files import atomic_write_json

from .repeats import ci95
from .report import generate_report
from .results import ReportError
from .tables import fmt_r, fmt_s, md_table, num, policy_order, read_csv, write_csv

from .sweep_task import RUN_RECORD
COMPLETE = ("ok", "partial")
RUN_COLS = ["status", "error", "wall_s", "node_id", "node_ip", "hostname"]


def _record(d: Path) -> Optional[dict]:
    try:
        return json.loads((d / RUN_RECORD).read_text())
    except (OSError, ValueError):
        return None


def finish_cell(cd: Path, info: dict, cell: dict, plots: bool = False) -> None:
    """A cell's compare.json and compare's report (comparison.csv, .md) from its runs."""
    pols = info["policies"]
    recs = {p: _record(cd / p) or {"status": "not run"} for p in pols}
    runs = {p: {k: r[k] for k in ("status", "detail", "error", "wall_s") if k in r}
            for p, r in recs.items()}
    cd.mkdir(parents=True, exist_ok=True)
    atomic_write_json(cd / "compare.json", {
        "scenario": f"{info['sweep']}-{cell['id']}", "backend": info.get("backend"),
        "policies": pols, "command": f"python -m analysis sweep {info.get('file')} (cell {cell['id']})",
        "options": info.get("options"), "cell": {"labels": dict(cell["labels"]), "seed": cell["seed"]},
        "runs": runs})
    if not any(r.get("status") in COMPLETE for r in recs.values()):
        return                                   # nothing ran: no scenario, nothing to report
    try:
        generate_report(cd, plots=plots)
    except ReportError as e:
        (cd / "report_error.txt").write_text(f"{e}\n")


def _stale(cd: Path, pols: List[str]) -> bool:
    comp = cd / "comparison.csv"
    if not comp.is_file():
        return True
    t = comp.stat().st_mtime
    return any((cd / p / RUN_RECORD).is_file() and (cd / p / RUN_RECORD).stat().st_mtime > t for p in pols)


def collect(d: Path, info: dict) -> List[dict]:
    """The rows of sweep.csv (cells of the current grid, in grid order)."""
    pols, metrics, axes = info["policies"], info["metrics"], info["axes"]
    rows = []
    for cell in info["cells"]:
        cd = d / "cells" / cell["id"]
        recs = {p: _record(cd / p) for p in pols}
        if any(r and r.get("status") in COMPLETE for r in recs.values()) and _stale(cd, pols):
            finish_cell(cd, info, cell)
        vals = {}
        if (cd / "comparison.csv").is_file():
            vals = {r["policy"]: r for r in read_csv(cd / "comparison.csv")}
        fair_ok = (recs.get("fair") or {}).get("status") == "ok"
        for p in pols:
            rec = recs[p] or {"status": "not run"}
            row = {"cell": cell["id"], **{a: v for a, v in cell["labels"]}, "seed": cell["seed"],
                   "policy": p, **{k: rec.get(k) for k in RUN_COLS}}
            ok = rec.get("status") in COMPLETE
            for m in metrics:
                v = num(vals.get(p, {}).get(m)) if ok else math.nan
                f = num(vals.get("fair", {}).get(m)) if fair_ok else math.nan
                row[m] = v
                row[f"{m}_vs_fair"] = v / f if math.isfinite(v) and math.isfinite(f) and f else math.nan
            rows.append(row)
    return rows


def _key(v):
    return (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, str(v))


def group_stats(rows: List[dict], info: dict) -> Dict[Tuple, dict]:
    """(grid point, policy, metric) -> ci95 fields, over the seeds."""
    axes = info["axes"]
    samples: Dict[Tuple, List[float]] = {}
    for r in rows:
        if r["status"] != "ok":           # as for repeated comparisons: only runs that are ok count
            continue
        point = tuple(r[a] for a in axes)
        for m in info["metrics"]:
            for col in (m, f"{m}_vs_fair"):
                samples.setdefault((point, r["policy"], col), []).append(r[col])
    out = {}
    for k, vals in samples.items():
        n, mean, sd, lo, hi = ci95(vals)
        out[k] = {"n": n, "mean": mean, "std": sd, "lo": lo, "hi": hi}
    return out


def points(info: dict) -> List[Tuple]:
    seen = []
    for c in info["cells"]:
        p = tuple(v for _, v in c["labels"])
        if p not in seen:
            seen.append(p)
    return seen


def _cell_text(s: Optional[dict], fmt, ratio: bool = False, fair: bool = False) -> str:
    if not s or not s["n"]:
        return "–"
    if ratio and fair:
        return "1"
    if not math.isfinite(s["lo"]):
        return f"{fmt(s['mean'])} (n=1)"
    txt = f"{fmt(s['mean'])} ± {fmt(s['hi'] - s['mean'])}"
    if ratio and (s["hi"] < 1.0 or s["lo"] > 1.0):
        txt += " *"
    return txt


def metric_tables(info: dict, stats: Dict, pols: List[str], m: str) -> List[str]:
    axes = info["axes"]
    fmt = fmt_s if m.endswith("_s") else fmt_r
    L = [f"### {m}", ""]
    hdr = list(axes) + pols
    body = [[str(v) for v in pt] + [_cell_text(stats.get((pt, p, m)), fmt) for p in pols]
            for pt in points(info)]
    L += md_table(hdr, body, right_from=len(axes)) + [""]
    if "fair" in pols and len(pols) > 1:
        L += [f"{m} / fair (paired by seed):", ""]
        body = [[str(v) for v in pt] + [_cell_text(stats.get((pt, p, f"{m}_vs_fair")), fmt_r, True, p == "fair")
                                        for p in pols] for pt in points(info)]
        L += md_table(hdr, body, right_from=len(axes)) + [""]
    return L


def render_markdown(d: Path, info: dict, rows: List[dict], stats: Dict, plots: List[str]) -> str:
    pols = policy_order(info["policies"])
    inv = (info.get("invocations") or [{}])[-1]
    count = {s: sum(1 for r in rows if (r["status"] or "not run") == s)
             for s in ("ok", "partial", "failed", "not run")}
    L = [f"# Sweep {info['sweep']}", ""]
    if info.get("description"):
        L += [" ".join(info["description"].split()), ""]
    L += [f"Command: `{inv.get('command', '')}`" + (f" ({inv.get('nodes')} Ray nodes, {inv.get('cpus'):g} CPUs)"
                                                   if inv.get("cpus") else ""), ""]
    grid = [f"{a} = {', '.join(str(v) for v in dict.fromkeys(c['labels'][i][1] for c in info['cells']))}"
            for i, a in enumerate(info["axes"])]
    L += [f"Grid: {'; '.join(grid) or 'no axes'}; seeds {', '.join(map(str, info['seeds']))}; "
          f"policies {', '.join(pols)}. {len(info['cells'])} cells x {len(pols)} policies = {len(rows)} runs: "
          + ", ".join(f"{n} {s}" for s, n in count.items() if n) + ".", ""]
    if count["not run"]:
        L += [f"The sweep is incomplete: {count['not run']} runs have not run "
              "(continue it with `--resume`).", ""]
    L += ["Each figure is the mean over the seeds ± the half-width of its 95% confidence interval "
          "(Student's t; `(n=1)`: one seed, no interval). The ratios to fair are paired: each seed's "
          "value is divided by fair sharing's in the same cell (same grid point, same seed), then "
          "averaged. `*`: the interval excludes 1.", ""]
    L += ["## Results", ""]
    for m in info["metrics"]:
        L += metric_tables(info, stats, pols, m)
    bad: Dict[Tuple[str, str], List[str]] = {}
    for r in rows:
        if r["status"] == "failed":
            bad.setdefault((r["cell"], (r["error"] or "")[:300]), []).append(r["policy"])
    if bad:
        L += ["## Failed runs", ""]
        L += md_table(["cell", "policies", "error"],
                       [[c, ", ".join(ps), e] for (c, e), ps in bad.items()], right=[])
        L += [""]
    if plots:
        L += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    L += ["Per cell: `cells/<cell>/comparison.md` (compare's report of that cell); per run: "
          "`cells/<cell>/<policy>/` and its `sweep_run.json` (status, error, node, wall time).", ""]
    return "\n".join(L)


def plot_sweep(d: Path, info: dict, stats: Dict) -> List[str]:
    """One figure per (metric, axis); see the module docstring.  Returns their paths (DIR-relative)."""
    axes = info["axes"]
    if not axes:
        return []
    from .plots import _save, plt, policy_color
    pols = policy_order(info["policies"])
    pts = points(info)
    out = []
    (d / "plots").mkdir(parents=True, exist_ok=True)
    for m, (ai, a) in itertools.product(info["metrics"], enumerate(axes)):
        xs = list(dict.fromkeys(pt[ai] for pt in pts))
        numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)
        xs = sorted(xs, key=_key)
        others = list(dict.fromkeys(tuple(v for i, v in enumerate(pt) if i != ai) for pt in pts))
        rows = [(m, m)] + ([(f"{m}_vs_fair", f"{m} / fair")] if "fair" in pols and len(pols) > 1 else [])
        fig, axs = plt.subplots(len(rows), len(others), squeeze=False, sharex=True,
                                figsize=(1.5 + 3.6 * len(others), 1.2 + 2.6 * len(rows)))
        for col, other in enumerate(others):
            rest = [(n, v) for n, v in zip([x for i, x in enumerate(axes) if i != ai], other)]
            for ri, (metric, label) in enumerate(rows):
                ax = axs[ri][col]
                for pi, p in enumerate(pols):
                    if metric.endswith("_vs_fair") and p == "fair":
                        continue
                    ss = [stats.get((tuple(list(other[:ai]) + [x] + list(other[ai:])), p, metric)) for x in xs]
                    pos = [x if numeric else i for i, x in enumerate(xs)]
                    ys = [s["mean"] if s and s["n"] else math.nan for s in ss]
                    lo = [s["lo"] if s and s["n"] > 1 else y for s, y in zip(ss, ys)]
                    hi = [s["hi"] if s and s["n"] > 1 else y for s, y in zip(ss, ys)]
                    c = policy_color(p, pi)
                    ax.plot(pos, ys, "o-", color=c, label=p, lw=1.5, ms=4)
                    ax.fill_between(pos, lo, hi, color=c, alpha=0.18, lw=0)
                if metric.endswith("_vs_fair"):
                    ax.axhline(1.0, color="#7f7f7f", ls="--", lw=1)
                if not ax.lines or all(not any(math.isfinite(y) for y in ln.get_ydata()) for ln in ax.lines
                                       if ln.get_label() in pols):
                    ax.text(0.5, 0.5, "no completed runs", transform=ax.transAxes, ha="center",
                            color="#7f7f7f")
                if not numeric:
                    ax.set_xticks(range(len(xs)), [str(x) for x in xs])
                elif len(xs) > 1 and min(xs) > 0 and max(xs) / min(xs) >= 8:
                    ax.set_xscale("log", base=2)
                    ax.set_xticks(xs, [str(x) for x in xs])
                else:
                    ax.set_xticks(xs, [str(x) for x in xs])
                if col == 0:
                    ax.set_ylabel(label)
                if ri == len(rows) - 1:
                    ax.set_xlabel(a)
                if ri == 0 and rest:
                    ax.set_title(", ".join(f"{n}={v}" for n, v in rest), fontsize=9)
                ax.grid(alpha=0.3)
        axs[0][0].legend(fontsize=8)
        fig.suptitle(f"{info['sweep']}: {m} vs {a} (mean over seeds, 95% CI band)", fontsize=10)
        name = f"plots/{_safe(m)}__vs__{_safe(a)}.png"
        _save(fig, d / name)
        out.append(name)
    return out


def _safe(s: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in s)


def aggregate_sweep(d, plots: bool = True) -> dict:
    """Write DIR/sweep.csv, sweep.md and plots from the cells' files.  Returns a summary dict."""
    d = Path(d)
    try:
        info = json.loads((d / "sweep.json").read_text())
    except (OSError, ValueError) as e:
        raise ReportError(f"{d}: not a sweep (sweep.json: {e})") from None
    rows = collect(d, info)
    metrics = info["metrics"]
    cols = ["cell"] + list(info["axes"]) + ["seed", "policy", "status", "error"] + metrics \
        + [f"{m}_vs_fair" for m in metrics] + ["wall_s", "node_id", "node_ip", "hostname"]
    write_csv(d / "sweep.csv", cols, rows)
    stats = group_stats(rows, info)
    figs = plot_sweep(d, info, stats) if plots else []
    md = render_markdown(d, info, rows, stats, figs)
    (d / "sweep.md").write_text(md)
    return {"dir": d, "info": info, "rows": rows, "stats": stats, "markdown": md,
            "failed": sum(1 for r in rows if r["status"] == "failed"),
            "not_run": sum(1 for r in rows if not r["status"] or r["status"] == "not run"),
            "written": time.strftime("%Y-%m-%d %H:%M:%S")}


def summary_text(res: dict) -> str:
    info, rows = res["info"], res["rows"]
    pols = policy_order(info["policies"])
    m = info["metrics"][0]
    L = [f"{info['sweep']}: {len(rows)} runs ({len(rows) - res['failed'] - res['not_run']} done, "
         f"{res['failed']} failed, {res['not_run']} not run); {m}, mean over seeds ± 95% CI "
         f"half-width [/ fair, * = the interval excludes 1]:", ""]
    fmt = fmt_s if m.endswith("_s") else fmt_r
    for pt in points(info):
        cells = []
        for p in pols:
            s = res["stats"].get((pt, p, m))
            r = res["stats"].get((pt, p, f"{m}_vs_fair"))
            txt = f"{p} {_cell_text(s, fmt)}"
            if p != "fair" and r and r["n"]:
                txt += f" [{_cell_text(r, fmt_r, True)}]"
            cells.append(txt)
        lab = ", ".join(f"{a}={v}" for a, v in zip(info["axes"], pt)) or "all"
        L.append(f"  {lab}: " + "; ".join(cells))
    L += ["", f"report: {res['dir'] / 'sweep.md'}"]
    return "\n".join(L)
