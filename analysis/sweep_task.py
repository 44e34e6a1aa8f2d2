"""The Ray side of a sweep: the task that makes one (cell, policy) run, and the tracker actor
the runs report to and take their stop order from.

Stopping.  The driver never calls ``ray.cancel``: in Ray 2.60 a cancel that races a finishing
task's reply aborts the driver ("Tried to complete task that was not pending", the core race of
ray-project/ray PRs #54179 and #54798). On Ctrl-C the driver tells the tracker to stop. Each run
watches the tracker from a thread (``_StopWatch``) and, once told, raises KeyboardInterrupt in
the thread that makes the run (what a non-forced cancel would do): the run's own ``finally``
blocks take its emulated cluster or simulator down, its scratch directory is removed and it
returns a ``cancelled`` record. A run still queued returns at once.
"""
from __future__ import annotations

import ctypes
import io
import json
import shutil
import socket
import tarfile
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Dict

from runs.files import replace_dir

from .sweep_spec import cell_scenario

RUN_RECORD = "sweep_run.json"
STOP_POLL_S = 0.2            # how often a run asks the tracker whether the sweep was stopped


class Tracker:
    """A Ray actor: the runs tell it when they start (the driver shows how many are running),
    and the driver tells it when the sweep stops."""

    def __init__(self):
        self.started: Dict[str, str] = {}
        self.stopped = False

    def start(self, key: str, node: str) -> bool:
        """Record a run's start; False when the sweep was stopped (the run must not start)."""
        if not self.stopped:
            self.started[key] = node
        return not self.stopped

    def get(self) -> Dict[str, str]:
        return dict(self.started)

    def stop(self) -> None:
        self.stopped = True

    def is_stopped(self) -> bool:
        return self.stopped


class _StopWatch:
    """Polls the tracker from a daemon thread; when the sweep is stopped, raises
    KeyboardInterrupt in the thread that made the watch (once)."""

    def __init__(self, tracker, poll_s: float = STOP_POLL_S):
        self.tracker, self.poll_s = tracker, poll_s
        self.target = threading.get_ident()
        self.done = threading.Event()
        self.fired = False
        self.thread = threading.Thread(target=self._watch, name="sweep-stopwatch", daemon=True)

    def __enter__(self):
        if self.tracker is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        return False

    def _watch(self) -> None:
        import ray
        while not self.done.wait(self.poll_s):
            try:
                stopped = ray.get(self.tracker.is_stopped.remote(), timeout=5)
            except Exception:               # noqa: BLE001 - tracker restarting: ask again
                continue
            if stopped and not self.done.is_set():
                self.fired = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.target),
                                                           ctypes.py_object(KeyboardInterrupt))
                return


def _node() -> dict:
    import ray
    ctx = ray.get_runtime_context()
    return {"node_id": ctx.get_node_id(), "node_ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname()}


def _tar(d: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.add(d, arcname=".")
    return buf.getvalue()


def _announce(tracker, key: str, node: dict) -> bool:
    """Tell the tracker this run starts; False if the sweep was stopped meanwhile."""
    if tracker is None:
        return True
    import ray
    try:
        return bool(ray.get(tracker.start.remote(key, node["node_id"]), timeout=10))
    except Exception:                       # noqa: BLE001 - progress only: run anyway
        return True


def run_task(job: dict, tracker=None) -> dict:
    """One (cell, policy) run, in a Ray worker.  ``job``: cell, policy, kind, base, seed, name,
    options, hash, out (the run's directory on the driver's node), driver_node.  Returns the
    run's record (and its directory as tar bytes when this is not the driver's node)."""
    node = _node()
    rec = {"cell": job["cell"], "policy": job["policy"], "hash": job["hash"], **node,
           "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    if not _announce(tracker, f"{job['cell']}/{job['policy']}", node):
        return {**rec, "status": "cancelled"}
    local = node["node_id"] == job["driver_node"]
    out = Path(job["out"])
    if local:
        out.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    else:
        work = Path(tempfile.mkdtemp(prefix="harmonics-sweep-"))
    t0 = time.time()
    try:
        with _StopWatch(tracker):
            return _run(job, rec, work / "run", out, local, t0)
    except KeyboardInterrupt:
        return {**rec, "status": "cancelled"}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(job: dict, rec: dict, run: Path, out: Path, local: bool, t0: float) -> dict:
    try:
        from .compare import RUNNERS, run_status
        sc = cell_scenario(job["kind"], job["base"], job["seed"], job["name"])
        status = RUNNERS[sc.backend](sc, job["policy"], run, job["options"])
        rec.update(status=run_status(status), detail=status)
    except Exception as e:                              # noqa: BLE001 - recorded, the rest go on
        rec.update(status="failed", error=" ".join(f"{type(e).__name__}: {e}".split())[:500],
                   traceback=traceback.format_exc(limit=8)[-3000:])
    rec["wall_s"] = round(time.time() - t0, 3)
    rec["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    run.mkdir(exist_ok=True)
    (run / RUN_RECORD).write_text(json.dumps(rec, indent=1) + "\n")
    if local:
        replace_dir(run, out)
        return rec
    return {**rec, "tar": _tar(run)}
