"""The known HTTP/2 attacks against idemproxy's listener (docs/http.md,
"HTTP/2"), in hand-built frames over a socket: rapid reset
(CVE-2023-44487), a CONTINUATION flood, an HPACK bomb, SETTINGS, PING
and empty DATA floods, and a window never opened by a reader of a large
response. Each must end its connection with GOAWAY (or close it) within
a bounded number of frames or bytes; idemproxy's CPU time (utime + stime
from /proc/PID/stat) and resident memory grow by a bounded amount (the
bounds are generous: these are not speed checks), and other connections
are served meanwhile and after. The figures measured are printed (run
pytest with -s to see them)."""
import struct
import threading
import time

import pytest

from tests.lib import h2, streams
from tests.lib.helpers import assert_owner, course
from tests.lib.streams import bounded_proxy, footprint

MIB = streams.MIB
CPU_BOUND_S = 20.0        # CPU seconds one attack may cost idemproxy
RSS_BOUND_MIB = 48        # growth of the resident set over its size after start
BATCH = 500               # frames written between two looks at the connection
RAPID_RESET_MAX = 50000   # HEADERS + RST_STREAM pairs before the connection must end
CONTINUATION_MAX = 64 * MIB
CONTINUATION_PIECE = 4096
BOMB_VALUE = 4000         # one dynamic-table entry (under the 4096-byte table)
BOMB_REFS = 16000         # one-byte references to it in each block: 64 MB decoded
BOMB_STREAMS_MAX = 100
FLOOD_MAX = 32 * MIB      # bytes of SETTINGS or PING frames
EMPTY_DATA_MAX = 1000000  # empty DATA frames
STALL_SIZE = 256 * MIB    # the response the never-opened window holds back
END_WAIT = 90.0           # seconds for a connection to end once the attack stops
SEND_TIMEOUT = 15.0       # a send that makes no progress this long: the server stopped reading
SMALL_RCVBUF = 4096
BYSTANDER_PACE = 0.2      # seconds between the bystander's requests (its CPU stays small)
BOMB_END_WAIT = 10.0      # after the last bomb, seconds for the connection to end
# Waiting for a window: CPU seconds at most this share of the wait, plus
# WAIT_CPU_S (the bystander's requests, the upstream's first megabytes).
WAIT_CPU_SHARE = 0.25
WAIT_CPU_S = 1.0


@pytest.fixture
def victim(proxy):
    """A proxy whose memory is measured, and its figures before the attack."""
    p = bounded_proxy(proxy, {"client_timeout": "5s"})
    p.base_rss = footprint(p)
    return p


class Bystander:
    """A normal HTTP/2 connection opened before the attack, used during it
    (a thread's requests, BYSTANDER_PACE apart, so that it is never idle)
    and after it."""

    def __init__(self, p, actor):
        self.p, self.actor = p, actor
        self.conn = h2.Client(p.port)
        self.errors = []
        self.served = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self):
        c = self.conn
        try:
            while not self.stop.is_set():
                st = c.response(c.request("GET", "/api/things/bystander",
                                          [("x-actor-id", self.actor)]), timeout=60)
                assert st.status == 200, st
                self.served += 1
                self.stop.wait(BYSTANDER_PACE)
        except Exception as e:  # reported by finish()
            self.errors.append(e)

    def __enter__(self):
        self.conn.settings()
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(90)

    def finish(self, ids):
        """After the attack: the connection opened before it was served
        meanwhile and still is, and a new one is too."""
        self.stop.set()
        self.thread.join(90)
        assert not self.errors, self.errors
        assert self.served >= 1, "no request was served during the attack"
        st = self.conn.response(self.conn.request("GET", "/api/things/after",
                                                  [("x-actor-id", self.actor)]), timeout=60)
        assert st.status == 200, st
        self.conn.close()
        assert_owner(self.p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course()))


