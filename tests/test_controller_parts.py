"""The controller's parts without a network: the spine choice and re-pathing (pure), the
fabric, monitor and enforcer against fake datapaths (os-ken's real OpenFlow 1.3 parser, no
switch), and the run-file formats the controller shares with the workers."""
from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("OSKEN_HUB_TYPE", "native")

from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser  # noqa: E402

from controllers.enforcer import Enforcer, changed_jobs, meter_burst, meter_kbps, repath  # noqa: E402
from controllers.epoch_loop import PRESTART_S, next_prestart  # noqa: E402
from controllers.fabric import (Fabric, choose_spine, flow_match_fields, link_of_port,  # noqa: E402
                                live_spines)
from controllers.monitor import bin_series, counter_rate, job_rates_mbps, take_bin  # noqa: E402
from controllers.state import JobTable, NetState, dpid_roles, key_of_match, new_flow  # noqa: E402
from runs.control import is_done, read_control, spec_start_at, write_control  # noqa: E402
from runs.logs import (LOG_HEADER, log_line, parse_log_line, parse_telemetry_line,  # noqa: E402
                       read_worker_log, telemetry_line)
from scheduling.base import Decision  # noqa: E402
from scheduling.classes import CLASS_DSCP, class_dscp, priority_dscp  # noqa: E402
from workloads.cluster import Cluster, ClusterSpec, default_spine  # noqa: E402

SPINES = 4


@pytest.fixture
def cluster():
    return Cluster(ClusterSpec(racks=3, hosts_per_rack=2, spines=SPINES, host_link_gbps=100,
                               uplink_gbps=100))


def cross_pairs(c):
    return [(a, b) for a in c.hosts for b in c.hosts if c.crosses_racks(a, b)]


# ---------------------------------------------------------------- spine choice
def test_hash_route_equals_the_simulators(cluster):
    for a, b in cross_pairs(cluster):
        ra, rb = cluster.rack_of(a), cluster.rack_of(b)
        spine, pinned = choose_spine(None, a, b, ra, rb, set(), SPINES)
        assert (spine, pinned) == (default_spine(a, b, SPINES), False)
        # the model's and the simulator's unpinned path is the same one
        assert cluster.path(a, b, spine) == cluster.path(a, b)


def test_dead_link_moves_to_the_next_live_spine(cluster):
    for a, b in cross_pairs(cluster):
        ra, rb = cluster.rack_of(a), cluster.rack_of(b)
        h = default_spine(a, b, SPINES)
        assert choose_spine(None, a, b, ra, rb, {(ra, h)}, SPINES) == ((h + 1) % SPINES, False)
        assert choose_spine(None, a, b, ra, rb, {(rb, h)}, SPINES) == ((h + 1) % SPINES, False)
        down = {(ra, h), (rb, (h + 1) % SPINES)}
        assert choose_spine(None, a, b, ra, rb, down, SPINES) == ((h + 2) % SPINES, False)
        # a link of other racks does not matter
        other = ({0, 1, 2} - {ra, rb}).pop()
        assert choose_spine(None, a, b, ra, rb, {(other, h)}, SPINES) == (h, False)


def test_every_link_dead_still_routes():
    down = {(0, s) for s in range(SPINES)}
    assert live_spines(0, 1, down, SPINES) == list(range(SPINES))
    assert choose_spine(None, "r0h0", "r1h0", 0, 1, down, SPINES) == \
        (default_spine("r0h0", "r1h0", SPINES), False)


def test_pin_is_honoured():
    for pin in range(SPINES):
        assert choose_spine(pin, "r0h0", "r1h1", 0, 1, set(), SPINES) == (pin, True)
    assert choose_spine(SPINES + 1, "r0h0", "r1h1", 0, 1, set(), SPINES) == (1, True)


def test_pin_onto_a_dead_link_is_refused():
    a, b = "r0h0", "r1h1"
    h = default_spine(a, b, SPINES)
    pin = (h + 2) % SPINES
    spine, pinned = choose_spine(pin, a, b, 0, 1, {(1, pin)}, SPINES)
    assert (spine, pinned) == (h, False)


