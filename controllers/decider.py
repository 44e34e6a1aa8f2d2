"""The policy's decisions, made in a process of their own at the lowest CPU priority.

On the emulator two cores forward every packet (Open vSwitch), run every worker and the
controller. A policy that searches for seconds (optimal's exhaustive search takes its whole
30 s limit on four-racks) would take a core from forwarding in the controller's process and
make the run measure the emulator's CPU instead of the policy. In a real deployment the
scheduler has a machine of its own. Here it gets what the emulation leaves: the decision
process runs in a session of its own whose autogroup is at nice 19 (with the kernel's
autogroups, on here, CPU is shared between sessions first: a niced process in the
controller's session would still get its session's full share), itself at nice 19 under
``SCHED_IDLE``. Any runnable forwarding, worker or controller thread then takes its core at
once. The fidelity monitor counts the CPU time of processes lowered this way as headroom
(emulation/fidelity.py, ``yielding_pids``).

The process holds the epoch driver (scheduling.epochs.EpochDriver, and with it the policy's
state across epochs); the controller's epoch loop sends each epoch's measurements and waits
for the decisions, while its other threads (OpenFlow, counter polling, phase control) go on.
The process ends with the controller: it watches its parent and exits when it is gone (a
SIGKILLed controller cannot stop it otherwise).
"""
from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Mapping, Set, Tuple

_DRIVER = None


def lower_priority() -> None:
    """This process yields to every normal one: a session of its own whose autogroup is at
    nice 19, nice 19 itself and, where the kernel has it, the SCHED_IDLE policy."""
    try:
        os.setsid()
    except OSError:
        pass
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write("19")
    except OSError:
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 19)
    except OSError:
        pass
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        pass


def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(0)
        time.sleep(0.2)


def build_driver(config: dict, num_classes: int):
    """The epoch driver of a run's controller config (what the decision process holds)."""
    from scheduling.epochs import EpochDriver, make_policy
    from workloads.scenario import load_scenario, resolve

    rs = resolve(load_scenario(config["scenario_path"]))
    emu = rs.scenario.emulation
    policy = make_policy(config["policy"], **config.get("policy_kw", {}))
    return EpochDriver(rs, policy, num_classes=num_classes, time_scale=emu.time_scale,
                       bytes_scale=emu.bytes_scale,
                       estimate_profiles=bool(config.get("estimate_profiles", False)))


def _init(config: dict, num_classes: int, parent: int) -> None:
    global _DRIVER
    lower_priority()
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    _DRIVER = build_driver(config, num_classes)


def _ready() -> int:
    return os.getpid()


def _step(now_s: float, active: Set[str], measured: Mapping, bin_s: float):
    t0 = time.process_time()
    decisions, rec = _DRIVER.step(now_s, active, measured, bin_s)
    return decisions, rec, (time.process_time() - t0) * 1000


class Decider:
    """``step`` as EpochDriver.step, run in the low-priority decision process."""

    def __init__(self, config: dict, num_classes: int):
        ctx = multiprocessing.get_context("spawn")
        self.pool = ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=_init,
                                        initargs=(config, num_classes, os.getpid()))
        self.epoch = 0
        self.last_cpu_ms = None
        self.pool.submit(_ready)      # start the process (imports, the policy) right away

    def step(self, now_s: float, active: Set[str], measured: Mapping, bin_s: float) -> Tuple:
        decisions, rec, self.last_cpu_ms = self.pool.submit(
            _step, now_s, set(active), {k: dict(v) for k, v in measured.items()}, bin_s).result()
        self.epoch = rec.epoch + 1
        return decisions, rec

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
