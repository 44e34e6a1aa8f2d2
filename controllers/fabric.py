"""The fabric: the switches' pipeline, ARP, routes, the spine of every new flow and the
ToR-spine links going down and up.

Pipeline on a ToR (OpenFlow 1.3):
  table 0   ARP -> controller | from a spine port -> table 2 | IPv4 -> table 1 | drop
  table 1   per-flow entries installed on packet-in (5-tuple -> [dscp] [meter] out port);
            miss -> controller
  table 2   dst IP of a local host -> host port; miss -> drop
On a spine: dst rack prefix -> port to that rack's ToR; miss -> drop.

Every cross-rack flow's spine is ``choose_spine``'s (a pure function): the spine a decision
pinned for the flow's job, else the model's and the simulator's hash route, both moved on
to the next live spine when a link on the way is down.  A flow's marks and meter come from
the enforcer (controllers/enforcer.py).
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Collection, Optional, Tuple

from os_ken.lib.packet import arp, ethernet, ether_types, in_proto, ipv4, packet, tcp, udp

from workloads.cluster import default_spine, parse_host

from .state import FlowKey, NetState, new_flow

LOG = logging.getLogger("harmonics.controller")

FLOW_IDLE_S = 60          # per-flow entries expire after this much silence
T_CLASSIFY, T_FLOWS, T_DOWN = 0, 1, 2

Links = Collection[Tuple[int, int]]     # (rack, spine) pairs


def live_spines(rack: int, dst_rack: int, down_links: Links, spines: int) -> list:
    """The spines whose links from ``rack`` and to ``dst_rack`` are both up (all of them if
    none is: the flow has to go somewhere)."""
    return [s for s in range(spines) if (rack, s) not in down_links
            and (dst_rack, s) not in down_links] or list(range(spines))


def choose_spine(pin: Optional[int], src_host: str, dst_host: str, rack: int, dst_rack: int,
                 down_links: Links, spines: int) -> Tuple[int, bool]:
    """The spine of a cross-rack flow and whether a decision pinned it.  ``pin``: the spine
    the flow's job's decision names for the pair (None: none).  A pin onto a dead link is
    refused; an unpinned flow takes the model's and the simulator's hash route
    (workloads.cluster.default_spine), moved on to the next live spine when that one's links
    are down, so every back end routes fair sharing alike."""
    live = live_spines(rack, dst_rack, down_links, spines)
    if pin is not None and pin % spines in live:
        return pin % spines, True
    h = default_spine(src_host, dst_host, spines)
    return min(live, key=lambda s: (s - h) % spines), False


def link_of_port(role: Tuple[str, int], port: int, racks: int, spines: int,
                 tor_spine_port: Callable[[int], int]) -> Optional[Tuple[int, int]]:
    """The (rack, spine) link a switch's port is on; None: a host port (or no such port)."""
    if role[0] == "tor":
        link = None
        for s in range(spines):
            if port == tor_spine_port(s):
                link = (role[1], s)
        return link
    if 1 <= port <= racks:          # a spine's port r + 1 goes to rack r's ToR
        return (port - 1, role[1])
    return None


def flow_match_fields(key: FlowKey) -> dict:
    """The OpenFlow match of a flow's per-flow entry."""
    fields = dict(eth_type=ether_types.ETH_TYPE_IP, ipv4_src=key[0], ipv4_dst=key[1], ip_proto=key[2])
    if key[2] == in_proto.IPPROTO_TCP:
        fields.update(tcp_src=key[3], tcp_dst=key[4])
    elif key[2] == in_proto.IPPROTO_UDP:
        fields.update(udp_src=key[3], udp_dst=key[4])
    return fields


