"""The job spec: one JSON file per job that tells every synthetic worker process
(emulation/worker.py) what to run.  Written by the runner with ``write_job_spec``.

Scaling (done HERE, once; the worker never scales anything):

  emulated seconds = trace seconds * time_scale
  emulated bytes   = trace bytes / bytes_scale        (bytes_scale = bandwidth_scale / time_scale)

Every collective's emulated byte count is rounded to the nearest positive multiple of its
group size, so that the per-step / per-peer pieces of workloads/flows.py are whole
bytes and the bytes a worker puts on the wire equal flows.py's numbers for the
emulated collective exactly.  The spec keeps the trace values next to the emulated
ones (``trace_seconds``, ``trace_bytes``) and the factors (``scale``), so results can
be reported in trace units: trace time = emulated time / time_scale, trace bytes =
emulated bytes * bytes_scale.

Format (``"format": "harmonics-job-spec/1"``)::

  {
    "format": "harmonics-job-spec/1",
    "job": "jobA", "iterations": 15, "num_ranks": 2,
    "port_base": 20000,               # rank r listens on port_base + r (all ranks' IPs)
    "start_at": 1717000000.25,        # absolute time.time() of the job's arrival
    "control_path": "RUN/control/jobA.json",
    "log_path": "RUN/logs/jobA.csv",  # shared by the job's ranks (atomic appends)
    "telemetry_path": "RUN/telemetry/jobA.csv",  # rank 0's iteration/phase starts (worker.py)
    "tcp_cc": "cubic", "dscp": null,  # dscp: optional DSCP (0-63) the workers set (IP_TOS)
    "connect_timeout_s": 60.0,        # all connections must be up this long after launch
    "io_timeout_s": 20.0,             # a collective moving no byte for this long = peer lost
    "scale": {"time_scale": 10, "bandwidth_scale": 2000, "bytes_scale": 200},
    "ranks": [{"rank": 0, "host": "r0h0", "gpu": 0, "ip": "10.0.0.1", "port": 20000}, ...],
    "phases": [
      {"op": "compute", "seconds": 0.5, "trace_seconds": 0.05},
      {"op": "allreduce", "bytes": 1500000, "trace_bytes": 3e8,
       "group": {"size": null, "stride": 1}, "overlap": 0.0}
    ]
  }

Control file (written by the controller, read by every rank before each iteration): its
format, and the workers' log and telemetry formats, are runs/control.py's and runs/logs.py's.

Ports: a job is recognised on the wire by its port range [port_base, port_base + n).
Connections are opened from ephemeral ports, so job ranges must lie outside the
kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by default);
``default_port_bases`` gives such ranges.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Union

from runs.files import atomic_write_json
from runs.logs import LOG_HEADER, TELEMETRY_HEADER

FORMAT = "harmonics-job-spec/1"

# The start-up transient (connection set-up, slow start, the jobs' phases settling) lasts
# about four iterations (docs/fidelity.md).  Every summary - the runner's summary.csv, the
# simulator's (through analysis compare), the report - leaves out this many first iterations
# of each job; a job that ran no more iterations than that keeps them all.
WARMUP_ITERATIONS = 5

# Host and process settings of an emulated run, each chosen by an A/B (docs/fidelity.md).
# HARMONICS_TUNING="key=value,..." overrides them for experiments; run.json records them.
TUNING_DEFAULTS = {
    "slow_start_after_idle": 0,   # hosts' net.ipv4.tcp_slow_start_after_idle
    "initcwnd": 0,                # hosts' initial congestion window, segments (0: kernel's 10)
    "timer_slack_ns": 0,          # workers' timer slack (0: the kernel's 50 us)
    "aux_nice": 0,                # nice value of tcpdump and the controller
}


def tuning() -> dict:
    """TUNING_DEFAULTS with HARMONICS_TUNING's overrides (JobSpecError on a bad one)."""
    out = dict(TUNING_DEFAULTS)
    raw = os.environ.get("HARMONICS_TUNING", "").strip()
    for item in filter(None, (x.strip() for x in raw.split(","))):
        k, _, v = item.partition("=")
        if k not in out:
            raise JobSpecError(f"HARMONICS_TUNING: unknown setting {k!r} (known: {', '.join(out)})")
        try:
            out[k] = int(v)
        except ValueError:
            raise JobSpecError(f"HARMONICS_TUNING: {k} needs an integer (got {v!r})") from None
    return out
