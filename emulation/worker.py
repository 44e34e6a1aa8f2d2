"""A synthetic GPU worker: one OS process per rank, real TCP to its peers.

    python -m emulation.worker --spec RUN/jobs/jobA.json --rank 0

The spec (emulation/jobspec.py, written by the runner with ``write_job_spec``) holds the
job's profile already in emulated units.  What a rank sends to whom in each collective is
taken from workloads/flows.py (``collective_flows``) and nothing else, so the bytes on the
wire are the trace's bytes / bytes_scale:

  allreduce / allgather / reducescatter: ring steps; in step s the rank sends its piece to
      its ring successor while receiving the predecessor's piece; step s+1 starts only when
      both are done (synchronised steps, as in NCCL's ring);
  alltoall: one step, every peer at once in both directions;
  sendrecv: one step, send to the next pipeline stage while receiving from the previous;
  broadcast: chain from the group's first rank, pipelined: a rank forwards only bytes it
      has already received.

Connections: one persistent TCP connection per directed (sender, receiver) pair that any
collective needs, opened by the sender to the receiver's listen port (port_base + rank)
and announced with a 12-byte hello (not counted as payload).  TCP_NODELAY, the spec's
congestion control (TCP_CONGESTION) and, if given, the DSCP are set on every socket.

Timeline: wait for start_at; before each iteration read the control file (see
jobspec.py); then run the phases.  A compute phase is a sleep.  A collective with
``overlap`` f that follows a compute phase of T seconds may start (1-f)*T into it and the
compute goes on alongside; collectives run one after another in phase order; a phase
after them starts when everything before it (compute included) has ended.

Log and telemetry: one whole line per write (runs/logs.py has both formats): every rank
appends its iterations, its start-up and its end to the spec's log_path (shared by the job's
ranks); rank 0 appends its iteration and collective starts to the telemetry_path.  Exit
codes: 0 done, 1 a peer lost or a connect deadline missed, 2 a bad spec or setup, 128+signal
on SIGTERM/SIGINT.
"""
from __future__ import annotations

import argparse
import errno
import os
import selectors
import signal
import socket
import struct
import sys
import time
import zlib
from typing import Dict, List, Optional, Tuple

from runs.control import read_control
from runs.logs import log_line, telemetry_line
from workloads.jitter import ComputeNoise

from .jobspec import JobSpecError, collectives_of, load_job_spec

HELLO = struct.Struct("!4sII")   # magic, crc32(job name), sender rank
MAGIC = b"HMNC"
BUF_BYTES = 1 << 20              # one preallocated buffer for sends, one for receives
SELECT_TICK = 0.5                # seconds between progress-timeout checks

EXIT_OK, EXIT_FAIL, EXIT_SETUP = 0, 1, 2


class PeerLost(Exception):
    """A peer went away (EOF, reset, no progress): the job cannot go on."""


class SetupError(Exception):
    """The worker cannot run (bad spec, cannot bind, congestion control unknown)."""


class Terminated(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum, frame):
    raise Terminated(signum)


# ---------------------------------------------------------------------------
# the plan: what this rank sends and receives, step by step
# ---------------------------------------------------------------------------

class CollectivePlan:
    """One collective seen from one rank: per step, (peer, bytes) to send and receive."""

    def __init__(self, index: int, coll, rank: int, n: int):
        from workloads.flows import collective_flows
        self.index = index
        self.op = coll.op
        self.overlap = float(coll.overlap)
        sends = [f for f in collective_flows(coll, n) if f.src == rank]
        recvs = [f for f in collective_flows(coll, n) if f.dst == rank]
        for fl in (sends, recvs):
            pairs = [(f.src, f.dst) for f in fl]
            if len(set(pairs)) != len(pairs):  # pragma: no cover - flows.py never does this
                raise SetupError(f"phase {index}: two flows between the same ranks")
        self.steps = max([f.steps for f in sends + recvs] + [0])
        self.send_steps: List[List[Tuple[int, int]]] = [[] for _ in range(self.steps)]
        self.recv_steps: List[List[Tuple[int, int]]] = [[] for _ in range(self.steps)]
        for fl, out in ((sends, self.send_steps), (recvs, self.recv_steps)):
            for f in fl:
                peer = f.dst if fl is sends else f.src
                for s, b in enumerate(_split(f.bytes, f.steps)):
                    out[s].append((peer, b))
        self.sent_bytes = sum(b for st in self.send_steps for _, b in st)
        self.recv_bytes = sum(b for st in self.recv_steps for _, b in st)
        # broadcast chain: forward only what has arrived
        self.pipelined = self.op == "broadcast" and bool(sends) and bool(recvs)
        self.out_peers = {f.dst for f in sends}
        self.in_peers = {f.src for f in recvs}


