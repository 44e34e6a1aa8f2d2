"""The scenario runner: one scenario, one policy, on the emulated cluster.

  python -m emulation run SCENARIO --policy P --out DIR [--isolated measured|analytical]
                         [--live [--live-port N]]   (the live view on 127.0.0.1, docs/api.md)

Builds the cluster, starts the controller with the policy, installs the priority classes
on the shared links, captures packets with tcpdump, starts one worker process per GPU
worker, shows progress, collects, cleans up.  Writes (trace units: seconds and bytes of
the real cluster; the emulator's scaling is undone):

  DIR/scenario.yaml      the scenario as run
  DIR/iterations.csv     job, worker, iteration, start_s, compute_s, comm_s, end_s
  DIR/summary.csv        job, policy, iterations, mean_iter_s, p99_iter_s, mean_comm_s,
                         jct_s, slowdown_vs_isolated, phase_error, corrections
  DIR/decisions.jsonl    the controller's epochs: decisions with reasons, decision time, and
                         with phase control the measured phases and the corrections ordered
  DIR/phase.csv          phase control, one row per epoch and held job (as the simulator's)
  DIR/telemetry/JOB.csv  the job agent's iteration and collective starts (emulation/worker.py)
  DIR/captures/*.pcap    headers of the captured links
  DIR/run.json           how it went (status, timings, failures, isolated times used,
                         warm-up, host tuning) and "fidelity": the monitor's verdict and
                         figures (emulation/fidelity.py); summary.csv repeats the verdict
"""
from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional


from workloads.scenario import ResolvedScenario, Scenario, ScenarioError, dump_scenario, load_scenario, resolve

from runs.logs import read_worker_log
from runs.rundata import phase_rows_from_records
from runs.summary import summary_row, write_summary_csv
from scheduling.phase import phase_summary, write_phase_csv

from . import fidelity, qos
from .jobspec import WARMUP_ITERATIONS, default_port_bases, tuning, write_job_spec
from .net import EmulatedCluster, check_stack, terminate_as_exception
from .topo import check_emulable

def known_policies() -> tuple:
    """The scheduler registry's policies, plus 'static' (decisions from a file)."""
    from scheduling.registry import POLICIES
    return tuple(POLICIES) + ("static",)
SNAPLEN = 128                  # captures keep headers only
# the longest wait for the policy's first decision before the clock starts (optimal's search
# stops at 30 s; its decision process starts in about 2 s)
PRESOLVE_TIMEOUT_S = 180.0