PORT_LOW = 20000           # default_port_bases starts here
_EPHEMERAL_DEFAULT = (32768, 60999)


class JobSpecError(ValueError):
    """A job spec that cannot be written or read.  str() is one line."""


def ephemeral_port_range() -> tuple:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return _EPHEMERAL_DEFAULT


def check_port_range(port_base: int, n: int) -> None:
    lo, hi = ephemeral_port_range()
    last = port_base + n - 1
    if port_base < 1024 or last > 65535:
        raise JobSpecError(f"port range {port_base}-{last} must lie within 1024-65535")
    if not (last < lo or port_base > hi):
        raise JobSpecError(f"port range {port_base}-{last} overlaps the ephemeral port range "
                           f"{lo}-{hi}: connections could not be told apart by port")


def default_port_bases(jobs: Iterable, base: int = PORT_LOW, stride: int = 100) -> Dict[str, int]:
    """Port bases for the jobs (ResolvedJob or (name, n) pairs) in order: base, base+stride,
    ... with stride grown to a multiple of 100 covering the largest job."""
    items = []
    for j in jobs:
        if isinstance(j, tuple):
            items.append((j[0], int(j[1])))
        else:
            items.append((j.name, len(j.workers)))
    need = max([n for _, n in items] + [1])
    stride = max(stride, int(math.ceil(need / 100.0)) * 100)
    out = {}
    for k, (name, n) in enumerate(items):
        out[name] = base + k * stride
        check_port_range(out[name], n)
    return out


def _round_bytes(trace_bytes: float, bytes_scale: float, group: int) -> int:
    if trace_bytes <= 0:
        return 0
    q = max(1, int(round(trace_bytes / bytes_scale / group)))
    return q * group


def scaled_phases(profile, num_ranks: int, time_scale: float, bytes_scale: float) -> List[dict]:
    """The profile's phases in emulated units (see the module docstring)."""
    from workloads.scenario import Compute
    phases = []
    for p in profile.phases:
        if isinstance(p, Compute):
            phases.append({"op": "compute", "seconds": p.seconds * time_scale,
                           "trace_seconds": p.seconds})
        else:
            g = p.group.size or num_ranks
            phases.append({"op": p.op, "bytes": _round_bytes(p.bytes, bytes_scale, g),
                           "trace_bytes": p.bytes,
                           "group": {"size": p.group.size, "stride": p.group.stride},
                           "overlap": p.overlap})
    return phases


