"""The controller's REST API and live view, and the same for a finished run.

ROUTES (JSON unless noted; documented in docs/api.md):
  GET  /                       the live view page (HTML; refreshes itself while the run is live)
  GET  /static/{path}          the page's script and style, and the vendored uPlot
  GET  /api/v1/status          the run (scenario, policy, state) and, live, the controller's state
  GET  /api/v1/jobs            every job's iteration times so far
  GET  /api/v1/epochs          epochs with their decisions and reasons (?since=N&limit=N)
  GET  /api/v1/throughput      per-link throughput by class, from the controller's counters
  GET  /api/v1/phase           phase errors and corrections of phase control
  GET  /api/v1/fidelity        the fidelity monitor's verdict and figures
  GET  /api/v1/notes           notes posted during the run
  POST /api/v1/notes           add a note to the run's timeline; needs the run's token
                               (header "Authorization: Bearer TOKEN"); live runs only
  GET  /status, /decisions     the controller's status and last epoch record (unversioned;
                               kept for the tools that used the earlier server; live only)

os-ken >= 4 no longer ships ``os_ken.app.wsgi`` (nor a WSGI server in its native hub), so
this module keeps that module's shape with the libraries os-ken itself depends on: a route
table mapped with Routes, a ``ControllerBase`` whose actions take a WebOb request, and a
threaded WSGI server from the standard library, bound to 127.0.0.1 only.  Requests that
are malformed get a 4xx JSON error; an unexpected error is logged and answered with a 500
JSON body, never a traceback.  The server lives as long as the controller (or the ``analysis
serve`` command): ``stop()`` closes it.
"""
from __future__ import annotations

import hmac
import json
import logging
import mimetypes
import socketserver
import threading
import time
from pathlib import Path
from typing import Optional
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from routes import Mapper
from webob import Request, Response

from runs.files import append_jsonl
from runs.rundata import RunData, clean

LOG = logging.getLogger("harmonics.rest")
STATIC = Path(__file__).resolve().parent / "static"
API = "/api/v1"
MAX_BODY = 4096

# name, methods, path, action of the controller
ROUTES = [
    ("index", ("GET",), "/", "index"),
    ("static", ("GET",), "/static/{path:.*}", "static"),
    ("status", ("GET",), API + "/status", "status"),
    ("jobs", ("GET",), API + "/jobs", "jobs"),
    ("epochs", ("GET",), API + "/epochs", "epochs"),
    ("throughput", ("GET",), API + "/throughput", "throughput"),
    ("phase", ("GET",), API + "/phase", "phase"),
    ("fidelity", ("GET",), API + "/fidelity", "fidelity"),
    ("notes", ("GET", "POST"), API + "/notes", "notes"),
    ("legacy_status", ("GET",), "/status", "legacy_status"),
    ("legacy_decisions", ("GET",), "/decisions", "legacy_decisions"),
]


