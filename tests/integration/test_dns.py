"""The store's host names, looked up without blocking (evdns) at every
connect: a name moved from one PostgreSQL to another is followed; a DNS
server that never answers stalls no worker; a machine without a usable
/etc/resolv.conf still starts. The DNS server is a small one on loopback
(python3-dnslib) whose answers the test sets."""
import signal
import socket
import threading
import time

import pytest

from tests.lib import helpers, procs
from tests.lib.cluster import PG_USER, Cluster
from tests.lib.helpers import assert_owner, assert_replay_of, course, problem
from tests.lib.proxy import rewrite, wait_for_log

dnslib = pytest.importorskip("dnslib", reason="scripts/deps.sh installs python3-dnslib")
from dnslib import QTYPE, RR, A  # noqa: E402
from dnslib.server import BaseResolver, DNSServer  # noqa: E402

NAME = "db.test"
ADDR_A = "127.0.0.2"
ADDR_B = "127.0.0.3"
POLL_LIMIT = 20.0
MAX_KEYS = 400          # keyed requests in the failover run, at most
AFTER_MOVE = 10         # successes on B before the traffic stops
PASS_THROUGH = 20       # requests served while a lookup hangs
NO_CACHE = {"replay_cache": "0"}


class Zone(BaseResolver):
    """NAME's A record, TTL 0, at whatever address the test sets; no AAAA;
    every other name does not exist. Counts the A questions."""

    def __init__(self, addr):
        self.addr = addr
        self.asked = 0
        self.lock = threading.Lock()

    def resolve(self, request, handler):
        reply = request.reply()
        q = request.q
        name = str(q.qname).rstrip(".").lower()  # evdns randomizes the case
        if name != NAME:
            reply.header.rcode = dnslib.RCODE.NXDOMAIN
        elif q.qtype == QTYPE.A:
            with self.lock:
                self.asked += 1
                reply.add_answer(RR(q.qname, QTYPE.A, rdata=A(self.addr), ttl=0))
        return reply


@pytest.fixture
def dns():
    """A DNS server on 127.0.0.1 (UDP) answering for NAME."""
    zone = Zone(ADDR_A)
    port = procs.free_port()
    server = DNSServer(zone, port=port, address="127.0.0.1", logger=_Quiet())
    server.start_thread()
    zone.port = port
    yield zone
    server.stop()


class _Quiet:
    def __getattr__(self, name):
        return lambda *a, **k: None