def test_unpinned_job_returns_to_the_hash_route():
    a, b = "r0h0", "r1h1"
    h = default_spine(a, b, SPINES)
    pin = (h + 1) % SPINES
    # pinned, then the decision names no spine: back to the hash route
    assert repath(pin, True, None, a, b, 0, 1, set(), SPINES) == (h, False)
    # pinned and still pinned there: unchanged; pinned elsewhere: moved
    assert repath(pin, True, pin, a, b, 0, 1, set(), SPINES) == (pin, True)
    other = (h + 2) % SPINES
    assert repath(pin, True, other, a, b, 0, 1, set(), SPINES) == (other, True)
    # never pinned: stays where it is
    assert repath(h, False, None, a, b, 0, 1, set(), SPINES) == (h, False)
    # a new pin onto a dead link: a pinned flow goes back to the hash route
    assert repath(pin, True, other, a, b, 0, 1, {(0, other)}, SPINES) == (h, False)
    # ... an unpinned one stays
    assert repath(h, False, other, a, b, 0, 1, {(0, other)}, SPINES) == (h, False)


def test_link_of_port(cluster):
    c = cluster
    for s in range(SPINES):
        assert link_of_port(("tor", 2), c.tor_spine_port(s), 3, SPINES, c.tor_spine_port) == (2, s)
        for r in range(3):
            assert link_of_port(("spine", s), c.spine_tor_port(r), 3, SPINES, c.tor_spine_port) == (r, s)
    assert link_of_port(("tor", 0), c.tor_host_port(0), 3, SPINES, c.tor_spine_port) is None
    assert link_of_port(("spine", 0), 4, 3, SPINES, c.tor_spine_port) is None


def test_flow_match_and_key_round_trip():
    for key in [("10.0.0.1", "10.0.1.2", 6, 40000, 20001), ("10.0.0.1", "10.0.1.2", 17, 5, 6),
                ("10.0.0.1", "10.0.1.2", 1, 0, 0)]:
        assert key_of_match(flow_match_fields(key)) == key
    assert key_of_match({"eth_type": 0x806}) is None


# ------------------------------------------------------------ fake datapaths
class FakeDP:
    ofproto = ofproto_v1_3
    ofproto_parser = ofproto_v1_3_parser

    def __init__(self, dpid):
        self.id = dpid
        self.sent = []

    def send_msg(self, m):
        self.sent.append(m)

    def of(self, cls):
        return [m for m in self.sent if isinstance(m, cls)]


class Desc:
    def __init__(self, port_no, down):
        self.port_no = port_no
        self.state = ofproto_v1_3.OFPPS_LINK_DOWN if down else 0
        self.config = 0


JOBS = [{"name": "jobA", "port_base": 20000, "ranks": 2}, {"name": "jobB", "port_base": 20100, "ranks": 2}]


def make_parts(cluster):
    net = NetState(cluster, JobTable(JOBS))
    enforcer = Enforcer(net, num_classes=4, bandwidth_scale=1000.0)
    fabric = Fabric(net, enforcer)
    dps = {d: FakeDP(d) for d in dpid_roles(cluster)}
    for d, dp in dps.items():
        net.datapaths[d] = dp
    return net, enforcer, fabric, dps


def add_flow(net, fabric, src, dst, sport, dport, job):
    c = net.cluster
    key = (c.host_ip(src), c.host_ip(dst), 6, sport, dport)
    rack, dst_rack = c.rack_of(src), c.rack_of(dst)
    spine, pinned = fabric.spine_for(job, src, dst, rack, dst_rack)
    net.flows[key] = new_flow(spine=spine, pinned=pinned, rack=rack, dst_rack=dst_rack, job=job,
                              src_host=src, dst_host=dst, since=0.0)
    return key


def test_job_of_by_port_either_way(cluster):
    jobs = JobTable(JOBS)
    assert jobs.job_of(("a", "b", 6, 40000, 20001)) == "jobA"
    assert jobs.job_of(("a", "b", 6, 20101, 40000)) == "jobB"
    assert jobs.job_of(("a", "b", 17, 40000, 20001)) is None
    assert jobs.job_of(("a", "b", 6, 40000, 30000)) is None