class HTTPError(Exception):
    def __init__(self, status: int, message: str, headers: Optional[dict] = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def json_response(body, status: int = 200) -> Response:
    r = Response(status=status, content_type="application/json", charset="utf-8")
    r.text = json.dumps(clean(body), sort_keys=True)
    r.cache_control = "no-store"
    return r


def _int_arg(req: Request, name: str, default: int, lo: int = 0, hi: int = 10 ** 9) -> int:
    raw = req.GET.get(name)
    if raw is None:
        return default
    try:
        v = int(raw)
    except ValueError:
        raise HTTPError(400, f"query parameter {name!r} must be an integer (got {raw[:40]!r})") from None
    if not lo <= v <= hi:
        raise HTTPError(400, f"query parameter {name!r} must be in [{lo}, {hi}]")
    return v


class ControllerBase:
    """The route table's actions: each takes the WebOb request (and the route's fields)
    and returns a Response or raises HTTPError."""

    def __init__(self, data: RunData, live: Optional["LiveView"] = None, token: Optional[str] = None):
        self.data, self.live, self.token = data, live, token

    # ---------------------------------------------------------------- page
    def index(self, req: Request) -> Response:
        return self.static(req, "index.html")

    def static(self, req: Request, path: str) -> Response:
        target = (STATIC / path).resolve()
        if STATIC not in target.parents or not target.is_file():
            raise HTTPError(404, f"no such file: /static/{path[:80]}")
        ctype = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        r = Response(body=target.read_bytes(), content_type=ctype)
        if ctype.startswith("text/") or ctype.endswith("javascript"):
            r.charset = "utf-8"
        r.cache_control = "no-cache"
        return r

    # ----------------------------------------------------------------- API
    def status(self, req: Request) -> Response:
        body = self.data.status()
        if self.live is not None:
            body["controller"] = self.live.app.status()
            body["policy"] = body.get("policy") or self.live.app.config.get("policy")
            body["token_required_for"] = ["POST " + API + "/notes"]
        return json_response(body)

    def jobs(self, req: Request) -> Response:
        return json_response(self.data.jobs())

    def epochs(self, req: Request) -> Response:
        since = _int_arg(req, "since", 0)
        limit = _int_arg(req, "limit", 5000, lo=1, hi=100000)
        return json_response(self.data.epochs(since=since, limit=limit))

    def throughput(self, req: Request) -> Response:
        return json_response(self.data.throughput())

    def phase(self, req: Request) -> Response:
        return json_response(self.data.phase())

    def fidelity(self, req: Request) -> Response:
        return json_response(self.data.fidelity())

    def notes(self, req: Request) -> Response:
        if req.method == "GET":
            return json_response({"notes": self.data.notes()})
        if self.live is None or not self.token:
            raise HTTPError(405, "this view is read-only (a finished run takes no notes)", {"Allow": "GET"})
        got = req.headers.get("Authorization", "")
        if not (got.startswith("Bearer ") and hmac.compare_digest(got[7:].encode(), self.token.encode())):
            raise HTTPError(401, "a note needs the run's token: header 'Authorization: Bearer TOKEN'",
                            {"WWW-Authenticate": "Bearer"})
        if req.content_length is None or req.content_length > MAX_BODY:
            raise HTTPError(413 if req.content_length else 411, f"body must be JSON of at most {MAX_BODY} bytes")
        try:
            body = json.loads(req.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise HTTPError(400, "body is not JSON") from None
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str) or not text.strip() or len(text) > 500:
            raise HTTPError(400, "field 'text': a non-empty string of at most 500 characters")
        note = {"time_s": self.live.trace_now(), "text": text.strip(), "posted": time.time()}
        append_jsonl(self.data.dir / "notes.jsonl", clean(note))
        return json_response({"ok": True, "note": note}, status=201)

    def legacy_status(self, req: Request) -> Response:
        if self.live is None:
            raise HTTPError(404, "no controller: this is a finished run (see /api/v1/status)")
        return json_response(self.live.app.status())

    def legacy_decisions(self, req: Request) -> Response:
        if self.live is None:
            raise HTTPError(404, "no controller: this is a finished run (see /api/v1/epochs)")
        return json_response(self.live.app.last_record or {})


LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")


class WSGIApplication:
    """Dispatches a request through ROUTES to the ControllerBase."""

    def __init__(self, controller: ControllerBase):
        self.controller = controller
        self.mapper = Mapper()
        self.allowed = {}
        for name, methods, path, action in ROUTES:
            self.mapper.connect(name, path, action=action)
            self.allowed[action] = methods

    def __call__(self, environ, start_response):
        req = Request(environ)
        try:
            resp = self._dispatch(req)
        except HTTPError as e:
            resp = json_response({"error": e.message, "status": e.status}, status=e.status)
            for k, v in e.headers.items():
                resp.headers[k] = v
        except Exception:  # a bug: logged, answered without a traceback
            LOG.exception("REST %s %s failed", req.method, req.path)
            resp = json_response({"error": "internal error (see the controller's log)", "status": 500}, 500)
        resp.headers["X-Content-Type-Options"] = "nosniff"
        return resp(environ, start_response)

    def _dispatch(self, req: Request) -> Response:
        # a page on another site must not read the run through DNS rebinding: loopback names only
        host = (req.host or "").rsplit(":", 1)[0] if not (req.host or "").endswith("]") else req.host
        if host not in LOCAL_HOSTS:
            raise HTTPError(403, "only requests addressed to 127.0.0.1 or localhost are served")
        match = self.mapper.match(req.path_info)
        if match is None:
            raise HTTPError(404, f"no such resource: {req.path_info[:100]} (the API is under {API}/)")
        action = match.pop("action")
        if req.method not in self.allowed[action]:
            raise HTTPError(405, f"{req.method} is not allowed here",
                            {"Allow": ", ".join(self.allowed[action])})
        return getattr(self.controller, action)(req, **match)


class _QuietHandler(WSGIRequestHandler):
    # a malformed request line is answered with a status line (400), not HTTP/0.9's bare body
    default_request_version = "HTTP/1.0"

    def log_message(self, *args):
        pass


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class RestServer:
    """A WSGI application served on 127.0.0.1:port (0: a free port) in a thread."""

    def __init__(self, app: WSGIApplication, port: int = 0):
        self.httpd = _ThreadingServer(("127.0.0.1", port), _QuietHandler)
        self.httpd.set_app(app)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="harmonics-rest", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> "RestServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def serve_run_dir(run_dir, port: int = 0) -> RestServer:
    """The page and the read-only API of a finished run (``python -m analysis serve``)."""
    return RestServer(WSGIApplication(ControllerBase(RunData(run_dir))), port).start()


class LiveView:
    """Wired into the controller: samples per-link throughput by class from the flow
    counters the controller polls (into RUN/throughput.jsonl), and serves the API and
    the page while the controller runs."""

    def __init__(self, app, sample_s: float = 0.5):
        self.app = app
        run_dir = app.config.get("run_dir")
        self.data = RunData(run_dir, live=True) if run_dir else None
        self.sample_s = max(sample_s, float(getattr(app, "poll_s", 0.5)))
        self.server: Optional[RestServer] = None
        self._stop = threading.Event()
        self._prev: dict = {}
        self._seen: set = set()
        self._last = None
        if self.data is not None:
            threading.Thread(target=self._sample_loop, name="harmonics-throughput", daemon=True).start()

    def serve(self, port: int, token: Optional[str]) -> None:
        data = self.data if self.data is not None else RunData(".", live=True)
        self.server = RestServer(WSGIApplication(ControllerBase(data, self, token)), port).start()
        LOG.info("REST and live view on %s", self.server.url)

    def stop(self) -> None:
        self._stop.set()
        if self.server is not None:
            self.server.stop()

    def trace_now(self) -> Optional[float]:
        start = self.app.run_start()
        if start is None:
            return None
        return (time.time() - start) / self.data.scaling()[0]

    def _sample_loop(self) -> None:
        while not self._stop.wait(self.sample_s):
            try:
                self.sample()
            except Exception:  # never let the view kill the controller
                LOG.exception("throughput sample failed")

    def sample(self) -> None:
        """One sample: every flow's bytes since the last sample, on every link of its
        path, by the class its job has now (trace Gb/s)."""
        app, now = self.app, time.time()
        dt = None if self._last is None else now - self._last
        with app.lock:
            flows = [(k, f["bytes"], f["since"], f.get("job"), f["src_host"], f["dst_host"], f["spine"])
                     for k, f in app.flows.items()]
            classes = {j: d.priority for j, d in app.decisions.items()}
        cur, links = {}, {}
        for key, b, since, job, src, dst, spine in flows:
            cur[key] = b
            prev = self._prev.get(key)
            if prev is None and self._last is not None and since < self._last:
                continue                      # adopted after a restart: its count is old
            delta = b - (prev or 0)
            if dt is None or delta <= 0:
                continue
            cls = str(classes[job]) if job in classes else "none"
            for i in app.cluster.path(src, dst, spine):
                lid = app.cluster.links[i].id
                links.setdefault(lid, {})[cls] = links.get(lid, {}).get(cls, 0.0) + delta
        self._prev, self._last = cur, now
        start = app.run_start()
        if dt is None or start is None:
            return
        ts, bs = self.data.scaling()
        rec = {}
        for lid, by in links.items():
            for cls, nbytes in by.items():
                self._seen.add((lid, cls))
                rec.setdefault(lid, {})[cls] = nbytes * 8 / dt * bs / 1e9
        for lid, cls in self._seen:               # a class that went quiet drops to zero
            rec.setdefault(lid, {}).setdefault(cls, 0.0)
        if rec:
            append_jsonl(self.data.dir / "throughput.jsonl", clean({"t": (now - start) / ts, "links": rec}))