def job_spec(job, cluster, emulation, *, port_base: int, start_at: float,
             control_dir: Union[str, Path], log_path: Union[str, Path],
             io_timeout_s: float = 20.0, connect_timeout_s: float = 60.0,
             dscp: Optional[int] = None,
             ip_of: Optional[Callable[[str], str]] = None,
             iterations: Optional[int] = None,
             telemetry_path: Optional[Union[str, Path]] = None,
             job_index: int = 0, seed: int = 0) -> dict:
    """The spec of a workloads.scenario.ResolvedJob as a dict (see the module docstring).

    ``ip_of`` overrides cluster.host_ip (tests put every rank on 127.0.0.1)."""
    n = len(job.workers)
    check_port_range(port_base, n)
    if dscp is not None and not 0 <= int(dscp) <= 63:
        raise JobSpecError(f"dscp must be 0-63 (got {dscp})")
    ip_of = ip_of or cluster.host_ip
    ts, bs = float(emulation.time_scale), float(emulation.bytes_scale)
    return {
        "format": FORMAT,
        "job": job.name,
        "iterations": int(iterations if iterations is not None else job.spec.iterations),
        "num_ranks": n,
        "port_base": int(port_base),
        "start_at": float(start_at),
        "control_path": str(Path(control_dir) / f"{job.name}.json"),
        "log_path": str(log_path),
        "telemetry_path": None if telemetry_path is None else str(telemetry_path),
        "tcp_cc": emulation.tcp_cc,
        "timer_slack_ns": tuning()["timer_slack_ns"],
        "dscp": None if dscp is None else int(dscp),
        "connect_timeout_s": float(connect_timeout_s),
        "io_timeout_s": float(io_timeout_s),
        "scale": {"time_scale": ts, "bandwidth_scale": float(emulation.bandwidth_scale),
                  "bytes_scale": bs},
        "ranks": [{"rank": w.rank, "host": w.host, "gpu": w.gpu, "ip": ip_of(w.host),
                   "port": port_base + w.rank} for w in job.workers],
        "phases": scaled_phases(job.profile, n, ts, bs),
        # compute noise (workloads/jitter.py): every rank draws the job's one sequence
        "compute_jitter": float(getattr(emulation, "compute_jitter", 0.0)),
        "jitter_seed": [int(seed), int(job_index)],
    }


def write_job_spec(job, cluster, emulation, out_path: Union[str, Path], *, port_base: int,
                   start_at: float, control_dir: Union[str, Path], log_path: Union[str, Path],
                   **kw) -> dict:
    """Write the job's spec JSON to ``out_path`` (atomically) and start its log file with
    the CSV header (truncating an old one); return the spec dict.  Keyword options as
    ``job_spec`` (io_timeout_s, connect_timeout_s, dscp, ip_of, iterations)."""
    spec = job_spec(job, cluster, emulation, port_base=port_base, start_at=start_at,
                    control_dir=control_dir, log_path=log_path, **kw)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    Path(control_dir).mkdir(parents=True, exist_ok=True)
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_path, spec)
    Path(log_path).write_text(LOG_HEADER + "\n")
    if spec.get("telemetry_path"):
        Path(spec["telemetry_path"]).parent.mkdir(parents=True, exist_ok=True)
        Path(spec["telemetry_path"]).write_text(TELEMETRY_HEADER + "\n")
    return spec


def load_job_spec(path: Union[str, Path]) -> dict:
    """Read and check a spec; JobSpecError (one line) if it is unusable."""
    path = Path(path)
    try:
        spec = json.loads(path.read_text())
    except OSError as e:
        raise JobSpecError(f"{path}: cannot read ({e.strerror})") from None
    except ValueError as e:
        raise JobSpecError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(spec, dict) or spec.get("format") != FORMAT:
        raise JobSpecError(f"{path}: not a {FORMAT} file")
    for key in ("job", "iterations", "num_ranks", "port_base", "start_at", "control_path",
                "log_path", "ranks", "phases"):
        if key not in spec:
            raise JobSpecError(f"{path}: missing key {key!r}")
    if len(spec["ranks"]) != spec["num_ranks"]:
        raise JobSpecError(f"{path}: num_ranks is {spec['num_ranks']} but {len(spec['ranks'])} ranks listed")
    for i, r in enumerate(spec["ranks"]):
        if r.get("rank") != i or "ip" not in r or "port" not in r:
            raise JobSpecError(f"{path}: ranks.{i} must have rank {i}, ip and port")
    return spec


def collectives_of(spec: dict) -> list:
    """(phase index, workloads.scenario.Collective in EMULATED bytes) for the spec's collectives."""
    from workloads.scenario import Collective, Group
    out = []
    for i, p in enumerate(spec["phases"]):
        if p["op"] != "compute":
            g = p.get("group") or {}
            out.append((i, Collective(op=p["op"], bytes=p["bytes"],
                                      group=Group(size=g.get("size"), stride=g.get("stride", 1)),
                                      overlap=p.get("overlap", 0.0))))
    return out
