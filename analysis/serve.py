"""``python -m analysis serve RESULTS_DIR [--port N]``: the live view's page and read-only API
for a finished run (emulated or simulated), read from its files, on 127.0.0.1 only.

The page, the API and the readers are the controller's own (controllers/rest.py,
runs/rundata.py): a finished run looks as it did live.  Ctrl-C (or SIGTERM) stops it.
"""
from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import List

RESULT_FILES = ("summary.csv", "iterations.csv", "decisions.jsonl", "decisions.csv", "logs")


def is_run_dir(d: Path) -> bool:
    return (d / "scenario.yaml").is_file() and any((d / f).exists() for f in RESULT_FILES)


def runs_under(d: Path) -> List[str]:
    """Run directories one level below ``d`` (a comparison's policies)."""
    return sorted(p.name for p in d.iterdir() if p.is_dir() and is_run_dir(p)) if d.is_dir() else []


def port_arg(v: str) -> int:
    import argparse
    try:
        p = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {v!r}") from None
    if not 0 <= p <= 65535:
        raise argparse.ArgumentTypeError(f"must be in 0..65535 (got {v})")
    return p


def cmd_serve(run_dir: str, port: int = 0) -> int:
    d = Path(run_dir)
    if not d.is_dir():
        print(f"error: {d}: no such directory", file=sys.stderr)
        return 2
    if not is_run_dir(d):
        runs = runs_under(d)
        hint = (f"; its runs: {', '.join(str(d / r) for r in runs)}" if runs
                else " (needs scenario.yaml and the run's result files)")
        print(f"error: {d}: not the directory of one run{hint}", file=sys.stderr)
        return 2
    from controllers.rest import serve_run_dir
    try:
        server = serve_run_dir(d, port)
    except OSError as e:
        print(f"error: --port {port}: cannot listen on 127.0.0.1 ({e.strerror or e})", file=sys.stderr)
        return 2
    stop = threading.Event()
    old = {s: signal.signal(s, lambda n, f: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    print(f"serving {d} at {server.url} (127.0.0.1 only; Ctrl-C stops)", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
        for s, h in old.items():
            signal.signal(s, h)
    return 0