def test_apply_decisions_pins_marks_and_returns(cluster):
    net, enf, fabric, dps = make_parts(cluster)
    a, b = "r0h0", "r1h1"
    h = default_spine(a, b, SPINES)
    ka = add_flow(net, fabric, a, b, 40000, 20001, "jobA")
    kb = add_flow(net, fabric, a, b, 40001, 20101, "jobB")
    reinstalled = []

    def reinstall(key, f):
        reinstalled.append(key)
        fabric.reinstall(key, f)
    pin = (h + 1) % SPINES
    enf.apply_decisions({"jobA": Decision("jobA", priority=0, spine=pin),
                         "jobB": Decision("jobB", priority=3)}, reinstall)
    assert (net.flows[ka]["spine"], net.flows[ka]["pinned"]) == (pin, True)
    assert (net.flows[kb]["spine"], net.flows[kb]["pinned"]) == (h, False)
    assert sorted(reinstalled) == sorted([ka, kb])
    mods = dps[Cluster.tor_dpid(0)].of(ofproto_v1_3_parser.OFPFlowMod)
    assert len(mods) == 2 and all(m.command == ofproto_v1_3.OFPFC_MODIFY_STRICT for m in mods)
    marks = {m.match["tcp_dst"]: [a_.value for i in m.instructions for a_ in i.actions
                                  if isinstance(a_, ofproto_v1_3_parser.OFPActionSetField)]
             for m in mods}
    assert marks == {20001: [CLASS_DSCP[0]], 20101: [0]}
    # the same decisions again: nothing to do
    reinstalled.clear()
    enf.apply_decisions(dict(enf.decisions), reinstall)
    assert reinstalled == []
    # jobA no longer pinned: back to the hash route; jobB untouched
    enf.apply_decisions({"jobA": Decision("jobA", priority=0), "jobB": Decision("jobB", priority=3)},
                        reinstall)
    assert (net.flows[ka]["spine"], net.flows[ka]["pinned"]) == (h, False)
    assert reinstalled == [ka]


def test_meters_split_reuse_and_release(cluster):
    net, enf, fabric, dps = make_parts(cluster)
    tor0 = dps[Cluster.tor_dpid(0)]
    a, b = "r0h0", "r1h0"
    ka = add_flow(net, fabric, a, b, 40000, 20001, "jobA")
    lid = cluster.links[cluster.path(a, b, net.flows[ka]["spine"])[1]].id     # tor0 > spine
    enf.apply_decisions({"jobA": Decision("jobA", rate_caps_gbps={lid: 10.0})}, fabric.reinstall)
    mm = tor0.of(ofproto_v1_3_parser.OFPMeterMod)
    assert len(mm) == 1 and mm[0].command == ofproto_v1_3.OFPMC_ADD
    assert mm[0].bands[0].rate == meter_kbps(10.0, 1000.0) == 10000
    assert mm[0].bands[0].burst_size == meter_burst(10000, 0.2) == 4096
    assert enf.meters == {(tor0.id, "jobA", lid): (1, 10000)}
    # a smaller cap: the same meter modified
    enf.apply_decisions({"jobA": Decision("jobA", rate_caps_gbps={lid: 5.0})}, fabric.reinstall)
    mm = tor0.of(ofproto_v1_3_parser.OFPMeterMod)
    assert mm[-1].command == ofproto_v1_3.OFPMC_MODIFY and mm[-1].meter_id == 1
    # the job ended: its meter is deleted
    enf.apply_decisions({}, fabric.reinstall)
    assert tor0.of(ofproto_v1_3_parser.OFPMeterMod)[-1].command == ofproto_v1_3.OFPMC_DELETE
    assert enf.meters == {}


def test_spine_downlink_cap_is_split_between_the_tors_feeding_it(cluster):
    net, enf, fabric, dps = make_parts(cluster)
    d = "r2h0"
    pin = 1
    enf.decisions = {"jobA": Decision("jobA", spine=pin)}
    ka = add_flow(net, fabric, "r0h0", d, 40000, 20001, "jobA")
    kb = add_flow(net, fabric, "r1h0", d, 40001, 20000, "jobA")
    assert net.flows[ka]["spine"] == net.flows[kb]["spine"] == pin
    down = f"sp{pin}>tor2"
    enf.apply_decisions({"jobA": Decision("jobA", spine=pin, rate_caps_gbps={down: 8.0})}, fabric.reinstall)
    rates = {m.bands[0].rate for dp in dps.values() for m in dp.of(ofproto_v1_3_parser.OFPMeterMod)}
    assert rates == {meter_kbps(4.0, 1000.0)}


