"""Spellings of a protected path that servers behind idemproxy route to
its handler although idemproxy's routes do not match them: "%2F" (WSGI and
ASGI servers decode it into "/") and "\\" (WHATWG URL parsers read it as
"/"). For unsafe methods such a path is refused with 400 before anything is
claimed or forwarded; safe methods pass it through as sent.

The matrix runs through three real servers (tests/lib/spellings.py:
spelling_apps.py under wsgiref and hypercorn, spelling_app.js under
Node), each with a protected handler for POST /api/courses that counts
its executions."""
import pytest

from tests.lib import helpers
from tests.lib.admin import admin_proxy, metrics, poll_metrics
from tests.lib.helpers import assert_owner, assert_replay_of, course, problem
from tests.lib.spellings import App

PROTECTED = "/api/courses"

# Every spelling refused for unsafe methods (the control, PROTECTED, aside).
SPELLINGS = [
    "/api%2Fcourses",
    "/api%2fcourses",
    "/api%5Ccourses",
    "/api%5ccourses",
    "/api\\courses",
    "/api/courses%2F",
    "/api/courses\\",
    "\\api\\courses",
    "/api/%2Fcourses",
    "/x;\\..\\api\\courses",       # the backslash hides in a ;parameter
    "http://test/api%2Fcourses",   # absolute-form
    "http://test\\api/courses",    # a backslash before the path
    "//x/api/courses",             # a host to a WHATWG URL parser
    "//api//courses",
]

# The spellings each server, asked directly, routes to the protected
# handler: what makes the matrix mean something.
ROUTED_DIRECTLY = {
    "wsgi": {"/api%2Fcourses", "/api%2fcourses", "/api/courses%2F", "/api/%2Fcourses"},
    "asgi": {"/api%2Fcourses", "/api%2fcourses", "/api/courses%2F", "/api/%2Fcourses"},
    "node": {"/api\\courses", "/api/courses\\", "/x;\\..\\api\\courses", "//x/api/courses"},
}
APPS = sorted(ROUTED_DIRECTLY)


@pytest.fixture(scope="module")
def apps():
    started = {}
    try:
        for name in APPS:
            started[name] = App(name)
        yield started
    finally:
        for app in started.values():
            app.stop()


def post(port, target, key=None, actor="spelling-actor"):
    """POST target (sent byte for byte) with a course body; the response."""
    headers = [("X-Actor-Id", actor), ("Content-Type", "application/json"),
               ("Connection", "close")]
    if key is not None:
        headers.append(("Idempotency-Key", key))
    return helpers.request(port, "POST", target, headers, course())


@pytest.mark.parametrize("name", APPS)
def test_upstreams_route_spellings_to_the_handler(apps, name):
    """Asked directly, each server runs the protected handler for the
    spellings it reads as /api/courses (and for /api/courses itself)."""
    app = apps[name]
    routed = set()
    for target in [PROTECTED] + SPELLINGS:
        before = app.count()
        post(app.port, target)
        if app.count() > before:
            routed.add(target)
    assert PROTECTED in routed
    assert ROUTED_DIRECTLY[name] <= routed, routed


@pytest.mark.parametrize("name", APPS)
def test_unsafe_spellings_are_refused(proxy, pg, apps, ids, name):
    """Through idemproxy no spelling runs the handler, with a key or
    without: 400 bad-request, nothing claimed."""
    app = apps[name]
    p = proxy(upstream_port=app.port)
    ran, answers = [], []
    for target in SPELLINGS:
        for key in (None, ids.key()):
            before = app.count()
            try:
                r = post(p.port, target, key, ids.actor)
            except helpers.ConnectionClosed as e:
                r = e  # cut short: the upstream's answer, relayed (not idemproxy's)
            if app.count() != before:
                ran.append((target, "key" if key else "no key"))
            answers.append((target, r))
    assert not ran, "the handler ran for %r" % ran
    for target, r in answers:
        assert isinstance(r, helpers.Response), (target, r)
        problem(r, "bad-request", 400)
    assert not pg.records.rows(ids.actor)


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "M-SEARCH"])
def test_every_unsafe_method_on_any_path(proxy, upstream, ids, method):
    """Every method but GET, HEAD, OPTIONS and TRACE is refused so, on any
    path, matched by a route or not (POST /api/courses;v=%2F is
    course.create's); nothing reaches the upstream."""
    p = proxy()
    for target in ("/files/a%2Fb", "/files/a\\b", "/api/courses;v=%2F"):
        r = p.request(method, target, [("X-Actor-Id", ids.actor)], b"")
        problem(r, "bad-request", 400)
        assert r.closed, r
    assert upstream.count(actor=ids.actor) == 0


