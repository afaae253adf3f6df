"""The relay budget: bytes waiting unsent to clients and upstreams are
counted for the whole process and per peer address; before a read could
take either count past its budget (relay_budget, relay_budget_per_peer),
that exchange stops reading from its sending side until the count is back
to three quarters of it, while an exchange with nothing waiting always
reads. So stalled readers cost memory that follows from the budget instead
of from their number, the other clients are served, and nothing is lost
once the stalled ones read again.

Loopback addresses 127/8 all reach the proxy on Linux: a client bound to
127.0.0.2 is another peer than the usual 127.0.0.1."""
import json
import signal
import socket
import threading

import websocket

from tests.lib import helpers, streams
from tests.lib.admin import metrics
from tests.lib.proxy import rewrite, wait_for_log
from tests.lib.streams import act, bounded_proxy, footprint, passthrough

MIB = streams.MIB
KIB = 1 << 10
READ = 64 * KIB             # one read of a relayed body (IO_BODY_CHUNK)
RELAY_BUFFER = 256 * KIB    # relay_buffer's default
OTHER_PEER = "127.0.0.2"
RCVBUF = 64 * KIB           # a stalled client's receive buffer: the kernel keeps little
# What a stalled reader keeps beyond the budget: one small read (a 4 KiB
# block) and its connection and exchange, about 20 KiB measured. Before the
# budget it kept relay_buffer and a read: about 300 KiB measured. Under the
# sanitizer every allocation carries redzones (about 170 KiB a reader
# measured, whatever the budget) and freed memory waits in a 4 MiB
# quarantine: the bound keeps its form, with room for that.
READER_KIB = streams.scaled(48, 256)
SLACK_MIB = streams.scaled(3, 6)    # the allocator (and quarantine), another peer's download
STEADY_SCRAPES = 3          # equal scrapes in a row: the stalled readers are as far as let
RESUME_TIMEOUT = 60.0
SMALL_RECV = 4 * KIB        # the reads of a client that takes a little at a time


def budget_proxy(proxy, budget, per_peer):
    """A proxy with an admin listener, the budget given, and timeouts long
    enough that stalled readers wait for the test, not for them."""
    port = helpers.free_port()
    p = bounded_proxy(proxy, {"relay_budget": budget, "relay_budget_per_peer": per_peer,
                              "admin": "127.0.0.1:%d" % port, "upstream_timeout": "30s",
                              "client_timeout": "30s", "lease": "60s"})
    p.admin = port
    assert helpers.wait_port(port, p.proc), p.stderr_tail()
    return p


def pauses(m, limit):
    return m.get("idemproxy_relay_budget_pauses_total", limit=limit)


def stall(p, ids, n, size, source=None):
    """n clients that ask for size bytes each, read the head and stop."""
    conns = []
    for _ in range(n):
        c = streams.Conn(p.port, source=source)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        c.send_request("GET", "/files/stalled", passthrough(ids.actor) + [act("stream:%d" % size)])
        conns.append(c)
    for c in conns:
        status, _ = c.head()
        assert status == 200
    return conns


def steady(p, cond):
    """A scrape once the counted bytes stopped moving for STEADY_SCRAPES
    scrapes and cond holds; None if that did not come in time."""
    seen = []

    def scrape():
        m = metrics(p)
        seen.append(m.get("idemproxy_relay_budget_bytes"))
        still = len(seen) >= STEADY_SCRAPES and len(set(seen[-STEADY_SCRAPES:])) == 1
        return m if still and cond(m) else None
    return helpers.poll(scrape, step=0.2)


def finish(c, size, into):
    """Read the rest of c's response of size bytes into the Result into."""
    try:
        while into.length < size and c.take(into, size - into.length):
            pass
    except OSError:
        pass


