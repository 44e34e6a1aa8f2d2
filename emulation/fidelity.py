"""The fidelity monitor: did this emulated run behave like the cluster it stands for?

Two cores forward every packet of the emulated cluster (Open vSwitch's userspace datapath),
run every worker, the controller and the captures.  When they fall behind, links run below
their rate, timers fire late and iteration times stretch for reasons the real cluster does
not have.  The monitor measures that on every run (in the spirit of Mininet-HiFi's
monitors) and gives the run a verdict, ``faithful`` or ``suspect: <reasons>``.

During the run (``Monitor``, a thread of the runner, one sample every ``SAMPLE_S``):
  * /proc/stat: the share of the two cores left idle (headroom) in every interval, the time
    of processes that yield their core at once included (``yielding_pids``: the policy's
    decision process, and background work lowered the same way);
  * ``tc -s -j qdisc show`` (one call per sample): bytes sent and backlog of the egress
    qdisc of every shaped switch port (host links, uplinks, spine downlinks) and of each
    priority class's leaf queue on the shared links;
  * /proc/PID/stat: CPU seconds per role (Open vSwitch, controller, tcpdump, workers).

After the run (``evaluate``):
  * link rate: over the intervals in which a link's queue was backlogged at both ends
    (saturated), bytes sent / time against its configured rate;
  * class shares: over the intervals in which two or more classes of a link were
    backlogged and the highest had a whole interval's worth queued at the start, the share
    it got against what htb promises it (the link less the others' guarantees);
  * switch drops: frames Open vSwitch logged it could not send (its send socket full);
  * retransmissions: wire bytes that were not new sequence space, from the captures;
  * isolated runs: the spread (coefficient of variation) of the isolated iteration times;
  * phase error: summary.csv's ``phase_error`` (mean |measured - decided offset| as a fraction
    of the period; docs/phase-control.md), against the phase error the simulator gets for the
    same run (``model_phase_errors``): offsets the model cannot hold either are the policy's
    and the phase controller's limit, not the emulator's.

Thresholds (``THRESHOLDS``) are stated in run.json with the figures.  A check without data
(no saturated interval, no competing classes, no captures) is ``n/a`` and does not count.
"""
from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional

import numpy as np

from .qos import GUARANTEE_FRACTION
from .yielding import Every, yielding_pids  # noqa: F401 (the runner's role)

# 0.05 s: a queue backlogged at both ends of a longer interval often ran dry inside it (ring
# collectives send in steps), which read as a slow link: on one crux run of four-racks the
# same samples gave saturated links 97.8% of their rate at 0.058 s, 87.1% taken two at a time
# and 73.1% three at a time (docs/fidelity.md, "Link rate: the sampling period")
SAMPLE_S = 0.05
# the role whose CPU time counts as headroom: processes that yield their core to any normal
# one at once (``yielding_pids``): the policy's decision process (controllers/decider.py), and
# any background work lowered the same way
YIELDING_ROLE = "yielding (nice 19)"
THRESHOLDS = {
    # CPU: the median interval keeps this share of both cores idle ...
    "cpu_headroom_median_min": 0.10,
    # ... and no more than this share of the intervals has less than 5% idle
    "cpu_starved_share_max": 0.20,
    "cpu_starved_below": 0.05,
    # Open vSwitch's threads wait for a core at most this long per second of CPU they get
    "ovs_wait_per_cpu_s_max": 0.5,
    # a saturated link carries at least this share of its rate (and not far above it)
    "link_rate_min": 0.90,
    "link_rate_max": 1.05,
    "link_saturated_min_s": 2.0,      # saturated time a link (or all, summed) needs to be judged
    # the highest competing class gets at least its promised share less this
    "class_share_tolerance": 0.10,
    "class_competing_min_s": 1.0,
    "retransmit_max": 0.02,           # retransmitted share of the wire bytes on a link
    "isolated_cv_max": 0.10,          # spread of an isolated job's iteration times
    "phase_error_over_model_max": 0.10,   # ... above the simulator's for the same run
    "phase_error_max": 0.25,          # mean |phase error|, fraction of the period: a quarter
                                      # period off on average is a decision that did not hold
}


