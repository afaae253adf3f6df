"""store_headers and what a record keeps decide from one table: every
header name `idemproxy -t` takes in store_headers is stored and replayed
with the upstream's value, and every name a record never keeps is refused
by -t, naming the header and why.

The names tried are every name idemproxy acts on (listed here, and
cross-checked against the headers the published contract names) and a few
ordinary ones; which of them -t refuses is read from the binary and must be
exactly the names listed as never stored."""
import json
import re
import subprocess

from tests.lib import helpers
from tests.lib.helpers import assert_owner, assert_replay_of, course
from tests.lib.proxy import BASE_ROUTES, base_settings, check_config, render_conf

# What no record keeps: credentials and cookies, hop-by-hop headers, the
# framing, the date (a replay is dated when sent) and the request id (each
# response carries its own request's), idemproxy's own markers.
NEVER_STORED = [
    "Authorization", "Cookie", "Set-Cookie", "Set-Cookie2", "WWW-Authenticate",
    "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
    "Proxy-Authorization", "TE", "Trailer", "Transfer-Encoding", "HTTP2-Settings", "Upgrade",
    "Content-Length", "Date", "X-Request-Id",
    "Idempotent-Replayed", "Idempotency-Enforced", "Idempotency-Body-Omitted",
    "Idempotency-Key-Expires",
]
# The other names idemproxy acts on: routing, forwarding, the ones every
# record keeps.
ACTED_ON = [
    "Host", "Expect", "Via", "Forwarded", "X-Forwarded-For", "X-Forwarded-Proto",
    "X-Forwarded-Host", "X-Real-IP",
    "Content-Type", "Content-Location", "Location", "ETag", "Last-Modified",
]
# Names idemproxy leaves alone, the problem headers among them.
ORDINARY = [
    "X-Request-Cost", "Retry-After", "Retry-After-Ms", "X-Should-Retry", "Stripe-Should-Retry",
    "Link", "Cache-Control", "Vary", "Idempotency-Key", "X-RateLimit-Remaining",
]
NAMES = NEVER_STORED + ACTED_ON + ORDINARY

ROUTE = "route sh.op {\n    match POST /api/sh\n    store_headers %s\n}\n"


def conf_text(port, conninfo, names, fail_open=False):
    settings = base_settings(port, conninfo)
    if fail_open:
        settings["store_unavailable"] = "fail-open"
    return render_conf(settings, ROUTE % " ".join(names) + BASE_ROUTES)


def accepted_by_check(binary, tmp_path):
    """{name: None when -t takes `store_headers NAME`, else its message}."""
    got = {}
    for i, name in enumerate(NAMES):
        path = tmp_path / ("sh%d.conf" % i)
        r = check_config(binary, path, conf_text(helpers.free_port(),
                                                 "host=/nonexistent dbname=x", [name]))
        assert not helpers.sanitizer_report(binary, r.stderr), r.stderr
        if r.returncode == 0:
            got[name] = None
        else:
            assert r.returncode == 1, r
            got[name] = r.stderr.strip()
            assert re.match(r'^%s:\d+: header "%s" is never stored \(.+\)$'
                            % (re.escape(str(path)), re.escape(name)), got[name]), got[name]
    return got


def test_check_refuses_exactly_the_names_never_stored(binary, tmp_path):
    got = accepted_by_check(binary, tmp_path)
    refused = sorted(n for n, why in got.items() if why is not None)
    assert refused == sorted(NEVER_STORED), refused
    assert "only idemproxy sets it" in got["Idempotent-Replayed"]
    assert "credentials" in got["WWW-Authenticate"]


def test_the_contract_names_no_header_missing_here(binary, tmp_path):
    """Every header the published contract names (idemproxy's markers, the
    problem headers) is among the names tried, and its markers are among
    those never stored: the lists above follow the binary's table."""
    conf = tmp_path / "contract.conf"
    conf.write_text(conf_text(helpers.free_port(), "host=/nonexistent dbname=x",
                              ["X-Request-Cost"], fail_open=True))
    r = subprocess.run([binary, "describe", "-c", str(conf), "--format", "openapi"],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    named = set(json.loads(r.stdout)["components"]["headers"])
    lower = {n.lower() for n in NAMES}
    assert {n for n in named if n.lower() not in lower} == set()
    markers = {n for n in named if n.startswith(("Idempotent-", "Idempotency-"))}
    assert len(markers) == 4, named
    assert markers <= set(NEVER_STORED)


def value_of(name):
    """A value the upstream sends for name, distinct per name."""
    return {
        "Content-Type": "application/x-stored",
        "Location": "/api/sh/1",
        "Content-Location": "/api/sh/1",
        "ETag": '"sh-1"',
        "Last-Modified": "Tue, 01 Jul 2025 10:00:00 GMT",
        "Retry-After": "3",
    }.get(name, "v-" + name.lower())


def test_every_name_check_takes_is_stored_and_replayed(binary, tmp_path, proxy, upstream, ids):
    got = accepted_by_check(binary, tmp_path)
    storable = [n for n in NAMES if got[n] is None]
    p = proxy(routes=ROUTE % " ".join(storable))
    key = ids.key()
    sent = [("X-Test-Header", "%s: %s" % (n, value_of(n))) for n in storable]
    first = p.post("/api/sh", key=key, actor=ids.actor, body=course(), headers=sent)
    assert_owner(first)
    again = p.post("/api/sh", key=key, actor=ids.actor, body=course())
    assert_replay_of(again, first)
    for name in storable:
        assert first.headers.get(name) == value_of(name), (name, first.headers)
        assert again.headers.get(name) == value_of(name), (name, again.headers)
    assert upstream.count(actor=ids.actor) == 1
    assert storable == ACTED_ON + ORDINARY
