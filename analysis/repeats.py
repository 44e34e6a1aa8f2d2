"""Repeated comparisons: one scenario run N times under every policy, each figure given as a
mean over the runs with its 95% confidence interval.

    python -m analysis compare SCENARIO --runs N [the other compare options]
    python -m analysis report DIR       # DIR of a repeated comparison: aggregates it again

An emulated run is one sample of a noisy system (real TCP, a shared CPU, the kernel's
scheduler), so a difference of a few percent between two policies in one run can be noise.
Each of DIR/run1/ .. DIR/runN/ is a complete comparison, as ``compare`` writes it
(compare.json, comparison.csv, comparison.md, plots).  The runs go one after another, and each
runs every policy in turn, so the machine's slow periods fall on all the policies alike.
DIR/repeats.json records what ran.  The aggregation writes:

  DIR/repeats.csv         one row per (policy, metric): runs, mean, std, ci95_low, ci95_high,
                          and for a "/ fair" metric how many runs were below 1
  DIR/repeats.md          the table with its intervals, and the plot
  DIR/plots/repeats.png   each policy's ratios to fair with their 95% intervals

Statistics.  A run counts for a policy when the policy's status in it is ok.  The mean is taken
over those runs, and std uses ddof=1.  The 95% interval is mean +- t(0.975, n-1) * std / sqrt(n),
with Student's t from scipy.  The "/ fair" figures are paired: each run's ratio is the policy's
value divided by fair sharing's in the same run, and those ratios are then averaged.  A ratio's
interval that excludes 1 is marked "*": a difference at the 95% level.
"""
from __future__ import annotations

import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from .comparison import NORMALISED
from .results import ReportError
from .tables import fmt_r, fmt_s, md_table, num, policy_order, read_csv, write_csv

REPEATS_JSON = "repeats.json"
# what the table shows: the raw mean iteration time, then the paired ratios to fair
RATIOS = [("mean_iter_vs_fair", "iter / fair"), ("p99_iter_vs_fair", "p99 / fair"),
          ("jct_vs_fair", "JCT / fair"), ("comm_vs_fair", "comm / fair"),
          ("slowdown_vs_fair", "slowdown / fair"),
          ("corun_iter_vs_fair", "iter all running / fair"),
          ("corun_slowdown_vs_fair", "slowdown all running / fair")]
METRICS = list(NORMALISED) + [c for c, _ in RATIOS] + ["decision_ms_mean"]
# a 95% interval wholly below 1, containing it, wholly above (_side)
SIDE_WORD = {-1: "shorter than", 1: "longer than", 0: "not different from"}
REPEAT_COLS = ["policy", "metric", "runs", "mean", "std", "ci95_low", "ci95_high", "runs_below_1"]
_RUN_DIR = re.compile(r"^run(\d+)$")


