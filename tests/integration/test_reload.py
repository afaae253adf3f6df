"""SIGHUP: a new configuration is built, checked and swapped in; requests in
flight finish under the one they started with; a bad file changes nothing."""
import shutil
import signal
import subprocess
import time

import pytest

from tests.lib import admin as admin_lib
from tests.lib import helpers
from tests.lib.helpers import course, assert_owner
from tests.lib.proxy import rewrite, wait_for_log


def conflict_status(p, ids):
    key = ids.key()
    assert_owner(p.post("/api/courses", key=key, actor=ids.actor, body=course()))
    return p.post("/api/courses", key=key, actor=ids.actor, body=course(title="Other")).status


def move_listen(p):
    """A restart-only change in p's file: listen on another port."""
    other = helpers.free_port()
    rewrite(p, lambda t: "\n".join(
        "listen 127.0.0.1:%d" % other if line.startswith("listen ") else line
        for line in t.splitlines()) + "\n")


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
    move_listen(p)
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


def reload_metrics(p):
    m = admin_lib.metrics(p)
    return (m.get("idemproxy_config_last_reload_successful"),
            m.get("idemproxy_config_last_reload_success_timestamp_seconds"))


def config_text(p):
    r = admin_lib.admin(p, "GET", "/config")
    assert r.status == 200, r
    assert (r.headers.get("Content-Type") or "").startswith("text/plain"), r
    return r.body.decode()


def test_a_reload_is_seen_in_metrics_and_config(proxy, upstream, ids):
    """At start the last reload counts as successful at the start time; a
    broken file sets it to 0, keeps the time and the running configuration,
    and GET /config says FILE:LINE: message; a good file sets it back."""
    before = int(time.time())
    p = admin_lib.admin_proxy(proxy)
    ok, at = reload_metrics(p)
    assert ok == 1 and before <= at <= time.time(), (ok, at)
    text = config_text(p)
    assert text.startswith("# last reload: none; loaded at start, "), text
    assert "\nmismatch_status 422\n" in text

    rewrite(p, lambda t: t + "\nmismatch_status 409\nno_such_directive 1\n")
    p.signal(signal.SIGHUP)
    wait_for_log(p, "reload failed")
    lines = len(open(p.conf).read().splitlines())
    assert helpers.poll(lambda: reload_metrics(p) == (0, at))
    text = config_text(p)
    assert ("error: %s:%d: unknown directive \"no_such_directive\"" % (p.conf, lines)) \
        in text.splitlines()[0], text
    assert "\nmismatch_status 422\n" in text
    assert conflict_status(p, ids) == 422

    rewrite(p, lambda t: t.replace("no_such_directive 1\n", ""))
    p.signal(signal.SIGHUP)
    wait_for_log(p, "configuration reloaded")
    assert helpers.poll(lambda: reload_metrics(p)[0] == 1)
    assert reload_metrics(p)[1] >= at
    text = config_text(p)
    assert text.splitlines()[0].startswith("# last reload: ") and \
        text.splitlines()[0].endswith(" ok"), text
    assert "\nmismatch_status 409\n" in text
    assert conflict_status(p, ids) == 409


def test_a_refused_reload_is_a_failed_one(proxy, upstream, ids):
    p = admin_lib.admin_proxy(proxy)
    move_listen(p)
    p.signal(signal.SIGHUP)
    wait_for_log(p, "reload refused")
    assert helpers.poll(lambda: reload_metrics(p)[0] == 0)
    assert 'error: "listen" changed, which needs a restart' in config_text(p)


def test_metrics_pass_promtool(proxy, upstream, ids):
    """The exposition, the reload gauges included, as Prometheus's own
    checker reads it, after a failed reload too."""
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool (Debian package prometheus) is not installed")
    p = admin_lib.admin_proxy(proxy)
    assert_owner(p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course()))
    rewrite(p, lambda t: t + "\nno_such_directive 1\n")
    p.signal(signal.SIGHUP)
    wait_for_log(p, "reload failed")
    r = admin_lib.admin(p, "GET", "/metrics")
    assert r.status == 200
    assert b"idemproxy_config_last_reload_successful 0\n" in r.body
    check = subprocess.run([promtool, "check", "metrics"], input=r.body, capture_output=True,
                           timeout=30)
    assert check.returncode == 0, (check.stdout, check.stderr)