def test_link_down_reroutes_and_up_does_not(cluster):
    net, enf, fabric, dps = make_parts(cluster)
    a, b = "r0h0", "r1h1"
    h = default_spine(a, b, SPINES)
    k = add_flow(net, fabric, a, b, 40000, 20001, "jobA")
    tor0 = dps[Cluster.tor_dpid(0)]
    fabric.port_change(tor0, Desc(cluster.tor_spine_port(h), down=True), deleted=False)
    assert net.down_links == {(0, h)}
    assert net.flows[k]["spine"] == (h + 1) % SPINES
    assert net.counters["flows_rerouted"] == 1 and net.counters["link_events"] == 1
    assert len(tor0.of(ofproto_v1_3_parser.OFPFlowMod)) == 1
    # the same event again changes nothing; the link back up keeps the flow where it is
    fabric.port_change(tor0, Desc(cluster.tor_spine_port(h), down=True), deleted=False)
    assert net.counters["link_events"] == 1
    fabric.port_change(tor0, Desc(cluster.tor_spine_port(h), down=False), deleted=False)
    assert net.down_links == set() and net.flows[k]["spine"] == (h + 1) % SPINES
    # a spine's port to rack 1 down: the flow moves on, to its hash route (up again)
    sp = dps[Cluster.spine_dpid((h + 1) % SPINES)]
    fabric.port_change(sp, Desc(cluster.spine_tor_port(1), down=True), deleted=False)
    assert net.down_links == {(1, (h + 1) % SPINES)}
    assert net.flows[k]["spine"] == h


def test_switch_setup_and_disconnect(cluster):
    net, enf, fabric, dps = make_parts(cluster)
    net.datapaths.clear()
    tor1 = dps[Cluster.tor_dpid(1)]
    fabric.connected(tor1)
    assert net.datapaths == {tor1.id: tor1} and net.counters["switch_connects"] == 1
    mods = tor1.of(ofproto_v1_3_parser.OFPFlowMod)
    # ARP, one per spine port, IPv4, drop; table-miss of table 1; one per host, drop
    assert len(mods) == 1 + SPINES + 2 + 1 + 2 + 1
    assert tor1.of(ofproto_v1_3_parser.OFPMeterMod)[0].meter_id == ofproto_v1_3.OFPM_ALL
    k = add_flow(net, fabric, "r1h0", "r2h0", 40000, 20001, "jobA")
    fabric.disconnected(tor1)
    assert net.datapaths == {} and k not in net.flows
    stranger = FakeDP(0x9999)
    fabric.connected(stranger)
    assert net.unknown_dpids == ["%016x" % 0x9999] and stranger.sent == []


def test_changed_jobs():
    d = Decision("a", priority=1)
    assert changed_jobs({"a": d}, {"a": Decision("a", priority=1)}) == set()
    assert changed_jobs({"a": d}, {"a": Decision("a", priority=0), "b": Decision("b")}) == {"a", "b"}
    assert changed_jobs({"a": d}, {}) == {"a"}


# --------------------------------------------------------------------- monitor
def test_bins_series_and_rates():
    flows = [new_flow(spine=0, pinned=False, rack=0, dst_rack=1, job="j", src_host="a", dst_host="b",
                      since=0.0),
             new_flow(spine=None, pinned=False, rack=0, dst_rack=0, job=None, src_host="a", dst_host="c",
                      since=0.0)]
    flows[0]["bytes"], flows[1]["bytes"] = 1000, 500
    b1 = take_bin(flows)
    assert b1 == {"j": {("a", "b"): 1000.0}}
    assert take_bin(flows) == {}                    # nothing new
    flows[0]["bytes"] = 1500
    b3 = take_bin(flows)
    assert bin_series([b1, {}, b3]) == {"j": {("a", "b"): [1000.0, 0.0, 500.0]}}
    assert job_rates_mbps([b1, b3], 1.0) == {"j": 1500 * 8 / 1e6}
    assert counter_rate(0, None, 100, 1.0) is None
    assert counter_rate(100, 1.0, 300, 2.0) == 1600.0
    assert counter_rate(300, 2.0, 100, 3.0) == 0.0  # a counter reset never gives a negative rate


def test_next_prestart():
    starts = {"a": 10.0, "b": 12.0, "c": None, "d": 3.0}
    assert next_prestart(starts, set(), 5.0) == 10.0 - PRESTART_S
    assert next_prestart(starts, {"a"}, 5.0) == 12.0 - PRESTART_S
    assert next_prestart(starts, {"a", "b"}, 5.0) is None


