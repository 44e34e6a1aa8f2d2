"""Bad input is refused before anything starts; a killed run leaves nothing behind."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emulation import cleanup
from conftest import REPO, our_bridges, run_cli

GOOD = (REPO / "scenarios" / "leaf-spine-2x2x2.yaml").read_text()


def _launcher_pids():
    out = subprocess.run(["pgrep", "-f", "controllers.launcher"], capture_output=True, text=True)
    return set(int(p) for p in out.stdout.split())


def _our_links():
    return [l for l in os.listdir("/sys/class/net") if l.startswith(("tor", "sp", "r0h", "r1h"))]


@pytest.mark.parametrize("edit,field", [
    (("racks: 2", "racks: 0"), "cluster.racks"),
    (("host_link_gbps: 100", "host_link_gbps: -5"), "cluster.host_link_gbps"),
    (("spines: 2", "spines: 2\n  colour: blue"), "cluster.colour"),
    (("bandwidth_scale: 2000", "bandwidth_scale: 10"), "emulation.bandwidth_scale"),
    (("cluster:", "cluster: [\n"), "not valid YAML"),
])
def test_malformed_scenario_exit_2_one_line_nothing_left(emulation_ready, tmp_path, edit, field):
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace(*edit))
    before = set(Path(cleanup.STATE_DIR).glob("*.json")) if Path(cleanup.STATE_DIR).exists() else set()
    out = tmp_path / "out"
    r = run_cli("emulation", "check", str(bad), "--out", str(out), timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], r.stderr
    assert r.stdout == ""
    assert not out.exists()
    assert not our_bridges()
    after = set(Path(cleanup.STATE_DIR).glob("*.json")) if Path(cleanup.STATE_DIR).exists() else set()
    assert after == before


def _start_held_run(tmp_path):
    before = _launcher_pids()
    # SIGINT at its default: a test run started in the background by a shell without job
    # control inherits SIGINT ignored, and Python then raises no KeyboardInterrupt
    p = subprocess.Popen([sys.executable, "-m", "emulation", "check", str(REPO / "scenarios" / "leaf-spine-2x2x2.yaml"),
                          "--hold", "120", "--out", str(tmp_path / "run")],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 60
    while time.time() < deadline:
        line = p.stdout.readline()
        if line.strip() == "ready":
            break
        if p.poll() is not None:
            pytest.fail(f"run failed: {p.stderr.read()}")
    else:
        p.kill()
        pytest.fail("cluster did not come up")
    assert len(our_bridges()) == 4
    controller = _launcher_pids() - before
    assert len(controller) == 1
    return p, controller.pop()


def test_sigterm_removes_bridges_links_controller(emulation_ready, tmp_path):
    p, ctl = _start_held_run(tmp_path)
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=60)
    assert rc == 128 + signal.SIGTERM
    assert not our_bridges()
    assert not _our_links()
    assert not cleanup.pid_alive(ctl)
    assert not cleanup.stale_records()


def test_sigint_cleans_up_too(emulation_ready, tmp_path):
    p, ctl = _start_held_run(tmp_path)
    p.send_signal(signal.SIGINT)
    rc = p.wait(timeout=60)
    assert rc == 130
    assert not our_bridges() and not _our_links() and not cleanup.pid_alive(ctl)


def test_sigkilled_run_is_cleaned_by_the_cleanup_command(emulation_ready, tmp_path):
    p, ctl = _start_held_run(tmp_path)
    p.kill()
    p.wait(timeout=10)
    assert our_bridges()  # a SIGKILL cannot clean up ...
    r = run_cli("emulation", "cleanup", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "bridge tor0" in r.stdout
    assert not our_bridges() and not _our_links() and not cleanup.pid_alive(ctl)