def ci95(values) -> tuple:
    """(n, mean, std, low, high) of the finite values: Student's t interval (nan if n < 2)."""
    v = np.asarray([x for x in values if math.isfinite(x)], dtype=float)
    n = len(v)
    if n == 0:
        return 0, math.nan, math.nan, math.nan, math.nan
    m = float(v.mean())
    if n < 2:
        return 1, m, math.nan, math.nan, math.nan
    from scipy.stats import t
    sd = float(v.std(ddof=1))
    h = float(t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return n, m, sd, m - h, m + h


# the precision section: each policy's mean iteration time, what its run-to-run spread gives,
# and how many runs that spread would need for these 95% half-widths
PRECISION_TARGETS = (0.03, 0.01)
MAX_PLANNED_RUNS = 1000


def runs_for(cv: float, target: float) -> Optional[int]:
    """The fewest runs n >= 2 whose 95% half-width t(0.975, n-1) * cv / sqrt(n) is at most
    ``target`` (both relative to the mean); None beyond ``MAX_PLANNED_RUNS``."""
    from scipy.stats import t
    if not math.isfinite(cv):
        return None
    n = np.arange(2, MAX_PLANNED_RUNS + 1)
    ok = np.flatnonzero(t.ppf(0.975, n - 1) * cv / np.sqrt(n) <= target)
    return int(n[ok[0]]) if len(ok) else None


def precision(res: dict) -> List[dict]:
    """Per policy with at least 2 runs: runs, the CV of its mean iteration time over the runs,
    its 95% half-width now (relative), and the runs each ``PRECISION_TARGETS`` half-width
    needs at that CV (an estimate: the CV itself comes from these runs)."""
    out = []
    for p in res["policies"]:
        r = res["stats"][p, "mean_iter_s"]
        if r["runs"] < 2 or not math.isfinite(r["std"]) or not r["mean"] > 0:
            continue
        cv = r["std"] / r["mean"]
        out.append({"policy": p, "runs": r["runs"], "cv": cv,
                    "half": (r["ci95_high"] - r["mean"]) / r["mean"],
                    "needs": [runs_for(cv, x) for x in PRECISION_TARGETS]})
    return out


def precision_md(res: dict) -> List[str]:
    rows = precision(res)
    if not rows:
        return []
    heads = [f"runs for ±{x:.0%}" for x in PRECISION_TARGETS]
    body = [[r["policy"], str(r["runs"]), f"{r['cv']:.1%}", f"±{r['half']:.1%}"]
            + [str(n) if n is not None else f"over {MAX_PLANNED_RUNS}" for n in r["needs"]]
            for r in rows]
    return (["", "Precision of each policy's mean iteration time: its coefficient of variation "
             "over these runs, the 95% half-width it gives now, and how many runs that spread "
             "needs for a narrower interval (an estimate from these runs' own spread).", ""]
            + md_table(["policy", "runs", "CV", "95% now"] + heads, body))


def run_dirs(d: Path) -> List[Path]:
    """DIR's run<k>/ sub-directories, in run order."""
    found = [(int(m.group(1)), p) for p in d.iterdir()
             if p.is_dir() and (m := _RUN_DIR.match(p.name))]
    return [p for _, p in sorted(found)]


def is_repeats_dir(d) -> bool:
    return (Path(d) / REPEATS_JSON).is_file()


def aggregate(d, plots: bool = True) -> dict:
    """Read DIR/run*/comparison.csv; write repeats.csv, repeats.md (and plots/repeats.png).
    Returns {"dir", "scenario", "runs" (runs read), "policies", "markdown", "stats": (policy,
    metric) -> its row of repeats.csv}."""
    d = Path(d)
    try:
        info = json.loads((d / REPEATS_JSON).read_text())
    except (OSError, ValueError) as e:
        raise ReportError(f"{d}: not a repeated comparison ({REPEATS_JSON}: {e})") from None
    samples: Dict[str, Dict[str, List[float]]] = {}
    fid: Dict[str, List[tuple]] = {}          # policy -> (run, verdict) of its ok runs
    read = 0
    for rd in run_dirs(d):
        f = rd / "comparison.csv"
        if not f.is_file():
            continue                      # a run cut short before its report: nothing to count
        read += 1
        for r in read_csv(f):
            if r.get("status") != "ok":
                continue
            s = samples.setdefault(r["policy"], {m: [] for m in METRICS})
            if r.get("fidelity"):
                fid.setdefault(r["policy"], []).append((rd.name, r["fidelity"]))
            for m in METRICS:
                s[m].append(num(r.get(m)))
    if not samples:
        raise ReportError(f"{d}: no run with results (run*/comparison.csv)")
    pols = policy_order(samples)
    stats: Dict[tuple, dict] = {}
    for p in pols:
        for m in METRICS:
            vals = samples[p][m]
            n, mean, sd, lo, hi = ci95(vals)
            below = (sum(1 for x in vals if math.isfinite(x) and x < 1.0)
                     if m.endswith("_vs_fair") else None)
            stats[p, m] = {"policy": p, "metric": m, "runs": n, "mean": mean, "std": sd,
                           "ci95_low": lo, "ci95_high": hi, "runs_below_1": below}
    write_csv(d / "repeats.csv", REPEAT_COLS, list(stats.values()))
    res = {"dir": d, "scenario": info.get("scenario", d.name), "runs": read,
           "planned": info.get("runs"), "policies": pols, "stats": stats, "fidelity": fid}
    plot = None
    if plots:
        plot = plot_repeats(res, d / "plots" / "repeats.png")
    res["markdown"] = render_markdown(res, info, plot)
    (d / "repeats.md").write_text(res["markdown"])
    return res


def _side(r: dict) -> int:
    """-1 / +1: the 95% interval lies wholly below / above 1; 0: it contains 1 (or is undefined)."""
    return -1 if r["ci95_high"] < 1.0 else 1 if r["ci95_low"] > 1.0 else 0


def _cell(r: dict, fmt=fmt_r, ratio: bool = False) -> str:
    if not r["runs"]:
        return "–"
    if ratio and r["policy"] == "fair":
        return "1"
    if not math.isfinite(r["ci95_low"]):
        return fmt(r["mean"])
    txt = f"{fmt(r['mean'])} ± {fmt(r['ci95_high'] - r['mean'])}"
    if ratio and _side(r):
        txt += " *"
    return txt


def fidelity_cell(res: dict, p: str) -> str:
    """'3/3 faithful', '2/3 faithful (run2 suspect)', or '–' (no verdicts: simulator, old runs)."""
    vs = (res.get("fidelity") or {}).get(p) or []
    if not vs:
        return "–"
    bad = [run for run, v in vs if v.startswith("suspect")]
    txt = f"{len(vs) - len(bad)}/{len(vs)} faithful"
    return txt + (f" ({', '.join(bad)} suspect)" if bad else "")


def suspect_lines(res: dict) -> List[str]:
    return [f"{p} {run}: {v}" for p in res["policies"] for run, v in (res.get("fidelity") or {}).get(p, [])
            if v.startswith("suspect")]


def table_md(res: dict) -> List[str]:
    hdr = ["policy", "runs", "mean iter s"] + [h for _, h in RATIOS]
    has_fid = any((res.get("fidelity") or {}).values())
    if has_fid:
        hdr.append("fidelity")
    body = []
    for p in res["policies"]:
        r0 = res["stats"][p, "mean_iter_s"]
        body.append([p, str(r0["runs"]), _cell(r0, fmt_s)]
                    + [_cell(res["stats"][p, m], ratio=True) for m, _ in RATIOS]
                    + ([fidelity_cell(res, p)] if has_fid else []))
    return md_table(hdr, body, right=range(1, len(hdr) - (1 if has_fid else 0)))


def verdicts(res: dict) -> List[str]:
    """One line per policy against fair: its iteration-time ratio, interval, and run count."""
    out = []
    for p in res["policies"]:
        if p == "fair":
            continue
        r = res["stats"][p, "mean_iter_vs_fair"]
        if not r["runs"]:
            out.append(f"{p}: no run paired with fair")
            continue
        if not math.isfinite(r["ci95_low"]):
            out.append(f"{p}: mean iteration time {fmt_r(r['mean'])}x fair's (one run: no interval)")
            continue
        word = SIDE_WORD[_side(r)]
        fc = fidelity_cell(res, p)
        out.append(f"{p}: mean iteration time {fmt_r(r['mean'])}x fair's (95% CI "
                   f"{fmt_r(r['ci95_low'])}-{fmt_r(r['ci95_high'])}), {word} fair's at the 95% level; below fair in "
                   f"{r['runs_below_1']} of {r['runs']} runs" + _corun_clause(res["stats"][p, "corun_iter_vs_fair"])
                   + (f"; fidelity {fc}" if fc != "–" else ""))
    return out


def _corun_clause(c: dict) -> str:
    """The same verdict on the iterations run while every job's link neighbours ran, when
    that figure exists in at least two runs."""
    if c["runs"] < 2 or not math.isfinite(c["ci95_low"]):
        return ""
    word = SIDE_WORD[_side(c)]
    return (f"; while every job's link neighbours run {fmt_r(c['mean'])}x (95% CI "
            f"{fmt_r(c['ci95_low'])}-{fmt_r(c['ci95_high'])}), {word} fair's")


def render_markdown(res: dict, info: dict, plot: Optional[str]) -> str:
    L = [f"# {res['scenario']}: {res['runs']} runs of every policy", ""]
    if info.get("command"):
        L += [f"Command: `{info['command']}`", ""]
    codes = info.get("exit_codes")
    if codes is not None and res["planned"] and (len(codes) < res["planned"] or codes[-1] == 130):
        done = sum(1 for c in codes if c in (0, 1))
        L += [f"The series was cut short: {done} of the {res['planned']} planned runs completed "
              f"(a run cut short counts for the policies that finished in it).", ""]
    L += ["Mean over the runs ± the half-width of its 95% confidence interval (Student's t). "
          "The ratios to fair are paired: each is taken inside one run. "
          "`*`: the interval excludes 1.", ""]
    if any((res.get("fidelity") or {}).values()):
        L += ["`fidelity`: how many of the policy's runs the emulator's fidelity monitor judged "
              "faithful (emulation/fidelity.py; a suspect run's figures may reflect the emulator's "
              "limits, not the policy).", ""]
    L += table_md(res)
    L += [""] + [f"- {v}" for v in verdicts(res)]
    L += precision_md(res)
    sus = suspect_lines(res)
    if sus:
        L += ["", "Suspect runs:"] + [f"- {x}" for x in sus]
    if plot:
        fids = [f"{p} {fidelity_cell(res, p)}" for p in res["policies"] if fidelity_cell(res, p) != "–"]
        L += ["", f"![ratios to fair with 95% intervals]({plot})"]
        if fids:
            L += ["", "Fidelity of the runs in the plot: " + "; ".join(fids)]
    links = [f"[{p.name}]({p.name}/comparison.md)" for p in run_dirs(res["dir"])
             if (p / "comparison.md").is_file()]
    if links:
        L += ["", "Each run's own report: " + ", ".join(links)]
    return "\n".join(L) + "\n"


def plot_repeats(res: dict, path: Path) -> Optional[str]:
    """Each policy's paired ratios to fair (mean and 95% interval), one group per metric."""
    pols = [p for p in res["policies"] if p != "fair"]
    if not pols:
        return None
    from .plots import _save, plt, policy_color
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(1.6 + 1.5 * len(RATIOS), 3.6))
    w = 0.8 / len(pols)
    for i, p in enumerate(pols):
        xs, ys, err = [], [], [[], []]
        for k, (m, _) in enumerate(RATIOS):
            r = res["stats"][p, m]
            if not r["runs"]:
                continue
            xs.append(k - 0.4 + w * (i + 0.5))
            ys.append(r["mean"])
            fin = math.isfinite(r["ci95_low"])
            err[0].append(r["mean"] - r["ci95_low"] if fin else 0.0)
            err[1].append(r["ci95_high"] - r["mean"] if fin else 0.0)
        ax.errorbar(xs, ys, yerr=err, fmt="o", capsize=3, color=policy_color(p, i), label=p)
    ax.axhline(1.0, color="#7f7f7f", ls="--", lw=1, label="fair")
    ax.set_xticks(range(len(RATIOS)), [h.replace(" all running", "\nall running") for _, h in RATIOS])
    ax.set_ylabel("policy / fair (paired, 95% CI)")
    ax.set_title(f"{res['scenario']}: {res['runs']} runs")
    ax.legend(fontsize=8, ncol=min(len(pols) + 1, 3))
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)
    return f"plots/{path.name}"


