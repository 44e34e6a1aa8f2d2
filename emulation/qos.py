"""Priority classes on the egress of shared links: DSCP-marked flows sorted by u32
filters into an htb tree that approximates strict priority.

OVS queues (set_queue + linux-htb QoS) do not work on the userspace datapath
(see docs/fidelity.md); what does is: the controller marks each flow's DSCP with
OpenFlow set_field at its first ToR, and every shared link's egress interface
carries this tree (replacing Mininet's single htb class):

    1:   htb root, default = lowest class
    1:1  the link: rate = ceil = link rate
    1:1k class k (k = 0 is the highest): rate = the guarantee's share of the link,
         ceil = link, htb prio k  -> spare bandwidth goes to the lowest prio first

htb gives every class its guaranteed rate before lending the rest by prio, so the
guarantee is the one departure from strict priority: a low class saturated under a
saturated high class keeps about that share of the link (measured in
tests/test_enforcement.py): the scenario's ``cluster.class_guarantee``, or
GUARANTEE_FRACTION when it sets none (``guarantee_of``).  Which DSCP is which class is the
controller's and the hosts' common contract, scheduling/classes.py.
"""
from __future__ import annotations

import subprocess
from typing import Dict, Iterable, List

from scheduling.classes import class_dscp

GUARANTEE_FRACTION = 0.02

# htb meters whole frames, headers included. A full TCP segment on the emulated links (MTU
# 1500, timestamps on: the MSS is 1448, seen in the captures) is 1448 bytes of payload in a
# 1514-byte frame (Ethernet 14 + IPv4 20 + TCP 32), so a shaped link carries the jobs'
# bytes at 95.6% of its rate. The fluid simulator's links carry payload at their full rate;
# simulation.crossval gives them this fraction when it compares the two.
TCP_PAYLOAD_PER_FRAME = 1448 / 1514


def guarantee_of(spec) -> float:
    """The share of a link each class keeps here for a cluster description
    (``ClusterSpec.class_guarantee``; the emulator's own when it sets none)."""
    g = spec.class_guarantee
    return GUARANTEE_FRACTION if g is None else float(g)


def tree_commands(dev: str, mbps: float, num_classes: int,
                  share: float = GUARANTEE_FRACTION) -> List[List[str]]:
    guarantee = max(mbps * share, 0.05)
    lowest = 0x10 + num_classes - 1
    cmds = [
        ["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", f"{lowest:x}"],
        ["tc", "class", "replace", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
         "rate", f"{mbps}mbit", "ceil", f"{mbps}mbit", "burst", "15k", "cburst", "15k", "quantum", "15000"],
    ]
    for k in range(num_classes):
        cid = f"1:{0x10 + k:x}"
        cmds.append(["tc", "class", "replace", "dev", dev, "parent", "1:1", "classid", cid, "htb",
                     "rate", f"{guarantee:.4f}mbit", "ceil", f"{mbps}mbit", "prio", str(k),
                     "burst", "15k", "cburst", "15k", "quantum", "15000"])
        cmds.append(["tc", "qdisc", "replace", "dev", dev, "parent", cid, "handle", f"{0x10 + k:x}:",
                     "pfifo", "limit", "1000"])
    for k in range(num_classes - 1):  # the lowest class is the default: no filter needed
        tos = class_dscp(k, num_classes) << 2
        cmds.append(["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1",
                     "u32", "match", "ip", "dsfield", f"0x{tos:02x}", "0xfc",
                     "flowid", f"1:{0x10 + k:x}"])
    return cmds


def install_classes(devs: Iterable[str], mbps: float, num_classes: int, run=None,
                    share: float = GUARANTEE_FRACTION) -> None:
    """Install the tree on each interface; ``run`` runs a command line in another network
    namespace (a Mininet host's ``cmd``) and returns its output, which must be empty."""
    for dev in devs:
        for cmd in tree_commands(dev, mbps, num_classes, share):
            if run is not None:
                out = run(" ".join(cmd)).strip()
                if out:
                    raise RuntimeError(f"{' '.join(cmd)}: {out}")
                continue
            r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
            if r.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")


def install_classes_map(devs: Dict[str, float], num_classes: int,
                        share: float = GUARANTEE_FRACTION) -> None:
    """Install the tree on every interface of ``devs`` (interface -> link rate, Mbit/s)."""
    for dev, mbps in devs.items():
        install_classes([dev], mbps, num_classes, share=share)