def figures(p, name, cpu0, detail):
    """Print the attack's figures, then check its CPU and memory; the CPU
    seconds it cost."""
    cpu = h2.cpu_seconds(p.proc) - cpu0
    rss = streams.rss_mib(p.proc)
    peak = streams.peak_rss_mib(p.proc)
    print("h2 attack %s: %s; idemproxy CPU +%.2f s, RSS %.1f MiB (peak %.1f, %.1f after start)"
          % (name, detail, cpu, rss, peak, p.base_rss))
    assert cpu < CPU_BOUND_S, (name, cpu)
    assert peak - p.base_rss < RSS_BOUND_MIB, (name, peak, p.base_rss)
    return cpu


def how(goaway, closed, what=None):
    if goaway is not None:
        return "GOAWAY code %d" % goaway[0]
    return what or ("closed" if closed else "still open")


def ended(raw, wait=END_WAIT):
    """Read until the server closes or sends GOAWAY: (GOAWAY or None, closed)."""
    frames = raw.drain(wait, until=lambda f: f[0] == h2.GOAWAY)
    goaway = h2.goaway_of(frames)
    if goaway is not None:
        raw.drain(wait)   # then the close
    return goaway, raw.closed


def look(raw):
    """Take what the server sent so far without waiting: its GOAWAY if any."""
    raw.read(0.001)
    return h2.goaway_of(raw.frames())


def headers_frame(sid, method="GET", path="/api/things/attack", actor="attacker", end=True,
                  extra=()):
    block = h2.hpack_request(method, path, headers=[("x-actor-id", actor)] + list(extra))
    return h2.frame(h2.HEADERS, h2.END_HEADERS | (h2.END_STREAM if end else 0), sid, block)


def run_flood(p, name, ids, raw, unit, limit, read_between):
    """Write unit (the bytes of BATCH frames) until the server ends the
    connection or limit bytes went; read_between: look at what came back
    between batches (otherwise never read: a client that does not read).
    Returns the bytes sent and how it ended."""
    raw.sock.settimeout(SEND_TIMEOUT)
    goaway, how = None, None
    while raw.sent < limit:
        try:
            if not raw.send(unit):
                how = "closed"
                break
        except OSError as e:  # a send timeout: the server stopped reading us
            how = "stopped reading (%s)" % e.__class__.__name__
            break
        if read_between:
            goaway = look(raw)
            if goaway is not None or raw.closed:
                how = "goaway" if goaway else "closed"
                break
    sent = raw.sent
    if goaway is None:
        goaway, closed = ended(raw)
    else:
        closed = True
    return sent, goaway, closed, how


def check_ended(name, sent, limit, goaway, closed, how):
    assert goaway is not None or closed, \
        "%s: the connection did not end (%s after %d bytes)" % (name, how, sent)
    assert sent < limit, "%s: the connection lasted all %d bytes" % (name, limit)


