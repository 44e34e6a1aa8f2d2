"""The packet captures of an emulated run, read for the report: per captured link the jobs'
bytes (``emulation.pcap``), the bottleneck link, and the check of the controller's priority
classes against the bytes each job got there.  ``run`` and ``sc`` are
``analysis.results.PolicyRun`` and ``ScenarioInfo`` (not imported: results imports this module)."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple


@dataclass
class PcapCheck:
    """Two jobs on one link in the epochs where both were active and the policy had them in
    different classes (or, for the record, in the same class: then nothing is checked)."""
    link: str
    higher: str                    # the job in the higher class (same class: the first name)
    lower: str
    same_class: bool = False
    epochs: int = 0
    seconds: float = 0.0           # trace seconds of those epochs
    higher_bytes: float = 0.0      # trace bytes on the link in those epochs
    lower_bytes: float = 0.0
    bins: int = 0                  # bins of those epochs in which both jobs sent on the link
    bin_s: float = 0.0
    higher_bytes_both: float = 0.0  # trace bytes in those bins
    lower_bytes_both: float = 0.0
    bins_higher_more: int = 0
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.same_class or self.bins == 0:
            return "n/a"
        return "yes" if self.higher_bytes_both > self.lower_bytes_both else "no"

    def gbps(self, which: str) -> float:
        """Mean trace Gb/s of 'higher'/'lower' over the bins where both sent."""
        b = self.higher_bytes_both if which == "higher" else self.lower_bytes_both
        return b * 8 / (self.bins * self.bin_s) / 1e9 if self.bins else math.nan



def load_captures(run: PolicyRun, sc: ScenarioInfo, bin_trace_s: float) -> None:
    caps = sorted((run.path / "captures").glob("*.pcap"))
    if not caps:
        return
    from emulation.pcap import PcapError, analyze_pcap, load_port_map
    specs = run.path / "specs"
    try:
        ports = load_port_map(specs if specs.is_dir() else run.path / "scenario.yaml")
    except PcapError as e:
        run.capture_note = f"no port map: {e}"
        return
    t0 = None
    for p in sorted(specs.glob("*.json")) if specs.is_dir() else []:
        try:
            t = float(json.loads(p.read_text())["start_at"])
            t0 = t if t0 is None else min(t0, t)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    if t0 is None:
        run.capture_note = "no job start times in specs/: capture times start at the first packet"
    run.pcap_t0 = t0
    cluster = None
    try:
        from workloads.cluster import Cluster
        from workloads.scenario import load_scenario
        cluster = Cluster(load_scenario(run.path / "scenario.yaml").cluster)
    except Exception:  # the captures are still read whole (both directions)
        pass
    for p in caps:
        # a capture named torR-spS holds both directions of that link: keep the uplink's
        # (packets from rack R's hosts), the direction whose egress carries the classes
        m = re.fullmatch(r"tor(\d+)-sp(\d+)", p.stem)
        src = None
        if m and cluster is not None and int(m.group(1)) < cluster.spec.racks:
            src = {cluster.host_ip(h) for h in cluster.hosts_in_rack(int(m.group(1)))}
        try:
            run.captures[p.stem] = analyze_pcap(p, ports, bin_s=bin_trace_s * sc.time_scale, t0=t0,
                                                src_ips=src)
        except PcapError as e:
            run.notes.append(f"capture {p.name}: {e}")
    if run.captures:
        load = {k: sum(j.bytes for j in an.jobs.values()) for k, an in run.captures.items()}
        run.bottleneck = max(load, key=lambda k: (load[k], k))
        if load[run.bottleneck] == 0:
            run.capture_note = "the captures hold no job traffic"


def capture_series(run: PolicyRun, sc: ScenarioInfo, link: Optional[str] = None):
    """(bin start in trace s since the run's start, {job: trace Gb/s per bin}) of a link."""
    an = run.captures[link or run.bottleneck]
    t = an.times() / sc.time_scale
    # emulated Mbit/s x bandwidth_scale / 1000 = trace Gb/s
    return t, {j: an.throughput_mbps(j) * sc.bandwidth_scale / 1000.0 for j in an.jobs}


def priority_check(run: PolicyRun, sc: ScenarioInfo) -> List[PcapCheck]:
    """For every pair of jobs both active in an epoch (decision at t_k holds until t_k+1; the
    last one for one epoch): their bytes on the bottleneck link, higher class vs lower class.
    The verdict uses the bins in which both jobs sent on the link (they competed there);
    the epochs' totals, which include the times only one of them was communicating, are
    given for context."""
    if not run.bottleneck or not run.epochs or run.pcap_t0 is None:
        return []
    an = run.captures[run.bottleneck]
    t = an.times() / sc.time_scale                           # trace s since the run's start
    bin_trace = an.bin_s / sc.time_scale
    series = {j: an.bytes_series(j) * sc.bytes_scale for j in an.jobs}    # trace bytes per bin
    jobs = sorted(series)
    checks: Dict[Tuple[str, str, bool], PcapCheck] = {}
    epoch_trace = sc.epoch_s / sc.time_scale
    eps = sorted(run.epochs, key=lambda e: e.time_s)
    for k, e in enumerate(eps):
        t1 = eps[k + 1].time_s if k + 1 < len(eps) else e.time_s + epoch_trace
        m = (t >= e.time_s) & (t < t1)
        act = [j for j in jobs if j in e.active and j in e.priority]
        for i, a in enumerate(act):
            for b in act[i + 1:]:
                same = e.priority[a] == e.priority[b]
                hi, lo = (a, b) if e.priority[a] <= e.priority[b] else (b, a)
                sh, sl = series[hi][m], series[lo][m]
                if sh.sum() + sl.sum() <= 0:
                    continue                     # neither sent on this link: nothing to compare
                c = checks.get((a, b, same))
                if c is None:
                    c = checks[(a, b, same)] = PcapCheck(run.bottleneck, hi, lo, same_class=same,
                                                         bin_s=bin_trace)
                if not same and (hi, lo) != (c.higher, c.lower):
                    c.note = "the classes swapped between epochs: bytes of whichever was higher"
                both = (sh > 0) & (sl > 0)
                c.epochs += 1
                c.seconds += t1 - e.time_s
                c.higher_bytes += float(sh.sum())
                c.lower_bytes += float(sl.sum())
                c.bins += int(both.sum())
                c.higher_bytes_both += float(sh[both].sum())
                c.lower_bytes_both += float(sl[both].sum())
                c.bins_higher_more += int((sh[both] > sl[both]).sum())
    out = sorted(checks.values(), key=lambda c: (c.same_class, c.higher, c.lower))
    for c in out:
        if c.same_class:
            c.note = "same class: nothing to check (numbers for comparison)"
        elif c.bins == 0:
            c.note = (c.note + "; " if c.note else "") + "the two never sent on the link in the same bin"
    return out