def read_cpu() -> tuple:
    """(idle ticks, total ticks) of all cores from /proc/stat."""
    with open("/proc/stat") as f:
        parts = f.readline().split()
    vals = [int(x) for x in parts[1:9]]          # user nice system idle iowait irq softirq steal
    return vals[3] + vals[4], sum(vals)


def proc_ticks(pid: int) -> Optional[int]:
    """utime + stime of a process (clock ticks), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rfind(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def proc_sched(pid: int) -> Optional[tuple]:
    """(ns on a CPU, ns waiting for one) summed over a process's threads (/proc/PID/task/*/schedstat)."""
    run = wait = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                a, b, _ = f.read().split()
        except (OSError, ValueError):
            continue
        run += int(a)
        wait += int(b)
    return run, wait


def read_psi() -> Optional[int]:
    """Microseconds during which some task waited for a CPU (/proc/pressure/cpu), None without PSI."""
    try:
        with open("/proc/pressure/cpu") as f:
            return int(f.readline().rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        return None


OVS_LOG = Path("/var/log/openvswitch/ovs-vswitchd.log")
OVS_SEND_ERROR = "error sending Ethernet packet"     # a frame the switch dropped at its send socket


def log_size(path: Path = OVS_LOG) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def ovs_send_errors(since: int, path: Path = OVS_LOG) -> Optional[int]:
    """Frames Open vSwitch reported it could not send after byte ``since`` of its log (one
    cluster runs at a time, so they are this run's); None without a log."""
    try:
        with open(path, "rb") as f:
            f.seek(since if since <= path.stat().st_size else 0)
            return f.read().decode(errors="replace").count(OVS_SEND_ERROR)
    except OSError:
        return None


def qdisc_stats(devs: Iterable[str]) -> Dict[str, dict]:
    """Per interface: root qdisc bytes, its backlog (bytes), the drops of all its qdiscs, and per
    class leaf (qos tree: the pfifo under class 1:1k) bytes and backlog."""
    want = set(devs)
    try:
        r = subprocess.run(["tc", "-s", "-j", "qdisc", "show"], capture_output=True, text=True, timeout=5)
        data = json.loads(r.stdout or "[]")
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return {}
    out: Dict[str, dict] = {}
    for q in data:
        dev = q.get("dev")
        if dev not in want:
            continue
        d = out.setdefault(dev, {"bytes": 0, "backlog": 0, "child_backlog": 0, "classes": {}})
        d["drops"] = d.get("drops", 0) + int(q.get("drops", 0))
        if q.get("root"):
            d["bytes"] = int(q.get("bytes", 0))
            d["backlog"] = int(q.get("backlog", 0))
        else:
            d["child_backlog"] += int(q.get("backlog", 0))
            parent = str(q.get("parent", ""))
            if parent.startswith("1:"):
                try:
                    k = int(parent[2:], 16) - 0x10
                except ValueError:
                    continue
                if k >= 0:
                    d["classes"][k] = (int(q.get("bytes", 0)), int(q.get("backlog", 0)))
    for d in out.values():
        d["backlog"] = max(d["backlog"], d.pop("child_backlog"))
    return out


class Monitor:
    """Samples CPU, shaped links and per-role CPU in a thread between start() and stop().

    ``links``: interface -> (link id, configured Mbit/s); ``roles``: role -> callable
    returning the PIDs of that role now (looked up at every sample: workers come and go)."""

    def __init__(self, links: Dict[str, tuple], roles: Optional[Dict[str, callable]] = None,
                 period: float = SAMPLE_S, share: float = GUARANTEE_FRACTION):
        self.links = dict(links)
        self.share = share          # each class's guaranteed share of a link (emulation.qos)
        self.roles = roles or {}
        self.period = period
        self.samples: List[dict] = []
        self.ticks: Dict[str, Dict[int, list]] = {r: {} for r in self.roles}
        self.sched: Dict[str, Dict[int, list]] = {r: {} for r in self.roles}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.t_start = self.t_stop = None
        self.t_from = 0.0          # CPU figures count samples from this time on (the jobs' start)
        self.ovs_log_at = 0

    def start(self) -> "Monitor":
        self.t_start = time.time()
        self.ovs_log_at = log_size()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="fidelity-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=10)
            self._thread = None
            self._sample()
        self.t_stop = time.time()

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self._sample()

    def _sample(self) -> None:
        t = time.time()
        idle, total = read_cpu()
        yielded: Dict[int, int] = {}
        q = qdisc_stats(self.links)
        for role, pids_of in self.roles.items():
            try:
                pids = list(pids_of())
            except Exception:       # noqa: BLE001 - a role that cannot be listed now is skipped
                continue
            seen, sch = self.ticks[role], self.sched[role]
            for pid in pids:
                v = proc_ticks(pid)
                if v is not None:
                    seen.setdefault(pid, [v, v])[1] = v
                    if role == YIELDING_ROLE:
                        yielded[pid] = v
                w = proc_sched(pid) if t >= self.t_from else None
                if w is not None:
                    sch.setdefault(pid, [w, w])[1] = w
        self.samples.append({"t": t, "idle": idle, "yielded": yielded, "total": total, "q": q,
                             "psi": read_psi()})

    # ------------------------------------------------------------- figures
    def cpu_figures(self) -> dict:
        s = [x for x in self.samples if x["t"] >= self.t_from - self.period]
        if len(s) < 3:
            return {}
        head, yielded = [], []
        for a, b in zip(s, s[1:]):
            dt = b["total"] - a["total"]
            if dt > 0:
                # the policy's decision process (controllers/decider.py) yields its core to
                # any normal thread at once: its time is headroom, reported apart
                ya, yb = a.get("yielded") or {}, b.get("yielded") or {}
                n = sum(yb[p] - ya[p] for p in yb if p in ya) / dt
                head.append(min(1.0, (b["idle"] - a["idle"]) / dt + n))
                yielded.append(n)
        if not head:
            return {}
        h = np.array(head)
        hz = os.sysconf("SC_CLK_TCK")
        wall = max(1e-9, s[-1]["t"] - s[0]["t"])
        roles = {r: round(sum(b - a for a, b in seen.values()) / hz / wall, 3)
                 for r, seen in self.ticks.items()}
        # run-queue wait: how long a role's threads were runnable but had no CPU, per second
        # of CPU they got (the delay the 2 cores added to forwarding and to the workers)
        wait = {}
        for r, seen in self.sched.items():
            ran = sum(b[0] - a[0] for a, b in seen.values())
            waited = sum(b[1] - a[1] for a, b in seen.values())
            if ran > 0:
                wait[r] = round(waited / ran, 4)
        psi = [x["psi"] for x in s if x["psi"] is not None]
        pressure = round((psi[-1] - psi[0]) / 1e6 / wall, 4) if len(psi) >= 2 else None
        return {"wait_per_cpu_s": wait, "cpu_pressure_some": pressure,"samples": len(h), "headroom_mean": round(float(h.mean()), 4),
                "headroom_median": round(float(np.median(h)), 4),
                "yielded_mean": round(float(np.mean(yielded)), 4),
                "headroom_p10": round(float(np.percentile(h, 10)), 4),
                "starved_share": round(float((h < THRESHOLDS["cpu_starved_below"]).mean()), 4),
                "cores_used_by_role": roles, "cores": os.cpu_count()}

    def link_figures(self) -> Dict[str, dict]:
        """Per link: saturated seconds, achieved / configured rate, drops are in tc."""
        out = {}
        for dev, (lid, mbps) in self.links.items():
            sat_s = sat_bytes = 0.0
            comp_s = comp_top = comp_all = comp_expect = 0.0
            for a, b in zip(self.samples, self.samples[1:]):
                qa, qb = a["q"].get(dev), b["q"].get(dev)
                if not qa or not qb:
                    continue
                dt = b["t"] - a["t"]
                if qa["backlog"] > 0 and qb["backlog"] > 0 and qb["bytes"] >= qa["bytes"]:
                    sat_s += dt
                    sat_bytes += qb["bytes"] - qa["bytes"]
                busy = sorted(k for k in qb["classes"] if k in qa["classes"]
                              and qa["classes"][k][1] > 0 and qb["classes"][k][1] > 0)
                # htb's promise holds only while the higher class has packets to send: a queue
                # non-empty at both ends of an interval may still run dry inside it. Judge an
                # interval only when the highest class had a whole interval's worth queued.
                if busy and qa["classes"][busy[0]][1] < mbps * 1e6 / 8 * dt:
                    busy = []
                if len(busy) >= 2:
                    # a class above the highest queued one is served first and so never queues:
                    # what it sent is not the queued classes' to share. htb's promise is over
                    # what it left: the highest queued class and the classes below it.
                    sent = {k: qb["classes"][k][0] - qa["classes"][k][0] for k in qb["classes"]
                            if k in qa["classes"] and k >= busy[0]}
                    tot = sum(v for v in sent.values() if v > 0)
                    if tot > 0:
                        comp_s += dt
                        comp_top += max(0, sent[busy[0]])
                        comp_all += tot
                        comp_expect += (1.0 - self.share * (len(busy) - 1)) * tot
            rec = {"link": lid, "mbps": mbps, "saturated_s": round(sat_s, 2)}
            seen = [x["q"][dev] for x in self.samples if dev in x["q"]]
            if len(seen) >= 2:
                rec["qdisc_drops"] = seen[-1].get("drops", 0) - seen[0].get("drops", 0)
            if sat_s > 0:
                rec["achieved_ratio"] = round(sat_bytes * 8 / sat_s / 1e6 / mbps, 4)
            if comp_s > 0:
                rec["competing_s"] = round(comp_s, 2)
                rec["top_class_share"] = round(comp_top / comp_all, 4)
                rec["top_class_expected"] = round(comp_expect / comp_all, 4)
            out[dev] = rec
        return out


def retransmissions(run_dir: Path) -> Dict[str, float]:
    """Per capture: retransmitted share of the payload bytes on the wire."""
    caps = sorted((run_dir / "captures").glob("*.pcap"))
    if not caps:
        return {}
    from .pcap import PcapError, analyze_pcap
    out = {}
    for p in caps:
        try:
            an = analyze_pcap(p, run_dir / "specs")
        except PcapError:
            continue
        wire = sum(j.bytes for j in an.jobs.values())
        uniq = sum(j.unique_bytes for j in an.jobs.values())
        if wire > 0:
            out[p.stem] = round((wire - uniq) / wire, 5)
    return out


def iteration_cv(rows: List[dict], warmup: int) -> float:
    """Coefficient of variation of a job's iteration times (per iteration: the mean over its
    ranks) after the warm-up; ``rows`` are worker-log rows in emulated seconds."""
    by: Dict[int, list] = {}
    for r in rows:
        if r["iteration"] >= warmup:
            by.setdefault(r["iteration"], []).append(r["end_s"] - r["start_s"])
    its = np.array([np.mean(v) for v in by.values()])
    if len(its) < 2 or its.mean() <= 0:
        return math.nan
    return float(its.std(ddof=1) / its.mean())


def _judge_jobs(checks: dict, reasons: list, check: str, per_job: Dict[str, float],
                limit: float, reason: str) -> None:
    """One per-job check: ``n/a`` without figures, else ``suspect`` (with the worst job named
    in ``reason``, percentages) when a job exceeds ``limit``, else ``ok``."""
    bad = {k: v for k, v in per_job.items() if v > limit}
    checks[check] = "n/a" if not per_job else "suspect" if bad else "ok"
    if bad:
        job = max(bad, key=bad.get)
        reasons.append(reason.format(job=job, v=100 * bad[job], lim=100 * limit))


def model_phase_errors(run_dir: Path, policy: str, num_classes: int, timeout: float = 300.0
                       ) -> Optional[Dict[str, float]]:
    """The phase error per job of the same run in the flow-level simulator: the run's
    scenario (same seed, same compute noise), policy and classes, and the same phase
    controller (scheduling/phase.py). That is what holding the decided offsets achieves in the
    model, where nothing but the trace and the noise moves them. The simulator runs as a
    program of its own (``python -m simulation run``; the emulator does not import it), in a
    scratch folder that is removed. None when it cannot run (a static policy, no scenario)."""
    import shutil
    import sys
    import tempfile

    scen = run_dir / "scenario.yaml"
    if policy in ("static", "none") or not scen.exists():
        return None
    tmp = Path(tempfile.mkdtemp(prefix=".model-", dir=run_dir))
    try:
        r = subprocess.run([sys.executable, "-m", "simulation", "run", str(scen), "--policy", policy,
                            "--classes", str(num_classes), "--out", str(tmp / "sim"), "--quiet"],
                           cwd=str(Path(__file__).resolve().parent.parent), capture_output=True,
                           text=True, timeout=timeout)
        if r.returncode != 0:
            return None
        return phase_errors(tmp / "sim")
    except (OSError, subprocess.TimeoutExpired):
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def phase_errors(run_dir: Path) -> Dict[str, float]:
    """|phase_error| per job from summary.csv, when phase control wrote it (already a fraction
    of the job's period: docs/phase-control.md)."""
    try:
        with open(run_dir / "summary.csv") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return {}
    out = {}
    for r in rows:
        try:
            pe = float(r.get("phase_error") or "nan")
        except ValueError:
            continue
        if math.isfinite(pe):
            out[r["job"]] = round(abs(pe), 4)
    return out


def evaluate(mon: Optional[Monitor], run_dir: Path, isolated_cv: Optional[Dict[str, float]] = None,
             model_pe: Optional[Dict[str, float]] = None) -> dict:
    """``model_pe``: the phase errors of the same run in the simulator (model_phase_errors)."""
    """The verdict and its figures (what run.json's "fidelity" holds)."""
    th = THRESHOLDS
    reasons: List[str] = []
    fig: dict = {}
    checks: Dict[str, str] = {}
    cpu = mon.cpu_figures() if mon is not None else {}
    fig["cpu"] = cpu
    if cpu:
        bad = (cpu["headroom_median"] < th["cpu_headroom_median_min"]
               or cpu["starved_share"] > th["cpu_starved_share_max"])
        ovs_wait = cpu.get("wait_per_cpu_s", {}).get("ovs-vswitchd")
        bad_ovs = ovs_wait is not None and ovs_wait > th["ovs_wait_per_cpu_s_max"]
        checks["cpu"] = "suspect" if bad or bad_ovs else "ok"
        if bad_ovs:
            reasons.append(f"Open vSwitch waited {ovs_wait:.2f} s for a core per CPU second "
                           f"(max {th['ovs_wait_per_cpu_s_max']:g})")
        if bad:
            reasons.append(f"CPU headroom median {100 * cpu['headroom_median']:.0f}% (min "
                           f"{100 * th['cpu_headroom_median_min']:.0f}%), under "
                           f"{100 * th['cpu_starved_below']:.0f}% idle {100 * cpu['starved_share']:.0f}% "
                           f"of the time (max {100 * th['cpu_starved_share_max']:.0f}%)")
    else:
        checks["cpu"] = "n/a"
    links = mon.link_figures() if mon is not None else {}
    fig["links"] = list(links.values())
    judged = [l for l in links.values() if l["saturated_s"] >= th["link_saturated_min_s"]
              and "achieved_ratio" in l]
    slow = [l for l in judged if not th["link_rate_min"] <= l["achieved_ratio"] <= th["link_rate_max"]]
    checks["link_rate"] = "n/a" if not judged else "suspect" if slow else "ok"
    if judged:
        fig["link_rate_min"] = min(l["achieved_ratio"] for l in judged)
        fig["link_rate_max"] = max(l["achieved_ratio"] for l in judged)
    # short collectives rarely keep one link busy for long: all links' saturated intervals
    # together (bytes over capacity x time) are judged as one figure too
    sat = [l for l in links.values() if "achieved_ratio" in l]
    cap = sum(l["saturated_s"] * l["mbps"] for l in sat)
    tot_s = sum(l["saturated_s"] for l in sat)
    if cap > 0:
        fig["link_rate_all"] = round(sum(l["achieved_ratio"] * l["saturated_s"] * l["mbps"] for l in sat) / cap, 4)
        fig["link_saturated_s_all"] = round(tot_s, 2)
        if tot_s >= th["link_saturated_min_s"]:
            ok_all = th["link_rate_min"] <= fig["link_rate_all"] <= th["link_rate_max"]
            if checks["link_rate"] == "n/a":
                checks["link_rate"] = "ok" if ok_all else "suspect"
            if not ok_all and not slow:
                checks["link_rate"] = "suspect"
                reasons.append(f"saturated links ran at {100 * fig['link_rate_all']:.0f}% of their rate "
                               f"overall ({tot_s:.1f} link-seconds; allowed {100 * th['link_rate_min']:.0f}-"
                               f"{100 * th['link_rate_max']:.0f}%)")
    if slow:
        w = max(slow, key=lambda l: abs(l["achieved_ratio"] - 1.0))
        reasons.append(f"{len(slow)} saturated link(s) off their rate, e.g. {w['link']} at "
                       f"{100 * w['achieved_ratio']:.0f}% (allowed {100 * th['link_rate_min']:.0f}-"
                       f"{100 * th['link_rate_max']:.0f}%)")
    comp = [l for l in links.values() if l.get("competing_s", 0) >= th["class_competing_min_s"]]
    bad_c = [l for l in comp if l["top_class_share"] < l["top_class_expected"] - th["class_share_tolerance"]]
    checks["class_share"] = "n/a" if not comp else "suspect" if bad_c else "ok"
    if comp:
        fig["class_share_worst"] = min(l["top_class_share"] - l["top_class_expected"] for l in comp)
    if bad_c:
        w = bad_c[0]
        reasons.append(f"higher class got {100 * w['top_class_share']:.0f}% of {w['link']} when classes "
                       f"competed (promised {100 * w['top_class_expected']:.0f}%)")
    drops = ovs_send_errors(mon.ovs_log_at) if mon is not None else None
    fig["ovs_send_errors"] = drops
    checks["switch_drops"] = "n/a" if drops is None else "suspect" if drops > 0 else "ok"
    if drops:
        reasons.append(f"Open vSwitch dropped {drops} frame(s) at its send socket (docs/fidelity.md, "
                       "\"Open vSwitch's send buffer\")")
    rtx = retransmissions(run_dir)
    fig["retransmit"] = rtx
    worst = max(rtx.values(), default=None)
    checks["retransmit"] = "n/a" if worst is None else "suspect" if worst > th["retransmit_max"] else "ok"
    if worst is not None and worst > th["retransmit_max"]:
        lk = max(rtx, key=rtx.get)
        reasons.append(f"{100 * worst:.1f}% of the bytes on {lk} were retransmissions "
                       f"(max {100 * th['retransmit_max']:.0f}%)")
    iso = {k: round(v, 4) for k, v in (isolated_cv or {}).items() if v is not None and math.isfinite(v)}
    fig["isolated_cv"] = iso
    _judge_jobs(checks, reasons, "isolated_spread", iso, th["isolated_cv_max"],
                "{job}'s isolated iteration times spread {v:.0f}% (max {lim:.0f}%)")
    pe = phase_errors(run_dir)
    fig["phase_error"] = pe
    # an offset the model cannot hold either (periods that slide against each other, groups
    # of several jobs) says nothing about the emulator: a job is judged against what the
    # simulator held for it, plus a margin; a job the model does not hold, against the
    # absolute bound
    if model_pe is not None:
        fig["phase_error_model"] = model_pe
    over = {k: v - (model_pe or {}).get(k, 0.0) for k, v in pe.items()}
    lim = {k: (model_pe[k] + th["phase_error_over_model_max"] if model_pe and k in model_pe
               else th["phase_error_max"]) for k in pe}
    bad = {k: v for k, v in pe.items() if v > lim[k]}
    checks["phase_error"] = "n/a" if not pe else "suspect" if bad else "ok"
    if bad:
        job = max(bad, key=lambda k: over[k])
        in_model = f", the model {100 * model_pe[job]:.0f}%" if model_pe and job in model_pe else ""
        reasons.append(f"{job}'s phase error {100 * pe[job]:.0f}% of its period{in_model} "
                       f"(max {100 * lim[job]:.0f}%)")
    verdict = "faithful" if not reasons else "suspect: " + "; ".join(reasons)
    return {"verdict": verdict, "checks": checks, "figures": fig, "thresholds": dict(th)}


def annotate_summary(run_dir: Path, verdict: str) -> None:
    """Add (or replace) the ``fidelity`` column of summary.csv, keeping its other columns."""
    path = run_dir / "summary.csv"
    if not path.exists():
        return
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return
    hdr = rows[0]
    if "fidelity" in hdr:
        i = hdr.index("fidelity")
        body = [r[:i] + r[i + 1:] for r in rows[1:]]
        hdr = hdr[:i] + hdr[i + 1:]
    else:
        body = rows[1:]
    tmp = path.with_name(".summary.csv.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(hdr + ["fidelity"])
        for r in body:
            w.writerow(r + [verdict])
    os.replace(tmp, path)


def short(verdict: Optional[str]) -> str:
    """'faithful', 'suspect' or '?' (for tables)."""
    if not verdict:
        return "?"
    return "suspect" if verdict.startswith("suspect") else verdict
