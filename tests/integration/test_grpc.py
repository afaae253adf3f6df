"""gRPC through idemproxy with real gRPC parts: a python3-grpcio server as
the upstream (`upstream h2c://`, tests/lib/grpc_upstream.py, which counts
every call it ran), grpcio clients on a cleartext HTTP/2 channel to the
proxy, one with retries in its service config. A unary call is recorded
and its retries replay the message and the trailers as they came; the
upstream's grpc-status decides the record; idemproxy's own answers are
gRPC statuses; a call with more than one request message is refused
before it reaches the upstream; a server-streaming call is recorded whole;
`grpc streaming pass` lets every call through. Each test counts the
upstream's effects exactly."""
import json
import subprocess
import threading
import uuid

import grpc
import pytest

from tests.lib import procs

ROUTES = """
route pay.charge {
	match POST /demo.Pay/Charge
	match POST /demo.Pay/Watch
	match POST /demo.Pay/Upload
	match POST /demo.Pay/Chat
	store_headers x-t
}
"""

PASS_ROUTES = ROUTES.replace("store_headers x-t", "grpc streaming pass")

RETRY_CONFIG = {
    "methodConfig": [{
        "name": [{"service": "demo.Pay"}],
        "retryPolicy": {
            "maxAttempts": 5,
            "initialBackoff": "0.01s",
            "maxBackoff": "0.02s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["ABORTED"],
        },
    }],
}

CALL_TIMEOUT = 30


