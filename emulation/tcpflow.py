"""A single long TCP flow with its goodput measured at the receiver (one connection,
unlike iperf3 which adds a control connection).  Used by the stack checks and tests.

  python -m emulation.tcpflow serve --port P [--seconds S]      prints JSON {bytes, seconds, mbps}
  python -m emulation.tcpflow send --to IP --port P --seconds S [--cc cubic]
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
import time


def serve(port: int, seconds: float, skip: float) -> dict:
    with socket.socket() as ls:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("0.0.0.0", port))
        ls.listen(1)
        ls.settimeout(30)
        conn, _ = ls.accept()
    buf = bytearray(1 << 16)
    total = 0
    counted = 0
    t0 = time.time()
    t_count = None
    conn.settimeout(10)
    with conn:
        while True:
            n = conn.recv_into(buf)
            if n == 0:
                break
            now = time.time()
            total += n
            if now - t0 >= skip:  # leave out slow start
                if t_count is None:
                    t_count = now
                else:
                    counted += n
            if seconds and now - t0 >= seconds:
                break
    dur = (time.time() - t_count) if t_count else 0.0
    return {"bytes": total, "seconds": dur, "mbps": counted * 8 / dur / 1e6 if dur > 0 else 0.0}


def send(to: str, port: int, seconds: float, cc: str | None) -> None:
    s = socket.socket()
    if cc:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    deadline = time.time() + 10
    while True:
        try:
            s.connect((to, port))
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.1)
            s.close()
            s = socket.socket()
    chunk = memoryview(bytearray(1 << 16))
    end = time.time() + seconds
    try:
        while time.time() < end:
            s.sendall(chunk)
    except OSError:
        pass
    s.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("serve")
    a.add_argument("--port", type=int, required=True)
    a.add_argument("--seconds", type=float, default=0)
    a.add_argument("--skip", type=float, default=1.0, help="seconds left out of the rate (slow start)")
    b = sub.add_parser("send")
    b.add_argument("--to", required=True)
    b.add_argument("--port", type=int, required=True)
    b.add_argument("--seconds", type=float, required=True)
    b.add_argument("--cc", default=None)
    args = ap.parse_args(argv)
    if args.cmd == "serve":
        print(json.dumps(serve(args.port, args.seconds, args.skip)), flush=True)
    else:
        send(args.to, args.port, args.seconds, args.cc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