def resume(conns, size):
    """Every stalled client reads the rest of its response, all at once;
    their Results."""
    results = [streams.Result() for _ in conns]
    threads = [threading.Thread(target=finish, args=(c, size, res), daemon=True)
               for c, res in zip(conns, results)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(RESUME_TIMEOUT)
    return results


def assert_byte_exact(results, size):
    sha = streams.pattern_sha(size)
    for res in results:
        assert res.length == size and res.digest == sha, res


def test_stalled_readers_of_one_peer_stay_within_its_budget(proxy, upstream, ids):
    """STALLED clients of 127.0.0.1 stop reading large responses: what they
    hold follows from relay_budget_per_peer, not from their number; a client
    of 127.0.0.2 downloads meanwhile without the budget stopping it; then
    the stalled ones read again and get every byte."""
    stalled, per_peer = 64, 2 * MIB
    p = budget_proxy(proxy, "4m", "2m")
    m = metrics(p)
    assert m.get("idemproxy_relay_budget_bytes_limit") == 4 * MIB
    assert pauses(m, "process") == 0 and pauses(m, "peer") == 0
    base = footprint(p)
    size = streams.stall_size(16 * MIB, 4 * MIB)
    conns = stall(p, ids, stalled, size)
    try:
        assert upstream.wait_for(stalled, actor=ids.actor)
        m = steady(p, lambda x: pauses(x, "peer") >= stalled // 2)
        assert m, metrics(p).text
        held = m.get("idemproxy_relay_budget_bytes")
        print("stalled readers hold %d bytes" % held)
        # The budget is spent, past it by a read of each exchange at most.
        assert per_peer - READ <= held <= per_peer + stalled * READ, held

        other = streams.Conn(p.port, source=OTHER_PEER)
        n = streams.scaled(64 * MIB, 16 * MIB)
        with other:
            other.send_request("GET", "/files/other", passthrough(ids.actor) +
                               [act("stream:%d" % n)])
            r = other.read_response()
        assert r.status == 200 and r.complete, r
        assert r.length == n and r.digest == streams.pattern_sha(n)

        peak = streams.peak_rss_mib(p.proc)
        bound = (per_peer + RELAY_BUFFER + READ) / MIB + stalled * READER_KIB / 1024 + SLACK_MIB
        print("idemproxy peak RSS %.1f MiB, %.1f after start; %d stalled readers: %.0f KiB each"
              % (peak, base, stalled, (peak - base) * 1024 / stalled))
        assert peak - base < bound, (peak, base, bound)
        # Only 127.0.0.1's budget was spent: nobody waited for the process's.
        assert pauses(metrics(p), "process") == 0

        assert_byte_exact(resume(conns, size), size)
    finally:
        for c in conns:
            c.close()
    assert helpers.poll(lambda: metrics(p).get("idemproxy_relay_budget_bytes") == 0)
    assert upstream.count(actor=ids.actor) == stalled + 1


def test_a_spent_budget_slows_reads_but_never_stops_them(proxy, upstream, ids):
    """With the process's budget spent by stalled readers, a new download
    still completes (an exchange with nothing waiting always reads), and so
    do the stalled ones once they read again."""
    stalled, budget = 16, 1 * MIB
    p = budget_proxy(proxy, "1m", "0")
    size = streams.stall_size(16 * MIB, 4 * MIB)
    conns = stall(p, ids, stalled, size)
    try:
        assert upstream.wait_for(stalled, actor=ids.actor)
        m = steady(p, lambda x: pauses(x, "process") >= 1)
        assert m, metrics(p).text
        assert budget - READ <= m.get("idemproxy_relay_budget_bytes") <= budget + stalled * READ
        assert pauses(m, "peer") == 0

        n = streams.scaled(32 * MIB, 8 * MIB)
        r = streams.exchange(p.port, "GET", "/files/more", passthrough(ids.actor) +
                             [act("stream:%d" % n)])
        assert r.status == 200 and r.complete, r
        assert r.length == n and r.digest == streams.pattern_sha(n)

        assert_byte_exact(resume(conns, size), size)
    finally:
        for c in conns:
            c.close()
    assert helpers.poll(lambda: metrics(p).get("idemproxy_relay_budget_bytes") == 0)
    assert upstream.count(actor=ids.actor) == stalled + 1


def test_every_counted_byte_is_uncounted_again(proxy, upstream, ids):
    """Downloads, uploads, a tunnel, an owner's streamed response, a
    download left by its client and one cut by the upstream, with a budget
    small enough that they stop and go: once they are over, nothing is
    counted any more."""
    p = budget_proxy(proxy, "1m", "512k")
    n = streams.scaled(8 * MIB, 2 * MIB)
    r = streams.exchange(p.port, "GET", "/files/down", passthrough(ids.actor) +
                         [act("stream-chunked:%d" % n)])
    assert r.complete and r.length == n and r.digest == streams.pattern_sha(n), r
    r = streams.exchange(p.port, "POST", "/uploads", passthrough(ids.actor) + [act("sink")],
                         body_size=n, chunked=True, keep=True)
    assert r.status == 201 and json.loads(bytes(r.keep))["len"] == n, r
    h = [("Idempotency-Key", ids.key()), ("X-Actor-Id", ids.actor),
         ("Content-Type", "application/json"), act("stream:%d" % n)]
    r = streams.exchange(p.port, "POST", "/api/courses", h)
    assert r.status == 201 and r.complete and r.digest == streams.pattern_sha(n), r
    r = streams.exchange(p.port, "GET", "/files/cut", passthrough(ids.actor) +
                         [act("break:%d" % n)])
    assert not r.complete, r

    ws = websocket.create_connection("ws://127.0.0.1:%d/ws" % p.port, timeout=10,
                                     header=["X-Actor-Id: %s" % ids.actor,
                                             "X-Test-Action: ws-echo"])
    try:
        blob = bytes(range(256)) * 4096
        ws.send_binary(blob)
        assert ws.recv() == blob
    finally:
        ws.close()

    (left,) = stall(p, ids, 1, 64 * MIB)
    assert helpers.poll(lambda: metrics(p).get("idemproxy_relay_budget_bytes") > 0)
    left.close()
    assert helpers.poll(lambda: metrics(p).get("idemproxy_relay_budget_bytes") == 0), \
        metrics(p).text
    assert upstream.count(actor=ids.actor) == 6


def test_a_reader_behind_when_the_budget_runs_out_still_completes(proxy, upstream, ids):
    """A client falls behind by nearly relay_buffer; then a reload lowers
    relay_budget below what waits for it (a reload applies to exchanges
    under way). As it reads again, a little at a time, what waited still
    goes out, and the rest follows: the exchange stops on the budget while
    bytes wait for its client and reads again once they are out."""
    p = budget_proxy(proxy, "4m", "0")
    size = streams.stall_size(8 * MIB, 8 * MIB)
    (behind,) = stall(p, ids, 1, size)
    try:
        assert helpers.poll(lambda: metrics(p).get("idemproxy_relay_budget_bytes")
                            >= RELAY_BUFFER - 2 * READ)
        rewrite(p, lambda text: text.replace("relay_budget 4m", "relay_budget 64k"))
        p.signal(signal.SIGHUP)
        wait_for_log(p, "configuration reloaded")
        assert helpers.poll(lambda: metrics(p).get("idemproxy_relay_budget_bytes_limit")
                            == 64 * KIB)
        res = streams.Result()
        while res.length < size and behind.take(res, min(SMALL_RECV, size - res.length)):
            pass
        assert_byte_exact([res], size)
    finally:
        behind.close()
    assert helpers.poll(lambda: metrics(p).get("idemproxy_relay_budget_bytes") == 0)
    assert upstream.count(actor=ids.actor) == 1
