"""The policy's decision process (controllers/decider.py): the same decisions as the epoch
driver in the controller's own process, made at the lowest CPU priority, and gone with its
parent."""
import json
import os
import signal
import subprocess
import sys
import time

from controllers.decider import Decider, build_driver

from conftest import REPO

CONFIG = {"scenario_path": str(REPO / "scenarios" / "four-racks.yaml"), "policy": "harmonics"}
JOBS = {"dp-a", "dp-b", "moe", "pipeline", "dp-c", "local"}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].split()[0] != "Z"
    except OSError:
        return False


def test_decisions_in_the_decision_process_equal_the_in_process_ones():
    d = Decider(CONFIG, 4)
    try:
        here = build_driver(CONFIG, 4)
        for epoch, now in enumerate((0.0, 1.0)):
            got, rec = d.step(now, JOBS, {}, 0.1)
            want, rec_here = here.step(now, JOBS, {}, 0.1)
            assert {k: v.to_dict() for k, v in got.items()} == {k: v.to_dict() for k, v in want.items()}
            assert rec.epoch == rec_here.epoch == epoch
            assert d.epoch == epoch + 1
            assert d.last_cpu_ms is not None and d.last_cpu_ms >= 0
        assert any(v.shift_s > 0 for v in got.values())          # a decision with content
        (pid,) = list(d.pool._processes)
        assert os.getpriority(os.PRIO_PROCESS, pid) == 19
        assert os.sched_getscheduler(pid) == os.SCHED_IDLE
        # a session of its own, whose autogroup is niced too (CPU is shared between
        # autogroups before nice counts inside one)
        assert os.getsid(pid) == pid
        assert open(f"/proc/{pid}/autogroup").read().split()[-1] == "19"
    finally:
        d.close()


PARENT = """
import json, sys, time
sys.path.insert(0, {repo!r})
from controllers.decider import Decider
d = Decider(json.loads(sys.argv[1]), 4)
d.step(0.0, set(), {{}}, 0.1)
print(list(d.pool._processes)[0], flush=True)
time.sleep(60)
"""


def test_the_decision_process_ends_with_its_parent():
    """A controller killed with SIGKILL cannot stop its decision process: it goes by itself."""
    p = subprocess.Popen([sys.executable, "-c", PARENT.format(repo=str(REPO)), json.dumps(CONFIG)],
                         stdout=subprocess.PIPE, text=True, cwd=str(REPO))
    try:
        child = int(p.stdout.readline())
        assert _alive(child)
        p.send_signal(signal.SIGKILL)
        p.wait()
        deadline = time.time() + 10
        while _alive(child) and time.time() < deadline:
            time.sleep(0.1)
        assert not _alive(child)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_optimal_is_not_searched_again_on_the_same_inputs():
    """Optimal decides on the jobs' declared fields alone: a second epoch with the same jobs
    (another time, another epoch number) gets its last decisions without a new search; another
    set of jobs is searched."""
    cfg = {"scenario_path": str(REPO / "scenarios" / "pair-shared-spine.yaml"), "policy": "optimal"}
    drv = build_driver(cfg, 4)
    first, _ = drv.step(0.0, {"jobA", "jobB"}, {}, 0.1)
    again, _ = drv.step(5.0, {"jobA", "jobB"}, {}, 0.1)
    assert drv.policy.reused == 1
    assert {k: v.to_dict() for k, v in again.items()} == {k: v.to_dict() for k, v in first.items()}
    alone, _ = drv.step(9.0, {"jobA"}, {}, 0.1)
    assert drv.policy.reused == 1 and set(alone) == {"jobA"}