class Fabric:
    """Switch set-up, ARP, routing and link events; ``enforcer`` gives a flow's pin, marks
    and meter."""

    def __init__(self, net: NetState, enforcer):
        self.net = net
        self.cluster = net.cluster
        self.enforcer = enforcer

    # ---------------------------------------------------------- switch setup
    def connected(self, dp) -> None:
        """A switch's features reply: check it is one of the cluster's and (re)write its
        base entries."""
        net = self.net
        role = net.dpid_role.get(dp.id)
        if role is None:
            LOG.error("switch with dpid %016x is not in the cluster description", dp.id)
            with net.lock:
                net.unknown_dpids.append("%016x" % dp.id)
            return
        with net.lock:
            net.datapaths[dp.id] = dp
            net.counters["switch_connects"] += 1
        # The base entries are (re)written; per-flow entries a switch kept while no controller
        # was connected stay and keep forwarding: the first flow-stats reply adopts them and
        # the next epoch re-applies the schedule to them.
        self.enforcer.reset_meters(dp)
        # learn which ports are down already (a restarted controller hears no PortStatus for them)
        dp.send_msg(dp.ofproto_parser.OFPPortDescStatsRequest(dp, 0))
        if role[0] == "tor":
            self._setup_tor(dp, role[1])
        else:
            self._setup_spine(dp, role[1])
        LOG.info("%s%d connected (dpid %016x)", role[0], role[1], dp.id)

    def disconnected(self, dp) -> None:
        net = self.net
        with net.lock:
            if net.datapaths.get(dp.id) is dp:
                del net.datapaths[dp.id]
                role = net.dpid_role[dp.id]
                if role[0] == "tor":  # its per-flow entries are gone with it
                    for k in [k for k, v in net.flows.items() if v["rack"] == role[1]]:
                        self.forget(k)
        LOG.info("switch %016x disconnected", dp.id)

    @staticmethod
    def _add(dp, table, prio, match, actions=None, goto=None, idle=0, flags=0, meter=None):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        inst = []
        if meter is not None:
            inst.append(parser.OFPInstructionMeter(meter, ofp.OFPIT_METER))
        if actions:
            inst.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions))
        if goto is not None:
            inst.append(parser.OFPInstructionGotoTable(goto))
        dp.send_msg(parser.OFPFlowMod(dp, table_id=table, priority=prio, match=match,
                                      instructions=inst, idle_timeout=idle, flags=flags))

    @staticmethod
    def _to_controller(dp):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        return [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]

    def _setup_tor(self, dp, r):
        parser = dp.ofproto_parser
        c = self.cluster
        self._add(dp, T_CLASSIFY, 500, parser.OFPMatch(eth_type=ether_types.ETH_TYPE_ARP),
                  self._to_controller(dp))
        if c.spec.racks > 1:
            for s in range(c.spec.spines):
                self._add(dp, T_CLASSIFY, 100, parser.OFPMatch(in_port=c.tor_spine_port(s)),
                          goto=T_DOWN)
        self._add(dp, T_CLASSIFY, 50, parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP), goto=T_FLOWS)
        self._add(dp, T_CLASSIFY, 0, parser.OFPMatch(), [])          # drop the rest (IPv6 chatter)
        self._add(dp, T_FLOWS, 0, parser.OFPMatch(), self._to_controller(dp))
        for h, host in enumerate(c.hosts_in_rack(r)):
            self._add(dp, T_DOWN, 100, parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP,
                                                       ipv4_dst=c.host_ip(host)),
                      [parser.OFPActionOutput(c.tor_host_port(h))])
        self._add(dp, T_DOWN, 0, parser.OFPMatch(), [])

    def _setup_spine(self, dp, s):
        parser = dp.ofproto_parser
        c = self.cluster
        for r in range(c.spec.racks):
            prefix = c.host_ip(c.hosts_in_rack(r)[0]).rsplit(".", 1)[0] + ".0"
            self._add(dp, 0, 100, parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP,
                                                  ipv4_dst=(prefix, "255.255.255.0")),
                      [parser.OFPActionOutput(c.spine_tor_port(r))])
        self._add(dp, 0, 0, parser.OFPMatch(), [])

    # ------------------------------------------------------------------ links
    def port_change(self, dp, desc, deleted: bool) -> None:
        """A ToR-spine link going down or up: route around it at once."""
        net, c = self.net, self.cluster
        ofp = dp.ofproto
        role = net.dpid_role.get(dp.id)
        if role is None or c.spec.racks < 2:
            return
        down = bool(desc.state & ofp.OFPPS_LINK_DOWN) or bool(desc.config & ofp.OFPPC_PORT_DOWN) or deleted
        link = link_of_port(role, desc.port_no, c.spec.racks, c.spec.spines, c.tor_spine_port)
        if link is None:
            return
        with net.lock:
            if down == (link in net.down_links):
                return
            if down:
                net.down_links.add(link)
            else:
                net.down_links.discard(link)
            net.count("link_events")
            LOG.warning("link tor%d-sp%d %s", link[0], link[1], "DOWN" if down else "up")
            if not down:
                return
            moved = 0
            for key, f in list(net.flows.items()):
                if f["spine"] == link[1] and link[0] in (f["rack"], f["dst_rack"]):
                    f["spine"], f["pinned"] = self.spine_for(f.get("job"), f["src_host"], f["dst_host"],
                                                             f["rack"], f["dst_rack"])
                    self.reinstall(key, f)
                    moved += 1
            net.count("flows_rerouted", moved)

    def spine_for(self, job: Optional[str], src_host: str, dst_host: str, rack: int,
                  dst_rack: int) -> Tuple[int, bool]:
        """``choose_spine`` with the job's pin and the links down now."""
        return choose_spine(self.enforcer.pin(job, src_host, dst_host), src_host, dst_host,
                            rack, dst_rack, self.net.down_links, self.cluster.spec.spines)

    # ---------------------------------------------------------------- packets
    def packet_in(self, msg) -> None:
        net = self.net
        dp = msg.datapath
        role = net.dpid_role.get(dp.id)
        pkt = packet.Packet(msg.data)
        eth = pkt.get_protocol(ethernet.ethernet)
        with net.lock:
            net.counters["packet_in"] += 1
        if eth is None or role is None or role[0] != "tor":
            with net.lock:
                net.counters["packet_in_other"] += 1
            return
        in_port = msg.match["in_port"]
        if eth.ethertype == ether_types.ETH_TYPE_ARP:
            with net.lock:
                net.counters["packet_in_arp"] += 1
            self._answer_arp(dp, in_port, eth, pkt.get_protocol(arp.arp))
        elif eth.ethertype == ether_types.ETH_TYPE_IP:
            with net.lock:
                net.counters["packet_in_ipv4"] += 1
            self._route_flow(dp, role[1], in_port, pkt, msg.data)
        else:
            with net.lock:
                net.counters["packet_in_other"] += 1

    def _answer_arp(self, dp, in_port, eth, a):
        if a is None or a.opcode != arp.ARP_REQUEST:
            return
        host = self.cluster.ip_to_host.get(a.dst_ip)
        if host is None:
            return
        mac = self.cluster.host_mac(host)
        reply = packet.Packet()
        reply.add_protocol(ethernet.ethernet(ethertype=ether_types.ETH_TYPE_ARP, dst=eth.src, src=mac))
        reply.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=mac, src_ip=a.dst_ip,
                                   dst_mac=a.src_mac, dst_ip=a.src_ip))
        reply.serialize()
        ofp, parser = dp.ofproto, dp.ofproto_parser
        dp.send_msg(parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                                        actions=[parser.OFPActionOutput(in_port)], data=reply.data))
        with self.net.lock:
            self.net.counters["arp_replies"] += 1

    def _route_flow(self, dp, rack, in_port, pkt, data):
        net, c = self.net, self.cluster
        ip = pkt.get_protocol(ipv4.ipv4)
        src_host = c.ip_to_host.get(ip.src)
        dst_host = c.ip_to_host.get(ip.dst)
        if src_host is None or dst_host is None:
            return
        sport = dport = 0
        l4 = pkt.get_protocol(tcp.tcp) or pkt.get_protocol(udp.udp)
        if l4 is not None:
            sport, dport = l4.src_port, l4.dst_port
        key: FlowKey = (ip.src, ip.dst, ip.proto, sport, dport)
        dst_rack = c.rack_of(dst_host)
        with net.lock:
            choice = net.flows.get(key)
            if choice is None:
                job = net.jobs.job_of(key)
                if dst_rack == rack:
                    spine, pinned = None, False
                else:
                    spine, pinned = self.spine_for(job, src_host, dst_host, rack, dst_rack)
                choice = new_flow(spine=spine, pinned=pinned, rack=rack, dst_rack=dst_rack, job=job,
                                  src_host=src_host, dst_host=dst_host, since=time.time())
                net.flows[key] = choice
                net.counters["flows_installed"] += 1
            self.install_flow(dp, key, choice, in_port=in_port, data=data)

    # ------------------------------------------------------------ flow entries
    def install_flow(self, dp, key: FlowKey, f: dict, modify: bool = False, in_port=None, data=None):
        c = self.cluster
        parser, ofp = dp.ofproto_parser, dp.ofproto
        out_port = (c.tor_host_port(parse_host(f["dst_host"])[1]) if f["spine"] is None
                    else c.tor_spine_port(f["spine"]))
        actions = self.enforcer.flow_actions(dp, key, f) + [parser.OFPActionOutput(out_port)]
        meter = self.enforcer.flow_meter(dp, key, f)
        inst = []
        if meter is not None:
            inst.append(parser.OFPInstructionMeter(meter, ofp.OFPIT_METER))
        inst.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions))
        # MODIFY_STRICT keeps the entry's counters (the epoch loop reads them)
        dp.send_msg(parser.OFPFlowMod(dp, table_id=T_FLOWS, priority=300,
                                      match=parser.OFPMatch(**flow_match_fields(key)),
                                      command=ofp.OFPFC_MODIFY_STRICT if modify else ofp.OFPFC_ADD,
                                      instructions=inst, idle_timeout=FLOW_IDLE_S,
                                      flags=ofp.OFPFF_SEND_FLOW_REM))
        if data is not None:
            dp.send_msg(parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=in_port,
                                            actions=actions, data=data))

    def reinstall(self, key: FlowKey, f: dict) -> None:
        """Rewrite an installed flow's entry at its first ToR (new spine, marks or meter)."""
        dp = self.net.tor_dp(f["rack"])
        if dp is not None:
            self.install_flow(dp, key, f, modify=True)

    def forget(self, key: FlowKey) -> None:
        self.net.flows.pop(key, None)

    def removed(self, key: Optional[FlowKey]) -> None:
        """A per-flow entry expired (idle) or was deleted."""
        if key is None:
            return
        with self.net.lock:
            self.forget(key)
            self.net.counters["flows_removed"] += 1
