"""The workers' two line formats: the iteration log every rank appends to (RUN/logs/JOB.csv)
and the telemetry channel rank 0 appends to (RUN/telemetry/JOB.csv).

Writers: emulation/worker.py (the lines), emulation/jobspec.py (the headers, when a job's
spec is written).  Readers: the runner's summary, the A/B tool and the live view
(``read_worker_log``), the controller's phase control (``parse_telemetry_line``).

Log (CSV, one whole line per write, shared by the job's ranks; header ``LOG_HEADER``; times
in emulated seconds relative to the job's start_at, divide by the spec's scale.time_scale
for trace seconds; bytes are emulated bytes, multiply by scale.bytes_scale for trace bytes):

  status ready    iteration -1; start_s = launch, end_s = all connections up;
                  detail lists the peers and the spec's time_scale and bytes_scale
  status ok       one iteration: start_s, compute_s (sum of the compute phases),
                  comm_s (sum of the collectives' wall durations, overlapped parts included),
                  end_s, sent_bytes / recv_bytes (payload this rank sent / received),
                  shift_s (control shift applied before this iteration)
  status done     iteration = iterations run; start_s = first start, end_s = last end,
                  compute_s / comm_s / sent / recv = totals; exit code 0
  status fail     peer lost (EOF, reset, no progress for io_timeout_s), connect deadline
                  missed or a setup error; iteration = the one in progress (-1 before);
                  end_s = time of failure; detail = reason; exit code 1 (2: bad spec/setup)
  status stopped  SIGTERM/SIGINT; exit code 128+signal

Telemetry (rank 0 of each job; the controller tails it at every counter poll for phase
control): one line per event, header ``TELEMETRY_HEADER``, t = absolute wall-clock seconds
(time.time()):

  iter  iteration starts (after any control delay), phase = -1
  comm  collective phase ``phase`` (index in the spec's phases) starts
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from .files import PathLike

LOG_HEADER = ("job,rank,iteration,start_s,compute_s,comm_s,end_s,"
              "sent_bytes,recv_bytes,shift_s,status,detail")
LOG_FIELDS = LOG_HEADER.split(",")
TELEMETRY_HEADER = "iteration,event,phase,t"

_INT_FIELDS = ("rank", "iteration", "sent_bytes", "recv_bytes")
_FLOAT_FIELDS = ("start_s", "compute_s", "comm_s", "end_s", "shift_s")


def clean_detail(s) -> str:
    """A detail field on one line without commas (it is the last column)."""
    return " ".join(str(s).replace(",", ";").split())


def log_line(job: str, rank: int, iteration: int, start_s: Optional[float],
             compute_s: Optional[float], comm_s: Optional[float], end_s: Optional[float],
             sent: Optional[int], recv: Optional[int], shift: Optional[float], status: str,
             detail: str = "") -> str:
    """One log line (with its newline); None: an empty field."""
    def f(x):
        return "" if x is None else f"{x:.6f}"

    def i(x):
        return "" if x is None else str(x)
    return (f"{job},{rank},{iteration},{f(start_s)},{f(compute_s)},{f(comm_s)},{f(end_s)},"
            f"{i(sent)},{i(recv)},{f(shift)},{status},{clean_detail(detail)}\n")


def parse_log_line(line: str) -> Optional[dict]:
    """A log line as a dict (numbers converted; empty fields None); None for the header, an
    empty line or one with too few fields."""
    line = line.rstrip("\n")
    if not line or line == LOG_HEADER:
        return None
    parts = line.split(",", len(LOG_FIELDS) - 1)
    if len(parts) != len(LOG_FIELDS):
        return None
    d = dict(zip(LOG_FIELDS, parts))
    for k in _INT_FIELDS:
        d[k] = int(d[k]) if d[k] != "" else None
    for k in _FLOAT_FIELDS:
        d[k] = float(d[k]) if d[k] != "" else None
    return d


def read_worker_log(path: PathLike) -> List[dict]:
    """The log's lines as dicts (numbers converted; empty fields None)."""
    with open(path) as f:
        return [d for d in map(parse_log_line, f) if d is not None]


def telemetry_line(iteration: int, event: str, phase: int, t: float) -> str:
    return f"{iteration},{event},{phase},{t:.6f}\n"


def parse_telemetry_line(line: str) -> Optional[Tuple[int, str, int, float]]:
    """(iteration, event, phase, t) of a telemetry line; None for the header or a damaged one."""
    parts = line.split(",")
    if len(parts) != 4 or parts[0] == "iteration":
        return None
    try:
        return int(parts[0]), parts[1], int(parts[2]), float(parts[3])
    except ValueError:
        return None