def _progress(msg: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K" + msg)
    else:
        sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def capture_links(ec: EmulatedCluster, what: List[str]) -> Dict[str, str]:
    """name -> switch interface for the capture settings ('uplinks', 'hosts', 'none', link ids)."""
    c = ec.cluster
    out = {}
    for w in what:
        if w == "none":
            continue
        if w == "uplinks":
            if c.spec.racks > 1:
                for r, t in enumerate(c.tors):
                    for s, sp in enumerate(c.spines):
                        out[f"{t}-{sp}"] = ec.intf_name(f"{t}>{sp}")
        elif w == "hosts":
            for h in c.hosts:
                out[f"{c.tors[c.rack_of(h)]}-{h}"] = ec.intf_name(f"{c.tors[c.rack_of(h)]}>{h}")
        else:
            a, _, b = w.partition(">")
            lid = w if (a.startswith(("tor", "sp"))) else f"{b}>{a}"
            out[w.replace(">", "-")] = ec.intf_name(lid)
    return out


def shared_link_interfaces(ec: EmulatedCluster) -> Dict[str, float]:
    """Egress interfaces of links jobs can share, with their emulated rate (Mbit/s)."""
    c, emu = ec.cluster, ec.emu
    out = {}
    if c.spec.racks > 1:
        up = emu.link_mbps(c.spec.uplink_gbps)
        for t in c.tors:
            for sp in c.spines:
                out[ec.intf_name(f"{t}>{sp}")] = up
                out[ec.intf_name(f"{sp}>{t}")] = up
    if c.spec.gpus_per_host > 1:
        for h in c.hosts:
            out[ec.intf_name(f"{c.tors[c.rack_of(h)]}>{h}")] = emu.link_mbps(c.spec.host_link_gbps)
    return out


def monitored_links(ec: EmulatedCluster) -> Dict[str, tuple]:
    """Switch egress interface -> (link id, Mbit/s) of every shaped link the switches send
    on (host links, uplinks, spine downlinks), for the fidelity monitor."""
    c, emu = ec.cluster, ec.emu
    out = {}
    for h in c.hosts:
        lid = f"{c.tors[c.rack_of(h)]}>{h}"
        out[ec.intf_name(lid)] = (lid, emu.link_mbps(c.spec.host_link_gbps))
    if c.spec.racks > 1:
        for t in c.tors:
            for sp in c.spines:
                for lid in (f"{t}>{sp}", f"{sp}>{t}"):
                    out[ec.intf_name(lid)] = (lid, emu.link_mbps(c.spec.uplink_gbps))
    return out


def _ovs_pids() -> List[int]:
    for d in ("/var/run/openvswitch", "/run/openvswitch", "/usr/local/var/run/openvswitch"):
        try:
            return [int(Path(d, "ovs-vswitchd.pid").read_text().split()[0])]
        except (OSError, ValueError, IndexError):
            continue
    return []


def start_monitor(ec: EmulatedCluster, procs: Dict[str, list], captures: list,
                  share: float = qos.GUARANTEE_FRACTION) -> fidelity.Monitor:
    roles = {"ovs-vswitchd": _ovs_pids,
             "controller": lambda: [ec.controller_proc.pid] if ec.controller_proc else [],
             "tcpdump": lambda: [p.pid for p in captures],
             "workers": lambda: [p.pid for ps in procs.values() for p in ps],
             "runner (monitor included)": lambda: [os.getpid()],
             fidelity.YIELDING_ROLE: fidelity.Every(fidelity.yielding_pids)}
    return fidelity.Monitor(monitored_links(ec), roles, share=share).start()


def expected_duration(rs: ResolvedScenario) -> float:
    """Emulated seconds the run should take if every job ran alone (for the time-out)."""
    from scheduling.base import job_state
    ts = rs.scenario.emulation.time_scale
    worst = 0.0
    total = 0.0
    for j in rs.jobs:
        t = job_state(j, rs.cluster).iso_iter_s * j.spec.iterations
        worst = max(worst, j.spec.arrival_s + t)
        total += t
    return ts * max(worst, total)


class RunFailed(RuntimeError):
    pass


class FaultInjector:
    """Fires the scenario's events (link down/up, controller restart) at their times and
    records them in run.json's "events"."""

    def __init__(self, sc: Scenario, info: dict):
        self.pending = sorted(sc.events, key=lambda e: e.at_s)
        self.ts = sc.emulation.time_scale
        self.log = info.setdefault("events", [])

    def __call__(self, ec: EmulatedCluster, elapsed: float) -> None:
        while self.pending and self.pending[0].at_s * self.ts <= elapsed:
            e = self.pending.pop(0)
            rec = {"at_s": e.at_s, "kind": e.kind, "link": e.link, "fired_at_emulated_s": round(elapsed, 3)}
            if e.kind in ("link-down", "link-up"):
                tor, sp = e.link.split("-")
                ec.net.configLinkStatus(tor, sp, "down" if e.kind == "link-down" else "up")
            else:
                old = ec.controller_proc.pid
                ec.stop_controller()
                time.sleep(e.down_s)
                ec.start_controller()
                ec.wait_switches(30)
                rec.update(old_pid=old, new_pid=ec.controller_proc.pid)
            rec["done_at_emulated_s"] = round(elapsed + (e.down_s if e.kind == "controller-restart" else 0), 3)
            self.log.append(rec)
            _progress(f"event: {e.kind} {e.link or ''} at {elapsed:.1f} s (emulated)")


def run_emulation(sc: Scenario, policy: str, out: Path, *, isolated: str = "measured",
                  policy_kw: Optional[dict] = None, num_classes: int = 4,
                  capture: Optional[List[str]] = None, quiet: bool = False,
                  events_hook=None, live: Optional[dict] = None) -> Dict[str, dict]:
    """Run and write the results; returns the summary rows by job.  ``live``: {"port": N or 0,
    "token": T}: the controller serves the live view (controllers/rest.py) on 127.0.0.1."""
    rs = resolve(sc)
    check_emulable(rs.cluster, sc.emulation)
    if policy not in known_policies():
        raise ScenarioError(f"--policy: unknown policy {policy!r} (known: {', '.join(known_policies())})")
    if not rs.jobs:
        raise ScenarioError("jobs: the scenario has no jobs to run")
    check_stack()   # before anything is written: a refused run leaves no folder behind
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scenario.yaml").write_text(dump_scenario(sc))
    emu = sc.emulation
    ports = default_port_bases(rs.jobs)
    for d in ("specs", "logs", "control", "telemetry", "done", "captures"):
        (out / d).mkdir(exist_ok=True)
    (out / "decisions.jsonl").write_text("")
    info = {"scenario": sc.name, "policy": policy, "status": "running", "started": time.time(),
            "emulation": emu.model_dump(mode="json"), "warmup_iterations": WARMUP_ITERATIONS,
            "tuning": tuning()}
    # the controller reads each job's start time from its spec once the spec exists
    jobs_cfg = [{"name": j.name, "port_base": ports[j.name], "ranks": len(j.workers),
                 "spec_path": str((out / "specs" / f"{j.name}.json").resolve())} for j in rs.jobs]
    ctl = {"jobs": jobs_cfg, "policy": policy, "policy_kw": policy_kw or {},
           "scenario_path": str((out / "scenario.yaml").resolve()), "epoch_s": emu.epoch_s,
           "poll_s": emu.epoch_s / 10, "num_classes": num_classes, "bandwidth_scale": emu.bandwidth_scale,
           "control_dir": str((out / "control").resolve()), "done_dir": str((out / "done").resolve()),
           "telemetry_dir": str((out / "telemetry").resolve()),
           "decisions_log": str((out / "decisions.jsonl").resolve()), "presolve": True}
    if live is not None:
        from .net import free_tcp_port
        ctl["rest_port"], ctl["rest_token"] = live.get("port") or free_tcp_port(), live["token"]
    procs: Dict[str, list] = {}
    captures = []
    mon = None
    t_begin = time.time()
    with terminate_as_exception():
        ec = EmulatedCluster(sc, out, controller_config=ctl)
        try:
            ec.start()
            if live is not None:
                print(f"live view: http://127.0.0.1:{ctl['rest_port']}/  (token for POST "
                      f"/api/v1/notes: {live['token']})", flush=True)
            info["presolve"] = wait_presolved(ec, policy)
            # the run's clock starts once the cluster is up: jobs start relative to it
            start_at = time.time() + 3.0 + 0.05 * sum(len(j.workers) for j in rs.jobs)
            share = qos.guarantee_of(rs.cluster.spec)
            qos.install_classes_map(shared_link_interfaces(ec), num_classes, share)
            if rs.cluster.spec.gpus_per_host > 1:
                # several jobs' workers share a host's NIC: classes on its egress too (the
                # workers mark their packets with their job's DSCP from the control file)
                host_mbps = emu.link_mbps(rs.cluster.spec.host_link_gbps)
                for h in rs.cluster.hosts:
                    qos.install_classes([ec.host(h).defaultIntf().name], host_mbps, num_classes,
                                        run=ec.host(h).cmd, share=share)
            for name, intf in capture_links(ec, capture if capture is not None else emu.capture).items():
                p = subprocess.Popen(["tcpdump", "-i", intf, "-s", str(SNAPLEN), "-Z", "root", "-U", "-n", "--immediate-mode",
                                      "-w", str(out / "captures" / f"{name}.pcap"), "tcp"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                ec.state.add_process(p.pid, f"tcpdump {intf}")
                if info["tuning"]["aux_nice"]:
                    os.setpriority(os.PRIO_PROCESS, p.pid, info["tuning"]["aux_nice"])
                captures.append(p)
            mon = start_monitor(ec, procs, captures, share)
            mon.t_from = start_at
            for idx, j in enumerate(rs.jobs):
                spec_path = out / "specs" / f"{j.name}.json"
                write_job_spec(j, rs.cluster, emu, spec_path, port_base=ports[j.name],
                               start_at=start_at + j.spec.arrival_s * emu.time_scale,
                               control_dir=out / "control", log_path=out / "logs" / f"{j.name}.csv",
                               telemetry_path=out / "telemetry" / f"{j.name}.csv",
                               job_index=idx, seed=sc.seed)
                procs[j.name] = [ec.popen(w.host, [sys.executable, "-m", "emulation.worker", "--spec",
                                                   str(spec_path), "--rank", str(w.rank)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                                 for w in j.workers]
            deadline = start_at + 3 * expected_duration(rs) + 60
            hook = events_hook or FaultInjector(sc, info)
            failures = _wait(rs, procs, out, deadline, quiet, ec, hook, start_at)
            mon.stop()
            info["failures"] = failures
        except BaseException as e:
            info["status"] = "interrupted" if isinstance(e, (KeyboardInterrupt, SystemExit)) else "failed"
            info["error"] = f"{type(e).__name__}: {e}"
            raise
        finally:
            if mon is not None:
                mon.stop()
            for p in captures:
                if p.poll() is None:
                    p.send_signal(2)
            for p in captures:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
            ec.stop()
            shutil.rmtree(out / "done", ignore_errors=True)   # the controller's end-of-job markers
            info["wall_s"] = time.time() - t_begin
            (out / "run.json").write_text(json.dumps(info, indent=1, default=str))
    rows = collect(rs, policy, out, isolated)
    info["status"] = "failed" if info.get("failures") else "ok"
    info["isolated"] = {k: v["isolated_iter_s"] for k, v in rows.items()}
    model_pe = (fidelity.model_phase_errors(out, policy, num_classes)
                if fidelity.phase_errors(out) else None)
    info["fidelity"] = fidelity.evaluate(mon, out, isolated_spread(rs, isolated, out), model_pe)
    fidelity.annotate_summary(out, info["fidelity"]["verdict"])
    for r in rows.values():
        r["fidelity"] = info["fidelity"]["verdict"]
    (out / "run.json").write_text(json.dumps(info, indent=1, default=str))
    if not quiet and info["fidelity"]["verdict"] != "faithful":
        _progress(f"fidelity: {info['fidelity']['verdict']}\n")
    return rows


def wait_presolved(ec: EmulatedCluster, policy: Optional[str], timeout: float = PRESOLVE_TIMEOUT_S) -> Optional[dict]:
    """Wait until the controller has decided for the jobs that start at time 0 (the epoch
    loop's presolve, controllers/epoch_loop.py), so that the clock starts with their
    decisions in place. Returns the presolve's figures (None without a policy)."""
    if not policy or policy == "none":
        return None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ec._controller_alive()
        done = ec.controller_status().get("presolved")
        if done:
            return done
        time.sleep(0.1)
    _progress(f"warning: the policy's first decision took over {timeout:g} s; the jobs start without it\n")
    return {"timeout_s": timeout}


def _wait(rs, procs, out: Path, deadline: float, quiet: bool, ec, events_hook, start_at) -> List[str]:
    failures = []
    done = set()
    last = 0.0
    total_it = {j.name: j.spec.iterations for j in rs.jobs}
    while len(done) < len(procs):
        now = time.time()
        for name, ps in procs.items():
            if name in done:
                continue
            if all(p.poll() is not None for p in ps):
                done.add(name)
                (out / "done" / name).touch()
                bad = [(i, p.returncode) for i, p in enumerate(ps) if p.returncode != 0]
                if bad:
                    errs = "; ".join((ps[i].stderr.read() or b"").decode(errors="replace").strip()[-200:]
                                     for i, _ in bad[:2])
                    failures.append(f"{name}: ranks {[i for i, _ in bad]} exited {[c for _, c in bad]}: {errs}")
                for p in ps:
                    p.stderr.close()
        if events_hook is not None:
            events_hook(ec, now - start_at)
        if now > deadline:
            for name, ps in procs.items():
                if name not in done:
                    failures.append(f"{name}: timed out")
                    for p in ps:
                        p.kill()
            break
        if not quiet and now - last > 2.0:
            last = now
            parts = []
            for j in rs.jobs:
                rows = [r for r in read_worker_log(out / "logs" / f"{j.name}.csv") if r["status"] == "ok"]
                it = (max(r["iteration"] for r in rows) + 1) if rows else 0
                parts.append(f"{j.name} {it}/{total_it[j.name]}")
            when = (f"starts in {start_at - now:.1f} s" if now < start_at
                    else f"{now - start_at:6.1f} s")
            _progress(f"[{when}] " + "  ".join(parts))
        time.sleep(0.2)
    if not quiet and sys.stderr.isatty():
        sys.stderr.write("\n")
    return failures


def collect(rs: ResolvedScenario, policy: str, out: Path, isolated: str) -> Dict[str, dict]:
    """iterations.csv and summary.csv from the workers' logs (trace units; the figures of
    runs.summary, the same as the simulator's)."""
    ts = rs.scenario.emulation.time_scale
    iso = isolated_times(rs, isolated, out)
    logs = {}
    with open(out / "iterations.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["job", "worker", "iteration", "start_s", "compute_s", "comm_s", "end_s"])
        for j in rs.jobs:
            log = [r for r in read_worker_log(out / "logs" / f"{j.name}.csv") if r["status"] == "ok"]
            log.sort(key=lambda r: (r["iteration"], r["rank"]))
            for r in log:
                w.writerow([j.name, r["rank"], r["iteration"]] +
                           [f"{r[k] / ts:.6f}" for k in ("start_s", "compute_s", "comm_s", "end_s")])
            logs[j.name] = [(j.name, r["rank"], r["iteration"], r["start_s"], r["compute_s"],
                             r["comm_s"], r["end_s"]) for r in log]
    prow = phase_rows_from_records(_records(out / "decisions.jsonl"))
    if prow:
        write_phase_csv(out / "phase.csv", prow)
    ps = phase_summary(prow)
    rows = {name: summary_row(name, policy, log, WARMUP_ITERATIONS, time_scale=ts,
                              isolated_s=iso.get(name, float("nan")), phase=ps.get(name))
            for name, log in logs.items()}
    write_summary_csv(out / "summary.csv", rows.values())
    return rows


def _records(path: Path) -> List[dict]:
    out = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return out
    for ln in lines:
        try:
            out.append(json.loads(ln))
        except ValueError:
            continue
    return out


def analytical_isolated(rs: ResolvedScenario) -> Dict[str, float]:
    from scheduling.base import job_state
    return {j.name: job_state(j, rs.cluster).iso_iter_s for j in rs.jobs}


def isolated_times(rs: ResolvedScenario, how: str, out: Path) -> Dict[str, float]:
    """Iteration time of every job alone: analytical (the model's), or measured by running
    each job alone on the same emulated cluster (cached per job, cluster and scaling)."""
    if how == "analytical":
        return analytical_isolated(rs)
    if how == "none":
        return {}
    res = {}
    sc = rs.scenario
    for j in rs.jobs:
        alone = sc.model_copy(update={"jobs": [_alone_spec(j)], "name": f"{sc.name}-alone-{j.name}"})
        hit = _isolated_cache(rs, j)
        if hit.exists():
            res[j.name] = json.loads(hit.read_text())["mean_iter_s"]
            continue
        _progress(f"measuring {j.name} alone (isolated iteration time)")
        sub = out / "isolated" / j.name
        r = run_emulation(alone, "fair", sub, isolated="none", capture=["none"], quiet=True)[j.name]
        if not math.isfinite(r["mean_iter_s"]):
            raise RunFailed(f"isolated run of {j.name} failed; see {sub}")
        hit.parent.mkdir(parents=True, exist_ok=True)
        cv = fidelity.iteration_cv([x for x in read_worker_log(sub / "logs" / f"{j.name}.csv")
                                    if x["status"] == "ok"], WARMUP_ITERATIONS)
        hit.write_text(json.dumps({"mean_iter_s": r["mean_iter_s"], "job": j.name, "scenario": sc.name,
                                   "iteration_cv": cv if math.isfinite(cv) else None}))
        res[j.name] = r["mean_iter_s"]
    return res


# A job alone repeats one iteration with little spread (the fidelity monitor reports it), so
# its isolated time is measured over at most this many iterations, however long the run it
# is compared with: a 505-iteration scenario does not pay for 505 iterations alone per job.
ISOLATED_ITERATIONS = WARMUP_ITERATIONS + 50


def _alone_spec(j):
    """The job spec of ``j``'s isolated run: from time 0, at most ISOLATED_ITERATIONS long."""
    return j.spec.model_copy(update={"arrival_s": 0.0,
                                     "iterations": min(j.spec.iterations, ISOLATED_ITERATIONS)})


def _isolated_cache(rs: ResolvedScenario, j) -> Path:
    """The cache file of a job's measured isolated iteration time (per job, cluster, scaling,
    warm-up and host tuning)."""
    cache = Path(os.environ.get("HARMONICS_CACHE", Path.home() / ".cache" / "harmonics" / "isolated"))
    sc = rs.scenario
    key = hashlib.sha256(json.dumps({"c": sc.cluster.model_dump(mode="json"),
                                     "e": sc.emulation.model_dump(mode="json"),
                                     "j": _alone_spec(j).model_dump(mode="json"),
                                     "p": j.profile.model_dump(mode="json"),
                                     "w": [(w.host, w.gpu) for w in j.workers],
                                     "wu": WARMUP_ITERATIONS, "t": tuning()},
                                    sort_keys=True).encode()).hexdigest()[:16]
    return cache / f"{key}.json"


def isolated_spread(rs: ResolvedScenario, how: str, out: Path) -> Dict[str, float]:
    """Coefficient of variation of each job's isolated iteration times (measured runs only)."""
    if how != "measured":
        return {}
    res = {}
    for j in rs.jobs:
        try:
            cv = json.loads(_isolated_cache(rs, j).read_text()).get("iteration_cv")
        except (OSError, ValueError):
            continue
        if cv is not None:
            res[j.name] = float(cv)
    return res


def print_summary(rows: Dict[str, dict], out: Path) -> None:
    print(f"{'job':<12} {'policy':<10} {'iters':>5} {'mean iter s':>12} {'p99 iter s':>11} "
          f"{'comm s':>9} {'JCT s':>9} {'slowdown':>9}")
    for r in rows.values():
        print(f"{r['job']:<12} {r['policy']:<10} {r['iterations']:>5} {r['mean_iter_s']:12.4f} "
              f"{r['p99_iter_s']:11.4f} {r['mean_comm_s']:9.4f} {r['jct_s']:9.3f} "
              f"{r['slowdown_vs_isolated']:9.3f}")
    verdict = next((r["fidelity"] for r in rows.values() if r.get("fidelity")), None)
    if verdict:
        print(f"fidelity: {verdict}")
    print(f"results in {out}")


def add_run_parser(sub) -> None:
    p = sub.add_parser("run", help="run a scenario under one policy on the emulated cluster")
    p.add_argument("scenario")
    p.add_argument("--policy", default="fair", help="a policy of scheduling.POLICIES, or static")
    p.add_argument("--out", default=None, help="results directory (default results/<scenario>/<time>-<policy>)")
    p.add_argument("--isolated", choices=["measured", "analytical"], default="measured",
                   help="where slowdown's isolated iteration time comes from")
    p.add_argument("--static", default=None, help="decisions JSON for --policy static")
    p.add_argument("--classes", type=int, default=4, help="priority classes the network enforces")
    p.add_argument("--live", action="store_true",
                   help="serve the live view (page and JSON API) on 127.0.0.1 while the run goes; "
                        "prints its URL and the run's token")
    p.add_argument("--live-port", type=int, default=0, metavar="N",
                   help="with --live: this port instead of a free one (e.g. one forwarded from a VM)")
    p.set_defaults(func=cmd_run)


def cmd_run(args) -> int:
    sc = load_scenario(args.scenario)
    out = Path(args.out) if args.out else Path("results") / sc.name / f"{time.strftime('%Y%m%d-%H%M%S')}-{args.policy}"
    kw = {"path": str(Path(args.static).resolve())} if args.policy == "static" else {}
    if args.policy == "static" and not args.static:
        raise ScenarioError("--static: a decisions file is needed with --policy static")
    if out.exists() and any(out.iterdir()):
        raise ScenarioError(f"--out: {out} exists and is not empty")
    live = None
    if args.live or args.live_port:
        live = {"port": _live_port(args.live_port), "token": secrets.token_urlsafe(18)}
    rows = run_emulation(sc, args.policy, out, isolated=args.isolated, policy_kw=kw, num_classes=args.classes,
                         live=live)
    print_summary(rows, out)
    return 0 if all(math.isfinite(r["mean_iter_s"]) for r in rows.values()) else 1


def _live_port(port: int) -> int:
    """--live-port: free on 127.0.0.1 now (0: the controller gets a free one)."""
    import socket
    if not 0 <= port <= 65535:
        raise ScenarioError(f"--live-port: must be in 0..65535 (got {port})")
    if port:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError as e:
                raise ScenarioError(f"--live-port: 127.0.0.1:{port} is not free ({e.strerror})") from None
    return port
