"""Real clients: the official Stripe SDK (stripe-node) and a Stainless-
generated SDK (orb-billing), installed from npm at the versions
tests/sdk/package-lock.json pins, driven against idemproxy by the scripts in
tests/sdk/ (each prints one JSON line: what every call returned or raised,
and every attempt the SDK's HTTP layer made).

They check docs/http.md, "For API consumers", in the terms the SDKs read: under `errors stripe` a
key reused with other parameters raises StripeIdempotencyError (400,
type idempotency_error) and stripe-node retries through an owner in
progress (Stripe-Should-Retry: true) to the replay; a Stainless SDK with
its default two retries gets through an owner slower than 2 s thanks to
the adaptive Retry-After-Ms, and stops at once on 409 outcome-unknown
(X-Should-Retry: false). A stored 500 (the upstream's own failure) stops
every SDK's retries at its first replay, which says X-Should-Retry: false
and Stripe-Should-Retry: false: stripe-node, orb-billing and Debian's
stripe-python (python3-stripe, run with /usr/bin/python3 by
tests/sdk/stripe_python_client.py). Upstream effects are counted at the
upstream: exactly one POST per key.

The SDKs cannot send the suite upstream's X-Test-* headers, so these tests
put tests/sdk/upstream.py behind idemproxy instead: it is slowed down (or
made to reset) by a parameter of the request itself. `npm ci` runs once
per session into tests/sdk/node_modules; the tests are skipped, saying
so, only when the npm registry cannot be reached."""
import email.utils
import hashlib
import json
import os
import subprocess
import time

import pytest

from tests.lib import helpers, npmkit

SDK_DIR = npmkit.SDK_DIR
SCRIPT_TIMEOUT = 90      # one SDK script (each bounds its own waits at 60 s)
SYSTEM_PYTHON = "/usr/bin/python3"   # Debian's python3-stripe is installed for it
# Retries every SDK is given for a stored 500: more than the one it takes,
# so that only the replay's advice can stop it at one.
FAILED_RETRIES = 3

API_KEY = "Bearer sk_test_x"   # what stripe-node sends for new Stripe('sk_test_x')
ORB_API_KEY = "Bearer orb_test_x"

STRIPE_ROUTE = """
route stripe.customers.create {
    match        POST /v1/customers
    actor        authorization
    fingerprint  body
    errors       stripe
}
"""
ORB_ROUTE = """
route orb.customers.create {
    match        POST /v1/customers
    actor        authorization
    fingerprint  json
}
"""
# stripe-node waits 0.5 s, then 0.5-1 s between its attempts and ignores
# Retry-After: an owner of 0.7 s is still running at the duplicate's
# second attempt and done by its third (maxNetworkRetries: 2).
STRIPE_OWNER_MS = 700
# Slower than the 2 s the SDK's default back-off (0.5 s, 1 s) or a fixed
# Retry-After: 1 (1 s, 1 s) would wait in all: only an estimate from the
# route's owner durations lets its two retries reach the replay.
ORB_OWNER_MS = 2500
ORB_CALLS = 4            # the owner and three concurrent duplicates
SLOW_SETTINGS = {"upstream_timeout": "10s", "lease": "20s",
                 # Two workers: the owner durations the estimate comes from
                 # are shared, so a duplicate on the other worker than the
                 # warm-up call's is told the same.
                 "workers": "2"}


text = npmkit.text
pinned = npmkit.pinned


@pytest.fixture(scope="session")
def node():
    """node, with the SDKs installed by `npm ci` from the lock file."""
    return npmkit.install()


class SdkUpstream:
    """tests/sdk/upstream.py, running."""

    def __init__(self):
        self.up = helpers.Upstream(module="tests.sdk.upstream")
        self.port = self.up.port

    def stop(self):
        self.up.stop()

    def reset(self):
        assert helpers.request(self.port, "POST", "/__reset", body=b"").status == 200

    def log(self):
        r = helpers.request(self.port, "GET", "/__log")
        assert r.status == 200
        return r.json()

    def posts(self, key):
        return [e for e in self.log() if e["method"] == "POST" and e["idempotency_key"] == key]


