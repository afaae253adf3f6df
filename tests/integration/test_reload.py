"""SIGHUP: a new configuration is built, checked and swapped in; requests in
flight finish under the one they started with; a bad file changes nothing."""
import signal

from tests.lib import helpers
from tests.lib.helpers import course, assert_owner
from tests.lib.proxy import rewrite, wait_for_log


def conflict_status(p, ids):
    key = ids.key()
    assert_owner(p.post("/api/courses", key=key, actor=ids.actor, body=course()))
    return p.post("/api/courses", key=key, actor=ids.actor, body=course(title="Other")).status


def test_reload_applies_new_configuration(proxy, upstream, ids):
    p = proxy()
    assert conflict_status(p, ids) == 422
    rewrite(p, lambda t: "mismatch_status 409\n" + t)
    p.signal(signal.SIGHUP)
    wait_for_log(p, "configuration reloaded")
    # Every worker switches; each new request uses the new configuration.
    for _ in range(6):
        assert conflict_status(p, ids) == 409
    assert p.running()


def test_broken_file_keeps_running_configuration(proxy, upstream, ids):
    p = proxy()
    rewrite(p, lambda t: t + "\nmismatch_status 409\nno_such_directive 1\n")
    p.signal(signal.SIGHUP)
    wait_for_log(p, "reload failed")
    lines = len(open(p.conf).read().splitlines())
    assert "%s:%d: " % (p.conf, lines) in p.stderr_text(), p.stderr_tail()
    assert "no_such_directive" in p.stderr_text()
    for _ in range(4):
        assert conflict_status(p, ids) == 422


def test_restart_only_change_is_refused(proxy, upstream, ids):
    p = proxy()
    other = helpers.free_port()
    rewrite(p, lambda t: "\n".join(
        "listen 127.0.0.1:%d" % other if line.startswith("listen ") else line
        for line in t.splitlines()) + "\n")
    p.signal(signal.SIGHUP)
    wait_for_log(p, 'reload refused: \\"listen\\" changed')
    # Still serving on the old port, with the old configuration.
    assert conflict_status(p, ids) == 422


def test_inflight_request_keeps_its_configuration(proxy, upstream, pg, ids):
    """An owner in flight when the reload lands finishes under the
    configuration it started with: its 503 is released (release_on 4xx 503),
    while an owner after the reload (release_on 4xx) has its 503 stored."""
    p = proxy()
    answer_503 = [("X-Test-Status", "503")]
    before = ids.key()
    with helpers.SlowOwner(p, upstream, "/api/courses", before, ids.actor, 1.5,
                           headers=answer_503) as owner:
        rewrite(p, lambda t: "release_on 4xx\n" + t)
        p.signal(signal.SIGHUP)
        wait_for_log(p, "configuration reloaded")
    assert owner.response.status == 503
    assert pg.records.rows(before) == []          # released: old configuration
    after = ids.key()
    for _ in range(4):                             # every worker has switched
        key = after + str(_)
        r = p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=answer_503)
        assert r.status == 503
        assert helpers.record_status(pg.records.one(key)) == 503   # stored: new one
    assert upstream.count(actor=ids.actor) == 5
