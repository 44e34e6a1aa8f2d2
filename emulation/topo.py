"""Mininet topology from the cluster description (description only; see net.py for
instantiation), in the spirit of Mininet's own Topo/Mininet split.

Every switch is an Open vSwitch bridge on the userspace datapath speaking OpenFlow 1.3
with an explicit dpid; every link is a TCLink shaped with htb to the scaled rate;
switch port numbers are the ones the controller computes from the same Cluster.
"""
from __future__ import annotations

from mininet.topo import Topo

from workloads.cluster import Cluster
from workloads.scenario import EmulationSpec


class LeafSpineTopo(Topo):
    def build(self, cluster: Cluster, emu: EmulationSpec):  # noqa: D401 - Mininet API
        host_mbps = emu.link_mbps(cluster.spec.host_link_gbps)
        up_mbps = emu.link_mbps(cluster.spec.uplink_gbps)
        sw = dict(protocols="OpenFlow13", datapath="user", failMode="secure")
        for r, tor in enumerate(cluster.tors):
            self.addSwitch(tor, dpid="%016x" % cluster.tor_dpid(r), **sw)
        for s, sp in enumerate(cluster.spines):
            self.addSwitch(sp, dpid="%016x" % cluster.spine_dpid(s), **sw)
        for r, tor in enumerate(cluster.tors):
            for h, host in enumerate(cluster.hosts_in_rack(r)):
                self.addHost(host, ip=cluster.host_ip(host) + "/8", mac=cluster.host_mac(host))
                self.addLink(host, tor, port1=0, port2=cluster.tor_host_port(h), bw=host_mbps)
        if len(cluster.tors) > 1:
            for r, tor in enumerate(cluster.tors):
                for s, sp in enumerate(cluster.spines):
                    self.addLink(tor, sp, port1=cluster.tor_spine_port(s),
                                 port2=cluster.spine_tor_port(r), bw=up_mbps)


def check_emulable(cluster: Cluster, emu: EmulationSpec) -> None:
    """Refuse clusters the emulator cannot hold faithfully (ScenarioError, one line)."""
    from workloads.scenario import ScenarioError

    mbps = emu.link_mbps(cluster.spec.host_link_gbps)
    if mbps > emu.max_host_link_mbps:
        raise ScenarioError(
            f"emulation.bandwidth_scale: host links would run at {mbps:g} Mbit/s; this emulator holds "
            f"at most {emu.max_host_link_mbps:g} (raise bandwidth_scale to at least "
            f"{cluster.spec.host_link_gbps * 1000 / emu.max_host_link_mbps:g})")
    if cluster.num_hosts > 64:
        raise ScenarioError(f"cluster: {cluster.num_hosts} hosts is too many to emulate on one machine "
                            "(at most 64); run it with the simulator (backend: simulation)")
    if emu.link_mbps(cluster.spec.uplink_gbps) < 0.5 or mbps < 0.5:
        raise ScenarioError("emulation.bandwidth_scale: links would run below 0.5 Mbit/s")
