"""Cluster start-up never depends on Mininet's telnet probe: we read the controller's OpenFlow
HELLO ourselves (binary transaction ids included), and node output is decoded safely.

The 30-start-up test is a stack test (marker ``stack``): it needs root, OVS and the
machine-wide lock, like every test that brings a cluster up."""
import socket
import threading

import pytest

from emulation.net import EmulatedCluster, EmulationError, node_classes, wait_openflow_hello
from workloads.scenario import load_scenario

from conftest import REPO, our_bridges

SCENARIO = REPO / "scenarios" / "leaf-spine-2x2x2.yaml"
STARTUPS = 30


class OneShotServer:
    """A loopback TCP server that sends ``payload`` to every connection, then closes it."""

    def __init__(self, payload: bytes):
        self.payload = payload
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            with c:
                if self.payload:
                    c.sendall(self.payload)

    def close(self):
        self._stop = True
        self.thread.join(timeout=2)
        self.sock.close()


def test_hello_with_undecodable_xid_is_accepted():
    # the failure of the issue: byte 0xd6 at position 5 of the HELLO (inside the xid)
    hello = bytes([0x04, 0x00, 0x00, 0x08, 0x12, 0xd6, 0xff, 0x80])
    srv = OneShotServer(hello)
    try:
        assert wait_openflow_hello("127.0.0.1", srv.port, 5.0) == hello
    finally:
        srv.close()


def test_not_openflow_is_a_clear_bounded_error():
    srv = OneShotServer(b"SSH-2.0-OpenSSH_9.2\r\n")
    try:
        with pytest.raises(EmulationError) as e:
            wait_openflow_hello("127.0.0.1", srv.port, 1.0)
        msg = str(e.value)
        assert "\n" not in msg and "OpenFlow HELLO" in msg and "not an OpenFlow HELLO" in msg
        assert srv.connections >= 2  # retried until the bound
    finally:
        srv.close()


def test_nothing_listening_is_a_clear_bounded_error():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(EmulationError, match="connect failed"):
        wait_openflow_hello("127.0.0.1", port, 0.5)


def test_dead_controller_is_reported_at_once():
    def alive():
        raise EmulationError("controller exited with code 1")
    with pytest.raises(EmulationError, match="exited with code 1"):
        wait_openflow_hello("127.0.0.1", 9, 30.0, alive=alive)


def test_controller_class_does_not_probe():
    _, _, ctl = node_classes()
    assert ctl.checkListening is not None
    from mininet.node import RemoteController
    assert ctl.checkListening is not RemoteController.checkListening


@pytest.mark.stack
def test_thirty_consecutive_cluster_startups(emulation_ready, tmp_path):
    sc = load_scenario(SCENARIO)
    for i in range(STARTUPS):
        with EmulatedCluster(sc, tmp_path / f"up{i:02d}") as ec:
            assert ec.controller_status().get("switches"), f"start-up {i}: no switch connected"
            h0 = ec.host("r0h0")
            if i == 0:
                # binary output on a node's shell is decoded, never raised on
                out = h0.cmd("printf 'a\\326\\377b\\n'")
                assert out.startswith("a") and "\ufffd" in out and out.rstrip().endswith("b")
                o, _, code = h0.pexec(["printf", "\\326\\377"])
                assert code == 0 and o == "\ufffd\ufffd"
            out = h0.cmd(f"ping -c1 -W2 {ec.cluster.host_ip('r1h1')}")
            assert " 0% packet loss" in out, f"start-up {i}: {out!r}"
        assert not our_bridges(), f"start-up {i} left bridges"
