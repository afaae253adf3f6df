"""`actor_max_records` and `actor_max_stored_bytes` are counted in
PostgreSQL across every instance: two idemproxy instances sharing one
database refuse an actor's new keys with 429 actor-quota-exceeded once its
records reach a quota (after the documented lag, one quota_refresh plus a
read, which the tests poll for), never reaching the upstream; replays of
its records still work at the quota, other actors are not affected, and
once its records expire and the sweeper deletes them it is served again."""
import time

from tests.lib.admin import admin_proxy, metrics
from tests.lib.expect import assert_owner, assert_replay_of, course, problem

REFRESH = "200ms"
WAIT = 30.0      # seconds any polled condition gets on a loaded machine
POLL = 0.1


def settings(**quota):
    s = {"quota_refresh": REFRESH, "sweep_interval": "200ms", "workers": "1"}
    s.update(quota)
    return s


def fill(proxies, ids, actor, made):
    """Post new keys for actor, alternating instances, until one is refused
    (bounded by WAIT); each owner goes into made as (key, response). Returns
    the refusal, counted in the instance's .refused."""
    deadline = time.monotonic() + WAIT
    i = 0
    while True:
        key = ids.key()
        p = proxies[i % len(proxies)]
        r = p.post("/api/courses", key=key, actor=actor, body=course())
        i += 1
        if r.status == 429:
            p.refused += 1
            return r
        assert_owner(r)
        made.append((key, r))
        assert time.monotonic() < deadline, "never refused: %d records" % len(made)
        time.sleep(POLL)


def refused_everywhere(proxies, ids, actor, made):
    """Each instance refuses the actor's next new key (polled: each sees the
    quota after its own refresh)."""
    for p in proxies:
        r = fill([p], ids, actor, made)
        doc = problem(r, "actor-quota-exceeded", 429)
        assert r.headers.get("X-Should-Retry") == "true", r
        assert int(r.headers.get("Retry-After")) >= 1, r
    return doc


def stored(pg, actor):
    return pg.query("SELECT count(*) AS n, coalesce(sum(coalesce(octet_length(response_headers),"
                    " 0) + coalesce(octet_length(response_body), 0)), 0) AS bytes"
                    " FROM idempotency_records WHERE actor = %s", ("h:" + actor,))[0]


def expire(pg, actor):
    """Move the actor's records past their retention: the sweeper deletes them."""
    pg.query("UPDATE idempotency_records SET expires_at = now() - interval '1 second'"
             " WHERE actor = %s AND state = 'completed'", ("h:" + actor,))


def served_again(proxies, ids, actor, pg, upstream, made):
    expire(pg, actor)
    deadline = time.monotonic() + WAIT
    for p in proxies:
        while True:
            key = ids.key()
            r = p.post("/api/courses", key=key, actor=actor, body=course())
            if r.status != 429:
                break
            p.refused += 1
            assert time.monotonic() < deadline, "still refused after the records expired"
            time.sleep(POLL)
        assert_owner(r)
        made.append((key, r))
    assert upstream.count(actor=actor) == len(made)


def instances(proxy, s):
    """Two instances sharing the suite's database, each with its admin listener."""
    proxies = [admin_proxy(proxy, s), admin_proxy(proxy, s)]
    for p in proxies:
        p.refused = 0
    return proxies


def counted(proxies, reason):
    """Each instance counted its refusals under reason, and no other."""
    for p in proxies:
        m = metrics(p)
        for why in ("actor_max_records", "actor_max_stored_bytes", "expired_key"):
            want = p.refused if why == reason else 0
            assert m.get("idemproxy_refusals_total", reason=why) == want, (why, m.text)
        assert m.get("idemproxy_quota_refreshes_total") >= 1


def at_quota(proxy, pg, upstream, ids, reason, **quota):
    """Two instances with quota, and the actor's records made until both
    refuse it for reason: (instances, [(key, owner response)])."""
    proxies = instances(proxy, settings(**quota))
    made = []
    doc = refused_everywhere(proxies, ids, ids.actor, made)
    assert reason in doc["detail"], doc
    # The lag lets an instance claim a few more before it sees the count;
    # every record made was one upstream effect, and no refusal was one.
    assert upstream.count(actor=ids.actor) == len(made)
    assert stored(pg, ids.actor)["n"] == len(made)
    return proxies, made


def test_record_quota_across_two_instances(proxy, pg, upstream, ids):
    proxies, made = at_quota(proxy, pg, upstream, ids, "actor_max_records",
                             actor_max_records="3")
    assert len(made) >= 3

    # At the quota, replays of its own records still work, on both.
    for p in proxies:
        for key, owner in made:
            assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
                             owner)
    assert upstream.count(actor=ids.actor) == len(made)

    # Another actor is not affected.
    other = ids.actor + "-other"
    assert_owner(proxies[0].post("/api/courses", key=ids.key(), actor=other, body=course()))
    assert upstream.count(actor=other) == 1

    served_again(proxies, ids, ids.actor, pg, upstream, made)
    counted(proxies, "actor_max_records")


def test_stored_bytes_quota(proxy, pg, upstream, ids):
    proxies, made = at_quota(proxy, pg, upstream, ids, "actor_max_stored_bytes",
                             actor_max_stored_bytes="1k")
    assert stored(pg, ids.actor)["bytes"] >= 1024
    served_again(proxies, ids, ids.actor, pg, upstream, made)
    counted(proxies, "actor_max_stored_bytes")
