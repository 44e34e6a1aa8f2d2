"""Sweeps on Ray: a grid of scenarios x policies x seeds, each run a Ray task.

    python -m analysis sweep sweeps/NAME.yaml [--address auto|HOST:PORT] [--resume]
                             [--max-parallel N] [--out DIR] [--no-plots]

The sweep file (analysis/sweep_spec.py, docs/schema.md "Sweeps") names a base scenario or a
generator call, the axes, the policies, the seeds and the metrics.  A cell is one grid point
(a value on every axis and a seed); a run is one (cell, policy).  Every run is one Ray task
that goes through the code path ``analysis compare`` uses for one policy
(``analysis.compare.RUNNERS``) into DIR/cells/<cell>/<policy>/.  When all policies of a cell
are done, the cell gets compare's report (DIR/cells/<cell>/comparison.csv, .md).  At the end
DIR/sweep.csv, DIR/sweep.md and DIR/plots/ aggregate the cells (analysis/sweep_report.py).

Ray.  Without --address a local Ray starts (every core, the dashboard off, worker logs not
forwarded) declaring one ``emulator`` resource; with --address the sweep joins a running
cluster (``ray start --head`` ...; give every node ``--resources '{"emulator": 1}'``).
Simulated runs take one CPU; emulated runs also take the node's ``emulator`` resource, so at
most one emulated run per node.  The workers import the project from this checkout's path
(PYTHONPATH): other machines of a cluster need the project at the same path.  A run on the
driver's node writes into DIR directly; a run elsewhere sends its directory back (tar).

Operations.  Progress (runs done, running, failed, ETA) on stderr.  Ctrl-C stops the runs in
flight, shuts Ray down, removes the partial run directories and leaves the finished ones;
``--resume`` (the latest DIR of this sweep, or --out DIR) skips runs whose directory holds a
completed result of the same cell, policy and options.  A failing run is recorded with its
error (DIR/cells/<cell>/<policy>/sweep_run.json, sweep.csv, sweep.md); the others go on.

Exit: 0 all runs ok, 1 some failed, 2 bad input (one line, nothing written), 130 interrupted.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .sweep_spec import Cell, Sweep, SweepError, load_sweep
from runs.files import atomic_write_json, replace_dir

from .sweep_task import RUN_RECORD, Tracker, run_task

ROOT = Path(__file__).resolve().parent.parent
SWEEP_JSON = "sweep.json"
COMPLETE = ("ok", "partial")
RETRIES = 3                  # re-runs of a run whose worker or node Ray lost


class SweepRunError(ValueError):
    """Bad options found before anything runs.  str() is one line."""


# ---------------------------------------------------------------------------
# progress
# ---------------------------------------------------------------------------

def _dur(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class Progress:
    """A bar redrawn in place on a terminal; a line per finished run otherwise."""
    WINDOW = 10

    def __init__(self, total: int, skipped: int, stream=None):
        self.total, self.skipped = total, skipped
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.t0 = time.time()
        self.done = self.failed = self.running = 0
        self.ends: List[float] = []
        self._last = ""

    def eta(self) -> str:
        """From the pace of the last WINDOW completions (runs later in a grid can be longer)."""
        todo = self.total - self.skipped - self.done
        if not self.done:
            return "?"
        ts = [self.t0] + self.ends
        k = min(self.WINDOW, len(self.ends))
        return _dur((ts[-1] - ts[-1 - k]) / k * todo)

    def finished_one(self, failed: bool) -> None:
        self.done += 1
        self.failed += failed
        self.ends.append(time.time())

    def line(self) -> str:
        n = self.skipped + self.done
        width = 24
        fill = int(width * n / max(self.total, 1))
        return (f"[{'#' * fill}{'.' * (width - fill)}] {n}/{self.total} runs done, "
                f"{self.running} running, {self.failed} failed, ETA {self.eta()}")

    def draw(self) -> None:
        if self.tty:
            ln = self.line()
            if ln != self._last:
                self.stream.write("\r\x1b[2K" + ln)
                self.stream.flush()
                self._last = ln

    def log(self, msg: str) -> None:
        if self.tty:
            self.stream.write("\r\x1b[2K" + msg + "\n")
            self._last = ""
            self.draw()
        else:
            self.stream.write(msg + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty and self._last:
            self.stream.write("\n")
            self.stream.flush()


# ---------------------------------------------------------------------------
# the results directory
# ---------------------------------------------------------------------------

def run_dir(d: Path, cell: Cell, policy: str) -> Path:
    return d / "cells" / cell.id / policy


def read_record(d: Path) -> Optional[dict]:
    try:
        return json.loads((d / RUN_RECORD).read_text())
    except (OSError, ValueError):
        return None


def latest_dir(name: str) -> Optional[Path]:
    root = Path("results") / "sweeps" / name
    if not root.is_dir():
        return None
    found = sorted(p for p in root.iterdir() if (p / SWEEP_JSON).is_file())
    return found[-1] if found else None


def pick_dir(sw: Sweep, out: Optional[str], resume: bool) -> Path:
    if resume:
        d = Path(out) if out else latest_dir(sw.name)
        if d is None:
            raise SweepRunError(f"--resume: no earlier run of {sw.name} under results/sweeps/{sw.name}/")
        if not (d / SWEEP_JSON).is_file():
            raise SweepRunError(f"--resume: {d} holds no sweep ({SWEEP_JSON} missing)")
        try:
            info = json.loads((d / SWEEP_JSON).read_text())
        except ValueError:
            raise SweepRunError(f"--resume: {d / SWEEP_JSON} is not valid JSON") from None
        if info.get("sweep") != sw.name:
            raise SweepRunError(f"--resume: {d} holds the sweep {info.get('sweep')!r}, not {sw.name!r}")
        return d
    d = Path(out) if out else Path("results") / "sweeps" / sw.name / time.strftime("%Y%m%d-%H%M%S")
    if d.exists() and (not d.is_dir() or any(d.iterdir())):
        raise SweepRunError(f"--out: {d} exists and is not empty (use --resume to continue it)")
    return d


def remove_partials(d: Path) -> None:
    """The partial run directories of cancelled runs (only those: dot-named .*.tmp-*/.*.recv-*)."""
    cells = d / "cells"
    if not cells.is_dir():
        return
    for c in cells.iterdir():
        if c.is_dir():
            for p in c.iterdir():
                if p.name.startswith(".") and (".tmp-" in p.name or ".recv-" in p.name or ".old-" in p.name):
                    shutil.rmtree(p, ignore_errors=True)


def receive(rec: dict, out: Path) -> dict:
    """Unpack a run sent back from another node into ``out``."""
    blob = rec.pop("tar", None)
    if blob is None:
        return rec
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.recv-", dir=out.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tf:
            _extract(tf, tmp)
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return rec


def _extract(tf: tarfile.TarFile, dest: Path) -> None:
    """Unpack a run's directory: plain files and directories inside ``dest`` only."""
    if hasattr(tarfile, "data_filter"):              # Python >= 3.11.4
        tf.extractall(dest, filter="data")
        return
    root = dest.resolve()
    for m in tf.getmembers():
        target = (dest / m.name).resolve()
        if not (m.isfile() or m.isdir()) or (target != root and root not in target.parents):
            raise ValueError(f"refusing to unpack {m.name!r} from a run's archive")
    tf.extractall(dest)


