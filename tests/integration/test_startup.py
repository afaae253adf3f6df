"""Start-up: keyed requests that arrive before a worker's first store
connection is up wait for it (within store_timeout) instead of failing;
READY=1 and /readyz 200 come only once every worker's store connection is
up. PostgreSQL is reached through a door on loopback TCP that the test
opens late, or that lets each connection through only after a delay (a
server still starting, a slow network)."""
import os
import socket
import threading
import time
from collections import Counter

import pytest

from tests.lib import helpers, procs
from tests.lib.admin import admin
from tests.lib.helpers import assert_owner, assert_replay_of, course, problem

REQUESTS = 50
STORE_TIMEOUT = "5s"        # what a request may wait for the first connection
NOTIFY_WAIT = 30.0
QUIET = 0.5                 # no READY=1 comes while the store cannot be reached


class Door:
    """A TCP port on 127.0.0.1 that forwards each connection to the suite's
    PostgreSQL (its Unix socket) after delay seconds; closed (connections
    refused) until open()."""

    def __init__(self, pg, delay=0.0):
        self.target = os.path.join(pg.dir, ".s.PGSQL.%d" % pg.port)
        self.port = procs.free_port()
        self.delay = delay
        self.listener = None
        self.conns = []
        self.lock = threading.Lock()

    @property
    def conninfo(self):
        return "host=127.0.0.1 port=%d dbname=idemproxy user=postgres" % self.port

    def open(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(64)
        self.listener = s
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        if self.listener:
            self.listener.close()
        with self.lock:
            for c in self.conns:
                c.close()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        time.sleep(self.delay)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.connect(self.target)
        except OSError:
            client.close()
            return
        with self.lock:
            self.conns += [client, server]
        threading.Thread(target=_pump, args=(server, client), daemon=True).start()
        _pump(client, server)


def _pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


@pytest.fixture
def door(pg):
    made = []

    def make(delay=0.0):
        d = Door(pg, delay)
        made.append(d)
        return d
    yield make
    for d in made:
        d.close()


def fire_at_open(p, keys, actor):
    """Start p and send one keyed POST per key the moment its listener
    accepts connections, all at once; the responses, in key order."""
    results = [None] * len(keys)
    go = threading.Event()

    def one(i):
        go.wait()
        try:
            results[i] = p.post("/api/courses", key=keys[i], actor=actor, body=course())
        except OSError as e:
            results[i] = e
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(keys))]
    for t in threads:
        t.start()
    p.start(wait=False)
    assert procs.poll(lambda: procs.port_open(p.port), 20.0, 0.001), p.stderr_tail()
    go.set()
    for t in threads:
        t.join(60)
    return results


def statuses(results):
    return Counter(r.status if hasattr(r, "status") else repr(r) for r in results)


@pytest.mark.parametrize("workers,delay", [(1, 0.0), (2, 0.0), (2, 0.3)],
                         ids=["1-worker", "2-workers", "2-workers-slow-connect"])
def test_keyed_requests_at_the_listeners_opening_all_succeed(proxy, upstream, ids, door,
                                                              workers, delay):
    """REQUESTS keyed requests sent as the listener opens, while the store
    connections are still being made (delay seconds each through the door):
    every one is owned and executed once; retries replay."""
    d = door(delay)
    d.open()
    p = proxy({"workers": str(workers), "store_timeout": STORE_TIMEOUT}, start=False,
              database=d.conninfo)
    keys = [ids.key() for _ in range(REQUESTS)]
    results = fire_at_open(p, keys, ids.actor)
    print("statuses at start (%d workers, connect %.1f s): %s"
          % (workers, delay, dict(statuses(results))))
    assert statuses(results) == {201: REQUESTS}, (statuses(results), p.stderr_tail())
    assert upstream.count(actor=ids.actor) == REQUESTS
    for key, first in zip(keys[:5], results):
        assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), first)
    assert upstream.count(actor=ids.actor) == REQUESTS


def test_a_store_that_never_comes_fails_the_wait_after_store_timeout(proxy, upstream, ids,
                                                                      door):
    """With no PostgreSQL to reach, a keyed request waits store_timeout and
    gets 503 store-unavailable, never forwarded; pass-through is served at
    once; once the store is there the same key runs, once."""
    d = door()
    p = proxy({"workers": "1", "store_timeout": "1s"}, database=d.conninfo)
    assert p.request("GET", "/anything").status == 200  # pass-through needs no store
    key = ids.key()
    t0 = time.monotonic()
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    waited = time.monotonic() - t0
    problem(r, "store-unavailable", 503)
    assert waited >= 0.9, waited
    assert upstream.count(actor=ids.actor) == 0
    d.open()
    assert procs.poll(lambda: p.stores_connected() >= 1, 20.0, 0.05), p.stderr_tail()
    assert_owner(p.post("/api/courses", key=key, actor=ids.actor, body=course()))
    assert upstream.count(actor=ids.actor) == 1


def test_ready_only_once_every_store_connection_is_up(proxy, upstream, ids, door, tmp_path):
    """NOTIFY_SOCKET gets READY=1 and /readyz answers 200 only after the
    store can be reached; until then /readyz says why not."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify.sock")
    sock.bind(path)
    d = door()
    try:
        port = procs.free_port()
        p = proxy({"workers": "2", "admin": "127.0.0.1:%d" % port}, start=False,
                  database=d.conninfo)
        p.env = {"NOTIFY_SOCKET": path}
        p.start()
        assert procs.wait_port(port, p.proc), p.stderr_tail()
        p.admin = port
        r = admin(p, "GET", "/readyz")
        assert r.status == 503 and b"store is unreachable" in r.body, r
        sock.settimeout(QUIET)
        with pytest.raises(socket.timeout):
            sock.recv(4096)
        d.open()
        sock.settimeout(NOTIFY_WAIT)
        assert sock.recv(4096) == b"READY=1"
        assert p.stores_connected() >= 2
        assert helpers.poll(lambda: admin(p, "GET", "/readyz").status == 200)
        assert_owner(p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course()))
        assert upstream.count(actor=ids.actor) == 1
    finally:
        sock.close()
