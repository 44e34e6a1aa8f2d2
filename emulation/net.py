"""Bring an emulated cluster up (Mininet + Open vSwitch userspace datapath + the
project's os-ken controller on 127.0.0.1) and take it down again, whatever happens.

    with EmulatedCluster(scenario, run_dir) as ec:
        ec.host("r0h0").cmd("ping -c1 10.0.1.1")

Everything made is recorded in an emulation.cleanup.RunState as it is made.
"""
from __future__ import annotations

import codecs
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional

from workloads.cluster import Cluster
from workloads.scenario import Scenario

from . import cleanup
from .topo import LeafSpineTopo, check_emulable

REPO = Path(__file__).resolve().parent.parent
OFP_HEADER = 8                # version, type, length, xid
OFPT_HELLO = 0
OFP_VERSIONS = range(1, 7)    # OpenFlow 1.0 (0x01) ... 1.5 (0x06)


class EmulationError(RuntimeError):
    """The emulation stack cannot run (missing tool, OVS down, controller failed)."""


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_stack() -> None:
    for tool in ("ovs-vsctl", "mnexec", "tc", "ip"):
        if shutil.which(tool) is None:
            raise EmulationError(f"{tool} not found: run ./scripts/setup.sh first")
    if os.geteuid() != 0:
        raise EmulationError("the emulator needs root (network namespaces, OVS): run it with sudo")
    r = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        raise EmulationError("Open vSwitch is not running: run ./scripts/setup.sh first")
    check_send_buffer()


# ovs-vswitchd's userspace datapath sends on every port through one non-blocking AF_PACKET
# socket; a frame stays charged to its send buffer until the egress qdisc has sent it. At the
# kernel's default (208 KB, about a dozen 16 KB GSO frames for every shaped queue together) the
# buffer fills under load and OVS drops the frame ("Resource temporarily unavailable"), whatever
# its class. docs/fidelity.md, "Open vSwitch's send buffer", has the measurement.
OVS_SEND_BUFFER = 64 * 1024 * 1024
WMEM_DEFAULT = Path("/proc/sys/net/core/wmem_default")


def ovs_send_buffers() -> List[int]:
    """SO_SNDBUF (bytes) of each AF_PACKET socket ovs-vswitchd holds; [] if it holds none yet."""
    r = subprocess.run(["ss", "-0", "-a", "-m", "-p"], capture_output=True, text=True, errors="replace")
    sizes, ovs = [], False
    for line in r.stdout.splitlines():
        if not line.startswith((" ", "\t")):       # a socket's own line; skmem follows it
            ovs = "ovs-vswitchd" in line
        if ovs and "skmem:(" in line:
            for field in line.split("skmem:(", 1)[1].split(")", 1)[0].split(","):
                if field.startswith("tb"):
                    sizes.append(int(field[2:]))
            ovs = False
    return sizes


def check_send_buffer() -> None:
    """Refuse a run whose Open vSwitch would drop frames of every class at its send socket."""
    wmem = int(WMEM_DEFAULT.read_text())
    if wmem < OVS_SEND_BUFFER:
        raise EmulationError(f"net.core.wmem_default is {wmem} bytes (Open vSwitch needs "
                             f"{OVS_SEND_BUFFER} or it drops packets under load): run ./scripts/setup.sh")
    small = [b for b in ovs_send_buffers() if b < OVS_SEND_BUFFER]
    if small:
        raise EmulationError(f"ovs-vswitchd's send socket has a {min(small)}-byte buffer (it started "
                             "before net.core.wmem_default was raised): run ./scripts/setup.sh")


@contextmanager
def terminate_as_exception():
    """Turn SIGTERM (and SIGHUP) into SystemExit so that ``finally`` blocks clean up."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def shielded():
    """Defer SIGINT/SIGTERM while cleaning up, so clean-up itself is never cut short."""
    got = []
    old = {s: signal.signal(s, lambda n, f: got.append(n)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def wait_openflow_hello(host: str, port: int, timeout: float, alive=None) -> bytes:
    """Wait until an OpenFlow controller on host:port greets a new connection with a HELLO
    (version 1-6, type 0, length >= 8); return its 8-byte header.  ``alive()`` is called
    between attempts and may raise (e.g. the controller process died).  EmulationError if no
    HELLO came within ``timeout`` seconds, naming what was seen last.  Nothing is decoded as
    text: the HELLO's transaction id is arbitrary bytes."""
    deadline = time.monotonic() + timeout
    last = "nothing listening"
    while True:
        if alive is not None:
            alive()
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            with socket.create_connection((host, port), timeout=min(1.0, left)) as s:
                s.settimeout(min(2.0, max(left, 0.1)))
                head = b""
                while len(head) < OFP_HEADER:
                    chunk = s.recv(OFP_HEADER - len(head))
                    if not chunk:
                        break
                    head += chunk
        except socket.timeout:
            last = "connected, but no OpenFlow HELLO arrived"
        except OSError as e:
            last = f"connect failed ({e.strerror or e})"
        else:
            if len(head) == OFP_HEADER:
                version, kind, length = head[0], head[1], int.from_bytes(head[2:4], "big")
                if version in OFP_VERSIONS and kind == OFPT_HELLO and length >= OFP_HEADER:
                    return head
                last = f"not an OpenFlow HELLO (header {head.hex()})"
            else:
                last = f"connection closed after {len(head)} bytes"
        time.sleep(0.1)
    raise EmulationError(f"controller on {host}:{port} did not answer with an OpenFlow HELLO "
                         f"within {timeout:g} s: {last}")