def record_failure(out: Path, job: dict, err: BaseException) -> dict:
    """A run that Ray itself failed (its worker died, ...): recorded by the driver."""
    msg = " ".join(f"{type(err).__name__}: {err}".split())
    rec = {"cell": job["cell"], "policy": job["policy"], "hash": job["hash"], "status": "failed",
           "error": msg[:500], "finished": time.strftime("%Y-%m-%d %H:%M:%S")}
    if out.exists():
        shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / RUN_RECORD).write_text(json.dumps(rec, indent=1) + "\n")
    return rec


# ---------------------------------------------------------------------------
# Ray
# ---------------------------------------------------------------------------

def start_ray(address: Optional[str]):
    """Join ``address`` or start a local Ray (dashboard off, worker output not forwarded)."""
    import logging
    logging.getLogger("ray").setLevel(logging.ERROR)
    import ray
    env = {"env_vars": {"PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}}
    kw = dict(log_to_driver=False, logging_level=logging.ERROR, runtime_env=env)
    if address:
        _reachable(address)
    asked = []                      # a Ctrl-C while Ray starts is acted on once it has started,
    prev = {sig: signal.signal(sig, lambda *_: asked.append(1))      # so that shutdown is whole
            for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if address:
            ray.init(address=address, **kw)
        else:
            ray.init(address="local", include_dashboard=False, resources={"emulator": 1}, **kw)
        if asked:
            ray.shutdown()
            raise KeyboardInterrupt
    except (ConnectionError, ValueError, RuntimeError) as e:
        msg = " ".join(str(e).split())[:300]
        raise SweepRunError(f"--address {address}: cannot join the Ray cluster ({msg})" if address
                            else f"cannot start Ray ({msg})") from None
    finally:
        for sig, h in prev.items():
            signal.signal(sig, h)
    return ray


def _reachable(address: str) -> None:
    """A HOST:PORT that nothing answers on: say so at once (Ray itself retries for minutes)."""
    host, _, port = address.rpartition(":")
    if address == "auto" or "://" in address or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise SweepRunError(f"--address {address}: no Ray head answers there "
                            f"({e.strerror or type(e).__name__})") from None


def _check_resources(ray, sw: Sweep) -> None:
    if sw.backend == "emulation" and not ray.cluster_resources().get("emulator"):
        raise SweepRunError("emulated runs need nodes that declare the Ray resource emulator "
                            "(ray start ... --resources '{\"emulator\": 1}')")


def _jobs(sw: Sweep, d: Path, driver_node: str) -> Tuple[List[dict], int]:
    """Every run still to do, and how many are skipped as already completed."""
    todo, skipped = [], 0
    opts = sw.options
    for cell in sw.cells:
        for p in sw.spec.policies:
            h = cell.spec_hash(p, opts)
            out = run_dir(d, cell, p)
            rec = read_record(out)
            if rec and rec.get("status") in COMPLETE and rec.get("hash") == h:
                skipped += 1
                continue
            todo.append({"cell": cell.id, "policy": p, "kind": sw.kind, "base": cell.base,
                         "seed": cell.seed, "name": f"{sw.name}-{cell.id}", "options": opts,
                         "hash": h, "out": str(out.resolve()), "driver_node": driver_node})
    return todo, skipped


def _report_line(rec: dict, prog: Progress) -> str:
    n = prog.skipped + prog.done
    txt = f"[{n}/{prog.total}] {rec['cell']} {rec['policy']} {rec.get('status')}"
    if rec.get("wall_s") is not None:
        txt += f" in {rec['wall_s']:.1f} s"
    if rec.get("hostname"):
        txt += f" on {rec['hostname']} ({str(rec.get('node_id', ''))[:8]})"
    if rec.get("error"):
        txt += f": {rec['error'][:200]}"
    if not prog.tty:
        txt += f" | {prog.running} running, {prog.failed} failed, ETA {prog.eta()}"
    return txt


def _running(ray, tracker, inflight: Dict[object, dict], last: int) -> int:
    """How many runs in flight have started (the tracker's count; the last one if it is down)."""
    try:
        started = ray.get(tracker.get.remote(), timeout=5)
    except Exception:                       # noqa: BLE001 - restarting: progress only
        return last
    return sum(1 for j in inflight.values() if f"{j['cell']}/{j['policy']}" in started)


def execute(ray, sw: Sweep, d: Path, todo: List[dict], skipped: int, max_parallel: Optional[int],
            plots: bool, info: dict) -> bool:
    """Run ``todo`` on Ray; True if it ran to the end, False if interrupted (Ctrl-C)."""
    # a run whose worker Ray lost (killed for memory another process took, a node gone) is
    # re-run; a run's own errors are caught by the run and recorded, never retried
    opts = {"num_cpus": 1, "max_retries": RETRIES}
    if sw.backend == "emulation":
        opts["resources"] = {"emulator": 1}
    task = ray.remote(run_task).options(**opts)
    tracker = ray.remote(num_cpus=0, max_restarts=-1)(Tracker).remote()
    prog = Progress(skipped + len(todo), skipped)
    left = {c.id: set(sw.spec.policies) for c in sw.cells}
    for c in sw.cells:
        for p in sw.spec.policies:
            rec = read_record(run_dir(d, c, p))
            if rec and rec.get("status") in COMPLETE and rec.get("hash") == c.spec_hash(p, sw.options):
                left[c.id].discard(p)
    from .sweep_report import finish_cell
    cells = {c["id"]: c for c in info["cells"]}
    state = info["invocations"][-1]
    pending = list(todo)
    inflight: Dict[object, dict] = {}
    prog.log(f"{sw.name}: {len(sw.cells)} cells x {len(sw.spec.policies)} policies = {prog.total} runs "
             f"({skipped} already done) -> {d}")
    try:
        while pending or inflight:
            while pending and (max_parallel is None or len(inflight) < max_parallel):
                job = pending.pop(0)
                inflight[task.remote(job, tracker)] = job
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=0.5)
            for ref in ready:
                job = inflight.pop(ref)
                out = Path(job["out"])
                try:
                    rec = receive(ray.get(ref), out)
                except Exception as e:                      # noqa: BLE001 - Ray lost the run
                    rec = record_failure(out, job, e)
                prog.finished_one(rec.get("status") == "failed")
                state["ran"].append(f"{job['cell']}/{job['policy']}")
                prog.running = _running(ray, tracker, inflight, prog.running)
                prog.log(_report_line(rec, prog))
                left[job["cell"]].discard(job["policy"])
                if not left[job["cell"]]:
                    finish_cell(d / "cells" / job["cell"], info, cells[job["cell"]],
                                plots and sw.spec.cell_plots)
            if not ready and inflight:
                prog.running = _running(ray, tracker, inflight, prog.running)
            prog.draw()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)     # clean up whatever a second Ctrl-C says
        prog.finish()
        sys.stderr.write(f"interrupted: stopping the {len(inflight)} runs in flight\n")
        # no ray.cancel (analysis/sweep_task.py says why): the tracker tells the runs to stop,
        # and each one stops itself, removing what it made
        try:
            tracker.stop.remote()
            ray.wait(list(inflight), num_returns=len(inflight), timeout=30)
        except Exception:                   # noqa: BLE001 - Ray going down: nothing left to stop
            pass
        return False
    prog.finish()
    return True


def run_sweep(path, address: Optional[str] = None, resume: bool = False,
              max_parallel: Optional[int] = None, out: Optional[str] = None, plots: bool = True,
              argv: Optional[List[str]] = None) -> int:
    """The sweep command (see the module docstring)."""
    import shlex
    try:
        sw = load_sweep(path)
        d = pick_dir(sw, out, resume)
    except (SweepError, SweepRunError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cmd = "python -m analysis sweep " + " ".join(shlex.quote(a) for a in (argv or [str(path)]))
    prev = signal.getsignal(signal.SIGINT)
    prev_term = signal.getsignal(signal.SIGTERM)
    if prev is signal.SIG_IGN:               # started in the background: Ctrl-C still stops it
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _as_interrupt)      # kill: the same clean stop as Ctrl-C
    ray, info, done, crash = None, None, False, None
    try:
        ray = start_ray(address)
        _check_resources(ray, sw)
        d.mkdir(parents=True, exist_ok=True)
        todo, skipped = _jobs(sw, d, ray.get_runtime_context().get_node_id())
        info = _start_info(d, sw, cmd, address, resume, skipped, ray)
        shutil.copyfile(sw.path, d / "sweep.yaml")
        done = execute(ray, sw, d, todo, skipped, max_parallel, plots, info)
    except SweepRunError as e:               # before anything was written
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        done = False
    except Exception as e:                   # noqa: BLE001 - Ray itself failed: say so, keep the runs
        crash = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        print(f"error: the sweep stopped: {crash}", file=sys.stderr)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if info is not None:
            inv = info["invocations"][-1]
            inv["wall_s"] = round(time.time() - inv.pop("t0"), 2)
            inv["status"] = "finished" if done else f"stopped: {crash}" if crash else "interrupted"
            inv["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
            _save_info(d, info)
        if ray is not None:
            ray.shutdown()
        remove_partials(d)
        signal.signal(signal.SIGINT, prev if prev is not None else signal.default_int_handler)
        signal.signal(signal.SIGTERM, prev_term if prev_term is not None else signal.SIG_DFL)
    if info is None:
        print("interrupted before the sweep started" if not crash else "nothing was run", file=sys.stderr)
        return 1 if crash else 130
    from .sweep_report import aggregate_sweep, summary_text
    try:
        res = aggregate_sweep(d, plots=plots)
    except KeyboardInterrupt:
        print(f"interrupted; the runs are in {d} (python -m analysis sweep ... --resume "
              "aggregates them again)", file=sys.stderr)
        return 130
    print(summary_text(res))
    if crash:
        print(f"finished runs kept in {d}; continue with --resume", file=sys.stderr)
        return 1
    if not done:
        print(f"interrupted: finished runs kept in {d}; continue with --resume", file=sys.stderr)
        return 130
    return 1 if res["failed"] else 0


def _start_info(d: Path, sw: Sweep, cmd: str, address, resume: bool, skipped: int, ray) -> dict:
    """sweep.json: the grid as it is now, and this invocation appended to the earlier ones."""
    info = _load_info(d)
    info.setdefault("invocations", []).append({
        "command": cmd, "address": address or "local", "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "t0": time.time(), "resume": resume, "skipped": skipped, "ran": [],
        "cpus": ray.cluster_resources().get("CPU"), "nodes": len(ray.nodes())})
    info.update(sweep=sw.name, file=str(sw.path), backend=sw.backend, kind=sw.kind,
                axes=sw.axis_names, policies=list(sw.spec.policies), metrics=list(sw.spec.metrics),
                seeds=list(sw.spec.seeds), options=sw.options, description=sw.spec.description,
                cells=[{"id": c.id, "labels": [[n, v] for n, v in c.labels], "seed": c.seed}
                       for c in sw.cells])
    _save_info(d, info)
    return info


def _as_interrupt(signum, frame):
    raise KeyboardInterrupt


def _load_info(d: Path) -> dict:
    try:
        return json.loads((d / SWEEP_JSON).read_text())
    except (OSError, ValueError):
        return {}


def _save_info(d: Path, info: dict) -> None:
    atomic_write_json(d / SWEEP_JSON, info)