def summary_text(res: dict) -> str:
    L = [f"{res['scenario']}: {res['runs']} runs of {len(res['policies'])} policies "
         "(mean ± 95% CI half-width; * = the interval excludes 1)", ""]
    L += table_md(res)
    L += [""] + verdicts(res)
    L += precision_md(res)
    sus = suspect_lines(res)
    if sus:
        L += ["", f"warning: {len(sus)} suspect run(s):"] + [f"  {x}" for x in sus]
    L += ["", f"report: {res['dir'] / 'repeats.md'}"]
    return "\n".join(L)


def run_repeats(scenario_path, policies: Optional[str], out: Optional[str], opts: dict,
                runs: int, argv: Optional[List[str]] = None,
                runners: Optional[dict] = None) -> int:
    """compare --runs N: N complete comparisons into DIR/run<k>/, then the aggregation.
    Exit 2 (nothing written) for bad input, 130 if interrupted (what finished is aggregated),
    1 if some policy failed in some run, else 0."""
    from runs.files import atomic_write_json
    from .compare import (RUNNERS, CompareError, check_compare, command_line, default_out, progress,
                          run_compare)
    from workloads.scenario import ScenarioError
    allr = {**RUNNERS, **(runners or {})}
    try:
        if runs < 2:
            raise CompareError(f"--runs: give at least 2 (got {runs}; one run is plain compare)")

        def default(sc):
            p = default_out(sc)
            return p.with_name(f"{p.name}-x{runs}")
        sc, _, d = check_compare(scenario_path, policies, out, opts, allr, default=default)
    except (ScenarioError, CompareError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    d.mkdir(parents=True, exist_ok=True)
    cmd = command_line(argv, [str(scenario_path), "--runs", str(runs)])
    info = {"scenario": sc.name, "scenario_path": str(scenario_path), "runs": runs,
            "command": cmd, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "exit_codes": []}
    atomic_write_json(d / REPEATS_JSON, info)
    progress(f"{sc.name}: {runs} runs of every policy -> {d}")
    if sc.backend == "simulation":
        progress("note: the simulator is deterministic; its runs will agree (zero-width intervals)")
    worst = 0
    for k in range(1, runs + 1):
        progress(f"== run {k}/{runs} ==")
        rc = run_compare(scenario_path, policies, str(d / f"run{k}"), opts, runners,
                         argv=argv, summary=False)
        info["exit_codes"].append(rc)
        atomic_write_json(d / REPEATS_JSON, info)
        worst = max(worst, rc)
        if rc not in (0, 1):          # 130: interrupted; 2: could not start
            break
    info["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    atomic_write_json(d / REPEATS_JSON, info)
    try:
        res = aggregate(d, plots=opts.get("plots", True))
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return worst or 1
    print(summary_text(res))
    return worst