def _split(total: float, steps: int) -> List[int]:
    t = int(round(total))
    return [t * (s + 1) // steps - t * s // steps for s in range(steps)]


# ---------------------------------------------------------------------------
# the worker
# ---------------------------------------------------------------------------

class Worker:
    def __init__(self, spec: dict, rank: int, log_fd: Optional[int] = None):
        self.spec = spec
        self.rank = rank
        self.n = spec["num_ranks"]
        if not 0 <= rank < self.n:
            raise SetupError(f"rank {rank} out of range (job has {self.n} ranks)")
        self.job = spec["job"]
        self.start_at = float(spec["start_at"])
        self.io_timeout = float(spec.get("io_timeout_s", 20.0))
        self.connect_timeout = float(spec.get("connect_timeout_s", 60.0))
        self.cc = spec.get("tcp_cc")
        self.dscp = spec.get("dscp")
        self.me = spec["ranks"][rank]
        self.launch = time.time()
        self.log_fd = log_fd
        self.phases = spec["phases"]
        seed, self.job_index = spec.get("jitter_seed") or (0, 0)
        self.noise = ComputeNoise(float(spec.get("compute_jitter") or 0.0), seed)
        self.plans: Dict[int, CollectivePlan] = {
            i: CollectivePlan(i, c, rank, self.n) for i, c in collectives_of(spec)}
        self.out_peers = sorted(set().union(*[p.out_peers for p in self.plans.values()]))
        self.in_peers = sorted(set().union(*[p.in_peers for p in self.plans.values()]))
        self.out_socks: Dict[int, socket.socket] = {}
        self.in_socks: Dict[int, socket.socket] = {}
        self.listener: Optional[socket.socket] = None
        self.sel = selectors.DefaultSelector()
        self.sendbuf = memoryview(bytearray(BUF_BYTES))
        self.recvbuf = memoryview(bytearray(BUF_BYTES))
        self.job_tag = zlib.crc32(self.job.encode())
        self.last_seq = None
        self.tele_fd: Optional[int] = None
        path = spec.get("telemetry_path")
        if path and rank == 0:
            self.tele_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        # progress of the iteration in flight, for failure lines
        self.iteration = -1
        self.it_start: Optional[float] = None
        self.it_sent = 0
        self.it_recv = 0

    # -- logging ----------------------------------------------------------
    def rel(self, t: float) -> float:
        return t - self.start_at

    def log(self, iteration, start_s, compute_s, comm_s, end_s, sent, recv, shift, status,
            detail="") -> None:
        if self.log_fd is not None:
            os.write(self.log_fd, log_line(self.job, self.rank, iteration, start_s, compute_s,
                                           comm_s, end_s, sent, recv, shift, status,
                                           detail).encode())

    def telemetry(self, iteration: int, event: str, phase: int, t: float) -> None:
        if self.tele_fd is not None:
            os.write(self.tele_fd, telemetry_line(iteration, event, phase, t).encode())

    def log_end(self, status: str, detail: str) -> None:
        self.log(self.iteration, None if self.it_start is None else self.rel(self.it_start),
                 None, None, self.rel(time.time()), self.it_sent, self.it_recv, None,
                 status, detail)

    # -- sockets ----------------------------------------------------------
    def _sockopts(self, s: socket.socket) -> None:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.cc:
            try:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, self.cc.encode())
            except OSError as e:
                raise SetupError(f"congestion control {self.cc!r} unavailable ({e.strerror})")
        if self.dscp is not None:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, int(self.dscp) << 2)

    def connect_all(self) -> None:
        deadline = self.launch + self.connect_timeout
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sockopts(ls)
        try:
            ls.bind((self.me["ip"], int(self.me["port"])))
        except OSError as e:
            ls.close()
            raise SetupError(f"cannot listen on {self.me['ip']}:{self.me['port']} ({e.strerror})")
        ls.listen(max(16, len(self.in_peers) + 4))
        self.listener = ls
        # the peers' handshakes complete in our backlog, so connect first, accept after
        for peer in self.out_peers:
            self.out_socks[peer] = self._connect(peer, deadline)
        while len(self.in_socks) < len(self.in_peers):
            left = deadline - time.time()
            if left <= 0:
                missing = sorted(set(self.in_peers) - set(self.in_socks))
                raise PeerLost(f"connect deadline: no connection from ranks {missing}")
            ls.settimeout(min(left, SELECT_TICK))
            try:
                c, addr = ls.accept()
            except socket.timeout:
                continue
            try:
                c.settimeout(max(0.1, min(5.0, deadline - time.time())))
                hello = _recv_exact(c, HELLO.size)
                magic, tag, peer = HELLO.unpack(hello)
                if magic != MAGIC or tag != self.job_tag or peer not in self.in_peers \
                        or peer in self.in_socks:
                    raise ValueError("unexpected hello")
            except (OSError, ValueError, EOFError):
                c.close()
                continue
            self._sockopts(c)
            self.in_socks[peer] = c
        ls.close()
        self.listener = None
        for s in list(self.out_socks.values()) + list(self.in_socks.values()):
            s.setblocking(False)

    def _connect(self, peer: int, deadline: float) -> socket.socket:
        info = self.spec["ranks"][peer]
        addr = (info["ip"], int(info["port"]))
        last_err = "no attempt"
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise PeerLost(f"connect deadline: cannot reach rank {peer} at "
                               f"{addr[0]}:{addr[1]} ({last_err})")
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                self._sockopts(s)
                s.bind((self.me["ip"], 0))
                s.settimeout(min(left, 3.0))
                s.connect(addr)
                s.settimeout(max(0.1, min(5.0, deadline - time.time())))
                s.sendall(HELLO.pack(MAGIC, self.job_tag, self.rank))
                return s
            except SetupError:
                s.close()
                raise
            except OSError as e:
                s.close()
                last_err = e.strerror or type(e).__name__
                if e.errno == errno.EADDRNOTAVAIL:
                    raise SetupError(f"cannot use address {self.me['ip']} ({last_err})")
                time.sleep(min(0.2, max(0.0, deadline - time.time())))

    def set_dscp(self, dscp) -> None:
        """Mark the job's packets from the host on (the controller's class for the job), so a
        host NIC shared by several jobs' workers can prioritise too."""
        try:
            dscp = int(dscp)
        except (TypeError, ValueError):
            return
        if not 0 <= dscp <= 63 or dscp == self.dscp:
            return
        self.dscp = dscp
        for s in list(self.out_socks.values()) + list(self.in_socks.values()):
            try:
                s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
            except OSError:
                pass

    def close(self) -> None:
        if self.tele_fd is not None:
            os.close(self.tele_fd)
            self.tele_fd = None
        for s in list(self.out_socks.values()) + list(self.in_socks.values()):
            try:
                s.close()
            except OSError:
                pass
        if self.listener is not None:
            self.listener.close()
        self.sel.close()

    # -- data movement ----------------------------------------------------
    def transfer(self, sends: List[Tuple[int, int]], recvs: List[Tuple[int, int]],
                 pipelined: bool = False) -> None:
        """Send and receive concurrently until every (peer, bytes) is done.  With
        ``pipelined`` (one send, one receive) the send never gets ahead of the receive."""
        s_left = {self.out_socks[p]: b for p, b in sends if b > 0}
        r_left = {self.in_socks[p]: b for p, b in recvs if b > 0}
        peer_of = {self.out_socks[p]: p for p, _ in sends}
        peer_of.update({self.in_socks[p]: p for p, _ in recvs})
        gate_send = next(iter(s_left), None) if pipelined else None
        gate_recv = next(iter(r_left), None) if pipelined else None
        total_recv = sum(r_left.values())
        sent_so_far = 0
        got_so_far = 0
        registered: Dict[socket.socket, int] = {}
        sel = self.sel
        last_progress = time.monotonic()
        try:
            while s_left or r_left:
                # what to wait for: a gated send waits for data it may forward
                want: Dict[socket.socket, int] = {}
                for s in s_left:
                    if s is gate_send and sent_so_far >= got_so_far and gate_recv in r_left:
                        continue
                    want[s] = selectors.EVENT_WRITE
                for s in r_left:
                    want[s] = selectors.EVENT_READ
                for s in list(registered):
                    if s not in want:
                        sel.unregister(s)
                        del registered[s]
                for s, ev in want.items():
                    if s not in registered:
                        sel.register(s, ev)
                        registered[s] = ev
                now = time.monotonic()
                wait = min(SELECT_TICK, max(0.0, last_progress + self.io_timeout - now))
                events = sel.select(timeout=wait)
                moved = False
                for key, ev in events:
                    s = key.fileobj
                    if s in r_left:
                        try:
                            k = s.recv_into(self.recvbuf, min(r_left[s], BUF_BYTES))
                        except (BlockingIOError, InterruptedError):
                            continue
                        except OSError as e:
                            raise PeerLost(f"receive from rank {peer_of[s]}: "
                                           f"{e.strerror or type(e).__name__}")
                        if k == 0:
                            raise PeerLost(f"rank {peer_of[s]} closed the connection (EOF)")
                        r_left[s] -= k
                        got_so_far += k
                        self.it_recv += k
                        moved = True
                        if r_left[s] == 0:
                            del r_left[s]
                    elif s in s_left:
                        n = min(s_left[s], BUF_BYTES)
                        if s is gate_send and gate_recv is not None:
                            n = min(n, got_so_far - sent_so_far) if got_so_far < total_recv else n
                        if n <= 0:
                            continue
                        try:
                            k = s.send(self.sendbuf[:n])
                        except (BlockingIOError, InterruptedError):
                            continue
                        except OSError as e:
                            raise PeerLost(f"send to rank {peer_of[s]}: "
                                           f"{e.strerror or type(e).__name__}")
                        s_left[s] -= k
                        sent_so_far += k
                        self.it_sent += k
                        moved = k > 0 or moved
                        if s_left[s] == 0:
                            del s_left[s]
                now = time.monotonic()
                if moved:
                    last_progress = now
                elif now - last_progress >= self.io_timeout:
                    waiting = sorted({peer_of[s] for s in list(s_left) + list(r_left)})
                    raise PeerLost(f"no progress for {self.io_timeout:g}s with ranks {waiting}")
        finally:
            for s in registered:
                try:
                    sel.unregister(s)
                except (KeyError, ValueError):
                    pass

    def run_collective(self, plan: CollectivePlan) -> None:
        for s in range(plan.steps):
            self.transfer(plan.send_steps[s], plan.recv_steps[s], plan.pipelined)

    # -- control ----------------------------------------------------------
    def control_shift(self, iteration: int) -> float:
        d = read_control(self.spec.get("control_path"))  # None: none yet, or being replaced
        if d is not None and d.get("dscp") is not None:
            self.set_dscp(d["dscp"])
        if d is None or "seq" not in d or d["seq"] == self.last_seq:
            return 0.0
        at = d.get("at_iteration")
        if at is not None and iteration < int(at):
            return 0.0
        try:
            shift = float(d.get("shift_s", 0.0))
        except (TypeError, ValueError):
            shift = 0.0
        self.last_seq = d["seq"]
        return max(0.0, shift)

    # -- the job ----------------------------------------------------------
    def run_iteration(self) -> Tuple[float, float]:
        """Run the phases once; (compute seconds, collective seconds)."""
        compute_s = comm_s = 0.0
        c_start = c_len = None
        c_end = 0.0
        factor = self.noise.factor(self.job_index)      # this iteration's compute noise
        for i, p in enumerate(self.phases):
            if p["op"] == "compute":
                _sleep_until(c_end)  # the previous compute (if overlapped) must be over
                c_start, c_len = time.time(), float(p["seconds"]) * factor
                c_end = c_start + c_len
                compute_s += c_len
            else:
                plan = self.plans[i]
                if c_start is not None:
                    _sleep_until(c_start + (1.0 - plan.overlap) * c_len)
                t0 = time.time()
                self.telemetry(self.iteration, "comm", i, t0)
                self.run_collective(plan)
                comm_s += time.time() - t0
        _sleep_until(c_end)
        return compute_s, comm_s

    def run(self) -> int:
        self.connect_all()
        sc = self.spec.get("scale") or {}
        self.log(-1, self.rel(self.launch), None, None, self.rel(time.time()), 0, 0, None,
                 "ready", f"out={self.out_peers} in={self.in_peers} "
                 f"time_scale={sc.get('time_scale', 1)} bytes_scale={sc.get('bytes_scale', 1)}"
                 .replace(", ", " "))
        iterations = int(self.spec["iterations"])
        next_start = self.start_at
        first = last = None
        tot_c = tot_m = 0.0
        tot_s = tot_r = 0
        for it in range(iterations):
            self.iteration = it
            self.it_start = None
            self.it_sent = self.it_recv = 0
            _sleep_until(next_start)
            # the control file is read at the iteration's start (after start_at for the
            # first one: the controller decides a job just before it starts)
            shift = self.control_shift(it)
            if shift > 0.0:
                next_start += shift
                _sleep_until(next_start)
            t0 = time.time()
            self.it_start = t0
            self.telemetry(it, "iter", -1, t0)
            c, m = self.run_iteration()
            t1 = time.time()
            self.log(it, self.rel(t0), c, m, self.rel(t1), self.it_sent, self.it_recv, shift, "ok")
            first = t0 if first is None else first
            last = t1
            tot_c += c
            tot_m += m
            tot_s += self.it_sent
            tot_r += self.it_recv
            next_start = t1
        self.iteration = iterations
        self.log(iterations, None if first is None else self.rel(first), tot_c, tot_m,
                 None if last is None else self.rel(last), tot_s, tot_r, None, "done")
        return EXIT_OK


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        k = s.recv(n - len(buf))
        if not k:
            raise EOFError
        buf += k
    return buf