def test_rapid_reset(victim, upstream, ids):
    p = victim
    cpu0 = h2.cpu_seconds(p.proc)
    with Bystander(p, ids.actor) as by, h2.Raw(p.port) as raw:
        pairs, sid, goaway = 0, 1, None
        while pairs < RAPID_RESET_MAX:
            batch = bytearray()
            for _ in range(BATCH // 2):
                batch += headers_frame(sid, actor=ids.actor + "-rr")
                batch += h2.frame(h2.RST_STREAM, 0, sid, struct.pack("!I", h2.CANCEL))
                sid += 2
            if not raw.send(bytes(batch)):
                break
            pairs += BATCH // 2
            goaway = look(raw)
            if goaway is not None or raw.closed:
                break
        if goaway is None:
            goaway, _ = ended(raw)
        executed = upstream.count(actor=ids.actor + "-rr")
        figures(p, "rapid reset", cpu0, "%d HEADERS+RST_STREAM pairs, then %s; %d reached the "
                "upstream" % (pairs, how(goaway, raw.closed), executed))
        assert goaway is not None or raw.closed, "rapid reset: the connection did not end"
        assert pairs < RAPID_RESET_MAX, pairs
        by.finish(ids)


def test_continuation_flood(victim, upstream, ids):
    p = victim
    cpu0 = h2.cpu_seconds(p.proc)
    with Bystander(p, ids.actor) as by, h2.Raw(p.port) as raw:
        raw.send(h2.frame(h2.HEADERS, 0, 1, h2.hpack_request("GET", "/api/things/cont")))
        piece = h2.hpack_literal("x-flood", "a" * (CONTINUATION_PIECE - 16))
        unit = h2.frame(h2.CONTINUATION, 0, 1, piece) * 16
        sent, goaway, closed, end = run_flood(p, "continuation", ids, raw, unit,
                                              CONTINUATION_MAX, True)
        figures(p, "CONTINUATION flood", cpu0, "%.1f MiB of CONTINUATION frames, then %s"
                % (sent / MIB, how(goaway, closed, end)))
        check_ended("CONTINUATION flood", sent, CONTINUATION_MAX, goaway, closed, end)
        assert upstream.count(path="/api/things/cont") == 0
        by.finish(ids)


def bomb_block(first):
    """A header block whose one dynamic-table entry (added by the first
    block) is referenced BOMB_REFS times: 16 KB that decode to 64 MB."""
    head = h2.hpack_request("GET", "/api/things/bomb")
    if first:
        # Literal with incremental indexing, new name (RFC 7541 6.2.1).
        head += b"\x40" + h2.hpack_string("x-bomb") + h2.hpack_string("b" * BOMB_VALUE)
    return head + b"\xbe" * BOMB_REFS   # indexed field 62: the newest entry


def block_frames(sid, block, max_frame=16384):
    """HEADERS (END_STREAM) and CONTINUATION frames carrying block."""
    pieces = [block[i:i + max_frame] for i in range(0, len(block), max_frame)]
    out = bytearray()
    for i, piece in enumerate(pieces):
        flags = h2.END_HEADERS if i == len(pieces) - 1 else 0
        if i == 0:
            out += h2.frame(h2.HEADERS, h2.END_STREAM | flags, sid, piece)
        else:
            out += h2.frame(h2.CONTINUATION, flags, sid, piece)
    return bytes(out)


def test_hpack_bomb(victim, upstream, ids):
    p = victim
    cpu0 = h2.cpu_seconds(p.proc)
    with Bystander(p, ids.actor) as by, h2.Raw(p.port) as raw:
        bombs, goaway, resets = 0, None, 0
        sid = 1
        while bombs < BOMB_STREAMS_MAX:
            if not raw.send(block_frames(sid, bomb_block(bombs == 0))):
                break
            bombs += 1
            sid += 2
            raw.read(0.05)
            got = raw.frames()
            resets += sum(1 for f in got if f[0] == h2.RST_STREAM)
            goaway = h2.goaway_of(got)
            if goaway is not None or raw.closed:
                break
        if goaway is None and not raw.closed:
            goaway, _ = ended(raw, BOMB_END_WAIT)
        figures(p, "HPACK bomb", cpu0, "%d blocks of %d bytes decoding to %d MB each, %d streams "
                "reset, then %s" % (bombs, len(bomb_block(False)),
                                    BOMB_REFS * (BOMB_VALUE + 6) // 10**6, resets,
                                    how(goaway, raw.closed)))
        assert upstream.count(path="/api/things/bomb") == 0
        assert goaway is not None or raw.closed, "HPACK bomb: the connection did not end"
        assert bombs < BOMB_STREAMS_MAX, bombs
        by.finish(ids)


@pytest.mark.parametrize("kind", ["settings", "ping"])
def test_control_frame_flood_unread(victim, upstream, ids, kind):
    """SETTINGS or PING frames, each owing an ACK, from a client that
    never reads the ACKs."""
    p = victim
    cpu0 = h2.cpu_seconds(p.proc)
    if kind == "settings":
        one = h2.settings_frame([(h2.INITIAL_WINDOW_SIZE, 65535)])
    else:
        one = h2.frame(h2.PING, 0, 0, b"12345678")
    with Bystander(p, ids.actor) as by, h2.Raw(p.port, rcvbuf=SMALL_RCVBUF) as raw:
        sent, goaway, closed, end = run_flood(p, kind, ids, raw, one * BATCH, FLOOD_MAX, False)
        figures(p, "%s flood" % kind.upper(), cpu0, "%d frames (%.1f MiB) unread, then %s" % (
            sent // len(one), sent / MIB, how(goaway, closed, end)))
        check_ended("%s flood" % kind, sent, FLOOD_MAX, goaway, closed, end)
        by.finish(ids)


def test_empty_data_flood(victim, upstream, ids):
    p = victim
    cpu0 = h2.cpu_seconds(p.proc)
    with Bystander(p, ids.actor) as by, h2.Raw(p.port) as raw:
        raw.send(headers_frame(1, "POST", "/api/uploads", ids.actor + "-empty", end=False,
                               extra=[("x-test-action", "sink")]))
        one = h2.frame(h2.DATA, 0, 1)
        limit = EMPTY_DATA_MAX * len(one)
        sent, goaway, closed, end = run_flood(p, "empty DATA", ids, raw, one * BATCH,
                                              limit, True)
        figures(p, "empty DATA flood", cpu0, "%d empty DATA frames, then %s" % (
            sent // len(one), how(goaway, closed, end)))
        check_ended("empty DATA flood", sent, limit, goaway, closed, end)
        by.finish(ids)


def test_window_never_opened(victim, upstream, ids):
    """A client whose stream window is 0 and never opened, reading a
    256 MiB response: the upstream is held back, nothing is buffered for
    it, idemproxy waits without spinning (its CPU time over the stall a
    small share of the stall's length), and the connection ends
    (client_timeout)."""
    p = victim
    cpu0 = h2.cpu_seconds(p.proc)
    t0 = time.monotonic()
    actor = ids.actor + "-stall"
    with Bystander(p, ids.actor) as by, \
            h2.Raw(p.port, settings=[(h2.INITIAL_WINDOW_SIZE, 0)]) as raw:
        raw.drain(10, until=lambda f: f[0] == h2.SETTINGS and not f[1] & h2.ACK)
        raw.send(h2.settings_frame(ack=True))
        raw.send(headers_frame(1, path="/files/stall", actor=actor,
                               extra=[("x-test-action", "stream:%d" % STALL_SIZE)]))
        assert len(upstream.wait_for(1, actor=actor)) == 1
        frames = raw.drain(END_WAIT, until=lambda f: f[0] == h2.GOAWAY)
        goaway = h2.goaway_of(frames)
        if goaway is not None:
            frames += raw.drain(END_WAIT)
        data = sum(len(f[3]) for f in frames if f[0] == h2.DATA)
        assert data == 0, "DATA beyond a window of 0: %d bytes" % data
        assert goaway is not None or raw.closed, "the connection did not end"
        (e,) = upstream.requests(actor=actor)
        assert (e.sent or 0) < STALL_SIZE, "the whole response was read from the upstream"
        stall = time.monotonic() - t0
        cpu = figures(p, "window never opened", cpu0, "%s after %.1f s; the upstream wrote %.1f "
                      "of %d MiB" % (how(goaway, raw.closed), stall, (e.sent or 0) / MIB,
                                     STALL_SIZE // MIB))
        assert cpu < WAIT_CPU_SHARE * stall + WAIT_CPU_S, \
            "idemproxy spent %.2f s of CPU in %.1f s waiting for a window" % (cpu, stall)
        by.finish(ids)
