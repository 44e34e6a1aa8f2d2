"""The report's plots (PNG, written to DIR/plots/), all from the files of the results directory.

  iteration_time.png   per-job iteration time over the run, one subplot per policy
  iteration_cdf.png    CDF of iteration times per policy (and of iteration time / isolated)
  link_throughput.png  per-job throughput on the bottleneck link from the captures (stacked
                       area, one subplot per policy); simulator: the most loaded link's total
                       from links.csv (the simulator does not split links per job)
  phase.png            phase control: measured minus decided offset per shifted job over time
  slowdown.png         mean slowdown per policy, normalised to fair sharing
  decision_time.png    decision time per epoch vs cluster size (this run's decision logs,
                       plus a benchmark CSV if given: columns gpus, policy, decision_ms)
"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Dict, List, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .captures import capture_series  # noqa: E402
from .results import Report  # noqa: E402
from .tables import finite  # noqa: E402

POLICY_COLORS = {"fair": "#7f7f7f", "optimal": "#1f1f1f", "crux": "#1f77b4",
                 "cassini": "#ff7f0e", "harmonics": "#2ca02c", "none": "#bcbd22"}
MAX_LABELLED_JOBS = 12
WIDE_RANGE = 20.0           # max / min beyond which a time axis goes logarithmic
DPI = 120


def policy_color(name: str, i: int = 0) -> str:
    return POLICY_COLORS.get(name, plt.get_cmap("tab10")((i + 5) % 10))


def _time_unit(values) -> tuple:
    """(factor, label) so that typical values read well: ms below one second."""
    v = np.asarray([x for x in values if finite(x)])
    if len(v) and np.median(v) < 1.0:
        return 1000.0, "ms"
    return 1.0, "s"


def _save(fig, path: Path) -> None:
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)


def _job_colors(jobs: List[str]) -> Dict[str, tuple]:
    cmap = plt.get_cmap("tab10" if len(jobs) <= 10 else "viridis")
    n = max(len(jobs) - 1, 1)
    return {j: cmap(i if len(jobs) <= 10 else i / n) for i, j in enumerate(jobs)}


def plot_iteration_time(rep: Report, path: Path) -> bool:
    runs = [r for r in rep.runs if r.iterations]
    if not runs:
        return False
    allt = np.concatenate([r.iteration_times() for r in runs])
    k, unit = _time_unit(allt)
    jobs = sorted({x[0] for r in runs for x in r.iterations})
    colors = _job_colors(jobs)
    labelled = len(jobs) <= MAX_LABELLED_JOBS
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 1.2 + 2.4 * len(runs)), sharex=True,
                             sharey=True, squeeze=False, layout="constrained")
    for ax, run in zip(axes[:, 0], runs):
        for j in jobs:
            per_it: Dict[int, list] = {}
            for r in run.iterations:
                if r[0] == j and r[2] >= run.steady_from(j):
                    per_it.setdefault(r[2], []).append(r)
            if not per_it:
                continue
            arr = rep.scenario.arrivals.get(j, 0.0)
            its = sorted(per_it)
            x = [arr + max(r[6] for r in per_it[i]) for i in its]
            y = [k * float(np.mean([r[6] - r[3] for r in per_it[i]])) for i in its]
            n = jobs.index(j)
            ax.plot(x, y, marker="osD^v<>"[n % 7] if len(its) <= 40 and labelled else None,
                    ms=5 if n % 2 else 3.5, mfc="none" if n % 2 else colors[j],
                    ls="-" if n % 2 == 0 else "--", lw=1.4 if labelled else 0.6, color=colors[j],
                    label=j if labelled else None, alpha=1.0 if labelled else 0.6)
        ax.set_title(f"{run.policy}", loc="left", fontsize=10, fontweight="bold")
        ax.set_ylabel(f"iteration time ({unit})")
        ax.grid(alpha=0.3)
    ys = [v for ax in axes[:, 0] for l in ax.get_lines() for v in l.get_ydata() if v > 0]
    if ys and max(ys) / min(ys) > WIDE_RANGE:
        axes[0, 0].set_yscale("log")                # heavy-tailed mixes: every job readable
        for ax in axes[:, 0]:
            ax.set_ylabel(f"iteration time ({unit}, log)")
    else:
        axes[0, 0].set_ylim(0, max(ys) * 1.12 if ys else 1)
    axes[-1, 0].set_xlabel("time since the run's start (trace s; point = iteration end)")
    if labelled:
        axes[0, 0].legend(title="job", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.suptitle(f"{rep.scenario.name}: per-job iteration time over the run"
                 + ("" if labelled else f" ({len(jobs)} jobs, not labelled)")
                 + f"\n(mean over a job's workers; warm-up iterations left out)", fontsize=11)
    _save(fig, path)
    return True


def _cdf(ax, values, **kw) -> None:
    v = np.sort(np.asarray(values))
    if not len(v):
        return
    y = np.arange(1, len(v) + 1) / len(v)
    ax.step(np.concatenate([[v[0]], v]), np.concatenate([[0.0], y]), where="post", **kw)


def plot_iteration_cdf(rep: Report, path: Path) -> bool:
    runs = [r for r in rep.runs if r.iterations]
    if not runs:
        return False
    iso_ok = any(finite(j.isolated_iter_s) for r in runs for j in r.jobs.values())
    fig, axes = plt.subplots(1, 2 if iso_ok else 1, figsize=(12 if iso_ok else 7, 4.6), squeeze=False,
                             layout="constrained")
    k, unit = _time_unit(np.concatenate([r.iteration_times() for r in runs]))
    for i, run in enumerate(runs):
        t = run.iteration_times()
        c = policy_color(run.policy, i)
        _cdf(axes[0, 0], k * t, color=c, lw=2, label=f"{run.policy} (n={len(t)})")
        if iso_ok:
            sd = [r[6] - r[3] for r in run.iterations if r[2] >= run.steady_from(r[0])]
            iso = [run.jobs[r[0]].isolated_iter_s if r[0] in run.jobs else math.nan
                   for r in run.iterations if r[2] >= run.steady_from(r[0])]
            rel = [a / b for a, b in zip(sd, iso) if finite(b) and b > 0]
            _cdf(axes[0, 1], rel, color=c, lw=2, label=run.policy)
    ax = axes[0, 0]
    pos = k * np.concatenate([r.iteration_times() for r in runs])
    pos = pos[pos > 0]
    log = len(pos) and pos.max() / pos.min() > WIDE_RANGE
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(f"iteration time ({unit}, trace{', log scale' if log else ''})")
    ax.set_ylabel("fraction of iterations")
    ax.set_title("iteration time (all jobs' iterations pooled)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(title="policy", fontsize=8, loc="lower right")
    if iso_ok:
        ax = axes[0, 1]
        ax.axvline(1.0, color="k", ls=":", lw=1)
        ax.set_xlabel("iteration time / the job's isolated iteration time")
        ax.set_ylabel("fraction of iterations")
        ax.set_title("per-iteration slowdown", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(title="policy", fontsize=8, loc="lower right")
    fig.suptitle(f"{rep.scenario.name}: CDF of iteration times per policy (warm-up left out)",
                 fontsize=11)
    _save(fig, path)
    return True


def _shade_priorities(ax, run, rep: Report, t_end: float) -> None:
    """Light band where the policy had the jobs in different classes (higher class named)."""
    eps = sorted(run.epochs, key=lambda e: e.time_s)
    ep_len = rep.scenario.epoch_s / rep.scenario.time_scale
    for i, e in enumerate(eps):
        t1 = eps[i + 1].time_s if i + 1 < len(eps) else e.time_s + ep_len
        pr = {j: p for j, p in e.priority.items() if j in e.active}
        if len(set(pr.values())) > 1 and e.time_s < t_end:
            ax.axvspan(e.time_s, min(t1, t_end), color="#ffd54f", alpha=0.25, lw=0, zorder=0)


def plot_link_throughput(rep: Report, path: Path) -> Optional[str]:
    sc = rep.scenario
    cap_runs = [r for r in rep.runs if r.bottleneck]
    if cap_runs:
        jobs = sorted({j for r in cap_runs for j in r.captures[r.bottleneck].jobs})
        colors = _job_colors(jobs)
        fig, axes = plt.subplots(len(cap_runs), 1, figsize=(10, 1.2 + 2.5 * len(cap_runs)),
                                 sharex=True, sharey=True, squeeze=False, layout="constrained")
        shaded = False
        for ax, run in zip(axes[:, 0], cap_runs):
            t, g = capture_series(run, sc)
            names = [j for j in jobs if j in g]
            if len(t):
                x = np.append(t, t[-1] + rep.bin_trace_s)          # step edges
                ys = [np.append(g[j], g[j][-1]) for j in names]
                ax.stackplot(x, ys, labels=names, colors=[colors[j] for j in names], step="post",
                             alpha=0.85)
                if any(len({p for j, p in e.priority.items() if j in e.active}) > 1 for e in run.epochs):
                    _shade_priorities(ax, run, rep, x[-1])
                    shaded = True
            if finite(sc.uplink_gbps):
                ax.axhline(sc.uplink_gbps, color="k", ls="--", lw=1, label="link capacity")
            ax.set_title(f"{run.policy}: {run.bottleneck}", loc="left", fontsize=10, fontweight="bold")
            ax.set_ylabel("throughput (Gb/s, trace)")
            ax.grid(alpha=0.3)
        h, lab = axes[0, 0].get_legend_handles_labels()
        if shaded:
            from matplotlib.patches import Patch
            h.append(Patch(color="#ffd54f", alpha=0.25))
            lab.append("jobs in different classes")
        axes[0, 0].legend(h, lab, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="job")
        axes[-1, 0].set_xlabel(f"time since the run's start (trace s; bins of {1000 * rep.bin_trace_s:.3g} ms)")
        fig.suptitle(f"{sc.name}: per-job throughput on the bottleneck link (from the packet captures)",
                     fontsize=11)
        _save(fig, path)
        return "captures"
    link_runs = [r for r in rep.runs if r.links]
    if not link_runs:
        return None
    fig, axes = plt.subplots(len(link_runs), 1, figsize=(10, 1.2 + 2.3 * len(link_runs)), sharex=True,
                             sharey=True, squeeze=False, layout="constrained")
    for ax, run in zip(axes[:, 0], link_runs):
        load: Dict[str, float] = {}
        for r in run.links:
            try:
                load[r["link"]] = load.get(r["link"], 0.0) + float(r["mean_gbps"]) * (
                    float(r["end_s"]) - float(r["start_s"]))
            except (KeyError, ValueError):
                continue
        if not load:
            continue
        top = max(load, key=lambda k: (load[k], k))
        rows = sorted((float(r["start_s"]), float(r["end_s"]), float(r["mean_gbps"]),
                       float(r.get("capacity_gbps") or "nan"))
                      for r in run.links if r.get("link") == top)
        x = [a for a, _, _, _ in rows] + [rows[-1][1]]
        y = [g for _, _, g, _ in rows] + [rows[-1][2]]
        ax.fill_between(x, y, step="post", color=policy_color(run.policy), alpha=0.7,
                        label="all jobs (total)")
        if finite(rows[0][3]):
            ax.axhline(rows[0][3], color="k", ls="--", lw=1, label="link capacity")
        ax.set_title(f"{run.policy}: {top} (most loaded link)", loc="left", fontsize=10, fontweight="bold")
        ax.set_ylabel("throughput (Gb/s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
    axes[-1, 0].set_xlabel("simulated time (trace s)")
    fig.suptitle(f"{sc.name}: load of the most loaded link (simulator links.csv; no per-job split)",
                 fontsize=11)
    _save(fig, path)
    return "links.csv"


def plot_slowdown(rep: Report, path: Path) -> bool:
    rows = rep.policy_rows
    if not any(finite(r["mean_slowdown"]) for r in rows):
        return False
    norm = any(finite(r["slowdown_vs_fair"]) for r in rows)
    key = "slowdown_vs_fair" if norm else "mean_slowdown"
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(rows) + 2), 4.2))
    xs = np.arange(len(rows))
    for i, r in enumerate(rows):
        v = r[key]
        if finite(v):
            ax.bar(i, v, color=policy_color(r["policy"], i), width=0.6)
            ax.text(i, v, f"{v:.3f}\n(slowdown {r['mean_slowdown']:.2f})" if norm else f"{v:.3f}",
                    ha="center", va="bottom", fontsize=8)
        else:
            ax.text(i, 0.02, "no result" if r["status"] == "ok" else "failed", ha="center",
                    va="bottom", fontsize=8, rotation=90, color="#b00")
    ax.axhline(1.0, color="k", ls="--", lw=1, label="fair sharing" if norm else "isolated (no slowdown)")
    ax.set_xticks(xs, [r["policy"] for r in rows])
    ax.set_xlabel("policy")
    ax.set_ylabel("mean slowdown / fair's" if norm else "mean slowdown (iteration time / isolated)")
    top = max([r[key] for r in rows if finite(r[key])] + [1.0])
    ax.set_ylim(0, top * 1.25)
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(f"{rep.scenario.name}: mean slowdown per policy"
                 + (", normalised to fair sharing (lower is better)" if norm else " (no fair run to normalise to)"),
                 fontsize=10)
    _save(fig, path)
    return True


def read_bench_csv(path: Path) -> Dict[str, List[tuple]]:
    """policy -> [(gpus, decision_ms)] from a CSV with columns gpus, policy, decision_ms."""
    out: Dict[str, List[tuple]] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            try:
                out.setdefault(r["policy"], []).append((float(r["gpus"]), float(r["decision_ms"])))
            except (KeyError, TypeError, ValueError):
                continue
    return {k: sorted(v) for k, v in out.items()}


def plot_decision_time(rep: Report, path: Path) -> Optional[str]:
    gpus = rep.scenario.gpus or 1
    runs = [r for r in rep.runs if len(r.decision_ms())]
    bench = read_bench_csv(rep.bench_csv) if rep.bench_csv else {}
    if not runs and not bench:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    names = [r.policy for r in runs] + [p for p in bench if p not in {r.policy for r in runs}]
    offsets = np.linspace(-0.025, 0.025, max(len(runs), 1)) if len(runs) > 1 else np.zeros(1)
    for i, name in enumerate(names):
        # variants of a policy in the benchmark ("harmonics-incremental", "optimal-timeout")
        # take the policy's colour and a line style of their own
        base, _, variant = name.partition("-")
        c = policy_color(base if base in POLICY_COLORS else name, i)
        if name in bench:
            xs, ys = zip(*bench[name])
            style = {"": "-", "critical": "--", "incremental": "-.", "reuse": ":", "timeout": "none"}
            ls = style.get(variant.split("-")[0], "--")
            ax.plot(xs, ys, marker="x" if variant == "timeout" else "s", ms=5 if variant == "timeout" else 4,
                    lw=1.2, ls=ls, color=c, alpha=0.8, label=f"{name} (benchmark)")
        run = rep.run(name)
        if run is not None and len(run.decision_ms()):
            ms = run.decision_ms()
            x = gpus * 10 ** offsets[min(i, len(offsets) - 1)]       # spread points apart
            m = float(ms.mean())
            ax.errorbar([x], [m], yerr=[[m - ms.min()], [ms.max() - m]], fmt="o", ms=7, capsize=4,
                        color=c, label=f"{name}: this run ({len(ms)} epochs, mean {m:.2f} ms)")
    from matplotlib.ticker import FuncFormatter, LogLocator
    ax.set_xscale("log", base=2)
    xs_all = [gpus] + [x for v in bench.values() for x, _ in v]
    ax.set_xlim(min(xs_all) / 2.5, max(xs_all) * 2.5)
    ax.xaxis.set_major_locator(LogLocator(base=2))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.axvline(gpus, color="k", ls=":", lw=0.8)
    ax.annotate(f"this run: {gpus} GPUs", (gpus, 0.0), xycoords=("data", "axes fraction"),
                xytext=(4, 4), textcoords="offset points", fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("cluster size (GPUs, log scale)")
    ax.set_ylabel("decision time per epoch (ms)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    src = ("this run's decision logs (point = mean, bar = min..max) and the benchmark CSV"
           if bench else "this run's decision logs only (point = mean, bar = min..max)")
    ax.set_title(f"{rep.scenario.name}: decision time vs cluster size\n{src}", fontsize=10)
    _save(fig, path)
    return "bench" if bench else "run"


def _phase_rows(run) -> List[dict]:
    f = Path(run.path) / "phase.csv"
    if not f.exists():
        return []
    with open(f, newline="") as fh:
        return [r for r in csv.DictReader(fh) if r.get("ref") and r.get("error")]


PHASE_LINES_MAX = 10     # more held jobs than this: their spread, not a line each


def _phase_spread(axes, runs) -> None:
    """Many held jobs (a large simulated mix): per time bin, the median and the 90th
    percentile over the jobs of |offset error|, with the jobs' count in the title."""
    for ax, (run, rows) in zip(axes, runs):
        t = np.array([float(x["time_s"]) for x in rows])
        e = np.abs(np.array([float(x["error"]) for x in rows]))
        edges = np.linspace(t.min(), t.max(), min(100, max(2, len(set(t.tolist())))) + 1)
        idx = np.clip(np.digitize(t, edges) - 1, 0, len(edges) - 2)
        mid, med, p90 = [], [], []
        for b in range(len(edges) - 1):
            v = e[idx == b]
            if len(v):
                mid.append((edges[b] + edges[b + 1]) / 2)
                med.append(float(np.median(v)))
                p90.append(float(np.percentile(v, 90)))
        ax.fill_between(mid, 0, p90, color="tab:blue", alpha=0.25, step="mid",
                        label="90th percentile over the jobs")
        ax.step(mid, med, where="mid", color="tab:blue", lw=1.4, label="median")
        ax.set_ylim(0, 0.5)
        n = len({x["job"] for x in rows})
        ax.set_title(f"{run.policy}: {n} held jobs", loc="left", fontsize=10, fontweight="bold")
        ax.set_ylabel("|offset error|\n(fraction of period)")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)


