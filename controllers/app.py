"""The Harmonics SDN controller: an os-ken (Ryu's maintained continuation) application.

It knows the topology from the run's cluster description and checks every switch that
connects against it, answers ARP itself (nothing is ever flooded), installs routes, and
chooses a spine for every new flow entering a ToR from a host: the path a policy pinned for
the flow's job, else the model's and the simulator's hash route (per-flow ECMP decided by
the controller), moved on to a live spine when a link is down.

The application only wires its parts, one concern each, as os-ken's sample applications
split theirs:
  controllers/fabric.py      pipeline tables, ARP, routing, spine choice, port events
  controllers/monitor.py     flow-stats polling into per-job bins
  controllers/enforcer.py    DSCP marks, meters, pinned paths, shifts (control files)
  controllers/epoch_loop.py  measure, decide, apply, every epoch (when the run names a policy)
  controllers/rest.py        the REST API and live view on 127.0.0.1
  controllers/state.py       what they share: flows, switches, counters, the run's jobs

Configuration: a JSON file named by $HARMONICS_CONTROLLER_CONFIG (written by the
launcher's caller) with the cluster spec, a status-file path and the REST port.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Dict, Optional

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER,
                                       set_ev_cls)
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

from runs.control import write_status
from scheduling.base import Decision
from workloads.cluster import Cluster, ClusterSpec

from .enforcer import Enforcer
from .fabric import Fabric
from .monitor import Monitor
from .state import JobTable, NetState, flow_active, key_of_match

LOG = logging.getLogger("harmonics.controller")


class HarmonicsController(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        path = os.environ.get("HARMONICS_CONTROLLER_CONFIG")
        if not path:
            raise RuntimeError("HARMONICS_CONTROLLER_CONFIG is not set")
        with open(path) as f:
            self.config = cfg = json.load(f)
        self.cluster = Cluster(ClusterSpec.model_validate(cfg["cluster"]))
        self.status_path = cfg.get("status_path")
        self.started = time.time()
        self.jobs = JobTable(cfg.get("jobs", []), cfg.get("done_dir"))
        self.net = NetState(self.cluster, self.jobs)
        self.lock = self.net.lock
        self.poll_s = float(cfg.get("poll_s", 1.0))
        epoch_s = float(cfg.get("epoch_s", 1.0))
        self.enforcer = Enforcer(self.net, num_classes=int(cfg.get("num_classes", 4)),
                                 bandwidth_scale=float(cfg.get("bandwidth_scale", 1000.0)),
                                 meter_burst_s=float(cfg.get("meter_burst_s", 0.2)))
        self.fabric = Fabric(self.net, self.enforcer)
        self.monitor = Monitor(self.net, self.poll_s, epoch_s,
                               float(cfg.get("estimate_window_s", max(4.0, epoch_s))))
        self._stop = threading.Event()
        self.epochs = None
        if cfg.get("policy"):
            from .epoch_loop import EpochLoop
            self.epochs = EpochLoop(cfg, self.jobs, self.monitor, self.enforcer, self.apply_decisions,
                                    origin=self.started, run_start=self.run_start)
            self._epochs = hub.spawn(self.epochs.loop, self._stop)
        # the live view (controllers/rest.py): throughput samples always, the REST API and
        # page on 127.0.0.1:rest_port when the run asks for them (--live)
        from .rest import LiveView
        self._rest = LiveView(self)
        if cfg.get("rest_port") is not None:
            self._rest.serve(int(cfg["rest_port"]), cfg.get("rest_token"))
        self._status_thread = threading.Thread(target=self._status_loop, daemon=True)
        self._status_thread.start()
        self._poller = hub.spawn(self.monitor.poll_loop, self._stop)

    # ------------------------------------------------- what the live view reads
    @property
    def flows(self) -> dict:
        return self.net.flows

    @property
    def decisions(self) -> Dict[str, Decision]:
        return self.enforcer.decisions

    @property
    def last_record(self) -> Optional[dict]:
        return self.epochs.last_record if self.epochs is not None else None

    def run_start(self) -> Optional[float]:
        return self.jobs.run_start()

    def apply_decisions(self, decisions: Dict[str, Decision]) -> None:
        """Make the network follow the decisions (controllers/enforcer.py)."""
        self.enforcer.apply_decisions(decisions, self.fabric.reinstall)

    # ------------------------------------------------------------------ status
    def status(self) -> dict:
        net = self.net
        with self.lock:
            now = time.time()
            return {
                "time": now,
                "uptime_s": now - self.started,
                "switches": sorted(f"{net.dpid_role[d][0]}{net.dpid_role[d][1]}"
                                   for d in net.datapaths),
                "expected_switches": len(net.dpid_role),
                "unknown_dpids": list(net.unknown_dpids),
                "counters": dict(net.counters),
                "active_flows": len(net.flows),
                "down_links": [f"tor{r}-sp{s_}" for r, s_ in sorted(net.down_links)],
                "policy": self.config.get("policy"),
                "epoch": self.epochs.driver.epoch if self.epochs else None,
                "presolved": self.epochs.presolved if self.epochs else None,
                "decisions": (self.last_record or {}).get("decisions", {}),
                "job_mbps": dict(self.monitor.job_rate_mbps),
                "active_flows_per_spine": {str(k): v for k, v in sorted(net.spines_in_use(now).items())},
                "flows": [{"src": k[0], "dst": k[1], "proto": k[2], "sport": k[3], "dport": k[4],
                           "spine": v["spine"], "pinned": v["pinned"], "since": v["since"],
                           "bytes": v["bytes"], "mbps": v["bps"] / 1e6, "active": flow_active(v, now)}
                          for k, v in net.flows.items()],
            }

    def _write_status(self):
        if self.status_path:
            write_status(self.status_path, self.status())

    def _status_loop(self):
        while not self._stop.wait(0.5):
            try:
                self._write_status()
            except Exception:  # never let status writing kill the controller
                LOG.exception("status write failed")

    def close(self):
        self._stop.set()
        if self.epochs is not None:
            self.epochs.close()
        if self._rest is not None:
            self._rest.stop()
        try:
            self._write_status()
        except Exception:
            pass

    # ------------------------------------------------------------ os-ken events
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _features(self, ev):
        self.fabric.connected(ev.msg.datapath)

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def _gone(self, ev):
        if ev.datapath.id is not None:
            self.fabric.disconnected(ev.datapath)

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def _port_desc(self, ev):
        for p in ev.msg.body:
            self.fabric.port_change(ev.msg.datapath, p, deleted=False)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port_status(self, ev):
        msg = ev.msg
        self.fabric.port_change(msg.datapath, msg.desc, deleted=msg.reason == msg.datapath.ofproto.OFPPR_DELETE)

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _packet_in(self, ev):
        self.fabric.packet_in(ev.msg)

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def _flow_stats(self, ev):
        self.monitor.flow_stats(ev.msg.datapath, ev.msg.body)

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def _flow_removed(self, ev):
        self.fabric.removed(key_of_match(ev.msg.match))
