"""The files between the controller and the rest of an emulated run.

Control file (RUN/control/JOB.json; written by the controller, read by every rank of the
job before each iteration; always replaced atomically)::

  {"shift_s": 0.3, "seq": 4}                     # delay the next iteration start by 0.3 s
  {"shift_s": 0.3, "seq": 4, "at_iteration": 7}  # ... the start of iteration 7 (race-free)
  {"shift_s": 0.0, "seq": 0, "dscp": 34}         # mark the job's packets with DSCP 34

A shift is applied once per new ``seq``.  Without ``at_iteration`` each rank applies it
at the next iteration it starts; if the file is replaced exactly while the ranks are
between iterations (a window of a few ms), ranks can disagree by one iteration and the
job is delayed up to twice.  ``at_iteration`` (an iteration index, 0-based, not yet
started: e.g. the last logged iteration + 2) makes every rank apply it at the same one.
``shift_s`` is in emulated seconds.  ``dscp`` is state, not an event: it needs no new seq.

Status file (the controller's ``status_path``, RUN/controller-status.json): the
controller's state as one JSON object, replaced atomically twice a second and once more
when it stops.

Done markers (RUN/done/JOB): an empty file the runner creates when every rank of the job
has exited; the controller counts the job as active no longer.

Job start: the controller learns a job's absolute start time (``start_at``) from the job's
spec (emulation/jobspec.py) once the runner has written it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from .files import PathLike, atomic_write_json, atomic_write_text


def control_record(shift_s: float, seq: int, at_iteration: Optional[int] = None,
                   dscp: Optional[int] = None) -> dict:
    d = {"shift_s": float(shift_s), "seq": int(seq)}
    if at_iteration is not None:
        d["at_iteration"] = int(at_iteration)
    if dscp is not None:
        d["dscp"] = int(dscp)
    return d


def write_control(path: PathLike, shift_s: float, seq: int,
                  at_iteration: Optional[int] = None, dscp: Optional[int] = None) -> None:
    """Write a control file atomically (what the controller does).  ``dscp``: the mark the
    workers put on their packets from now on (state, not an event: it does not need a new
    seq)."""
    atomic_write_text(path, json.dumps(control_record(shift_s, seq, at_iteration, dscp)))


def read_control(path: Optional[PathLike]) -> Optional[dict]:
    """The control file as a dict; None if there is none yet, it cannot be read (being
    replaced) or is not a JSON object: look again next iteration."""
    if not path:
        return None
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def write_status(path: PathLike, status: dict) -> None:
    atomic_write_json(path, status, indent=None)


def read_status(path: PathLike) -> dict:
    """The last status the controller wrote; {} if there is none (yet) or it is unreadable."""
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}


def is_done(done_dir: Optional[PathLike], job: str) -> bool:
    return bool(done_dir) and os.path.exists(os.path.join(done_dir, job))


def spec_start_at(spec_path: PathLike) -> Optional[float]:
    """The job's absolute start time from its spec; None until the spec is there."""
    try:
        with open(spec_path) as f:
            return float(json.load(f)["start_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