# --- timers (clock and timer settings only) ---------------------------------
PR_SET_TIMERSLACK = 29


def set_timer_slack(ns: int) -> bool:
    """Let the kernel fire this process's timers at most ``ns`` late (0: keep its default,
    50 us); the spec's ``timer_slack_ns``.  False if prctl is unavailable."""
    if not ns or ns <= 0:
        return False
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, int(ns), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _sleep_until(t: float) -> None:
    while True:
        d = t - time.time()
        if d <= 0:
            return
        time.sleep(min(d, 1.0))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Harmonics synthetic GPU worker (one rank of a job)")
    ap.add_argument("--spec", required=True, help="job spec JSON (emulation/jobspec.py)")
    ap.add_argument("--rank", required=True, type=int)
    args = ap.parse_args(argv)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    try:
        spec = load_job_spec(args.spec)
    except JobSpecError as e:
        print(f"worker: {e}", file=sys.stderr)
        return EXIT_SETUP
    try:
        fd = os.open(spec["log_path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as e:
        print(f"worker: cannot open log {spec['log_path']} ({e.strerror})", file=sys.stderr)
        return EXIT_SETUP
    w = None
    try:
        set_timer_slack(int(spec.get("timer_slack_ns") or 0))
        w = Worker(spec, args.rank, fd)
        return w.run()
    except Terminated as t:
        if w is not None:
            w.log_end("stopped", f"signal {t.signum}")
        return 128 + t.signum
    except PeerLost as e:
        print(f"worker {spec['job']}/{args.rank}: {e}", file=sys.stderr)
        w.log_end("fail", str(e))
        return EXIT_FAIL
    except (SetupError, KeyError, TypeError, ValueError) as e:
        msg = f"setup: {e}" if isinstance(e, SetupError) else f"bad spec: {type(e).__name__} {e}"
        print(f"worker {spec['job']}/{args.rank}: {msg}", file=sys.stderr)
        if w is not None:
            w.log_end("fail", msg)
        else:
            os.write(fd, log_line(spec["job"], args.rank, -1, None, None, None, None, None, None,
                                  None, "fail", msg).encode())
        return EXIT_SETUP
    finally:
        if w is not None:
            # a signal arriving now must not skip the socket cleanup
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            w.close()
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