@pytest.mark.parametrize("name", APPS)
def test_the_plain_path_is_enforced(proxy, apps, ids, name):
    """The control: /api/courses without a key is 400 idempotency-key-missing;
    with one it runs once and a retry is a replay."""
    app = apps[name]
    p = proxy(upstream_port=app.port)
    before = app.count()
    problem(post(p.port, PROTECTED, None, ids.actor), "idempotency-key-missing", 400)
    assert app.count() == before
    key = ids.key()
    first = post(p.port, PROTECTED, key, ids.actor)
    assert_owner(first)
    assert app.count() == before + 1
    assert_replay_of(post(p.port, PROTECTED, key, ids.actor), first)
    assert app.count() == before + 1


@pytest.mark.parametrize("name", APPS)
def test_safe_methods_pass_spellings_through(proxy, apps, name):
    """Downloads of /files/a%2Fb work: safe methods go upstream with the
    target as sent (the server's own answer comes back)."""
    app = apps[name]
    p = proxy(upstream_port=app.port)
    before = app.count()
    for target in ("/files/a%2Fb", "/files/a%5cb", "/files/a\\b", "/api%2Fcourses"):
        r = p.request("GET", target)
        assert r.status == 200 and r.json()["target"] == target, (target, r)
        r = p.request("OPTIONS", target)
        assert r.status == 404 and "path" in r.json(), (target, r)
    assert app.count() == before


def test_the_query_does_not_count(proxy, apps, ids):
    """Only the path counts: %2F in the query of the protected path is the
    protected path, enforced as usual."""
    app = apps["wsgi"]
    p = proxy(upstream_port=app.port)
    before = app.count()
    target = PROTECTED + "?next=%2Fhome%5C"
    problem(post(p.port, target, None, ids.actor), "idempotency-key-missing", 400)
    key = ids.key()
    first = post(p.port, target, key, ids.actor)
    assert_owner(first)
    assert_replay_of(post(p.port, target, key, ids.actor), first)
    assert app.count() == before + 1


def test_refusals_are_logged_and_counted(proxy, apps, ids):
    """Like any refusal of the HTTP layer: an access line with method and
    path, outcome rejected and no route, and a count of 400s."""
    app = apps["asgi"]
    p = admin_proxy(proxy, upstream_port=app.port)
    m0 = metrics(p)
    assert m0.get("idemproxy_http_refusals_total", status="400") == 0, m0.text
    sent = ["/api%2Fcourses", "/api\\courses"]
    for target in sent:
        problem(post(p.port, target, ids.key(), ids.actor), "bad-request", 400)

    def counted(m):
        return m.get("idemproxy_http_refusals_total", status="400") == len(sent) and \
            m.get("idemproxy_requests_total", route="", outcome="rejected") == len(sent)
    assert poll_metrics(p, counted), metrics(p).text

    def refused():
        return [l for l in p.log_lines() if l.get("msg") == "request"
                and l.get("outcome") == "rejected" and "route" not in l]
    assert helpers.poll(lambda: len(refused()) == len(sent)), p.stderr_tail()
    lines = refused()
    assert sorted(l["path"] for l in lines) == sorted(sent), lines
    for l in lines:
        assert l["method"] == "POST" and l["status"] == 400, l
