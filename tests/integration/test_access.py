"""Admin access: with the admin token the records API needs it and the
other paths are open to probes and scrapers, whatever Host they name;
without it every path answers only loopback clients naming a loopback
Host (a DNS-rebinding page names its own). Either way a POST from a web
page of another origin is refused; the listener's own page (GET /ui) may
post, with what else the rules ask of it."""
import socket

from tests.lib import helpers
from tests.lib.admin import admin, admin_proxy, scope
from tests.lib.helpers import assert_owner, course

TOKEN = "s3cr3t-admin-token-0123456789"
OPEN_PATHS = ("/healthz", "/readyz", "/metrics")
# What a page on another site could read through a rebound name.
EVERY_PATH = OPEN_PATHS + ("/contract", "/contract/openapi.json", "/config", "/records",
                           "/no-such-path")
FOREIGN_HOSTS = ("evil.example", "evil.example:%d", "127.0.0.1.evil.example",
                 "localhost.evil.example", "10.0.0.1", "[::2]:1")


def assert_open(p, headers=()):
    """Probes and scrapers need no secret (readiness comes a moment after start)."""
    for path in OPEN_PATHS:
        assert helpers.poll(lambda: admin(p, "GET", path, headers=headers).status == 200), path


def token_proxy(proxy, tmp_path, token=TOKEN):
    f = tmp_path / "admin.token"
    f.write_text(token + "\n")
    return admin_proxy(proxy, {"admin_token": str(f)})


def test_token_protects_every_records_path(proxy, upstream, ids, tmp_path):
    p = token_proxy(proxy, tmp_path)
    key = ids.key()
    assert_owner(p.post("/api/courses", key=key, actor=ids.actor, body=course()))
    calls = [("GET", "/records", None), ("GET", "/records/scope", scope(ids.actor, key)),
             ("POST", "/records/release", scope(ids.actor, key)),
             ("POST", "/records/resolve", scope(ids.actor, key, status="200")),
             ("GET", "/records/anything", None)]
    for method, path, params in calls:
        for headers in ([], [("Authorization", "Bearer wrong-token-0123456789")],
                        [("Authorization", "Bearer " + TOKEN[:-1])],
                        [("Authorization", TOKEN)]):
            r = admin(p, method, path, params, body=b"" if method == "POST" else None,
                      headers=headers)
            assert r.status == 401, (method, path, headers, r)
            assert (r.headers.get("WWW-Authenticate") or "").startswith("Bearer"), r
    auth = [("Authorization", "Bearer " + TOKEN)]
    r = admin(p, "GET", "/records/scope", scope(ids.actor, key), headers=auth)
    assert r.status == 200, r
    assert r.json()["record"]["state"] == "completed"
    # Not even a token lets a web page of another origin change state.
    r = admin(p, "POST", "/records/release", scope(ids.actor, key), body=b"",
              headers=auth + [("Origin", "http://evil.example")])
    assert r.status == 403, r
    r = admin(p, "POST", "/records/release", scope(ids.actor, key), body=b"",
              headers=[("Origin", "http://127.0.0.1:%d" % p.admin)])
    assert r.status == 401, r
    # Token holders are not bound to loopback Host names.
    r = admin(p, "GET", "/records", headers=auth + [("Host", "idemproxy.internal:9")])
    assert r.status == 200, r
    assert_open(p)
    assert TOKEN not in p.stderr_text()
    assert upstream.count(key=key) == 1


def test_without_token_only_loopback_hosts(proxy, upstream, ids):
    p = admin_proxy(proxy)
    key = ids.key()
    assert_owner(p.post("/api/courses", key=key, actor=ids.actor, body=course()))
    for host in ("evil.example", "evil.example:%d" % p.admin, "127.0.0.1.evil.example",
                 "localhost.evil.example", "[::2]:1", "10.0.0.1"):
        r = admin(p, "GET", "/records", headers=[("Host", host)])
        assert r.status == 403, (host, r)
        r = admin(p, "POST", "/records/release", scope(ids.actor, key), body=b"",
                  headers=[("Host", host)])
        assert r.status == 403, (host, r)
    for host in ("localhost", "LOCALHOST:%d" % p.admin, "127.0.0.1:%d" % p.admin,
                 "127.9.9.9", "[::1]:%d" % p.admin):
        r = admin(p, "GET", "/records", headers=[("Host", host)])
        assert r.status == 200, (host, r)
    r = admin(p, "GET", "/records/scope", scope(ids.actor, key), headers=[("Host", "localhost")])
    assert r.status == 200 and r.json()["record"]["state"] == "completed", r
    # A page of another origin, the loopback names' included, cannot act.
    own = "localhost:%d" % p.admin
    for host, origin in ((own, "http://localhost"), (own, "http://localhost:1"),
                         (own, "https://" + own), (own, "http://127.0.0.1:%d" % p.admin),
                         (own, "null"), (own, "http://" + own + ".evil.example"),
                         ("localhost", "http://localhost:%d" % p.admin)):
        r = admin(p, "POST", "/records/release", scope(ids.actor, key), body=b"",
                  headers=[("Host", host), ("Origin", origin)])
        assert r.status == 403, (host, origin, r)
    # The listener's own page (the operator page, GET /ui) may: the record
    # is completed, so the release itself is refused as not stuck.
    r = admin(p, "POST", "/records/release", scope(ids.actor, key), body=b"",
              headers=[("Host", own), ("Origin", "http://LOCALHOST:%d" % p.admin)])
    assert r.status == 409, r
    assert_open(p)
    assert upstream.count(key=key) == 1


