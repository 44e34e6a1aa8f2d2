"""The report as Markdown (comparison.md) and the short text a run prints at the end."""
from __future__ import annotations

import math
import time
from typing import List

from .comparison import NORMALISED
from .results import Report
from .tables import finite, fmt_ms, fmt_r, fmt_s, md_table, ratio

# the policy table's figures: (comparison row key, column label)
POLICY_TABLE = [("mean_iter_s", "mean iter s"), ("corun_iter_s", "iter s, all running"),
                ("p99_iter_s", "p99 iter s"), ("mean_jct_s", "mean JCT s"),
                ("mean_comm_s", "comm s"), ("mean_slowdown", "slowdown"),
                ("corun_slowdown", "slowdown, all running")]


def policy_table_md(rep: Report) -> List[str]:
    has_fair = any(r["policy"] == "fair" and r["jobs"] for r in rep.policy_rows)
    keys = [k for k, _ in POLICY_TABLE]
    hdr = ["policy"]
    for _, label in POLICY_TABLE:
        hdr += [label] + (["/ fair"] if has_fair else [])
    lim = rep.limit_row is not None
    if lim:
        hdr.insert(hdr.index("mean iter s") + (2 if has_fair else 1), "/ limit")
    hdr += ["decision ms (mean / max)", "epochs", "status"]
    rows = []
    for r in rep.policy_rows + ([rep.limit_row] if lim else []):
        cells = [r["policy"]]
        for k in keys:
            v = r.get(k, math.nan)
            cells.append(fmt_r(v) if k in ("mean_slowdown", "corun_slowdown") else fmt_s(v))
            if has_fair:
                cells.append(fmt_r(r.get(NORMALISED[k], math.nan)) if r is not rep.limit_row
                             else fmt_r(ratio(v, next(x[k] for x in rep.policy_rows
                                                       if x["policy"] == "fair"))))
            if lim and k == "mean_iter_s":
                cells.append(fmt_r(r.get("mean_iter_vs_limit", math.nan)))
        cells += [f"{fmt_ms(r['decision_ms_mean'])} / {fmt_ms(r['decision_ms_max'])}"
                  if r.get("epochs") else "–", str(r.get("epochs", "–")), r["status"]]
        rows.append(cells)
    return md_table(hdr, rows, right=range(1, len(hdr) - 1))


def check_table_md(rep: Report) -> List[str]:
    rows = []
    for r in rep.pcap_check_rows:
        pair = (f"{r['higher_job']} = {r['lower_job']}" if r["same_class"]
                else f"{r['higher_job']} > {r['lower_job']}")
        rows.append([r["policy"], r["link"], pair, str(r["epochs"]),
                     f"{r['higher_mb_epochs']:.1f} / {r['lower_mb_epochs']:.1f}",
                     str(r["bins_both"]),
                     f"{r['higher_mb_both']:.1f} / {r['lower_mb_both']:.1f}",
                     f"{fmt_r(r['higher_gbps_both'])} / {fmt_r(r['lower_gbps_both'])}",
                     f"{r['bins_higher_more']}/{r['bins_both']}", f"**{r['verdict']}**", r["note"]])
    return md_table(["policy", "link", "classes (higher > lower)", "epochs", "MB in epochs",
                      "bins both sent", "MB when both sent", "Gb/s when both sent",
                      "bins higher got more", "higher class got more?", "note"], rows,
                     right=range(3, 9))


def warmup_text(rep: Report) -> str:
    wus = sorted({r.warmup for r in rep.runs if r.has_results})
    if not wus:
        return "warm-up left out"
    w = "/".join(str(x) for x in wus)
    return f"the first {w} iteration{'s' if wus != [1] else ''} of each job left out as warm-up"


def fidelity_lines(rep: Report) -> List[str]:
    """One line per emulated policy run: its fidelity verdict."""
    return [f"{r.policy}: {r.fidelity}" for r in rep.runs if r.fidelity]


def fidelity_md(rep: Report) -> List[str]:
    lines = fidelity_lines(rep)
    if not lines:
        return []
    bad = [r.policy for r in rep.runs if r.fidelity.startswith("suspect")]
    head = ("**Fidelity: every run faithful**" if not bad else
            f"**Fidelity: {len(bad)} of {len(lines)} runs SUSPECT ({', '.join(bad)})**: "
            "their numbers may reflect the emulator's limits (CPU, shaping) rather than the policy")
    return [head + " (emulation/fidelity.py; figures and thresholds in each run's run.json, "
            "`fidelity`):", ""] + [f"- {x}" for x in lines] + [""]


