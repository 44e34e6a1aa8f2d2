import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def pytest_collection_modifyitems(config, items):
    """Every test that brings an emulated cluster up (through the emulation_ready fixture,
    directly or by another fixture) carries the ``stack`` marker: ``-m "not stack"`` runs the
    rest, which need neither root nor Open vSwitch."""
    for item in items:
        if "emulation_ready" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.stack)


def run_cli(*args, timeout=300, **kw):
    """Run `python -m ...` from the repo as a user would."""
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, **kw)


def our_bridges():
    out = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True, text=True)
    return [b for b in out.stdout.split() if b.startswith(("tor", "sp"))]


@pytest.fixture(scope="session")
def emulation_ready():
    """The real stack must be there (scripts/test.sh installs and starts it).  Emulation tests
    of concurrent pytest sessions on one machine take turns (bridge names are fixed)."""
    import fcntl
    if os.geteuid() != 0:
        pytest.fail("emulation tests need root: run ./scripts/test.sh")
    for tool in ("ovs-vsctl", "mnexec", "iperf3", "tcpdump"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} missing: run ./scripts/setup.sh")
    if subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True).returncode != 0:
        pytest.fail("Open vSwitch is not running: run ./scripts/setup.sh")
    os.makedirs("/run/harmonics", exist_ok=True)
    lock = open("/run/harmonics/tests.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    assert not our_bridges(), f"bridges left from elsewhere: {our_bridges()}"
    yield True
    lock.close()