def plot_phase(rep: Report, path: Path) -> bool:
    """Phase control: each held job's offset error (fraction of the beat) against time, one
    subplot per policy that decided shifts; corrections marked."""
    runs = [(r, _phase_rows(r)) for r in rep.runs]
    runs = [(r, rows) for r, rows in runs if rows]
    if not runs:
        return False
    jobs = sorted({x["job"] for _, rows in runs for x in rows})
    colors = _job_colors(jobs)
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 1.2 + 2.2 * len(runs)), sharex=True,
                             squeeze=False, layout="constrained")
    if len(jobs) > PHASE_LINES_MAX:
        _phase_spread(axes[:, 0], runs)
        axes[-1, 0].set_xlabel("time (trace s)")
        fig.suptitle(f"{rep.scenario.name}: how far the held jobs are from their decided offsets "
                     "(phase control; 0 = the decided schedule, 0.5 = full collision)", fontsize=11)
        _save(fig, path)
        return True
    for ax, (run, rows) in zip(axes[:, 0], runs):
        for j in jobs:
            pts = [(float(x["time_s"]), float(x["error"])) for x in rows if x["job"] == j]
            if pts:
                ax.plot(*zip(*pts), lw=1.2, color=colors[j], label=f"{j} vs {rows[0]['ref']}")
        ax.axhline(0, color="black", lw=0.8)
        ax.set_ylim(-0.5, 0.5)
        ax.set_title(run.policy, loc="left", fontsize=10, fontweight="bold")
        ax.set_ylabel("offset error\n(fraction of period)")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("time (trace s)")
    fig.suptitle(f"{rep.scenario.name}: measured offset minus decided offset (phase control; "
                 "0 = the decided schedule, ±0.5 = full collision)", fontsize=11)
    _save(fig, path)
    return True


