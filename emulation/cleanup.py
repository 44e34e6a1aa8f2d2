"""What a run made, written down as it is made, so that it can be removed - and only it.

Each run keeps a JSON record in STATE_DIR (one file per run): the bridges it created,
the processes it started (with their start times, so a recycled PID is never killed),
the interfaces it shaped.  Normal exits remove everything in ``finally``; a run that
was SIGKILLed leaves its record behind, and ``python -m emulation cleanup`` (also run
automatically before every new run) removes what dead runs left, never touching
bridges or processes that no record of ours names.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterable, List, Optional

from runs.files import atomic_write_json

STATE_DIR = Path(os.environ.get("HARMONICS_STATE_DIR", "/run/harmonics"))


def _proc_start(pid: int) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def pid_alive(pid: int, start: Optional[str] = None) -> bool:
    st = _proc_start(pid)
    return st is not None and (start is None or st == start)


def kill_process(pid: int, start: Optional[str] = None, grace: float = 2.0) -> None:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL; only if it is still the same process."""
    if not pid_alive(pid, start):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.time() + grace
    while time.time() < deadline:
        if not pid_alive(pid, start):
            return
        try:  # reap it if it is our child
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    except ProcessLookupError:
        pass


def ovs_bridges() -> List[str]:
    out = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True, text=True, errors="replace")
    return out.stdout.split() if out.returncode == 0 else []


def delete_bridge(name: str) -> None:
    subprocess.run(["ovs-vsctl", "--timeout=10", "--if-exists", "del-br", name],
                   capture_output=True)


def delete_link(name: str) -> None:
    if Path(f"/sys/class/net/{name}").exists():
        subprocess.run(["ip", "link", "del", name], capture_output=True)


class RunState:
    """The record of one run.  Every ``add_*`` rewrites the file atomically."""

    def __init__(self, tag: str):
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self.path = STATE_DIR / f"{os.getpid()}-{int(time.time() * 1000)}.json"
        self.data = {"owner_pid": os.getpid(), "owner_start": _proc_start(os.getpid()),
                     "tag": tag, "bridges": [], "processes": [], "links": []}
        self._save()

    def _save(self):
        atomic_write_json(self.path, self.data, indent=None)

    def add_bridges(self, names: Iterable[str]):
        self.data["bridges"] += list(names)
        self._save()

    def add_links(self, names: Iterable[str]):
        self.data["links"] += list(names)
        self._save()

    def add_process(self, pid: int, what: str):
        self.data["processes"].append({"pid": pid, "start": _proc_start(pid), "what": what})
        self._save()

    def clean(self):
        clean_record(self.data)
        self.path.unlink(missing_ok=True)


def clean_record(data: dict) -> List[str]:
    """Remove what one record names; returns a description of what was removed."""
    done = []
    for p in reversed(data.get("processes", [])):
        if pid_alive(p["pid"], p.get("start")):
            kill_process(p["pid"], p.get("start"))
            done.append(f"process {p['pid']} ({p['what']})")
    present = set(ovs_bridges())
    for b in data.get("bridges", []):
        if b in present:
            delete_bridge(b)
            done.append(f"bridge {b}")
    for l in data.get("links", []):
        if Path(f"/sys/class/net/{l}").exists():
            delete_link(l)
            done.append(f"link {l}")
    return done


def stale_records() -> List[Path]:
    if not STATE_DIR.exists():
        return []
    out = []
    for p in sorted(STATE_DIR.glob("*.json")):
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if not pid_alive(d.get("owner_pid", -1), d.get("owner_start")):
            out.append(p)
    return out


def clean_stale(verbose: bool = False) -> List[str]:
    """Remove what runs that died without cleaning up left behind."""
    done = []
    for p in stale_records():
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        done += clean_record(d)
        p.unlink(missing_ok=True)
    if verbose:
        for line in done:
            print(f"removed {line}")
    return done