def _classes_note(sc) -> str:
    """How the cluster's switches serve the priority classes, when the scenario says."""
    g = sc.class_guarantee
    if g is None:
        return ""
    if g == 0:
        return ", strict priority classes"
    return f", every lower priority class keeps {100 * g:g}% of a link"


def render_markdown(rep: Report) -> str:
    sc = rep.scenario
    L = [f"# Policy comparison: {sc.name}", ""]
    if sc.description:
        L += [f"> {sc.description}", ""]
    L += fidelity_md(rep)
    backends = sorted({r.backend for r in rep.runs if r.backend != "?"}) or [sc.backend]
    L += [f"- back end: **{', '.join(backends)}**; cluster: {sc.racks} racks, {sc.hosts} hosts, "
          f"{sc.gpus} GPUs, {sc.spines} spine{'s' if sc.spines != 1 else ''}, host links {sc.host_link_gbps:g} Gb/s, "
          f"uplinks {sc.uplink_gbps:g} Gb/s{_classes_note(sc)}; {len(sc.arrivals)} jobs",
          f"- results: `{rep.dir}`; report generated {time.strftime('%Y-%m-%d %H:%M:%S')} by "
          f"`python -m analysis report`"]
    if rep.compare.get("started"):
        L.append(f"- runs started {rep.compare['started']} by `{rep.compare.get('command', 'python -m analysis compare')}`")
    if sc.backend == "emulation" or "emulation" in backends:
        L.append(f"- emulator scaling: time x{sc.time_scale:g}, bandwidth / {sc.bandwidth_scale:g}; "
                 "all numbers below are trace units (seconds and bytes of the real cluster)")
    L += ["", "## Policies", "",
          f"Means over jobs ({warmup_text(rep)}); `/ fair` = the policy's value divided by fair "
          "sharing's (below 1 is better); slowdown = mean iteration time / the job's isolated "
          "iteration time; decision time per controller epoch. Row `limit`: per job its "
          "isolated iteration time, stretched by the load of its most loaded link group at "
          "isolated pace where that exceeds the capacity (no policy brings every job of that "
          "link below it at once; analysis/limit.py); `/ limit` = mean iteration time / the "
          "mean of that bound over the same jobs. `iter s, all running`: a job's mean over only "
          "the iterations that ran while every job sharing one of its links was running "
          "(docs/experiments.md; runs/summary.py `corun_window`), and `slowdown, all running` "
          "the same over the job's isolated time: a run's "
          "jobs have fixed iteration counts, so a policy that favours one job lets it finish "
          "first and the others then run alone, which the plain mean counts in; `–` where a "
          "job had fewer than 3 such iterations.", ""]
    L += policy_table_md(rep)
    if not any(r["policy"] == "fair" and r["jobs"] for r in rep.policy_rows):
        L += ["", "_No fair-sharing results: nothing to normalise to._"]
    L += ["", "## Per job", ""]
    has_fair = rep.fair is not None
    hdr = ["policy", "job", "iterations", "mean iter s", "p99 iter s", "comm s", "JCT s",
           "isolated s", "slowdown"] + (["mean iter / fair"] if has_fair else []) + [
           "iter s, all running (iterations)", "note"]
    rows = []
    for r in rep.job_rows:
        corun = (f"{fmt_s(r['corun_iter_s'])} ({r['corun_iterations']})"
                 if finite(r["corun_iter_s"]) else "–")
        rows.append([r["policy"], r["job"], str(r["iterations"]), fmt_s(r["mean_iter_s"]),
                     fmt_s(r["p99_iter_s"]), fmt_s(r["mean_comm_s"]), fmt_s(r["jct_s"]),
                     fmt_s(r["isolated_iter_s"]), fmt_r(r["slowdown"])]
                    + ([fmt_r(r["mean_iter_vs_fair"])] if has_fair else []) + [corun, r["note"]])
    L += md_table(hdr, rows, right=range(2, len(hdr) - 1))
    L += ["", "## Packet-capture check", ""]
    caps = [r for r in rep.runs if r.captures or r.kept_pcap is not None]
    if not caps:
        L.append("No packet captures in these results (the simulator writes none; the emulator "
                 "writes captures/*.pcap unless `emulation.capture: [none]`).")
    else:
        L += ["Per policy, the bottleneck link is the captured link that carried the most "
              "payload bytes. Bytes are TCP payload on that link converted to trace bytes "
              f"(x bytes_scale = {sc.bytes_scale:g}); DSCP = packets per DSCP value seen "
              "(the class marking the controller installed; 0 = best effort).", ""]
        for run in caps:
            if run.kept_pcap is not None:
                link = next(r["link"] for r in run.kept_pcap[0] + run.kept_pcap[1])
                L.append(f"- **{run.policy}**: bottleneck `{link}` ({run.capture_note})")
                continue
            an_load = {k: sum(j.bytes for j in an.jobs.values()) * sc.bytes_scale / 1e6
                       for k, an in run.captures.items()}
            L.append(f"- **{run.policy}**: bottleneck `{run.bottleneck}`; captured links (trace MB): "
                     + ", ".join(f"{k} {v:.1f}" for k, v in sorted(an_load.items()))
                     + (f" ({run.capture_note})" if run.capture_note else ""))
        L += [""]
        L += md_table(["policy", "link", "job", "trace MB", "share of link", "peak Gb/s", "DSCP: packets"],
                       [[r["policy"], r["link"], r["job"], f"{r['trace_mb']:.1f}",
                         f"{100 * r['share']:.1f}%" if finite(r["share"]) else "–",
                         fmt_r(r["peak_gbps"]), r["dscp"] or "–"] for r in rep.pcap_job_rows],
                       right=range(3, 6))
        L += ["", "Check against the controller's decisions: in the epochs where two jobs were "
              "both active and the policy had them in different priority classes (a decision "
              "holds until the next epoch), did the job in the higher class get more bytes on "
              "the bottleneck link? The verdict compares their bytes in the capture bins "
              f"({1000 * rep.bin_trace_s:.3g} ms trace) in which both sent on the link, i.e. "
              "competed for it; the epochs' totals (`MB in epochs`, higher / lower) also count "
              "the times only one of them was communicating. Pairs the policy kept in one class "
              "are listed for comparison.", ""]
        if rep.pcap_check_rows:
            L += check_table_md(rep)
        else:
            L.append("_No epochs with decisions to check (no decisions.jsonl, or no job pairs were ever active together)._")
    if rep.plots:
        L += ["", "## Plots", ""]
        for f, cap in rep.plots.items():
            L += [f"**{cap}** (`{f}`)", "", f"![{cap}]({f})", ""]
        for n in rep.plot_notes:
            L.append(f"- {n}")
    notes = [f"{r.policy}: {n}" for r in rep.runs for n in r.notes]
    if notes:
        L += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(L).rstrip() + "\n"


