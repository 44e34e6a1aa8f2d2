"""Command line of the emulator.

  python -m emulation check SCENARIO [--seconds S] [--window S] [--hold S] [--out DIR]
      bring the scenario's cluster up under the controller; every ordered host pair
      connects at once (flow set-up time measured) and pings; measure shaping, spine
      spreading, and concurrent cross-rack flows on every uplink; print tables
  python -m emulation run SCENARIO --policy P --out DIR [--live]
      run a scenario's jobs under a policy (see emulation/runner.py)
  python -m emulation cleanup
      remove what emulation runs that died (SIGKILL) left behind - only theirs
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import time
from pathlib import Path

from workloads.scenario import ScenarioError, load_scenario


def _out_dir(arg, name: str) -> Path:
    if arg:
        return Path(arg)
    return Path("results") / name / time.strftime("%Y%m%d-%H%M%S")


def cmd_check(args) -> int:
    from .net import EmulatedCluster, terminate_as_exception
    from . import stackcheck

    sc = load_scenario(args.scenario)
    out = _out_dir(args.out, f"{sc.name}-check")
    with terminate_as_exception():
        t0 = time.time()
        with EmulatedCluster(sc, out) as ec:
            c = ec.cluster
            rate = ec.emu.link_mbps(c.spec.host_link_gbps)
            print(f"cluster up in {time.time() - t0:.1f} s: {c.spec.racks} racks x "
                  f"{c.rack_sizes[0]} hosts, {c.spec.spines} spines, host links {rate:g} Mbit/s, "
                  f"uplinks {ec.emu.link_mbps(c.spec.uplink_gbps):g} Mbit/s; controller on "
                  f"127.0.0.1:{ec.port}", flush=True)
            if args.hold:
                print("ready", flush=True)
                time.sleep(args.hold)
                return 0
            # every pair at once first: each new flow goes through the controller, so this
            # measures flow set-up under the largest burst the cluster can produce
            setups = stackcheck.connect_all_pairs(ec, window=args.window)
            ok = sum(1 for p in setups if p.done_s is not None)
            conn = np.array([p.connect_s for p in setups if p.connect_s is not None])
            print(f"every pair at once: {ok}/{len(setups)} ordered pairs connected and exchanged 64 KB "
                  f"within {args.window:g} s", flush=True)
            if len(conn):
                print(f"  flow set-up (connect, ARP and controller included): median "
                      f"{1000 * np.median(conn):.0f} ms, p99 {1000 * np.percentile(conn, 99):.0f} ms, "
                      f"max {1000 * conn.max():.0f} ms", flush=True)
            for p in [p for p in setups if p.done_s is None][:5]:
                print(f"  failed: {p.src}->{p.dst}: {p.error}", flush=True)
            loss = stackcheck.ping_all(ec)
            print(f"ping: loss {loss:.0f}% over {len(c.hosts) * (len(c.hosts) - 1)} pairs", flush=True)
            rows = []
            uplinks = []
            if c.spec.racks > 1:
                single = stackcheck.measure_flows(ec, stackcheck.cross_rack_pairs(ec, 1), args.seconds)
                rows += [("single cross-rack", f) for f in single]
                n = min(c.spec.spines, len(c.hosts_in_rack(0)), len(c.hosts_in_rack(1)))
                if n > 1:
                    conc = stackcheck.measure_flows(ec, stackcheck.cross_rack_pairs(ec, n), args.seconds)
                    rows += [(f"{n} concurrent", f) for f in conc]
                _, uplinks = stackcheck.uplink_flows(ec, args.seconds)
            st = ec.controller_status()
            print()
            print(f"{'test':<20} {'flow':<16} {'spine':>5} {'Mbit/s':>8} {'of link':>8}")
            for name, f in rows:
                print(f"{name:<20} {f.src + '->' + f.dst:<16} {str(f.spine):>5} {f.mbps:8.1f} "
                      f"{100 * f.mbps / rate:7.1f}%")
            if uplinks:
                print(f"\nconcurrent cross-rack flows on every uplink ({len(c.hosts)} flows: every host "
                      f"to another rack, spread over the uplinks by the hash route):")
                print(f"{'uplink':<12} {'flows':>5} {'Mbit/s':>8} {'of link':>8}")
                for u in uplinks:
                    print(f"{u.link:<12} {u.flows:>5} {u.mbps:8.1f} {100 * u.mbps / u.rate_mbps:7.1f}%")
                idle = [u.link for u in uplinks if u.flows == 0]
                print(f"uplinks carrying flows: {len(uplinks) - len(idle)}/{len(uplinks)}; rate held: "
                      f"min {100 * min(u.mbps / u.rate_mbps for u in uplinks):.1f}% of the link")
            cnt = st.get("counters", {})
            print(f"\ncontroller: {cnt.get('packet_in', 0)} packet-ins ({cnt.get('packet_in_arp', 0)} ARP, "
                  f"{cnt.get('packet_in_ipv4', 0)} new flows), {cnt.get('arp_replies', 0)} ARP replies; "
                  f"log and status in {out}")
            return 0 if loss == 0 and ok == len(setups) else 1


def cmd_cleanup(args) -> int:
    from .cleanup import clean_stale

    done = clean_stale(verbose=True)
    print(f"{len(done)} leftovers removed" if done else "nothing left behind by earlier runs")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m emulation", description="Harmonics emulator")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="bring a cluster up and check it with real traffic")
    c.add_argument("scenario")
    c.add_argument("--seconds", type=float, default=5.0, help="length of each measured flow")
    c.add_argument("--hold", type=float, default=0, help="just hold the cluster up this long")
    c.add_argument("--window", type=float, default=15.0,
                   help="seconds every pair has to connect and exchange 64 KB (all pairs at once)")
    c.add_argument("--out", default=None)
    c.set_defaults(func=cmd_check)
    k = sub.add_parser("cleanup", help="remove what dead runs left behind")
    k.set_defaults(func=cmd_cleanup)
    from .runner import add_run_parser
    add_run_parser(sub)
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; cleaned up", file=sys.stderr)
        return 130
    except Exception as e:  # one clear line, not a traceback, for known failures
        from .net import EmulationError
        from .jobspec import JobSpecError
        from .runner import RunFailed
        if isinstance(e, (EmulationError, RunFailed, JobSpecError)):
            print(f"error: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
