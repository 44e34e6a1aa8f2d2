"""The cluster description alone (no Mininet, no os-ken)."""
import sys

from workloads.cluster import Cluster, ClusterSpec


def test_ports_paths_and_names():
    c = Cluster(ClusterSpec(racks=3, hosts_per_rack=[2, 3, 1], spines=2, host_link_gbps=100,
                            uplink_gbps=200))
    assert c.hosts == ["r0h0", "r0h1", "r1h0", "r1h1", "r1h2", "r2h0"]
    assert c.tor_spine_port(0) == 5 and c.tor_host_port(2) == 3 and c.spine_tor_port(2) == 3
    assert len({c.host_ip(h) for h in c.hosts}) == 6
    assert len({c.host_mac(h) for h in c.hosts}) == 6
    p = [c.links[i].id for i in c.path("r0h1", "r2h0", spine=1)]
    assert p == ["r0h1>tor0", "tor0>sp1", "sp1>tor2", "tor2>r2h0"]
    assert [c.links[i].id for i in c.path("r1h0", "r1h2")] == ["r1h0>tor1", "tor1>r1h2"]
    assert c.link_port("tor1>sp1") == ("tor1", 6) and c.link_port("sp0>tor2") == ("sp0", 3)
    assert abs(c.oversubscription(1) - 3 * 100 / 400) < 1e-9
    # every link of rack 1's ToR belongs to rack 1's scheduler, and only those
    assert {c.links[i].id for i in c.links_of_rack(1)} >= {"tor1>sp0", "sp1>tor1", "r1h2>tor1"}


def test_importable_without_mininet_or_osken():
    import subprocess
    code = ("import sys, workloads.scenario, workloads.cluster, workloads.flows, scheduling.base;"
            "bad=[m for m in sys.modules if m.startswith(('mininet','os_ken'))]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=__import__("conftest").REPO)
