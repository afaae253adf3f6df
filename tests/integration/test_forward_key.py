"""forward_key: the upstream receives, on an owner's request, a key of its
own in the configured header, replacing whatever the client sent there.
`scoped` (the default) is the same for the first try and for the takeover
of an unknown outcome (recovery forward), on any instance, and differs for
another actor or another operation: a SHA-256 over the length-prefixed
actor, operation and key, in hex; `raw` is the client's Idempotency-Key. A
replay never reaches the upstream, and a pass-through request's header of
that name never goes along. Every test counts the upstream's effects."""
import hashlib
import uuid

from tests.lib import helpers
from tests.lib.helpers import assert_owner, assert_replay_of, course, problem

HEADER = "Upstream-Key"
ROUTES = """
route fk.pay {
    match        POST /api/fkpay
    recovery     forward
}
route fk.refund {
    match        POST /api/fkrefund
}
route fk.raw {
    match        POST /api/fkraw
    forward_key  %s raw
    key          optional
}
""" % HEADER
LABEL = b"idemproxy forward_key v1"


def expected(actor, operation, key):
    """The scoped key of the header actor's scope (stored as "h:" + actor)."""
    def part(b):
        return len(b).to_bytes(4, "big") + b
    data = part(LABEL) + part(("h:" + actor).encode()) + part(operation.encode()) + \
        part(key.encode())
    return hashlib.sha256(data).hexdigest()


def sent(upstream, actor, path):
    """The forwarded key of each of actor's requests on path, as the upstream got them."""
    out = []
    for e in upstream.requests(actor=actor, path=path):
        values = e.headers.get_all(HEADER)
        assert len(values) <= 1, e.headers
        out.append(values[0] if values else None)
    return out


def test_scoped_key_is_stable_across_takeover_and_distinct_across_scopes(proxy, upstream, ids):
    """First try (its outcome lost: the upstream reset), the takeover that
    forwards it again, and its replay: the upstream saw the same forwarded
    key twice, never the client's own value of that header, and the replay
    never came. Another actor's and another operation's same key differ."""
    p = proxy({"forward_key": HEADER}, routes=ROUTES)
    key = ids.key()
    spoof = [(HEADER, "client-chosen")]
    first = p.post("/api/fkpay", key=key, actor=ids.actor, body=course(),
                   headers=spoof + [("X-Test-Action", "reset")])
    problem(first, "upstream-error", 502)
    again = p.post("/api/fkpay", key=key, actor=ids.actor, body=course(), headers=spoof)
    assert_owner(again)
    assert_replay_of(p.post("/api/fkpay", key=key, actor=ids.actor, body=course()), again)
    keys = sent(upstream, ids.actor, "/api/fkpay")
    want = expected(ids.actor, "fk.pay", key)
    assert keys == [want, want], keys
    assert len(want) == 64 and want != key
    other = "other-" + uuid.uuid4().hex
    assert_owner(p.post("/api/fkpay", key=key, actor=other, body=course()))
    assert_owner(p.post("/api/fkrefund", key=key, actor=ids.actor, body=course()))
    theirs = sent(upstream, other, "/api/fkpay")
    refund = sent(upstream, ids.actor, "/api/fkrefund")
    assert theirs == [expected(other, "fk.pay", key)], theirs
    assert refund == [expected(ids.actor, "fk.refund", key)], refund
    assert len({want, theirs[0], refund[0]}) == 3
    assert upstream.count(actor=ids.actor) == 3 and upstream.count(actor=other) == 1


def test_same_scope_same_key_on_another_instance(proxy, upstream, ids):
    """Two instances derive one forwarded key for one scope: a takeover on
    the second of the first's unknown outcome sends what the first sent."""
    a = proxy({"forward_key": HEADER}, routes=ROUTES)
    b = proxy({"forward_key": HEADER}, routes=ROUTES)
    key = ids.key()
    problem(a.post("/api/fkpay", key=key, actor=ids.actor, body=course(),
                   headers=[("X-Test-Action", "reset")]), "upstream-error", 502)
    assert_owner(b.post("/api/fkpay", key=key, actor=ids.actor, body=course()))
    keys = sent(upstream, ids.actor, "/api/fkpay")
    assert len(keys) == 2 and keys[0] == keys[1] == expected(ids.actor, "fk.pay", key), keys


def test_raw_passes_the_clients_key(proxy, upstream, ids):
    """raw: the client's key as sent; a request without a key (key
    optional: it passes through) carries none, whatever the client put in
    that header."""
    p = proxy(routes=ROUTES)
    key = ids.key()
    assert_owner(p.post("/api/fkraw", key=key, actor=ids.actor, body=course(),
                        headers=[(HEADER, "client-chosen")]))
    unkeyed = p.post("/api/fkraw", actor=ids.actor, body=course(),
                     headers=[(HEADER, "client-chosen")])
    assert unkeyed.status == 201, unkeyed
    assert sent(upstream, ids.actor, "/api/fkraw") == [key, None]
    # Without forward_key the header is the client's business.
    assert_owner(p.post("/api/fkrefund", key=ids.key(), actor=ids.actor, body=course(),
                        headers=[(HEADER, "client-chosen")]))
    assert sent(upstream, ids.actor, "/api/fkrefund") == ["client-chosen"]
    assert upstream.count(actor=ids.actor) == 3


BASE = "upstream http://127.0.0.1:1\nactor header X-Actor\nroute r {\n    match POST /r\n"


def test_check_names_file_and_line(binary, tmp_path):
    """-t names the file and line of a bad forward_key; -T shows it."""
    conf = tmp_path / "f.conf"
    for bad, word in (("forward_key Host", "Host"), ("forward_key X-Key hashed", "hashed"),
                      ("forward_key Bad:Name", "Bad:Name"), ("forward_key off raw", "off"),
                      ("forward_key X-Forwarded-For", "X-Forwarded-For")):
        r = helpers.check_config(binary, conf, BASE + "    " + bad + "\n}\n")
        assert r.returncode == 1, (bad, r)
        assert r.stderr.startswith("%s:5: " % conf) and word in r.stderr, r.stderr
    text = ("forward_key Upstream-Key\n" + BASE + "}\nroute s {\n    match POST /s\n"
            "    forward_key Idempotency-Key raw\n}\nroute t {\n    match POST /t\n"
            "    forward_key off\n}\n")
    r = helpers.check_config(binary, conf, text)
    assert r.returncode == 0, r.stderr
    out = helpers.show_config(binary, conf)
    routes = out.split("\nroute ")[1:]
    assert "    forward_key Upstream-Key scoped\n" in routes[0], out
    assert "    forward_key Idempotency-Key raw\n" in routes[1], out
    assert "    forward_key off\n" in routes[2], out