def make_plots(rep: Report) -> None:
    d = rep.dir / "plots"
    d.mkdir(exist_ok=True)
    # captures pruned: the throughput plot an earlier report drew from them is kept
    kept = (d / "link_throughput.png").read_bytes() if (
        any(r.kept_pcap is not None for r in rep.runs) and (d / "link_throughput.png").is_file()) else None
    for f in d.glob("*.png"):              # a plot that no longer applies must not linger
        f.unlink()
    caption = {}
    if plot_iteration_time(rep, d / "iteration_time.png"):
        caption["plots/iteration_time.png"] = "Per-job iteration time over time, per policy"
    if plot_iteration_cdf(rep, d / "iteration_cdf.png"):
        caption["plots/iteration_cdf.png"] = "CDF of iteration times per policy"
    src = plot_link_throughput(rep, d / "link_throughput.png")
    if src == "captures":
        caption["plots/link_throughput.png"] = ("Per-job throughput on the bottleneck link from the "
                                                "captures (shaded: the policy had the jobs in different classes)")
    elif src == "links.csv":
        caption["plots/link_throughput.png"] = "Load of the most loaded link (simulator, all jobs together)"
        rep.plot_notes.append("link throughput: the simulator writes no captures and its links.csv is "
                              "not split per job, so the plot shows the most loaded link's total load.")
    elif kept is not None:
        (d / "link_throughput.png").write_bytes(kept)
        caption["plots/link_throughput.png"] = ("Per-job throughput on the bottleneck link, drawn by "
                                                "an earlier report from the captures (since pruned)")
    else:
        rep.plot_notes.append("link throughput: no captures and no links.csv, no plot.")
    if plot_phase(rep, d / "phase.png"):
        caption["plots/phase.png"] = ("Phase control: each shifted job's offset error against time "
                                      "(0 = held at the decided offset)")
    if plot_slowdown(rep, d / "slowdown.png"):
        caption["plots/slowdown.png"] = "Mean slowdown per policy, normalised to fair sharing"
    src = plot_decision_time(rep, d / "decision_time.png")
    if src:
        caption["plots/decision_time.png"] = "Decision time per epoch vs cluster size"
        if src == "run":
            rep.plot_notes.append(
                "decision time vs cluster size: scheduling/bench.py prints its table and writes no CSV, "
                "so the plot has this run's cluster size only; give a CSV with columns gpus, policy, "
                "decision_ms via `--bench-csv` to add the benchmark's sizes.")
    rep.plots = caption
