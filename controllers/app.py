"""The Harmonics SDN controller: an os-ken (Ryu's maintained continuation) application.

It knows the topology from the run's cluster description and checks every switch
that connects against it, answers ARP itself (nothing is ever flooded), installs
routes, and chooses a spine for every new flow entering a ToR from a host: the
path a policy pinned for the flow's job, else the least-loaded uplink (per-flow
ECMP decided by the controller, ties broken by a hash of the 5-tuple).

Pipeline on a ToR (OpenFlow 1.3):
  table 0   ARP -> controller | from a spine port -> table 2 | IPv4 -> table 1 | drop
  table 1   per-flow entries installed on packet-in (5-tuple -> [dscp] [meter] out port);
            miss -> controller
  table 2   dst IP of a local host -> host port; miss -> drop
On a spine: dst rack prefix -> port to that rack's ToR; miss -> drop.

Configuration: a JSON file named by $HARMONICS_CONTROLLER_CONFIG (written by the
launcher's caller) with the cluster spec, a status-file path and the REST port.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Dict, Optional, Tuple

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER,
                                       set_ev_cls)
from os_ken.lib import hub
from os_ken.lib.packet import arp, ethernet, ether_types, in_proto, ipv4, packet, tcp, udp
from os_ken.ofproto import ofproto_v1_3

from scheduling.base import Decision, clamp_class
from emulation.qos import class_dscp
from workloads.cluster import Cluster, ClusterSpec, default_spine, parse_host

# a job is decided this long (wall seconds) before its start (``_epoch_loop``)
PRESTART_S = 0.5

LOG = logging.getLogger("harmonics.controller")

FLOW_IDLE_S = 60          # per-flow entries expire after this much silence
T_CLASSIFY, T_FLOWS, T_DOWN = 0, 1, 2

FlowKey = Tuple[str, str, int, int, int]   # src ip, dst ip, proto, sport, dport


class HarmonicsController(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        path = os.environ.get("HARMONICS_CONTROLLER_CONFIG")
        if not path:
            raise RuntimeError("HARMONICS_CONTROLLER_CONFIG is not set")
        with open(path) as f:
            self.config = json.load(f)
        self.cluster = Cluster(ClusterSpec.model_validate(self.config["cluster"]))
        self.status_path = self.config.get("status_path")
        self.lock = threading.RLock()
        self.datapaths: Dict[int, object] = {}
        self.unknown_dpids: list = []
        self.flows: Dict[FlowKey, dict] = {}          # installed per-flow choices
        self.counters = {"packet_in": 0, "packet_in_arp": 0, "packet_in_ipv4": 0,
                         "packet_in_other": 0, "arp_replies": 0, "flows_installed": 0,
                         "flows_removed": 0, "switch_connects": 0}
        self.started = time.time()
        self.dpid_role = {}
        for r in range(self.cluster.spec.racks):
            self.dpid_role[Cluster.tor_dpid(r)] = ("tor", r)
        for s in range(self.cluster.spec.spines):
            self.dpid_role[Cluster.spine_dpid(s)] = ("spine", s)
        # jobs of the run: which TCP ports are whose (a job's rank r listens on port_base + r)
        self.jobs: Dict[str, dict] = {j["name"]: j for j in self.config.get("jobs", [])}
        self.port_job: Dict[int, str] = {}
        for j in self.jobs.values():
            for r in range(j["ranks"]):
                self.port_job[j["port_base"] + r] = j["name"]
        self.num_classes = int(self.config.get("num_classes", 4))
        self.bandwidth_scale = float(self.config.get("bandwidth_scale", 1000.0))
        self.decisions: Dict[str, Decision] = {}
        self.meters: Dict[Tuple[int, str, str], Tuple[int, int]] = {}  # (dpid, job, link) -> (id, kbps)
        self._next_meter = 1
        self.down_links: set = set()          # (rack, spine) pairs whose ToR-spine link is down
        self.meter_burst_s = float(self.config.get("meter_burst_s", 0.2))
        self.poll_s = float(self.config.get("poll_s", 1.0))
        self._stop = threading.Event()
        # the epoch loop: measure, decide, apply (only when the run names a policy)
        self.epoch_s = float(self.config.get("epoch_s", 1.0))
        self.bins: list = []                 # per poll: {job: {(src, dst): bytes}}
        self.window: list = []               # the bins the estimator sees
        self.estimate_window_s = float(self.config.get("estimate_window_s", max(4.0, self.epoch_s)))
        self.last_record: Optional[dict] = None
        self.job_rate_mbps: Dict[str, float] = {}
        self._prestarted: set = set()             # jobs decided before their start
        self.driver = None
        self.channel = None
        if self.config.get("policy"):
            self._make_driver()
            self._epochs = hub.spawn(self._epoch_loop)
        # the live view (controllers/rest.py): throughput samples always, the REST API and
        # page on 127.0.0.1:rest_port when the run asks for them (--live)
        from controllers.rest import LiveView
        self._rest = LiveView(self)
        if self.config.get("rest_port") is not None:
            self._rest.serve(int(self.config["rest_port"]), self.config.get("rest_token"))
        self._status_thread = threading.Thread(target=self._status_loop, daemon=True)
        self._status_thread.start()
        self._poller = hub.spawn(self._poll_loop)

    # ------------------------------------------------------------------ status
    def status(self) -> dict:
        with self.lock:
            per_spine = {}
            for f in self.flows.values():
                if f["spine"] is not None and self._active(f):
                    per_spine[f["spine"]] = per_spine.get(f["spine"], 0) + 1
            return {
                "time": time.time(),
                "uptime_s": time.time() - self.started,
                "switches": sorted(f"{self.dpid_role[d][0]}{self.dpid_role[d][1]}"
                                   for d in self.datapaths),
                "expected_switches": len(self.dpid_role),
                "unknown_dpids": list(self.unknown_dpids),
                "counters": dict(self.counters),
                "active_flows": len(self.flows),
                "down_links": [f"tor{r}-sp{s_}" for r, s_ in sorted(self.down_links)],
                "policy": self.config.get("policy"),
                "epoch": self.driver.epoch if self.driver else None,
                "decisions": (self.last_record or {}).get("decisions", {}),
                "job_mbps": dict(self.job_rate_mbps),
                "active_flows_per_spine": {str(k): v for k, v in sorted(per_spine.items())},
                "flows": [{"src": k[0], "dst": k[1], "proto": k[2], "sport": k[3], "dport": k[4],
                           "spine": v["spine"], "pinned": v["pinned"], "since": v["since"],
                           "bytes": v["bytes"], "mbps": v["bps"] / 1e6, "active": self._active(v)}
                          for k, v in self.flows.items()],
            }

    def _write_status(self):
        if not self.status_path:
            return
        tmp = self.status_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.status(), f)
        os.replace(tmp, self.status_path)

    def _status_loop(self):
        while not self._stop.wait(0.5):
            try:
                self._write_status()
            except Exception:  # never let status writing kill the controller
                LOG.exception("status write failed")

    # ------------------------------------------------------------ counters
    def _poll_loop(self):
        """Every poll_s: per-flow byte counters of the ToRs' flow tables."""
        while not self._stop.is_set():
            self._take_bin()
            if self.channel is not None:
                try:
                    with self.lock:
                        self.channel.tick()     # phase control closes its loop every iteration
                except Exception:
                    LOG.exception("phase control failed")
            with self.lock:
                dps = [(dp, self.dpid_role[d]) for d, dp in self.datapaths.items()]
            for dp, role in dps:
                if role[0] == "tor":
                    parser = dp.ofproto_parser
                    dp.send_msg(parser.OFPFlowStatsRequest(dp, table_id=T_FLOWS))
            hub.sleep(self.poll_s)

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def _flow_stats(self, ev):
        now = time.time()
        with self.lock:
            for st in ev.msg.body:
                key = self._key_of_match(st.match)
                if key is None:
                    continue
                f = self.flows.get(key) or self._adopt(ev.msg.datapath, key, st)
                if f is None:
                    continue
                if f["polled"] is not None and now > f["polled"]:
                    f["bps"] = max(0, st.byte_count - f["bytes"]) * 8 / (now - f["polled"])
                f["bytes"], f["polled"] = st.byte_count, now
        self.on_flow_stats(ev.msg.datapath, now)

    def on_flow_stats(self, dp, now: float) -> None:
        """Hook for the epoch loop."""

    # ------------------------------------------------------------ epochs
    def _make_driver(self):
        from scheduling.epochs import EpochDriver, make_policy
        from workloads.scenario import load_scenario, resolve

        rs = resolve(load_scenario(self.config["scenario_path"]))
        emu = rs.scenario.emulation
        policy = make_policy(self.config["policy"], **self.config.get("policy_kw", {}))
        self.driver = EpochDriver(rs, policy, num_classes=self.num_classes, time_scale=emu.time_scale,
                                  bytes_scale=emu.bytes_scale,
                                  estimate_profiles=bool(self.config.get("estimate_profiles", False)))
        self.channel = None
        if self.config.get("control_dir"):
            from controllers.control_channel import ControlChannel
            from scheduling.phase import PhaseConfig
            pc = rs.scenario.phase_control
            self.channel = ControlChannel(
                self.config["control_dir"], self.config.get("telemetry_dir"), list(self.jobs),
                self.cluster, emu.time_scale, self.num_classes,
                PhaseConfig(gain=pc.gain, tolerance=pc.tolerance, hold=pc.hold) if pc.enabled else None,
                origin=self.started, run_start=self.run_start)

    def _take_bin(self):
        with self.lock:
            b: Dict[str, Dict[Tuple[str, str], float]] = {}
            for f in self.flows.values():
                delta = f["bytes"] - f.get("binned", 0)
                f["binned"] = f["bytes"]
                if f.get("job") and delta > 0:
                    pair = (f["src_host"], f["dst_host"])
                    jb = b.setdefault(f["job"], {})
                    jb[pair] = jb.get(pair, 0.0) + delta
            self.bins.append(b)

    def job_start(self, name: str) -> Optional[float]:
        """The job's start time (absolute), from its spec once the runner has written it."""
        j = self.jobs[name]
        if j.get("start_at") is None and j.get("spec_path"):
            try:
                with open(j["spec_path"]) as f:
                    j["start_at"] = float(json.load(f)["start_at"])
            except (OSError, ValueError, KeyError):
                return None
        return j.get("start_at")

    def active_jobs(self, now: float) -> set:
        done_dir = self.config.get("done_dir")
        out = set()
        for name in self.jobs:
            t = self.job_start(name)
            if t is not None and t <= now and not (done_dir and os.path.exists(os.path.join(done_dir, name))):
                out.add(name)
        return out

    def run_start(self) -> Optional[float]:
        ts = [t for t in (self.job_start(n) for n in self.jobs) if t is not None]
        return min(ts) if ts else None

    def _epoch_loop(self):
        """Epochs every ``epoch_s``, plus one ``PRESTART_S`` before a job starts: that job's
        class and start-time shift are in place for its first iteration (as in the model and
        the simulator, which decide at a job's arrival), instead of a shift applied after it
        has already run an epoch in an arbitrary phase."""
        nxt = time.time() + self.epoch_s
        while not self._stop.is_set():
            now = time.time()
            pre = self._next_prestart(now)
            if pre is not None and pre < nxt:
                hub.sleep(max(0.0, pre - now))
                lead = PRESTART_S
            else:
                hub.sleep(max(0.0, nxt - now))
                nxt += self.epoch_s
                lead = 0.0
            try:
                self._run_epoch(lead)
            except Exception:
                LOG.exception("epoch failed")

    def _next_prestart(self, now: float) -> Optional[float]:
        """When to decide for the next job about to start (not decided before its start)."""
        best = None
        for name in self.jobs:
            t = self.job_start(name)
            if name in self._prestarted or t is None or t <= now:
                continue
            best = t - PRESTART_S if best is None else min(best, t - PRESTART_S)
        return best

    def _run_epoch(self, lead: float = 0.0):
        """One epoch; ``lead`` > 0: a pre-start epoch, jobs starting within ``lead`` s count
        as active."""
        now = time.time()
        with self.lock:
            fresh, self.bins = self.bins, []
        # the estimator looks at a sliding window of the last estimate_window_s (several
        # periods are needed for a period estimate); the rate shown is the last epoch's
        self.window = (self.window + fresh)[-max(1, int(round(self.estimate_window_s / self.poll_s))):]
        bins = self.window
        series: Dict[str, Dict[Tuple[str, str], list]] = {}
        for i, b in enumerate(bins):
            for job, pairs in b.items():
                for pair, v in pairs.items():
                    series.setdefault(job, {}).setdefault(pair, [0.0] * len(bins))[i] = v
        self.job_rate_mbps = {}
        for b in fresh:
            for job, pairs in b.items():
                self.job_rate_mbps[job] = self.job_rate_mbps.get(job, 0.0) + \
                    sum(pairs.values()) * 8 / self.epoch_s / 1e6
        active = self.active_jobs(now + lead)
        for name in active:
            if (self.job_start(name) or 0.0) > now:
                self._prestarted.add(name)
        if not active and not self.decisions:
            return
        decisions, rec = self.driver.step(max(0.0, now - (self.run_start() or now)), active,
                                          series, self.poll_s)
        self.apply_decisions(decisions)
        phase = self._apply_shifts(decisions)
        rec_d = json.loads(rec.to_json())
        rec_d["measured_mbps"] = self.job_rate_mbps
        rec_d.update(phase)
        self.last_record = rec_d
        path = self.config.get("decisions_log")
        if path:
            with open(path, "a") as f:
                f.write(json.dumps(rec_d, sort_keys=True) + "\n")

    def _apply_shifts(self, decisions):
        """The workers' control files (controllers.control_channel): DSCP, new start-time
        shifts, and phase control's samples and corrections for the epoch record."""
        if self.channel is None:
            return {}
        with self.lock:
            return self.channel.apply(
                decisions, lambda job: (self.job_start(job) or 0.0) <= time.time(),
                self.driver.declared)

    def _adopt(self, dp, key: FlowKey, st) -> Optional[dict]:
        """A per-flow entry this controller did not install (it was restarted): learn it."""
        role = self.dpid_role.get(dp.id)
        src_host, dst_host = self.cluster.ip_to_host.get(key[0]), self.cluster.ip_to_host.get(key[1])
        if role is None or role[0] != "tor" or src_host is None or dst_host is None:
            return None
        spine = None
        for inst in st.instructions:
            for a in getattr(inst, "actions", []):
                port = getattr(a, "port", None)
                for s_ in range(self.cluster.spec.spines):
                    if port == self.cluster.tor_spine_port(s_) and self.cluster.crosses_racks(src_host, dst_host):
                        spine = s_
        f = {"spine": spine, "pinned": False, "rack": role[1], "dst_rack": self.cluster.rack_of(dst_host),
             "job": self.job_of(key), "src_host": src_host, "dst_host": dst_host, "since": time.time(),
             "bytes": st.byte_count, "polled": None, "bps": 0.0, "adopted": True}
        self.flows[key] = f
        self.counters["flows_adopted"] = self.counters.get("flows_adopted", 0) + 1
        return f

    @staticmethod
    def _key_of_match(m) -> Optional[FlowKey]:
        if "ipv4_src" not in m:
            return None
        proto = m.get("ip_proto", 0)
        return (m["ipv4_src"], m["ipv4_dst"], proto, m.get("tcp_src", m.get("udp_src", 0)),
                m.get("tcp_dst", m.get("udp_dst", 0)))

    @staticmethod
    def _active(f: dict) -> bool:
        """A flow loads its path if it is new (no counters yet) or carried traffic lately."""
        return f["polled"] is None or f["bps"] > 1e4 or time.time() - f["since"] < 2.0

    def close(self):
        self._stop.set()
        if self._rest is not None:
            self._rest.stop()
        try:
            self._write_status()
        except Exception:
            pass

    # ---------------------------------------------------------- switch setup
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _features(self, ev):
        dp = ev.msg.datapath
        role = self.dpid_role.get(dp.id)
        if role is None:
            LOG.error("switch with dpid %016x is not in the cluster description", dp.id)
            with self.lock:
                self.unknown_dpids.append("%016x" % dp.id)
            return
        with self.lock:
            self.datapaths[dp.id] = dp
            self.counters["switch_connects"] += 1
        # The base entries are (re)written; per-flow entries a switch kept while no controller
        # was connected stay and keep forwarding: the first flow-stats reply adopts them and
        # the next epoch re-applies the schedule to them.
        # meters are ours alone: start each switch from none (a restarted controller numbers
        # them afresh; the flows that used old ones are re-learned from packet-ins)
        dp.send_msg(dp.ofproto_parser.OFPMeterMod(dp, command=dp.ofproto.OFPMC_DELETE, flags=0,
                                                  meter_id=dp.ofproto.OFPM_ALL, bands=[]))
        with self.lock:
            for k in [k for k in self.meters if k[0] == dp.id]:
                del self.meters[k]
        # learn which ports are down already (a restarted controller hears no PortStatus for them)
        dp.send_msg(dp.ofproto_parser.OFPPortDescStatsRequest(dp, 0))
        if role[0] == "tor":
            self._setup_tor(dp, role[1])
        else:
            self._setup_spine(dp, role[1])
        LOG.info("%s%d connected (dpid %016x)", role[0], role[1], dp.id)

    def _add(self, dp, table, prio, match, actions=None, goto=None, idle=0, flags=0, meter=None):
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

    def _to_controller(self, dp):
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

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def _port_desc(self, ev):
        for p in ev.msg.body:
            self._port_change(ev.msg.datapath, p, deleted=False)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port_status(self, ev):
        msg = ev.msg
        self._port_change(msg.datapath, msg.desc, deleted=msg.reason == msg.datapath.ofproto.OFPPR_DELETE)

    def _port_change(self, dp, desc, deleted: bool):
        """A ToR-spine link going down or up: route around it at once."""
        ofp = dp.ofproto
        role = self.dpid_role.get(dp.id)
        if role is None or self.cluster.spec.racks < 2:
            return
        port = desc.port_no
        down = bool(desc.state & ofp.OFPPS_LINK_DOWN) or bool(desc.config & ofp.OFPPC_PORT_DOWN) or deleted
        link = None
        if role[0] == "tor":
            for s_ in range(self.cluster.spec.spines):
                if port == self.cluster.tor_spine_port(s_):
                    link = (role[1], s_)
        elif 1 <= port <= self.cluster.spec.racks:
            link = (port - 1, role[1])
        if link is None:
            return
        with self.lock:
            if down == (link in self.down_links):
                return
            if down:
                self.down_links.add(link)
            else:
                self.down_links.discard(link)
            self.counters["link_events"] = self.counters.get("link_events", 0) + 1
            LOG.warning("link tor%d-sp%d %s", link[0], link[1], "DOWN" if down else "up")
            if not down:
                return
            moved = 0
            for key, f in list(self.flows.items()):
                if f["spine"] == link[1] and link[0] in (f["rack"], f["dst_rack"]):
                    f["spine"], f["pinned"] = self._choose_spine(f.get("job"), f["src_host"], f["dst_host"],
                                                                 f["rack"], f["dst_rack"])
                    tor = self._tor_dp(f["rack"])
                    if tor is not None:
                        self._install_flow(tor, key, f, modify=True)
                    moved += 1
            self.counters["flows_rerouted"] = self.counters.get("flows_rerouted", 0) + moved

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def _gone(self, ev):
        dp = ev.datapath
        if dp.id is None:
            return
        with self.lock:
            if self.datapaths.get(dp.id) is dp:
                del self.datapaths[dp.id]
                role = self.dpid_role[dp.id]
                if role[0] == "tor":  # its per-flow entries are gone with it
                    for k in [k for k, v in self.flows.items() if v["rack"] == role[1]]:
                        self._forget(k)
        LOG.info("switch %016x disconnected", dp.id)

    # ---------------------------------------------------------------- packets
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        role = self.dpid_role.get(dp.id)
        pkt = packet.Packet(msg.data)
        eth = pkt.get_protocol(ethernet.ethernet)
        with self.lock:
            self.counters["packet_in"] += 1
        if eth is None or role is None or role[0] != "tor":
            with self.lock:
                self.counters["packet_in_other"] += 1
            return
        in_port = msg.match["in_port"]
        if eth.ethertype == ether_types.ETH_TYPE_ARP:
            with self.lock:
                self.counters["packet_in_arp"] += 1
            self._answer_arp(dp, in_port, eth, pkt.get_protocol(arp.arp))
        elif eth.ethertype == ether_types.ETH_TYPE_IP:
            with self.lock:
                self.counters["packet_in_ipv4"] += 1
            self._route_flow(dp, role[1], in_port, pkt, msg.data)
        else:
            with self.lock:
                self.counters["packet_in_other"] += 1

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
        with self.lock:
            self.counters["arp_replies"] += 1

    def _route_flow(self, dp, rack, in_port, pkt, data):
        ip = pkt.get_protocol(ipv4.ipv4)
        src_host = self.cluster.ip_to_host.get(ip.src)
        dst_host = self.cluster.ip_to_host.get(ip.dst)
        if src_host is None or dst_host is None:
            return
        sport = dport = 0
        l4 = pkt.get_protocol(tcp.tcp) or pkt.get_protocol(udp.udp)
        if l4 is not None:
            sport, dport = l4.src_port, l4.dst_port
        key: FlowKey = (ip.src, ip.dst, ip.proto, sport, dport)
        c = self.cluster
        dst_rack = c.rack_of(dst_host)
        with self.lock:
            choice = self.flows.get(key)
            if choice is None:
                job = self.job_of(key)
                if dst_rack == rack:
                    spine, pinned = None, False
                else:
                    spine, pinned = self._choose_spine(job, src_host, dst_host, rack, dst_rack)
                choice = {"spine": spine, "pinned": pinned, "rack": rack, "dst_rack": dst_rack, "job": job,
                          "src_host": src_host, "dst_host": dst_host, "since": time.time(),
                          "bytes": 0, "polled": None, "bps": 0.0}
                self.flows[key] = choice
                self.counters["flows_installed"] += 1
            self._install_flow(dp, key, choice, in_port=in_port, data=data)

    # ------------------------------------------------------------ enforcement
    def job_of(self, key: FlowKey) -> Optional[str]:
        if key[2] != in_proto.IPPROTO_TCP:
            return None
        return self.port_job.get(key[4]) or self.port_job.get(key[3])

    def flow_actions(self, dp, key: FlowKey, choice: dict) -> list:
        """DSCP of the flow's job's priority class (jobs without a decision: best effort)."""
        d = self.decisions.get(choice.get("job") or "")
        if d is None:
            return []
        k = clamp_class(d.priority, self.num_classes)
        return [dp.ofproto_parser.OFPActionSetField(ip_dscp=class_dscp(k, self.num_classes))]

    def flow_meter(self, dp, key: FlowKey, choice: dict) -> Optional[int]:
        """The meter of the tightest cap the flow's job has on a link of the flow's path."""
        job = choice.get("job")
        d = self.decisions.get(job or "")
        if d is None or not d.rate_caps_gbps:
            return None
        path = [self.cluster.links[i].id for i in
                self.cluster.path(choice["src_host"], choice["dst_host"], choice["spine"])]
        caps = [(self._share_of_cap(job, lid), lid) for lid in path if lid in d.rate_caps_gbps]
        if not caps:
            return None
        gbps, lid = min(caps)
        return self._meter(dp, job, lid, gbps)

    def _share_of_cap(self, job: str, lid: str) -> float:
        """A cap on a link that several ToRs feed (a spine downlink) is split evenly between the
        ToRs whose flows of the job cross it: meters live at each flow's first ToR."""
        racks = set()
        for f in self.flows.values():
            if f.get("job") == job and lid in (self.cluster.links[i].id for i in
                                                self.cluster.path(f["src_host"], f["dst_host"], f["spine"])):
                racks.add(f["rack"])
        return self.decisions[job].rate_caps_gbps[lid] / max(1, len(racks))

    def _meter(self, dp, job: str, lid: str, gbps: float) -> int:
        kbps = max(8, int(gbps * 1e6 / self.bandwidth_scale))
        parser, ofp = dp.ofproto_parser, dp.ofproto
        key = (dp.id, job, lid)
        have = self.meters.get(key)
        if have and have[1] == kbps:
            return have[0]
        mid = have[0] if have else self._next_meter
        if not have:
            self._next_meter += 1
        # burst: meter_burst_s at the meter's rate, and at least 8 GSO super-frames (64 KB)
        # so TCP can hold the rate (see docs/fidelity.md for the measurement behind it)
        burst = int(max(8 * 64 * 8, kbps * self.meter_burst_s))
        band = parser.OFPMeterBandDrop(rate=kbps, burst_size=burst)
        dp.send_msg(parser.OFPMeterMod(dp, command=ofp.OFPMC_MODIFY if have else ofp.OFPMC_ADD,
                                       flags=ofp.OFPMF_KBPS | ofp.OFPMF_BURST, meter_id=mid,
                                       bands=[band]))
        self.meters[key] = (mid, kbps)
        return mid

    def _release_meters(self, jobs) -> None:
        for key in [k for k in self.meters if k[1] in jobs]:
            mid, _ = self.meters.pop(key)
            dp = self.datapaths.get(key[0])
            if dp is not None:
                dp.send_msg(dp.ofproto_parser.OFPMeterMod(dp, command=dp.ofproto.OFPMC_DELETE,
                                                          flags=0, meter_id=mid, bands=[]))

    def apply_decisions(self, decisions: Dict[str, Decision]) -> None:
        """Make the network follow the decisions: re-mark, re-meter and re-path every installed
        flow of the jobs whose decision changed; release what ended jobs held."""
        with self.lock:
            old = self.decisions
            self.decisions = dict(decisions)
            changed = {j for j in set(old) | set(decisions) if old.get(j) != decisions.get(j)}
            self._release_meters({j for j in changed if j not in decisions or
                                  not decisions[j].rate_caps_gbps})
            for key, f in list(self.flows.items()):
                if f.get("job") not in changed:
                    continue
                d = decisions.get(f["job"])
                if f["spine"] is not None and d is not None:
                    want = d.spine_for(f["src_host"], f["dst_host"])
                    if want is not None and ((f["rack"], want) in self.down_links
                                             or (f["dst_rack"], want) in self.down_links):
                        want = None  # never pin onto a dead link
                    if want is not None and want != f["spine"]:
                        f["spine"], f["pinned"] = want, True
                    elif want is None and f.get("pinned"):
                        f["spine"], f["pinned"] = self._choose_spine(
                            f["job"], f["src_host"], f["dst_host"], f["rack"], f["dst_rack"])
                dp = self._tor_dp(f["rack"])
                if dp is not None:
                    self._install_flow(dp, key, f, modify=True)

    def _tor_dp(self, rack: int):
        return self.datapaths.get(Cluster.tor_dpid(rack))

    def _install_flow(self, dp, key: FlowKey, f: dict, modify: bool = False, in_port=None, data=None):
        c = self.cluster
        parser, ofp = dp.ofproto_parser, dp.ofproto
        out_port = (c.tor_host_port(parse_host(f["dst_host"])[1]) if f["spine"] is None
                    else c.tor_spine_port(f["spine"]))
        fields = dict(eth_type=ether_types.ETH_TYPE_IP, ipv4_src=key[0], ipv4_dst=key[1], ip_proto=key[2])
        if key[2] == in_proto.IPPROTO_TCP:
            fields.update(tcp_src=key[3], tcp_dst=key[4])
        elif key[2] == in_proto.IPPROTO_UDP:
            fields.update(udp_src=key[3], udp_dst=key[4])
        actions = self.flow_actions(dp, key, f) + [parser.OFPActionOutput(out_port)]
        meter = self.flow_meter(dp, key, f)
        inst = []
        if meter is not None:
            inst.append(parser.OFPInstructionMeter(meter, ofp.OFPIT_METER))
        inst.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions))
        # MODIFY_STRICT keeps the entry's counters (the epoch loop reads them)
        dp.send_msg(parser.OFPFlowMod(dp, table_id=T_FLOWS, priority=300, match=parser.OFPMatch(**fields),
                                      command=ofp.OFPFC_MODIFY_STRICT if modify else ofp.OFPFC_ADD,
                                      instructions=inst, idle_timeout=FLOW_IDLE_S,
                                      flags=ofp.OFPFF_SEND_FLOW_REM))
        if data is not None:
            dp.send_msg(parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=in_port,
                                            actions=actions, data=data))

    def _choose_spine(self, job, src_host, dst_host, rack, dst_rack) -> Tuple[int, bool]:
        """The spine of a cross-rack flow and whether a decision pinned it. An unpinned flow takes
        the model's and the simulator's hash route (workloads.cluster.default_spine), moved on to
        the next live spine when that one's links are down, so every back end routes fair
        sharing alike."""
        d = self.decisions.get(job or "")
        pin = d.spine_for(src_host, dst_host) if d is not None else None
        n = self.cluster.spec.spines
        live = [s_ for s_ in range(n) if (rack, s_) not in self.down_links
                and (dst_rack, s_) not in self.down_links] or list(range(n))
        if pin is not None and pin % n in live:
            return pin % n, True
        h = default_spine(src_host, dst_host, n)
        return min(live, key=lambda s_: (s_ - h) % n), False

    def _forget(self, key):
        self.flows.pop(key, None)

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def _flow_removed(self, ev):
        key = self._key_of_match(ev.msg.match)
        if key is None:
            return
        with self.lock:
            self._forget(key)
            self.counters["flows_removed"] += 1