class GrpcUpstream:
    """tests/lib/grpc_upstream.py on a free port, and its control calls."""

    def __init__(self):
        self.proc = subprocess.Popen(
            ["/usr/bin/python3", "-m", "tests.lib.grpc_upstream"], cwd=procs.ROOT,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(5)
            raise RuntimeError("the gRPC upstream did not start")
        self.port = int(line)
        self.channel = grpc.insecure_channel("127.0.0.1:%d" % self.port)

    def admin(self, method, body=b""):
        call = self.channel.unary_unary("/control.Admin/" + method)
        return call(body, timeout=CALL_TIMEOUT)

    def counts(self):
        return json.loads(self.admin("Count"))

    def effects(self, method, ident):
        return self.counts().get("%s %s" % (method, ident), 0)

    def release(self, ident):
        assert self.admin("Release", json.dumps({"id": ident}).encode()) == b"released"

    def stop(self):
        self.channel.close()
        procs.terminate(self.proc)


@pytest.fixture(scope="module")
def grpc_up():
    up = GrpcUpstream()
    yield up
    up.stop()


@pytest.fixture
def gproxy(proxy, grpc_up):
    return proxy(settings={"upstream": "h2c://127.0.0.1:%d" % grpc_up.port}, routes=ROUTES)


def channel(p, retries=False):
    options = []
    if retries:
        options = [("grpc.enable_retries", 1),
                   ("grpc.service_config", json.dumps(RETRY_CONFIG))]
    return grpc.insecure_channel("127.0.0.1:%d" % p.port, options=options)


def meta(key, actor):
    m = [("x-actor-id", actor)]
    if key is not None:
        m.append(("idempotency-key", key))
    return m


def charge(ch, req, key, actor):
    """A unary Charge: ("OK", message, initial, trailing) or (code, details,
    initial, trailing) for an error."""
    call = ch.unary_unary("/demo.Pay/Charge")
    try:
        msg, c = call.with_call(json.dumps(req).encode(), metadata=meta(key, actor),
                                timeout=CALL_TIMEOUT)
        return ("OK", msg, dict(c.initial_metadata()), list(c.trailing_metadata()))
    except grpc.RpcError as e:
        return (e.code(), e.details(), dict(e.initial_metadata() or ()),
                list(e.trailing_metadata() or ()))


def ident():
    return uuid.uuid4().hex


def outcomes(p, route="pay.charge"):
    """The access lines' outcomes of route so far, in the order written
    (a request's line is written when it ends, and reaches the log within
    the access lines' flush interval)."""
    return [l["outcome"] for l in p.log_lines()
            if l.get("msg") == "request" and l.get("route") == route]


def logged(p, **want):
    """Wait until the access lines of pay.charge hold at least want's count
    of each outcome; the outcomes then."""
    def enough():
        seen = outcomes(p)
        return all(seen.count(o) >= n for o, n in want.items()) and seen
    seen = procs.poll(enough, limit=CALL_TIMEOUT)
    assert seen, (want, outcomes(p))
    return seen


def test_owner_then_replay_byte_for_byte(gproxy, grpc_up, ids):
    """The first call runs once; its retry gets the same message, the same
    trailing metadata (a custom trailer the route stores, and
    grpc-status-details-bin) and status, marked as a replay."""
    i, key = ident(), ids.key()
    req = {"id": i, "trailers": [["x-t", "v1"]], "details_bin": "0001ff"}
    with channel(gproxy) as ch:
        first = charge(ch, req, key, ids.actor)
        second = charge(ch, req, key, ids.actor)
    assert first[0] == "OK", first
    assert json.loads(first[1]) == {"id": i, "n": 1}
    assert second[:2] == first[:2]
    assert second[3] == first[3], (first[3], second[3])
    assert ("x-t", "v1") in first[3] and ("grpc-status-details-bin", b"\x00\x01\xff") in first[3]
    assert "idempotent-replayed" not in first[2]
    assert second[2].get("idempotent-replayed") == "true", second[2]
    assert grpc_up.effects("Charge", i) == 1
    assert logged(gproxy, owner=1, replay=1) == ["owner", "replay"]


def test_upstream_error_is_stored_and_replayed(gproxy, grpc_up, ids):
    """INTERNAL is an answer like any other: stored, replayed with its
    details and trailers, never run again."""
    i, key = ident(), ids.key()
    req = {"id": i, "code": "INTERNAL", "details": "ledger said no", "details_bin": "0a0b"}
    with channel(gproxy) as ch:
        first = charge(ch, req, key, ids.actor)
        second = charge(ch, req, key, ids.actor)
    assert first[0] == grpc.StatusCode.INTERNAL and first[1] == "ledger said no", first
    assert second[:2] == first[:2]
    assert [t for t in second[3] if t[0] == "grpc-status-details-bin"] == \
        [("grpc-status-details-bin", b"\x0a\x0b")]
    assert grpc_up.effects("Charge", i) == 1


def test_unavailable_releases_and_deadline_exceeded_is_unknown(gproxy, grpc_up, ids):
    """grpc_release_on (UNAVAILABLE among the defaults) frees the key, so
    the retry runs again; grpc_unknown_on (DEADLINE_EXCEEDED) keeps the
    outcome unknown, so the retry is refused with FAILED_PRECONDITION."""
    released, unknown = ident(), ident()
    k1, k2 = ids.key(), ids.key()
    with channel(gproxy) as ch:
        for _ in range(2):
            r = charge(ch, {"id": released, "code": "UNAVAILABLE"}, k1, ids.actor)
            assert r[0] == grpc.StatusCode.UNAVAILABLE, r
        first = charge(ch, {"id": unknown, "code": "DEADLINE_EXCEEDED"}, k2, ids.actor)
        second = charge(ch, {"id": unknown, "code": "DEADLINE_EXCEEDED"}, k2, ids.actor)
    assert grpc_up.effects("Charge", released) == 2
    assert first[0] == grpc.StatusCode.DEADLINE_EXCEEDED, first
    assert second[0] == grpc.StatusCode.FAILED_PRECONDITION, second
    assert "outcome-unknown" in second[1], second
    assert grpc_up.effects("Charge", unknown) == 1


def test_idempotency_errors_are_grpc_statuses(gproxy, grpc_up, ids):
    """No key: INVALID_ARGUMENT; no actor: UNAUTHENTICATED; the key again
    with another request: FAILED_PRECONDITION; none of them reaches the
    upstream but the first call."""
    i, key = ident(), ids.key()
    with channel(gproxy) as ch:
        missing = charge(ch, {"id": i}, None, ids.actor)
        call = ch.unary_unary("/demo.Pay/Charge")
        with pytest.raises(grpc.RpcError) as anonymous:
            call(json.dumps({"id": i}).encode(), metadata=[("idempotency-key", key)],
                 timeout=CALL_TIMEOUT)
        ok = charge(ch, {"id": i}, key, ids.actor)
        conflict = charge(ch, {"id": i, "other": 1}, key, ids.actor)
    assert missing[0] == grpc.StatusCode.INVALID_ARGUMENT, missing
    assert missing[1].startswith("idempotency-key-missing: "), missing
    assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert anonymous.value.details().startswith("actor-missing: ")
    assert ok[0] == "OK", ok
    assert conflict[0] == grpc.StatusCode.FAILED_PRECONDITION, conflict
    assert conflict[1].startswith("idempotency-conflict: "), conflict
    assert grpc_up.effects("Charge", i) == 1


def test_lost_response_retried_with_pushback_runs_once(gproxy, grpc_up, ids):
    """The first call's response is lost (its channel closes while the
    upstream still runs it); the client calls again with the same key
    through a channel whose retry policy retries ABORTED with 10 ms
    backoff. While the first runs, idemproxy answers ABORTED with
    grpc-retry-pushback-ms; grpcio waits that long, so its next attempt
    after the first call ended gets the replay. Ignoring the pushback,
    its five attempts would all be spent while the first is held. The
    upstream ran the call once."""
    i, key = ident(), ids.key()
    req = {"id": i, "hold": True}
    lost = channel(gproxy)
    future = lost.unary_unary("/demo.Pay/Charge").future(
        json.dumps(req).encode(), metadata=meta(key, ids.actor), timeout=CALL_TIMEOUT)
    assert procs.poll(lambda: i in grpc_up.counts()["entered"], limit=CALL_TIMEOUT)
    lost.close()
    with pytest.raises(grpc.RpcError):
        future.result(timeout=CALL_TIMEOUT)

    # A duplicate answered directly: ABORTED, trailers-only, with the pushback.
    with channel(gproxy) as plain:
        busy = charge(plain, req, key, ids.actor)
    assert busy[0] == grpc.StatusCode.ABORTED, busy
    assert busy[1].startswith("operation-in-progress: ")
    pushback = dict(busy[3]).get("grpc-retry-pushback-ms")
    assert pushback is not None and int(pushback) >= 1000, busy[3]

    result = {}
    with channel(gproxy, retries=True) as ch:
        t = threading.Thread(target=lambda: result.update(r=charge(ch, req, key, ids.actor)))
        t.start()
        # Its first attempt was refused while the first call is held ...
        logged(gproxy, in_progress=2)
        grpc_up.release(i)
        t.join(CALL_TIMEOUT)
    assert not t.is_alive()
    r = result["r"]
    assert r[0] == "OK", r
    assert json.loads(r[1]) == {"id": i, "n": 1}
    assert r[2].get("idempotent-replayed") == "true", r[2]
    assert grpc_up.effects("Charge", i) == 1
    seen = logged(gproxy, owner=1, replay=1)
    assert seen.count("owner") == 1 and seen.count("replay") == 1, seen
    # ... and the retries waited for the pushback: far fewer than five refused.
    assert 2 <= seen.count("in_progress") <= 4, seen


def test_streaming_requests_are_refused_before_forwarding(gproxy, grpc_up, ids):
    """A client-streaming and a bidirectional call on a matched route send
    two messages: UNIMPLEMENTED, and the upstream never sees them."""
    before_up, before_chat = grpc_up.effects("Upload", "-"), grpc_up.effects("Chat", "-")
    with channel(gproxy) as ch:
        up = ch.stream_unary("/demo.Pay/Upload")
        with pytest.raises(grpc.RpcError) as e:
            up(iter([b"a", b"b"]), metadata=meta(ids.key(), ids.actor), timeout=CALL_TIMEOUT)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert e.value.details().startswith("grpc-streaming-refused: ")
        chat = ch.stream_stream("/demo.Pay/Chat")
        with pytest.raises(grpc.RpcError) as e:
            list(chat(iter([b"a", b"b"]), metadata=meta(ids.key(), ids.actor),
                      timeout=CALL_TIMEOUT))
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert grpc_up.effects("Upload", "-") == before_up
    assert grpc_up.effects("Chat", "-") == before_chat


def test_server_streaming_is_recorded_and_replayed(gproxy, grpc_up, ids):
    """A server-streaming call is one request message: recorded with every
    message and its trailers; the retry gets them all again."""
    i, key = ident(), ids.key()
    req = json.dumps({"id": i, "n": 3, "trailers": [["x-t", "end"]]}).encode()
    got = []
    with channel(gproxy) as ch:
        watch = ch.unary_stream("/demo.Pay/Watch")
        for _ in range(2):
            it = watch(req, metadata=meta(key, ids.actor), timeout=CALL_TIMEOUT)
            got.append((list(it), it.code(), list(it.trailing_metadata()),
                        dict(it.initial_metadata())))
    assert got[0][0] == [("%s:%d" % (i, n)).encode() for n in range(3)]
    assert got[1][:3] == got[0][:3]
    assert got[0][1] == grpc.StatusCode.OK and ("x-t", "end") in got[0][2]
    assert got[1][3].get("idempotent-replayed") == "true"
    assert grpc_up.effects("Watch", i) == 1


def test_grpc_streaming_pass(proxy, grpc_up, ids):
    """With `grpc streaming pass` every call goes through unenforced: a
    client-streaming call reaches the upstream, a keyed unary call retried
    runs twice."""
    p = proxy(settings={"upstream": "h2c://127.0.0.1:%d" % grpc_up.port}, routes=PASS_ROUTES)
    i, key = ident(), ids.key()
    before = grpc_up.effects("Upload", "-")
    with channel(p) as ch:
        up = ch.stream_unary("/demo.Pay/Upload")
        assert up(iter([b"a", b"b"]), metadata=meta(key, ids.actor), timeout=CALL_TIMEOUT) == b"2"
        for _ in range(2):
            assert charge(ch, {"id": i}, key, ids.actor)[0] == "OK"
    assert grpc_up.effects("Upload", "-") == before + 1
    assert grpc_up.effects("Charge", i) == 2
    assert logged(p, **{"pass": 3}).count("pass") == 3


def test_describe_lists_grpc_methods(binary, proxy, grpc_up):
    """describe names the route's gRPC methods and how their calls are answered."""
    p = proxy(settings={"upstream": "h2c://127.0.0.1:%d" % grpc_up.port}, routes=ROUTES,
              start=False)
    out = subprocess.run([binary, "describe", "-c", p.conf], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    row = [l for l in out.stdout.splitlines() if l.startswith("| gRPC methods |")]
    assert len(row) == 1, out.stdout
    for method in ("demo.Pay/Charge", "demo.Pay/Watch", "demo.Pay/Upload", "demo.Pay/Chat"):
        assert "`%s`" % method in row[0]
    assert "`UNIMPLEMENTED`" in row[0] and "`ABORTED`" in row[0]
    # Routes with no gRPC method path have no such row.
    assert out.stdout.count("| gRPC methods |") == 1


def test_call_beyond_actor_max_owners_is_resource_exhausted(proxy, grpc_up, ids):
    """With actor_max_owners 1 and the actor's one call held upstream, its
    call with a new key gets RESOURCE_EXHAUSTED (too-many-requests) with
    grpc-retry-pushback-ms, trailers-only, and never reaches the upstream;
    after the held call ends the same call runs once."""
    p = proxy(settings={"upstream": "h2c://127.0.0.1:%d" % grpc_up.port},
              routes=ROUTES.replace("store_headers x-t", "store_headers x-t\n\tactor_max_owners 1"))
    held, other = ident(), ident()
    with channel(p) as ch:
        future = ch.unary_unary("/demo.Pay/Charge").future(
            json.dumps({"id": held, "hold": True}).encode(), metadata=meta(ids.key(), ids.actor),
            timeout=CALL_TIMEOUT)
        assert procs.poll(lambda: held in grpc_up.counts()["entered"], limit=CALL_TIMEOUT)
        key = ids.key()
        refused = charge(ch, {"id": other}, key, ids.actor)
        assert refused[0] == grpc.StatusCode.RESOURCE_EXHAUSTED, refused
        assert refused[1].startswith("too-many-requests: "), refused
        pushback = dict(refused[3]).get("grpc-retry-pushback-ms")
        assert pushback is not None and int(pushback) >= 1000, refused[3]
        assert grpc_up.effects("Charge", other) == 0
        grpc_up.release(held)
        future.result(timeout=CALL_TIMEOUT)
        ok = charge(ch, {"id": other}, key, ids.actor)
    assert ok[0] == "OK", ok
    assert grpc_up.effects("Charge", other) == 1 and grpc_up.effects("Charge", held) == 1