@pytest.fixture(scope="session")
def sdk_upstream_server():
    up = SdkUpstream()
    yield up
    up.stop()


@pytest.fixture
def sdk_upstream(sdk_upstream_server):
    sdk_upstream_server.reset()
    return sdk_upstream_server


def run_client(argv, label):
    """Run a client in tests/sdk (argv), which prints its result as its last
    JSON line; that result, after checking it ran without error."""
    try:
        r = subprocess.run([str(a) for a in argv], cwd=SDK_DIR, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=SCRIPT_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail("%s did not finish in %d s:\n%s" % (label, SCRIPT_TIMEOUT, text(e.stderr)))
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    assert lines, "%s printed no result (exit %d):\n%s%s" % (label, r.returncode,
                                                             r.stdout, r.stderr)
    out = json.loads(lines[-1])
    assert r.returncode == 0 and "error" not in out, (
        "%s failed (exit %d): %s\n%s" % (label, r.returncode, out.get("error"), r.stderr))
    return out


def run_sdk(node, script, *args):
    """Run tests/sdk/SCRIPT ARGS... with node; its JSON line."""
    out = run_client([node, script] + list(args), "%s %s" % (script, args))
    name = out["sdk"]["name"]
    assert out["sdk"]["version"] == pinned()[name], (out["sdk"], pinned())
    return out


def run_stripe_python(*args):
    """Run tests/sdk/stripe_python_client.py ARGS... with Debian's
    python3-stripe; its JSON line."""
    r = subprocess.run([SYSTEM_PYTHON, "-c", "import stripe"], capture_output=True, text=True)
    assert r.returncode == 0, ("python3-stripe is not installed for %s: scripts/deps.sh test "
                               "installs it\n%s" % (SYSTEM_PYTHON, r.stderr))
    script = os.path.join(SDK_DIR, "stripe_python_client.py")
    out = run_client([SYSTEM_PYTHON, script] + list(args), "%s %s" % (script, args))
    assert out["sdk"] == {"name": "stripe-python", "version": "5.0.0"}, out["sdk"]
    return out


def assert_stops_at_the_stored_500(call, p, sdk_upstream, key, raised, stripe):
    """call, one SDK call with FAILED_RETRIES retries whose upstream
    answered 500, made two requests: the upstream's own 500 (no advice:
    every SDK retries a 5xx) and one replay of it, whose X-Should-Retry:
    false (Stripe-Should-Retry: false under `errors stripe`) ended the
    retries. One upstream effect; idemproxy saw the same two requests."""
    assert call.get("raised") == raised, call
    assert statuses(call) == [500, 500], call
    first, replay = call["attempts"]
    assert "x-should-retry" not in first["headers"], first
    assert "stripe-should-retry" not in first["headers"], first
    assert "idempotent-replayed" not in first["headers"], first
    assert replay["headers"].get("idempotent-replayed") == "true", replay
    assert replay["headers"].get("x-should-retry") == "false", replay
    assert replay["headers"].get("stripe-should-retry") == ("false" if stripe else None), replay
    assert all(a["idempotency_key"] == key for a in call["attempts"]), call
    lines = access_lines(p, key, 2)
    assert [d["status"] for d in lines] == [500, 500], lines
    assert len(sdk_upstream.posts(key)) == 1


def statuses(call):
    return [a.get("status", a.get("error")) for a in call["attempts"]]


def is_replay(call):
    return call["headers"].get("idempotent-replayed") == "true"


def access_lines(p, key, at_least):
    """idemproxy's access lines for key (by its key_hash), once flushed."""
    digest = hashlib.sha256(key.encode()).hexdigest()

    def lines():
        return [d for d in p.log_lines()
                if d.get("msg") == "request" and d.get("key_hash")
                and digest.startswith(d["key_hash"])]
    helpers.poll(lambda: len(lines()) >= at_least, 5.0, 0.05)
    time.sleep(0.3)  # lines are written every 100 ms: a late extra one shows now
    return lines()


def stripe_proxy(proxy, sdk_upstream, settings=None):
    return proxy(settings, routes=STRIPE_ROUTE, upstream_port=sdk_upstream.port)


def orb_proxy(proxy, sdk_upstream, settings=None):
    return proxy(settings, routes=ORB_ROUTE, upstream_port=sdk_upstream.port)


# ---- stripe-node ----

def test_stripe_sends_what_the_route_expects(node, proxy, sdk_upstream, ids):
    """What stripe-node sends, as the upstream receives it through idemproxy:
    a form-encoded POST to /v1/customers with the key and the secret key."""
    p = stripe_proxy(proxy, sdk_upstream)
    key = ids.key()
    out = run_sdk(node, "stripe_client.js", p.port, sdk_upstream.port, "conflict", key)
    assert out["first"].get("returned"), out["first"]
    posts = sdk_upstream.posts(key)
    assert len(posts) == 1, posts
    e = posts[0]
    h = helpers.Headers(e["headers"])
    assert e["path"] == "/v1/customers"
    assert h.get("Content-Type") == "application/x-www-form-urlencoded"
    assert h.get("Authorization") == API_KEY
    assert h.get("Idempotency-Key") == key
    assert e["body"] == "name=Ada&email=ada%40example.com", e["body"]


def test_stripe_key_reused_with_other_parameters_raises_idempotency_error(
        node, proxy, sdk_upstream, ids):
    p = stripe_proxy(proxy, sdk_upstream)
    key = ids.key()
    out = run_sdk(node, "stripe_client.js", p.port, sdk_upstream.port, "conflict", key)
    first, replay, other = out["first"], out["replay"], out["other"]
    # The owner and its replay are the upstream's customer, once.
    assert first.get("returned") and first["status"] == 200 and not is_replay(first), first
    assert replay.get("returned") and replay["id"] == first["id"] and is_replay(replay), replay
    assert statuses(first) == [200] and statuses(replay) == [200]
    # Other parameters: Stripe's own answer to that, which stripe-node
    # turns into StripeIdempotencyError (a 400 or 404 with that type only).
    assert other.get("raised") == "StripeIdempotencyError", other
    assert other["statusCode"] == 400, other
    assert other["rawType"] == "idempotency_error", other
    assert other["code"] == "idempotency_conflict", other
    assert other["message"], other
    assert other["headers"].get("content-type", "").split(";")[0] == "application/json", other
    assert other["headers"].get("stripe-should-retry") == "false", other
    assert other["headers"].get("x-should-retry") == "false", other
    assert statuses(other) == [400], other   # not retried
    assert len(sdk_upstream.posts(key)) == 1


def test_stripe_error_body_has_stripes_shape(proxy, sdk_upstream, ids):
    """The conflict stripe-node read, as bytes: {"error": {type, code,
    message}} as application/json, and no problem document."""
    p = stripe_proxy(proxy, sdk_upstream)
    key = ids.key()
    head = [("Authorization", API_KEY), ("Idempotency-Key", key),
            ("Content-Type", "application/x-www-form-urlencoded")]
    owner = p.request("POST", "/v1/customers", head, b"name=Ada")
    assert owner.status == 200, owner
    r = p.request("POST", "/v1/customers", head, b"name=Grace")
    assert r.status == 400, r
    assert (r.headers.get("Content-Type") or "").split(";")[0].strip() == "application/json", r
    doc = r.json()
    assert set(doc) == {"error"}, doc
    err = doc["error"]
    assert err.get("type") == "idempotency_error" and err.get("code") == "idempotency_conflict", doc
    assert isinstance(err.get("message"), str) and err["message"], doc
    assert r.headers.get("Stripe-Should-Retry") == "false", r
    assert r.headers.get("X-Should-Retry") == "false", r
    assert len(sdk_upstream.posts(key)) == 1


def test_stripe_retries_through_an_owner_in_progress(node, proxy, sdk_upstream, ids):
    p = stripe_proxy(proxy, sdk_upstream)
    key = ids.key()
    out = run_sdk(node, "stripe_client.js", p.port, sdk_upstream.port, "inprogress", key,
                  STRIPE_OWNER_MS)
    owner, dup = out["owner"], out["duplicate"]
    assert owner.get("returned") and owner["status"] == 200 and not is_replay(owner), owner
    assert statuses(owner) == [200], owner
    # The duplicate was told "in progress, retry" at least once, then got
    # the owner's customer as a replay, within its two retries.
    assert dup.get("returned"), dup
    assert dup["id"] == owner["id"] and dup["n"] == owner["n"] and is_replay(dup), (dup, owner)
    seen = statuses(dup)
    assert 2 <= len(seen) <= 3 and seen[-1] == 200 and set(seen[:-1]) == {409}, dup
    for a in dup["attempts"][:-1]:
        assert a["headers"].get("stripe-should-retry") == "true", a
        assert a["headers"].get("x-should-retry") == "true", a
        assert a["headers"].get("content-type", "").split(";")[0] == "application/json", a
        assert a["idempotency_key"] == key
    assert len(sdk_upstream.posts(key)) == 1


def test_stripe_sees_when_the_key_expires(node, proxy, sdk_upstream, ids):
    """The owner's response and its replay say until when the key holds:
    completion plus retention (24 h by default)."""
    p = stripe_proxy(proxy, sdk_upstream)
    key = ids.key()
    before = time.time()
    out = run_sdk(node, "stripe_client.js", p.port, sdk_upstream.port, "conflict", key)
    after = time.time()
    expires = []
    for call in (out["first"], out["replay"]):
        value = call["headers"].get("idempotency-key-expires")
        assert value, call
        expires.append(email.utils.parsedate_to_datetime(value).timestamp())
    assert abs(expires[0] - expires[1]) <= 1, expires   # one record, one date
    assert before + 86400 - 2 <= expires[0] <= after + 86400 + 1, (before, expires, after)


def test_stripe_stops_at_the_replay_of_a_stored_500(node, proxy, sdk_upstream, ids):
    """stripe-node (maxNetworkRetries 3) retries the upstream's own 500,
    which carries no Stripe-Should-Retry, and stops at the replay, which
    says false: two requests, StripeAPIError, one upstream effect."""
    p = stripe_proxy(proxy, sdk_upstream)
    key = ids.key()
    out = run_sdk(node, "stripe_client.js", p.port, sdk_upstream.port, "failed", key,
                  FAILED_RETRIES)
    call = out["call"]
    assert call["statusCode"] == 500, call
    assert_stops_at_the_stored_500(call, p, sdk_upstream, key, "StripeAPIError", True)


# ---- stripe-python (Debian's python3-stripe) ----

def test_stripe_python_stops_at_the_replay_of_a_stored_500(proxy, sdk_upstream, ids):
    """stripe-python 5.0.0 (stripe.max_network_retries = 3) likewise: it
    retries the upstream's own 500 and stops at the replay's
    Stripe-Should-Retry: false, raising APIError after two requests."""
    p = stripe_proxy(proxy, sdk_upstream)
    key = ids.key()
    call = run_stripe_python(p.port, "failed", key, FAILED_RETRIES)["call"]
    assert call["http_status"] == 500, call
    assert_stops_at_the_stored_500(call, p, sdk_upstream, key, "APIError", True)
    # What it sent: the key, a form body, the secret key.
    h = helpers.Headers(sdk_upstream.posts(key)[0]["headers"])
    assert h.get("Idempotency-Key") == key and h.get("Authorization") == API_KEY
    assert h.get("Content-Type") == "application/x-www-form-urlencoded"


# ---- orb-billing (Stainless) ----

def test_orb_completes_every_call_through_a_slow_owner(node, proxy, sdk_upstream, ids):
    p = orb_proxy(proxy, sdk_upstream, SLOW_SETTINGS)
    warm_key, key = ids.key(), ids.key()
    out = run_sdk(node, "orb_client.js", p.port, sdk_upstream.port, "slow", warm_key, key,
                  ORB_OWNER_MS, ORB_CALLS)
    warm, owner, dups = out["warm"], out["owner"], out["duplicates"]
    assert warm.get("returned") and statuses(warm) == [200], warm
    assert owner.get("returned") and statuses(owner) == [200] and not is_replay(owner), owner
    assert owner["max_retries"] == 2  # the SDK's default
    assert len(dups) == ORB_CALLS - 1
    for d in dups:
        assert d.get("returned"), d   # not ConflictError
        assert d["id"] == owner["id"] and d["n"] == owner["n"] and is_replay(d), (d, owner)
        seen = statuses(d)
        assert 2 <= len(seen) <= 3 and seen[-1] == 200 and set(seen[:-1]) == {409}, d
        told = d["attempts"][0]["headers"]
        assert told.get("x-should-retry") == "true", d
        # Adaptive: the owner had about 2.4 s to go, not the 1 s floor.
        ms = int(told.get("retry-after-ms", "0"))
        assert ms >= 1500, d
        assert ms <= warm["ms"] * 1.1 + 200, (d, warm["ms"])
        seconds = int(told.get("retry-after", "0"))
        assert abs(seconds * 1000 - ms) < 1000, d
    assert len(sdk_upstream.posts(warm_key)) == 1
    assert len(sdk_upstream.posts(key)) == 1


def test_orb_stops_at_once_on_outcome_unknown(node, proxy, sdk_upstream, ids):
    p = orb_proxy(proxy, sdk_upstream)
    key = ids.key()
    out = run_sdk(node, "orb_client.js", p.port, sdk_upstream.port, "unknown", key)
    first, again = out["first"], out["again"]
    # The retry of an unknown outcome: one request, ConflictError 409.
    assert again.get("raised") == "ConflictError", again
    assert again["status"] == 409, again
    assert statuses(again) == [409], again
    assert again["headers"].get("x-should-retry") == "false", again
    assert (again["body"] or {}).get("type") == helpers.PROBLEM_BASE + "outcome-unknown", again
    # The call whose upstream reset: 502 upstream-error, not retried either.
    assert first.get("raised") == "InternalServerError" and first["status"] == 502, first
    assert statuses(first) == [502], first
    assert first["headers"].get("x-should-retry") == "false", first
    # idemproxy saw one request per call; the upstream one POST in all.
    lines = access_lines(p, key, 2)
    assert sorted(d["status"] for d in lines) == [409, 502], lines
    posts = sdk_upstream.posts(key)
    assert len(posts) == 1, posts
    # What the SDK sent: its idempotencyKey as Idempotency-Key, JSON, its key.
    h = helpers.Headers(posts[0]["headers"])
    assert posts[0]["path"] == "/v1/customers"
    assert h.get("Idempotency-Key") == key and h.get("Authorization") == ORB_API_KEY
    assert h.get("Content-Type") == "application/json"


def test_orb_stops_at_the_replay_of_a_stored_500(node, proxy, sdk_upstream, ids):
    """orb-billing (maxRetries 3) retries the upstream's own 500 and stops
    at the replay's X-Should-Retry: false: two requests,
    InternalServerError, one upstream effect."""
    p = orb_proxy(proxy, sdk_upstream)
    key = ids.key()
    out = run_sdk(node, "orb_client.js", p.port, sdk_upstream.port, "failed", key,
                  FAILED_RETRIES)
    call = out["call"]
    assert call["max_retries"] == FAILED_RETRIES and call["status"] == 500, call
    assert_stops_at_the_stored_500(call, p, sdk_upstream, key, "InternalServerError", False)