def test_without_token_every_path_needs_a_loopback_host(proxy, upstream):
    """Metrics, readiness and the contract tell a rebinding page as much as
    the records do: without the token, every admin path refuses a Host that
    is not loopback, before it says whether the path exists."""
    p = admin_proxy(proxy)
    for path in EVERY_PATH:
        for host in FOREIGN_HOSTS:
            host = host % p.admin if "%d" in host else host
            r = admin(p, "GET", path, headers=[("Host", host)])
            assert r.status == 403, (path, host, r)
            assert b"loopback" in r.body, r
    # HTTP/1.0 may leave Host out: nothing names loopback, so nothing is served.
    with socket.create_connection(("127.0.0.1", p.admin), timeout=helpers.IO_TIMEOUT) as s:
        s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        head = s.recv(4096)
    assert head.startswith(b"HTTP/1.0 403") or head.startswith(b"HTTP/1.1 403"), head
    for host in ("localhost:%d" % p.admin, "127.0.0.1", "[::1]:%d" % p.admin):
        assert_open(p, [("Host", host)])
        for path in ("/contract", "/contract/openapi.json", "/config", "/records"):
            r = admin(p, "GET", path, headers=[("Host", host)])
            assert r.status == 200, (path, host, r)
        assert admin(p, "GET", "/no-such-path", headers=[("Host", host)]).status == 404


def test_with_token_the_open_paths_answer_any_host(proxy, upstream, tmp_path):
    """Kubernetes probes and Prometheus name the pod's address as Host."""
    p = token_proxy(proxy, tmp_path)
    for host in FOREIGN_HOSTS:
        host = host % p.admin if "%d" in host else host
        assert_open(p, [("Host", host)])
        for path in ("/contract", "/contract/openapi.json"):
            r = admin(p, "GET", path, headers=[("Host", host)])
            assert r.status == 200, (path, host, r)
        assert admin(p, "GET", "/records", headers=[("Host", host)]).status == 401
        assert admin(p, "GET", "/config", headers=[("Host", host)]).status == 401


def test_config_needs_the_token_and_never_holds_it(proxy, upstream, tmp_path):
    """The running configuration names the files and database an attacker
    would want: with admin_token it is the records API's, and it names the
    token's file, never its contents."""
    p = token_proxy(proxy, tmp_path)
    for headers in ([], [("Authorization", "Bearer wrong-token-0123456789")]):
        r = admin(p, "GET", "/config", headers=headers)
        assert r.status == 401, r
    r = admin(p, "GET", "/config", headers=[("Authorization", "Bearer " + TOKEN)])
    assert r.status == 200, r
    text = r.body.decode()
    assert "admin_token %s\n" % (tmp_path / "admin.token") in text, text
    assert TOKEN not in text


def check(binary, tmp_path, text):
    conf = tmp_path / "c.conf"
    return conf, helpers.check_config(binary, conf, text)


BASE = "upstream http://127.0.0.1:1\nactor header X-Actor\nroute r {\n    match POST /r\n}\n"


def test_non_loopback_admin_needs_a_token(binary, tmp_path):
    conf, r = check(binary, tmp_path, BASE + "admin 0.0.0.0:9911\n")
    assert r.returncode == 1, r
    assert r.stderr.startswith("%s:6: " % conf) and "admin_token" in r.stderr, r.stderr
    conf, r = check(binary, tmp_path, BASE + "admin [::]:9911\n")
    assert r.returncode == 1 and "admin_token" in r.stderr, r.stderr
    tok = tmp_path / "t"
    tok.write_text(TOKEN + "\n")
    conf, r = check(binary, tmp_path, BASE + "admin 0.0.0.0:9911\nadmin_token %s\n" % tok)
    assert r.returncode == 0, r.stderr
    conf, r = check(binary, tmp_path, BASE + "admin 127.0.0.2:9911\n")
    assert r.returncode == 0, r.stderr
    # The token file is read by -t: too short, or missing, is an error.
    tok.write_text("short\n")
    conf, r = check(binary, tmp_path, BASE + "admin 0.0.0.0:9911\nadmin_token t\n")
    assert r.returncode == 1, r
    assert r.stderr.startswith('%s:7: admin token "%s": ' % (conf, tok)), r.stderr
    conf, r = check(binary, tmp_path, BASE + "admin_token missing.token\n")
    assert r.returncode == 1 and "No such file" in r.stderr, r.stderr
