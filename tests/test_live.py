"""The live view: the controller's REST API and page during a real emulated run, loaded in
headless Chromium; the same page for finished runs (`analysis serve`); loopback only; bad
requests get 4xx; the server ends with the run."""
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml
from lxml import html as lxml_html

from controllers.rest import serve_run_dir

from conftest import REPO, run_cli

PAIR = REPO / "scenarios" / "pair-shared-spine.yaml"
REFERENCE_RUN = REPO / "results" / "reference" / "pair-shared-spine" / "harmonics"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


# ------------------------------------------------------------------ helpers
def chromium_dom(url, tmp_path, budget_ms=6000):
    """The page's DOM after ``budget_ms`` of virtual time, as lxml tree."""
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium missing: run ./scripts/setup.sh (installs Debian's chromium)")
    profile = tmp_path / f"chromium-{time.monotonic_ns()}"
    r = subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                        f"--virtual-time-budget={budget_ms}", "--dump-dom", url],
                       capture_output=True, text=True, timeout=120)
    shutil.rmtree(profile, ignore_errors=True)
    assert r.returncode == 0 and "<html" in r.stdout, r.stderr[-2000:]
    return lxml_html.fromstring(r.stdout)


def fetch(url, method="GET", body=None, headers=None):
    """(status, parsed JSON or text) of one request; HTTP errors are returned, not raised."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            status, raw, ctype = r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        status, raw, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
    text = raw.decode()
    assert "Traceback" not in text
    return status, (json.loads(text) if ctype.startswith("application/json") else text)


def raw_request(port, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


def refused(host, port) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return False
    except OSError:
        return True


def check_page(dom, jobs, want_throughput=True):
    """Both jobs, a decision with its reason, charts with data points."""
    rows = dom.xpath('//table[@id="jobs"]//tr[@data-job]/@data-job')
    assert sorted(rows) == sorted(jobs)
    cells = dom.xpath('//span[contains(@class, "decision") and @data-reason != ""]')
    assert cells, "no decision with a reason in the timeline"
    title = cells[0].get("title")
    assert "reason: " + cells[0].get("data-reason") in title and "class" in title
    reasons = dom.xpath('//table[@id="changes"]//td[@class="reason"]/text()')
    assert any(r.strip() for r in reasons)
    pts = [int(p) for p in dom.xpath('//div[@id="chart-iter"]//div[@data-chart]/@data-points')]
    assert pts and pts[0] > 0, "the iteration-time chart has no points"
    assert dom.xpath('//div[@id="chart-iter"]//canvas'), "uPlot drew no canvas"
    if want_throughput:
        tp = [int(p) for p in dom.xpath('//div[@id="throughput"]//div[@data-chart]/@data-points')]
        assert tp and max(tp) > 0, "no throughput chart with points"


def serve_cli(run_dir):
    p = subprocess.Popen([sys.executable, "-m", "analysis", "serve", str(run_dir)], cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    if m is None:
        p.kill()
        pytest.fail(f"analysis serve printed {line!r}; stderr {p.stderr.read()!r}")
    return p, m.group(0), int(m.group(1))


def stop_cli(p, port):
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=10) == 0
    assert refused("127.0.0.1", port)


# ------------------------------------------------------------------ finished runs
def test_finished_simulated_run_through_analysis_serve(tmp_path):
    out = tmp_path / "sim"
    r = run_cli("simulation", "run", str(PAIR), "--policy", "harmonics", "--out", str(out))
    assert r.returncode == 0, r.stderr
    p, url, port = serve_cli(out)
    try:
        st, status = fetch(url + "api/v1/status")
        assert st == 200 and status["kind"] == "simulated" and status["live"] is False
        st, tp = fetch(url + "api/v1/throughput")
        assert tp["available"] and any(max(s["gbps"]) > 0 for s in tp["series"])
        dom = chromium_dom(url, tmp_path)
        check_page(dom, ["jobA", "jobB"])
        # harmonics shifts jobB: the simulator's phase control recorded its phases (phase.csv)
        st, ph = fetch(url + "api/v1/phase")
        assert ph["available"] and ph["jobs"]["jobB"]["ref"] == "jobA" and ph["jobs"]["jobB"]["error"]
        assert not dom.xpath('//div[@id="phase"]/span[@class="na"]')
        # no fidelity section in a simulated run: said so, the page still draws the rest
        assert dom.xpath('//div[@id="fidelity"]/span[@class="na"]/text()') == ["not available"]
    finally:
        stop_cli(p, port)


def _with_phase_and_fidelity(dst):
    """A finished emulated run whose files carry phase control's and the fidelity monitor's
    records (the formats those features write)."""
    shutil.copytree(REFERENCE_RUN, dst)
    recs = [json.loads(l) for l in open(dst / "decisions.jsonl")]
    for i, r in enumerate(recs):
        # the controller's per-epoch phase samples (controllers/control_channel.py)
        r["phase_samples"] = [{"epoch": i, "time_s": 0.1 * i, "job": "jobB", "ref": "jobA",
                               "period_s": 0.05, "beat_s": 0.05, "offset_s": 0.02,
                               "decided_s": 0.022, "error": 0.004 / (1 + i),
                               "correction_s": 0.003 if i == 2 else 0.0}]
        r["corrections"] = [{"job": "jobB", "delay_s": 0.003, "error": 0.004}] if i == 2 else []
    (dst / "decisions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    lines = (dst / "summary.csv").read_text().splitlines()
    lines = [lines[0] + ",phase_error,corrections"] + [l + ",0.0012,1" for l in lines[1:]]
    (dst / "summary.csv").write_text("\n".join(lines) + "\n")
    run = json.loads((dst / "run.json").read_text())
    run["fidelity"] = {"verdict": "suspect: iteration times 12% above the model", "iter_error": 0.12}
    (dst / "run.json").write_text(json.dumps(run))


def test_phase_and_fidelity_are_served_and_drawn(tmp_path):
    run = tmp_path / "run"
    _with_phase_and_fidelity(run)
    srv = serve_run_dir(run)
    try:
        _, ph = fetch(srv.url + "api/v1/phase")
        assert ph["available"] and ph["jobs"]["jobB"]["ref"] == "jobA"
        assert len(ph["jobs"]["jobB"]["error"]) == len(open(run / "decisions.jsonl").readlines())
        assert [c["job"] for c in ph["corrections"]] == ["jobB"] and ph["summary"]["jobA"]["corrections"] == 1
        _, fi = fetch(srv.url + "api/v1/fidelity")
        assert fi["verdict"].startswith("suspect") and fi["iter_error"] == 0.12
        dom = chromium_dom(srv.url, tmp_path)
        check_page(dom, ["jobA", "jobB"], want_throughput=False)
        assert "suspect: iteration times 12% above the model" in dom.xpath('string(//div[@id="fidelity"])')
        pts = [int(p) for p in dom.xpath('//div[@id="phase"]//div[@data-chart]/@data-points')]
        assert pts and pts[0] > len(ph["jobs"]["jobB"]["t"])       # errors plus the correction
        assert dom.xpath('//table[@id="jobs"]//tr[@data-job="jobB"]/td[7]/text()') == ["0.0012"]
    finally:
        srv.stop()


def test_bad_requests_get_4xx_and_damaged_files_are_skipped(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(REFERENCE_RUN, run)
    with open(run / "decisions.jsonl", "a") as f:
        f.write('{"epoch": "x", "decisions": 5}\n{"epoch": 99, "decis')     # damaged, half-written
    (run / "run.json").write_text("{not json")
    srv = serve_run_dir(run)
    base = srv.url
    try:
        assert fetch(base + "api/v1/epochs?since=-1")[0] == 400
        assert fetch(base + "api/v1/epochs?limit=abc")[0] == 400
        assert fetch(base + "api/v2/status")[0] == 404
        assert fetch(base + "static/../rest.py")[0] == 404
        assert fetch(base + "static/%2e%2e/rest.py")[0] == 404
        st, body = fetch(base + "api/v1/status", method="POST", body=b"{}")
        assert st == 405 and "error" in body
        # a finished run's view is read-only: no notes, token or not
        assert fetch(base + "api/v1/notes", method="POST", body=b'{"text": "x"}',
                     headers={"Authorization": "Bearer x"})[0] == 405
        # addressed by another name (DNS rebinding): refused
        assert fetch(base + "api/v1/status", headers={"Host": "evil.example:80"})[0] == 403
        assert raw_request(srv.port, b"GET / HTTP/1.1 junk\r\n\r\n")[9:12] == b"400"
        assert raw_request(srv.port, b"GET / HTTP/x.y\r\n\r\n")[9:12] == b"400"
        assert raw_request(srv.port, b"BREW /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")[9:12] == b"405"
        assert raw_request(srv.port, b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n")[9:12] == b"414"
        st, ep = fetch(base + "api/v1/epochs")
        assert st == 200 and ep["total"] == len(open(REFERENCE_RUN / "decisions.jsonl").readlines())
        assert fetch(base + "api/v1/status")[1]["status"] == "unknown"     # run.json unreadable
    finally:
        srv.stop()
    assert refused("127.0.0.1", srv.port)


def test_analysis_serve_bad_directory_is_one_line_exit_2(tmp_path):
    r = run_cli("analysis", "serve", str(tmp_path / "none"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such directory" in r.stderr
    r = run_cli("analysis", "serve", str(REFERENCE_RUN.parent))
    assert r.returncode == 2 and "its runs:" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("analysis", "serve", str(REFERENCE_RUN), "--port", "70000")
    assert r.returncode == 2 and r.stderr.startswith("error: argument --port")


# ------------------------------------------------------------------ a live emulated run
def _root_addresses():
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    return [m for m in re.findall(r"inet (\d+\.\d+\.\d+\.\d+)", out) if not m.startswith("127.")]


def _connect_from_namespace(pid, host, port) -> bool:
    code = (f"import socket\ntry:\n socket.create_connection(({host!r}, {port}), timeout=2)\n"
            f" print('connected')\nexcept OSError as e:\n print('refused', e)")
    r = subprocess.run(["nsenter", "-t", str(pid), "-n", sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.startswith("connected")


def _wait_for(fn, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}")


def _worker_pid(out):
    r = subprocess.run(["pgrep", "-f", f"emulation.worker --spec {out}/specs/jobA.json"],
                       capture_output=True, text=True)
    pids = [int(x) for x in r.stdout.split()]
    return pids[0] if pids else None


def test_live_run_page_in_chromium_loopback_only_and_stops_with_the_run(emulation_ready, tmp_path):
    sc = yaml.safe_load(PAIR.read_text())
    for j in sc["jobs"]:
        j["iterations"] = 60            # long enough to look at while it runs
    scen = tmp_path / "pair-live.yaml"
    scen.write_text(yaml.safe_dump(sc))
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "emulation", "run", str(scen), "--policy", "harmonics",
                             "--isolated", "analytical", "--live", "--out", str(out)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        m = re.search(r"live view: (http://127\.0\.0\.1:(\d+)/)\s+\(token for POST /api/v1/notes: (\S+)\)", line)
        assert m, f"the run printed {line!r}"
        url, port, token = m.group(1), int(m.group(2)), m.group(3)

        def ready():
            jobs = fetch(url + "api/v1/jobs")[1]["jobs"]
            eps = fetch(url + "api/v1/epochs")[1]["epochs"]
            tp = fetch(url + "api/v1/throughput")[1]
            return (all(len(j["iterations"]) >= 3 for j in jobs) and any(e["decisions"] for e in eps)
                    and tp.get("available"))
        _wait_for(ready, 60, "iterations, an epoch and throughput samples")
        st, status = fetch(url + "api/v1/status")
        assert status["live"] and status["status"] == "running" and status["policy"] == "harmonics"
        assert len(status["controller"]["switches"]) == status["controller"]["expected_switches"]
        assert fetch(url + "status")[1]["policy"] == "harmonics"            # unversioned alias

        # the page, rendered by a real browser while the run goes
        dom = chromium_dom(url, tmp_path)
        check_page(dom, ["jobA", "jobB"])
        assert "live" in dom.xpath('//div[@id="conn"]/@class')[0]

        # notes change state: the run's token, nothing else
        note = json.dumps({"text": "cross traffic starts"}).encode()
        assert fetch(url + "api/v1/notes", "POST", note)[0] == 401
        assert fetch(url + "api/v1/notes", "POST", note, {"Authorization": "Bearer wrong"})[0] == 401
        assert fetch(url + "api/v1/notes", "POST", b"[1", {"Authorization": f"Bearer {token}",
                                                          "Content-Type": "application/json"})[0] == 400
        st, body = fetch(url + "api/v1/notes", "POST", note, {"Authorization": f"Bearer {token}"})
        assert st == 201 and body["note"]["time_s"] is not None
        assert [n["text"] for n in fetch(url + "api/v1/notes")[1]["notes"]] == ["cross traffic starts"]

        # listening on 127.0.0.1 only: not from this machine's other addresses, not from a host
        listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
        assert [l.split()[3] for l in listening.splitlines()] == [f"127.0.0.1:{port}"]
        for addr in _root_addresses():
            assert refused(addr, port), addr
        pid = _wait_for(lambda: _worker_pid(out), 10, "a worker process")
        host_addrs = subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "-4", "-o", "addr", "show"],
                                    capture_output=True, text=True).stdout
        assert "10.0." in host_addrs                         # really inside a Mininet host
        for addr in ["127.0.0.1"] + _root_addresses():
            assert not _connect_from_namespace(pid, addr, port), addr
        assert not refused("127.0.0.1", port)
        assert proc.wait(timeout=300) == 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
    # the server ended with the run
    assert refused("127.0.0.1", port)
    assert (out / "throughput.jsonl").stat().st_size > 0

    # the finished run, through analysis serve: the same page, now from the files
    p, furl, fport = serve_cli(out)
    try:
        assert fetch(furl + "api/v1/status")[1]["status"] == "ok"
        dom = chromium_dom(furl, tmp_path)
        check_page(dom, ["jobA", "jobB"])
        assert dom.xpath('//ul[@id="notes"]/li/text()')[0].endswith("cross traffic starts")
        jobs = {j["name"]: j for j in fetch(furl + "api/v1/jobs")[1]["jobs"]}
        assert all(len(j["iterations"]) == 60 for j in jobs.values())
    finally:
        stop_cli(p, fport)