def _safe_decoder():
    """Mininet decodes a node's shell output as strict UTF-8: one stray byte (a capture, a
    binary reply) would raise UnicodeDecodeError in the middle of a run."""
    return codecs.getincrementaldecoder("utf-8")(errors="replace")


@functools.lru_cache(maxsize=None)
def node_classes():
    """(host, switch, controller) Mininet classes that never fail on undecodable output, and a
    controller that skips Mininet's telnet probe (we wait for the HELLO ourselves)."""
    from mininet.node import Host, OVSSwitch, RemoteController

    class SafeDecoding:
        def startShell(self, *args, **kw):
            self.decoder = _safe_decoder()
            return super().startShell(*args, **kw)

        def pexec(self, *args, **kw):
            p = self.popen(*args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, **kw)
            out, err = p.communicate()
            return (out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), p.wait())

    class SafeHost(SafeDecoding, Host):
        pass

    class SafeOVSSwitch(SafeDecoding, OVSSwitch):
        pass

    class CheckedController(SafeDecoding, RemoteController):
        """Our own controller, already checked with wait_openflow_hello()."""

        def checkListening(self):
            return

    return SafeHost, SafeOVSSwitch, CheckedController


class EmulatedCluster:
    def __init__(self, scenario: Scenario, run_dir: Path, controller_config: Optional[dict] = None,
                 quiet: bool = True):
        self.scenario = scenario
        self.cluster = Cluster(scenario.cluster)
        self.emu = scenario.emulation
        self.run_dir = Path(run_dir)
        self.extra_config = controller_config or {}
        self.quiet = quiet
        self.net = None
        self.state: Optional[cleanup.RunState] = None
        self.controller_proc: Optional[subprocess.Popen] = None
        self.port: Optional[int] = None
        self.host_procs: List[subprocess.Popen] = []
        from .jobspec import tuning
        self.tuning = tuning()

    # ------------------------------------------------------------ lifecycle
    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    @property
    def status_path(self) -> Path:
        return self.run_dir / "controller-status.json"

    @property
    def controller_config_path(self) -> Path:
        return self.run_dir / "controller.json"

    def start(self) -> None:
        check_emulable(self.cluster, self.emu)
        check_stack()
        cleanup.clean_stale()
        names = set(self.cluster.tors + self.cluster.spines)
        taken = names & set(cleanup.ovs_bridges())
        if taken:
            raise EmulationError(f"bridges {sorted(taken)} already exist (another emulation is running "
                                 "on this machine?); stop it first")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.state = cleanup.RunState(f"{self.scenario.name} {self.run_dir}")
        self.start_controller()
        self._build_network()

    def start_controller(self) -> None:
        self.port = self.port or free_tcp_port()
        cfg = {"cluster": self.scenario.cluster.model_dump(mode="json"),
               "status_path": str(self.status_path), "run_dir": str(self.run_dir)}
        cfg.update(self.extra_config)
        self.controller_config_path.write_text(json.dumps(cfg, indent=1))
        self.status_path.unlink(missing_ok=True)
        log = open(self.run_dir / "controller.log", "a")
        self.controller_proc = subprocess.Popen(
            [sys.executable, "-m", "controllers.launcher", "--config", str(self.controller_config_path),
             "--port", str(self.port)],
            cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.state.add_process(self.controller_proc.pid, "controller")
        if self.tuning["aux_nice"]:
            try:
                os.setpriority(os.PRIO_PROCESS, self.controller_proc.pid, self.tuning["aux_nice"])
            except OSError:
                pass
        deadline = time.monotonic() + 30
        while not self.status_path.exists():    # the app is up (it writes its status) ...
            self._controller_alive()
            if time.monotonic() > deadline:
                raise EmulationError("controller did not start within 30 s; "
                                     f"see {self.run_dir / 'controller.log'}")
            time.sleep(0.1)
        # ... and greets an OpenFlow connection: read its HELLO ourselves
        wait_openflow_hello("127.0.0.1", self.port, max(deadline - time.monotonic(), 5.0),
                            alive=self._controller_alive)

    def _controller_alive(self) -> None:
        if self.controller_proc is not None and self.controller_proc.poll() is not None:
            raise EmulationError(f"controller exited with code {self.controller_proc.returncode}; "
                                 f"see {self.run_dir / 'controller.log'}")

    def stop_controller(self) -> None:
        if self.controller_proc is not None:
            cleanup.kill_process(self.controller_proc.pid, grace=3.0)
            self.controller_proc = None

    def _build_network(self) -> None:
        from mininet.log import setLogLevel
        from mininet.link import TCLink
        from mininet.net import Mininet

        setLogLevel("critical" if self.quiet else "info")
        host_cls, switch_cls, controller_cls = node_classes()
        topo = LeafSpineTopo(cluster=self.cluster, emu=self.emu)
        # record the bridges and veths before they exist, so an interrupted build is cleaned too
        self.state.add_bridges(topo.switches())
        self.net = Mininet(topo=topo, host=host_cls, switch=switch_cls, link=TCLink, controller=None,
                           autoSetMacs=False, build=False, waitConnected=False)
        # the controller answered an OpenFlow HELLO in start_controller(): no telnet probe here
        self.net.addController("c0", controller=controller_cls, ip="127.0.0.1", port=self.port)
        self.net.build()
        self.state.add_links(i.name for sw in self.net.switches for i in sw.intfList() if i.name != "lo")
        self.net.start()
        self.wait_switches(30)
        for h in self.net.hosts:
            # quiet hosts: no IPv6 chatter; the experiment's congestion control
            h.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
            h.cmd(f"sysctl -qw net.ipv4.tcp_congestion_control={self.emu.tcp_cc}")
            # collectives restart after every compute phase: keep the window, as RDMA would
            # (A/B in docs/fidelity.md; HARMONICS_TUNING slow_start_after_idle=1 for the other side)
            h.cmd(f"sysctl -qw net.ipv4.tcp_slow_start_after_idle={self.tuning['slow_start_after_idle']}")
            if self.tuning["initcwnd"] > 0:
                h.cmd(f"ip route change 10.0.0.0/8 dev {h.defaultIntf()} proto kernel scope link "
                      f"src {h.IP()} initcwnd {self.tuning['initcwnd']}")
            # smaller segmentation-offload frames: a 64 KB frame holds a 50 Mbit/s link for
            # 10 ms, so strict priority would only act at that grain (docs/fidelity.md)
            if self.emu.gso_max_bytes:
                h.cmd(f"ip link set dev {h.defaultIntf()} gso_max_size {self.emu.gso_max_bytes}")

    def wait_switches(self, timeout: float) -> None:
        want = len(self.cluster.tors) + len(self.cluster.spines)
        deadline = time.time() + timeout
        st = {}
        while time.time() < deadline:
            st = self.controller_status()
            if len(st.get("switches", [])) >= want:
                return
            if st.get("unknown_dpids"):
                raise EmulationError(f"switches the cluster does not describe connected: {st['unknown_dpids']}")
            time.sleep(0.2)
        raise EmulationError(f"only {st.get('switches', [])} of {want} switches connected to the controller")

    def controller_status(self) -> dict:
        try:
            return json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return {}

    def stop(self) -> None:
        with shielded():
            for p in self.host_procs:
                cleanup.kill_process(p.pid, grace=1.0)
            self.host_procs = []
            # the controller goes first: its last status is the run's, not the teardown's
            self.stop_controller()
            if self.net is not None:
                try:
                    self.net.stop()
                except Exception as e:  # fall back to the record below
                    print(f"warning: mininet stop: {e}", file=sys.stderr)
                self.net = None
            if self.state is not None:
                self.state.clean()
                self.state = None

    # ------------------------------------------------------------- helpers
    def host(self, name: str):
        return self.net.get(name)

    def popen(self, host: str, args: List[str], **kw) -> subprocess.Popen:
        """Start a process inside a host; it is killed when the cluster stops."""
        p = self.host(host).popen(args, **kw)
        self.host_procs.append(p)
        self.state.add_process(p.pid, f"{host}: {' '.join(args[:3])}")
        return p

    def intf_name(self, lid: str) -> str:
        """Switch-side interface carrying the egress of link id 'tor0>sp1' / 'sp1>tor0'."""
        sw, port = self.cluster.link_port(lid)
        return f"{sw}-eth{port}"