@pytest.fixture
def silent_dns():
    """A UDP socket on 127.0.0.1 that reads DNS questions and never answers;
    .received counts them."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    state = {"received": 0, "stop": False}

    def drop():
        while not state["stop"]:
            try:
                sock.recvfrom(4096)
                state["received"] += 1
            except socket.timeout:
                pass

    t = threading.Thread(target=drop, daemon=True)
    t.start()
    yield sock.getsockname()[1], state
    state["stop"] = True
    t.join(5)
    sock.close()


class LoopbackCluster(Cluster):
    """A Cluster that also listens on TCP at addr:port, so that two of them
    can share a port and differ only in the address a name points to."""

    def __init__(self, addr, port):
        self.addr = addr
        self.fixed_port = port
        self.listen_addresses = addr
        super().__init__()

    def layout(self):
        super().layout()
        self.port = self.fixed_port
        self.conninfo = "host=%s port=%d dbname=idemproxy user=%s" % (
            self.dir, self.port, PG_USER)
        self.records = helpers.Records(self.conninfo)


def dns_conf(port, **more):
    conf = {"resolver": "127.0.0.1:%d" % port, "resolver_timeout": "2s"}
    conf.update(more)
    return conf


def test_store_follows_a_moved_name(private_pg, proxy, upstream, ids, dns):
    port = procs.free_port()
    a = private_pg(lambda: LoopbackCluster(ADDR_A, port))
    b = private_pg(lambda: LoopbackCluster(ADDR_B, port))
    conninfo = "host=%s port=%d dbname=idemproxy user=%s connect_timeout=2" % (
        NAME, port, PG_USER)
    p = proxy(dict(NO_CACHE, **dns_conf(dns.port)), database=conninfo, wait_store=True)
    asked_at_start = dns.asked
    assert asked_at_start >= 1

    first_key = ids.key()
    first = p.post("/api/courses", key=first_key, actor=ids.actor, body=course())
    assert_owner(first)
    assert len(a.records.rows(ids.actor)) == 1
    before_move = 20

    # Keyed traffic, each key sent once, while A goes away and the name moves.
    answers = {}
    moved = {}
    t0 = time.monotonic()
    for i in range(MAX_KEYS):
        if i == before_move:
            a.stop()             # the old primary goes first, as in a managed failover
            moved["stopped"] = time.monotonic() - t0
            dns.addr = ADDR_B
            moved["at"] = time.monotonic() - t0
        key = ids.key()
        r = p.post("/api/courses", key=key, actor=ids.actor, body=course(), timeout=10)
        answers[key] = (r, time.monotonic() - t0, i)
        if r.status == 201 and "at" in moved:
            moved.setdefault("first_b", time.monotonic() - t0)
            moved["after"] = moved.get("after", 0) + 1
            if moved["after"] >= AFTER_MOVE:
                break
        elif r.status != 201:
            problem(r, "store-unavailable", 503)
            time.sleep(0.02)
    assert moved.get("after", 0) >= AFTER_MOVE, "never followed the name to B: %r" % moved
    print("\nDNS failover timeline (s from the first keyed request): A stopped %.3f, "
          "name moved %.3f, first success on B %.3f; %d keys sent, %d answered 503"
          % (moved["stopped"], moved["at"], moved["first_b"], len(answers),
             sum(1 for r, _, _ in answers.values() if r.status == 503)))

    # Nothing executed twice; every success is recorded once, on the server
    # the name pointed to when it was claimed.
    for key, (r, _, i) in answers.items():
        n = upstream.count(key=key)
        if r.status == 201:
            assert n == 1, (key, r)
        else:
            assert n == 0, (key, r)   # store-unavailable: never forwarded
    on_b = [k for k, (r, _, i) in answers.items() if r.status == 201 and i >= before_move]
    assert len(b.records.rows(ids.actor)) == len(on_b)
    for key in on_b:
        assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
                         answers[key][0])
    assert dns.asked > asked_at_start


def test_hanging_lookup_stalls_no_worker(proxy, upstream, ids, silent_dns):
    port, state = silent_dns
    conninfo = "host=%s port=5432 dbname=idemproxy user=%s" % (NAME, PG_USER)
    # resolver_timeout far beyond the test: the lookups stay pending.
    p = proxy(dns_conf(port, resolver_timeout="600s"), database=conninfo, wait_store=False)
    assert helpers.poll(lambda: state["received"] >= 1, POLL_LIMIT), "no DNS question sent"
    for i in range(PASS_THROUGH):
        r = p.request("GET", "/api/passthrough/%d" % i, [("X-Actor-Id", ids.actor)])
        assert r.status == 200, r
    assert upstream.count(actor=ids.actor, method="GET") == PASS_THROUGH
    key = ids.key()
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    problem(r, "store-unavailable", 503)
    assert upstream.count(key=key) == 0
    # Still pending: no lookup ended, none connected.
    text = p.stderr_text()
    assert "store host name lookup failed" not in text
    assert '"msg":"store connected"' not in text
    # Stopped with the lookups pending: cancelled and freed (the ASan run checks it).


def test_lookup_timeout_is_logged(proxy, upstream, ids, silent_dns):
    port, state = silent_dns
    conninfo = "host=%s port=5432 dbname=idemproxy user=%s" % (NAME, PG_USER)
    p = proxy(dns_conf(port, resolver_timeout="200ms"), database=conninfo, wait_store=False)
    assert helpers.poll(lambda: "no answer within 200 ms" in p.stderr_text(), POLL_LIMIT), \
        p.stderr_tail()
    line = [l for l in p.log_lines() if l.get("msg", "").startswith("store host name lookup")]
    assert line and NAME in line[0]["msg"], line
    key = ids.key()
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
            "store-unavailable", 503)
    assert upstream.count(key=key) == 0


@pytest.mark.parametrize("how", ["empty", "absent"])
def test_starts_without_resolv_conf(proxy, upstream, ids, tmp_path, how):
    if how == "empty":
        empty = tmp_path / "resolv.conf"
        empty.write_text("# no nameserver\n")
        script = 'mount --bind %s /etc/resolv.conf && exec "$0" "$@"' % empty
    else:
        hosts = tmp_path / "hosts"
        hosts.write_text("127.0.0.1 localhost\n")
        # /etc emptied (a minimal image's root), /etc/hosts put back.
        script = ('mount -t tmpfs none /etc && touch /etc/hosts && mount --bind %s /etc/hosts '
                  '&& exec "$0" "$@"' % hosts)
    p = proxy(start=False)
    p.prefix = ["unshare", "-m", "--", "sh", "-c", script]
    p.start()
    lines = [l for l in p.log_lines() if l.get("msg", "").startswith("no resolver")]
    assert len(lines) == 1, p.stderr_tail()
    assert "set \"resolver\"" in lines[0]["msg"]
    key = ids.key()
    owner = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_owner(owner)
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), owner)
    assert upstream.count(key=key) == 1


@pytest.mark.parametrize("value,ok", [
    ("10.0.0.2", True), ("10.0.0.2:5353 [fd00::53]:53 ::1", True),
    ("db.example", False), ("10.0.0.2:0", False), ("[fd00::53", False),
])
def test_resolver_directive(binary, tmp_path, pg, value, ok):
    text = "upstream http://127.0.0.1:1\ndatabase \"%s\"\nresolver %s\nresolver_timeout 300ms\n" % (
        pg.conninfo, value)
    r = helpers.check_config(binary, tmp_path / "r.conf", text)
    assert (r.returncode == 0) == ok, r.stdout + r.stderr
    if not ok:
        assert "r.conf:3:" in r.stderr and "resolver" in r.stderr, r.stderr


def test_resolver_change_needs_a_restart(proxy, upstream, ids):
    p = proxy({"resolver": "127.0.0.1:53", "resolver_timeout": "1s"})
    rewrite(p, lambda text: text.replace("resolver 127.0.0.1:53", "resolver 127.0.0.1:5353"))
    p.signal(signal.SIGHUP)
    wait_for_log(p, 'reload refused: \\"resolver\\" changed')
    key = ids.key()
    assert_owner(p.post("/api/courses", key=key, actor=ids.actor, body=course()))
    assert upstream.count(key=key) == 1