def test_job_table_reads_starts_and_done_markers(tmp_path):
    spec = tmp_path / "jobA.json"
    jobs = JobTable([{"name": "jobA", "port_base": 20000, "ranks": 1, "spec_path": str(spec)}],
                    str(tmp_path / "done"))
    assert jobs.start("jobA") is None and jobs.run_start() is None
    spec.write_text(json.dumps({"start_at": 100.0}))
    assert jobs.start("jobA") == 100.0 and jobs.run_start() == 100.0
    assert jobs.active(99.0) == set() and jobs.active(100.0) == {"jobA"}
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "jobA").touch()
    assert is_done(tmp_path / "done", "jobA") and jobs.active(200.0) == set()


# ------------------------------------------------------ classes and run files
def test_class_dscp_is_the_tc_filters_contract():
    from emulation.qos import tree_commands
    assert [class_dscp(k, 4) for k in range(4)] == [46, 34, 26, 0]
    assert priority_dscp(-1, 4) == 46 and priority_dscp(9, 4) == 0
    filters = [c for c in tree_commands("eth0", 100.0, 4) if c[:2] == ["tc", "filter"]]
    tos = [int(c[c.index("dsfield") + 1], 16) for c in filters]
    assert tos == [class_dscp(k, 4) << 2 for k in range(3)]
    with pytest.raises(ValueError):
        class_dscp(4, 4)


def test_class_guarantee_is_the_clusters_own():
    from emulation.qos import GUARANTEE_FRACTION, guarantee_of, tree_commands
    from workloads.cluster import ClusterSpec
    spec = ClusterSpec(racks=2, hosts_per_rack=2, host_link_gbps=100, uplink_gbps=100)
    assert guarantee_of(spec) == GUARANTEE_FRACTION
    spec = spec.model_copy(update={"class_guarantee": 0.1})
    leaves = [c for c in tree_commands("eth0", 100.0, 4, guarantee_of(spec))
              if c[:2] == ["tc", "class"] and c[c.index("classid") + 1] != "1:1"]
    assert [c[c.index("rate") + 1] for c in leaves] == ["10.0000mbit"] * 4
    with pytest.raises(ValueError):
        ClusterSpec(racks=2, hosts_per_rack=2, host_link_gbps=100, uplink_gbps=100,
                    class_guarantee=0.3)          # four classes cannot each keep 30%


def test_log_lines_round_trip(tmp_path):
    line = log_line("jobA", 1, 3, 0.5, 0.25, 0.125, 1.0, 100, 200, None, "ok", "a, b\nc")
    d = parse_log_line(line)
    assert d == {"job": "jobA", "rank": 1, "iteration": 3, "start_s": 0.5, "compute_s": 0.25,
                 "comm_s": 0.125, "end_s": 1.0, "sent_bytes": 100, "recv_bytes": 200,
                 "shift_s": None, "status": "ok", "detail": "a; b c"}
    fail = log_line("jobA", 0, -1, None, None, None, None, None, None, None, "fail", "x")
    assert fail == "jobA,0,-1,,,,,,,,fail,x\n"
    p = tmp_path / "log.csv"
    p.write_text(LOG_HEADER + "\n" + line + "truncated,li\n" + fail)
    assert [r["status"] for r in read_worker_log(p)] == ["ok", "fail"]


def test_telemetry_lines():
    assert parse_telemetry_line(telemetry_line(4, "iter", -1, 12.5)) == (4, "iter", -1, 12.5)
    assert parse_telemetry_line("iteration,event,phase,t") is None
    assert parse_telemetry_line("4,iter,x,1") is None


def test_control_files_round_trip(tmp_path):
    p = tmp_path / "jobA.json"
    assert read_control(p) is None and read_control(None) is None
    write_control(p, 0.3, 4, at_iteration=7, dscp=34)
    assert read_control(p) == {"shift_s": 0.3, "seq": 4, "at_iteration": 7, "dscp": 34}
    assert [f.name for f in tmp_path.iterdir()] == ["jobA.json"]    # no temporary file left
    p.write_text("[1, 2]")
    assert read_control(p) is None
    p.write_text('{"shift_s": 0.3, "se')
    assert read_control(p) is None
    assert spec_start_at(tmp_path / "nope.json") is None
