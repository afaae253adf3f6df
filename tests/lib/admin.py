"""The admin listener from a test: a proxy started with one (admin_proxy),
requests to it (admin, scope), its Prometheus text parsed (Metrics,
metrics, poll_metrics), the outcome labels it counts (ALL_OUTCOMES), and
the metric families the shipped Grafana dashboard queries
(DASHBOARD_METRICS)."""
import json
import os
import re
import urllib.parse

from tests.lib import http1, procs

OPERATION = "course.create"     # the route of /api/courses (BASE_ROUTES)
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

# The outcome labels of idemproxy_requests_total, every one always exported.
ALL_OUTCOMES = ("pass", "owner", "replay", "conflict", "in_progress", "unknown", "released",
                "rejected", "unenforced", "store_unavailable")
DASHBOARD = os.path.join(procs.ROOT, "deploy", "grafana", "idemproxy-dashboard.json")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def admin_proxy(proxy, settings=None, **kw):
    """A started proxy with an admin listener; .admin is its port."""
    port = procs.free_port()
    s = {"admin": "127.0.0.1:%d" % port}
    s.update(settings or {})
    p = proxy(s, **kw)
    p.admin = port
    assert procs.wait_port(port, p.proc), "admin port %d never opened:\n%s" % (
        port, p.stderr_tail())
    return p


def admin(p, method, path, params=None, body=None, headers=()):
    """One request to p's admin listener; params are URL-encoded into the
    query. Host is the listener's address unless headers name one (the
    records API answers loopback Host names only)."""
    if params is not None:
        path += "?" + urllib.parse.urlencode(params)
    headers = list(headers)
    if not any(k.lower() == "host" for k, _ in headers):
        headers.append(("Host", "127.0.0.1:%d" % p.admin))
    return http1.request(p.admin, method, path, headers, body)


def scope(actor, key, **extra):
    """The query of a scope: the stored actor ("h:" + header value)."""
    params = {"actor": "h:" + actor, "operation": OPERATION, "key": key}
    params.update(extra)
    return params


# ---- Prometheus text ----

class Metrics:
    """One scrape: samples in text order, each (name, labels dict, value)."""

    def __init__(self, text):
        self.text = text
        self.samples = []
        self.types = {}
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ", 3)
                self.types[name] = kind
                continue
            if not line or line.startswith("#"):
                continue
            m = SAMPLE.match(line)
            assert m, "not a Prometheus sample: %r" % line
            labels = dict(LABEL.findall(m.group(2) or ""))
            self.samples.append((m.group(1), labels, float(m.group(3))))

    def get(self, name, default=None, **labels):
        for n, lab, v in self.samples:
            if n == name and lab == labels:
                return v
        return default

    def all(self, name):
        return [(lab, v) for n, lab, v in self.samples if n == name]


def metrics(p):
    r = admin(p, "GET", "/metrics")
    assert r.status == 200, r
    assert (r.headers.get("Content-Type") or "").startswith("text/plain"), r
    return Metrics(r.body.decode("utf-8"))


def poll_metrics(p, cond):
    """A scrape of p for which cond(Metrics) holds, polled (gauges follow a
    worker timer); None if none came within procs.POLL_LIMIT."""
    def scrape():
        m = metrics(p)
        return m if cond(m) else None
    return procs.poll(scrape)


# ---- the dashboard ----

def dashboard_exprs(path=DASHBOARD):
    """Every target expr of the dashboard's panels (rows' panels included)."""
    with open(path) as f:
        dash = json.load(f)
    exprs = []

    def walk(panels):
        for p in panels:
            exprs.extend(t["expr"] for t in p.get("targets", []) if "expr" in t)
            walk(p.get("panels", []))
    walk(dash.get("panels", []))
    return exprs


def metric_family(name):
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


# The metric names of a PromQL expression: idemproxy's own and the
# process collector's (process_*).
METRIC_NAME = re.compile(r"\b(?:idemproxy|process)_\w+")

# The metric families the dashboard's queries use (histogram series reduced
# to their family), for comparison with a live /metrics.
DASHBOARD_METRICS = sorted({metric_family(m) for e in dashboard_exprs()
                            for m in METRIC_NAME.findall(e)})