def summary_table_md(rep: Report) -> List[str]:
    """The policy table for a terminal: the mean iteration time, the mean slowdown, each
    with its ratio to fair over all measured iterations and while every neighbour ran, the
    tail and the JCT as ratios, the decision time and the status (comparison.md has all)."""
    has_fair = any(r["policy"] == "fair" and r["jobs"] for r in rep.policy_rows)
    lim = rep.limit_row
    fair_row = next((x for x in rep.policy_rows if x["policy"] == "fair"), None)
    hdr = ["policy", "mean iter s"] + (["/ fair", "all running / fair"] if has_fair else []) \
        + ["slowdown"] + (["/ fair", "all running / fair", "p99 / fair", "JCT / fair"]
                          if has_fair else []) + ["decision ms (mean)", "status"]
    rows = []
    for r in rep.policy_rows + ([lim] if lim is not None else []):
        ratio_of = (lambda k: fmt_r(ratio(r.get(k, math.nan), fair_row[k]))) if r is lim else \
            (lambda k: fmt_r(r.get(NORMALISED[k], math.nan)))
        cells = [r["policy"], fmt_s(r.get("mean_iter_s", math.nan))]
        if has_fair:
            cells += [ratio_of("mean_iter_s"), ratio_of("corun_iter_s")]
        cells.append(fmt_r(r.get("mean_slowdown", math.nan)))
        if has_fair:
            cells += [ratio_of("mean_slowdown"), ratio_of("corun_slowdown"),
                      ratio_of("p99_iter_s"), ratio_of("mean_jct_s")]
        cells += [fmt_ms(r.get("decision_ms_mean", math.nan)) if r.get("epochs") else "–",
                  r["status"]]
        rows.append(cells)
    return md_table(hdr, rows, right=range(1, len(hdr) - 1))


def summary_text(rep: Report) -> str:
    """What a run prints at the end: the policy table and the capture check."""
    L = [f"{rep.scenario.name}: {len(rep.runs)} policies", ""]
    fl = fidelity_lines(rep)
    if fl:
        L += ["fidelity:"] + [f"  {x}" for x in fl] + [""]
    L += summary_table_md(rep)
    L += ["", "(all running: only the iterations while every job sharing a link with the job "
          "ran; comparison.md has every column)"]
    if rep.pcap_check_rows:
        L += ["", "packet-capture check (higher class got more bytes on the bottleneck link?):", ""]
        L += check_table_md(rep)
    L += ["", f"report: {rep.dir / 'comparison.md'}"]
    return "\n".join(L)

