"""The operator page, GET /ui on the admin listener, in a real headless
browser (Debian's chromium, driven through chromedriver by selenium): it
loads with no console error and asks nothing of any other origin, lists
the records that need an operator, resolves one (its retries replay) and
releases another (its next retry runs once), cannot act without the admin
token, and a page of another origin cannot act on a record at all.

IDEMPROXY_UI_SCREENSHOT=PATH saves a screenshot of the page listing a
record (docs/ui.png is one)."""
import http.server
import json
import os
import re
import shutil
import signal
import threading

import pytest

from tests.lib import helpers
from tests.lib.admin import admin, admin_proxy, scope
from tests.lib.helpers import assert_owner, course, problem
from tests.lib.proxy import rewrite, wait_for_log
from tests.lib.records import make_unknown

TOKEN = "ui-admin-token-0123456789abcdef"
WAIT = 30               # seconds: the bound of every wait on the page (a loaded 2-core machine)
WINDOW = (1280, 800)    # the screenshot's size
UI_FILES = {"/ui": "text/html", "/ui/": "text/html", "/ui/index.html": "text/html",
            "/ui/app.js": "text/javascript", "/ui/app.css": "text/css",
            "/ui/favicon.svg": "image/svg+xml"}
RESOLVED_BODY = '{"id":"resolved-by-an-operator"}'
JSON_CTYPE = "application/json"
# URLs that are no request to any server.
LOCAL_SCHEMES = ("chrome", "chrome-untrusted", "about", "data", "blob")

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:
    webdriver = None


def token_proxy(proxy, tmp_path):
    f = tmp_path / "admin.token"
    f.write_text(TOKEN + "\n")
    return admin_proxy(proxy, {"admin_token": str(f)})


def origin(p):
    return "http://127.0.0.1:%d" % p.admin


# ---- the browser ----

class Page:
    """One headless chromium with its console and network logs kept."""

    def __init__(self, tmp_path):
        opts = Options()
        opts.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=%d,%d" % WINDOW, "--no-first-run", "--disable-extensions",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--user-data-dir=%s" % (tmp_path / "chromium")):
            opts.add_argument(arg)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
        self.driver.set_page_load_timeout(WAIT)
        self.console = []
        self.network = []

    def quit(self):
        self.driver.quit()

    def logs(self):
        """Collect what the browser logged since the last call (reading consumes it)."""
        self.console += self.driver.get_log("browser")
        for entry in self.driver.get_log("performance"):
            self.network.append(json.loads(entry["message"])["message"])

    def console_errors(self):
        self.logs()
        return [e for e in self.console if e["level"] in ("SEVERE", "ERROR")]

    def requested(self):
        """The URL of every request that went to the network (CDP
        Network.requestWillBeSent), the browser's own pages (chrome://, its
        new tab's) and the page's data: and blob: URLs left out."""
        self.logs()
        urls = [m["params"]["request"]["url"] for m in self.network
                if m["method"] == "Network.requestWillBeSent"]
        return [u for u in urls if u.split(":", 1)[0] not in LOCAL_SCHEMES]

    def answered(self, url_part):
        """The statuses of the responses to URLs holding url_part."""
        self.logs()
        return [m["params"]["response"]["status"] for m in self.network
                if m["method"] == "Network.responseReceived"
                and url_part in m["params"]["response"]["url"]]

    def until(self, cond, what):
        """Wait (at most WAIT seconds) for cond() to be true; its value. The
        page redraws its list every few seconds: an element that was
        replaced meanwhile is asked again."""
        return WebDriverWait(self.driver, WAIT,
                             ignored_exceptions=[StaleElementReferenceException]).until(
                                 lambda _d: cond(), what)

    def el(self, css):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def text(self, css):
        """The rendered text of css's element, read in one step."""
        return self.driver.execute_script(
            "return document.querySelector(arguments[0]).innerText", css)

    def rows(self):
        """The records table's rows, each its cells' texts, read in one step."""
        return self.driver.execute_script(
            "return [...document.querySelectorAll('#record-rows tr')]"
            ".map((tr) => [...tr.cells].map((td) => td.innerText))")

    def type_token(self, token):
        field = self.el("#token")
        field.clear()
        field.send_keys(token)
        self.el("#token-use").click()

    def filter_text(self, value):
        field = self.el("#filter-text")
        field.clear()
        field.send_keys(value)

    def open_record(self, key):
        """Filter the list by key, wait for its one row, open it."""
        self.filter_text(key)
        rows = self.until(lambda: len(self.rows()) == 1 and self.rows(), "one row for " + key)

        def click():
            self.driver.find_element(By.CSS_SELECTOR, "#record-rows tr").click()
            return True
        self.until(click, "a click on the row")
        self.until(lambda: self.el("#detail").is_displayed()
                   and key in self.text("#detail-facts")
                   and self.el("#release").is_enabled(), "the record's facts")
        return rows[0]

    def confirm(self, action):
        """Press release or resolve, then the dialog's confirmation; the dialog's text."""
        self.el("#" + action).click()
        self.until(lambda: self.el("#confirm").is_displayed(), "the confirmation")
        said = self.text("#confirm")
        self.el("#confirm-ok").click()
        self.until(lambda: not self.el("#confirm").is_displayed(), "the dialog to close")
        return said

    def status(self):
        return self.text("#action-status")


@pytest.fixture
def page(tmp_path):
    if webdriver is None or not CHROMIUM or not CHROMEDRIVER:
        pytest.skip("no headless browser: install chromium, chromium-driver and "
                    "python3-selenium (scripts/deps.sh test does)")
    browser = Page(tmp_path)
    try:
        yield browser
    finally:
        browser.quit()


def assert_only_admin_requests(page, p):
    urls = page.requested()
    assert urls, "the page made no request"
    foreign = [u for u in urls if not u.startswith(origin(p) + "/")]
    assert not foreign, foreign


# ---- the page's files ----

def test_ui_files_are_served_self_contained(proxy, upstream, tmp_path):
    """Every file of the page, with its type, a strict Content-Security-Policy,
    nosniff and no-store; open without the token (they hold no data)."""
    p = token_proxy(proxy, tmp_path)
    for path, ctype in UI_FILES.items():
        for method in ("GET", "HEAD"):
            r = admin(p, method, path)
            assert r.status == 200, (method, path, r)
            assert (r.headers.get("Content-Type") or "").startswith(ctype), (path, r)
            csp = r.headers.get("Content-Security-Policy") or ""
            assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp, (path, r)
            assert r.headers.get("X-Content-Type-Options") == "nosniff", (path, r)
            assert r.headers.get("Cache-Control") == "no-store", (path, r)
            assert (r.body == b"") == (method == "HEAD"), (method, path, r)
    html = admin(p, "GET", "/ui").body.decode()
    # Nothing inline (the policy would refuse it) and nothing from elsewhere.
    assert "<style" not in html and " style=" not in html, html
    assert "<script>" not in html and "://" not in html, html
    for path in ("/ui/nothing.js", "/ui/../metrics", "/uix", "/ui/app.js/x"):
        assert admin(p, "GET", path).status == 404, path
    assert admin(p, "POST", "/ui", body=b"").status == 405
    # Without admin_token the page answers what every admin path answers: loopback only.
    q = admin_proxy(proxy)
    assert admin(q, "GET", "/ui", headers=[("Host", "evil.example")]).status == 403


# ---- in the browser ----

def test_ui_lists_resolves_and_releases(proxy, upstream, pg, ids, tmp_path, page):
    p = token_proxy(proxy, tmp_path)
    resolved, released = ids.key(), ids.key()
    make_unknown(p, ids, resolved)
    make_unknown(p, ids, released)
    assert upstream.count(key=resolved) == 1 and upstream.count(key=released) == 1

    page.driver.get(origin(p) + "/ui")
    page.until(lambda: "No token given" in page.text("#auth-status"), "the token prompt")
    page.until(lambda: page.text("#ready") == "ready", "readiness")
    assert page.rows() == []
    page.type_token(TOKEN)
    row = page.open_record(resolved)
    assert row[0] == "unknown" and row[2] == "course.create", row
    facts = page.text("#detail-facts")
    assert "h:" + ids.actor in facts and "Body size" in facts, facts
    page.until(lambda: "records needing an operator" in page.text("#counter-list"), "counters")
    shot = os.environ.get("IDEMPROXY_UI_SCREENSHOT")
    if shot:
        page.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": WINDOW[0], "height": WINDOW[1], "deviceScaleFactor": 1, "mobile": False})
        page.driver.save_screenshot(shot)

    # Resolve: the answer typed in becomes the record; retries replay it.
    page.el("#resolve").click()
    page.until(lambda: page.el("#confirm").is_displayed(), "the resolve dialog")
    said = page.text("#confirm")
    assert "replayed" in said and "never forwarded again" in said, said
    for css, value in (("#resolve-status", "201"), ("#resolve-type", JSON_CTYPE),
                       ("#resolve-body", RESOLVED_BODY)):
        page.el(css).clear()
        page.el(css).send_keys(value)
    page.el("#confirm-ok").click()
    page.until(lambda: "Resolved" in page.status(), "the resolve's result")
    for _ in range(2):
        r = p.post("/api/courses", key=resolved, actor=ids.actor, body=course())
        assert r.status == 201, r
        assert (r.headers.get("Idempotent-Replayed") or "").lower() == "true", r
        assert r.headers.get("Content-Type") == JSON_CTYPE, r
        assert r.body == RESOLVED_BODY.encode(), r
    assert upstream.count(key=resolved) == 1

    # Release: the next retry runs the request once, then it replays.
    page.open_record(released)
    said = page.confirm("release")
    assert "runs the request again" in said, said
    page.until(lambda: "Released" in page.status(), "the release's result")
    owner = p.post("/api/courses", key=released, actor=ids.actor, body=course())
    assert_owner(owner)
    helpers.assert_replay_of(p.post("/api/courses", key=released, actor=ids.actor,
                                    body=course()), owner)
    assert upstream.count(key=released) == 2
    # Live: the list follows the store without a reload of the page.
    page.filter_text(ids.actor)
    page.until(lambda: page.rows() == [], "the list to empty")

    assert page.console_errors() == []
    assert_only_admin_requests(page, p)


def test_ui_cannot_act_without_the_token(proxy, upstream, pg, ids, tmp_path, page):
    p = token_proxy(proxy, tmp_path)
    key = ids.key()
    make_unknown(p, ids, key)

    page.driver.get(origin(p) + "/ui")
    page.until(lambda: "No token given" in page.text("#auth-status"), "the token prompt")
    assert page.rows() == [] and not page.el("#detail").is_displayed()
    page.type_token("not-the-admin-token-0123456789")
    page.until(lambda: "refused the token" in page.text("#auth-status"), "the refusal")
    assert page.rows() == []

    # With the token the record is listed; a wrong one by the time of the click acts on nothing.
    page.type_token(TOKEN)
    page.open_record(key)
    page.driver.execute_script(
        "sessionStorage.setItem('idemproxy.admin_token', 'stale-token-0123456789abcdef')")
    page.confirm("release")
    page.until(lambda: "Refused: the admin token" in page.status(), "the refused release")
    assert helpers.record_state(pg.records.one(ids.actor)) == "unknown"
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
            "outcome-unknown", 409)
    assert upstream.count(key=key) == 1
    # Forgetting the token leaves nothing on the page to act with.
    page.el("#token-forget").click()
    page.until(lambda: page.rows() == [] and not page.el("#detail").is_displayed(),
               "the page to forget the records")
    assert_only_admin_requests(page, p)


def counter(page, label):
    """The value the page shows for a counter, or None."""
    m = re.search(re.escape(label) + r"\n(\S+)", page.text("#counter-list"))
    return m.group(1) if m else None


def test_ui_follows_counters_and_reloads_live(proxy, upstream, ids, tmp_path, page):
    """The counters and the last reload's result change on the page without a
    reload of the page."""
    p = token_proxy(proxy, tmp_path)
    page.driver.get(origin(p) + "/ui")
    page.type_token(TOKEN)
    page.until(lambda: "loaded at start" in page.text("#reload"), "the last reload")
    page.until(lambda: counter(page, "requests: unknown") == "0", "the counters")
    make_unknown(p, ids, ids.key())
    page.until(lambda: counter(page, "requests: unknown") == "2", "the counters to follow")

    rewrite(p, lambda t: t + "\nno_such_directive 1\n")
    p.signal(signal.SIGHUP)
    wait_for_log(p, "reload failed")
    page.until(lambda: "error" in page.text("#reload"), "the failed reload")
    said = page.text("#reload")
    assert os.path.basename(p.conf) in said and "no_such_directive" in said, said
    assert page.console_errors() == []
    assert_only_admin_requests(page, p)


class ForeignPage(http.server.ThreadingHTTPServer):
    """A page of another origin (another port) whose script posts to the
    admin API as a cross-site page can: a form and a no-cors fetch, then
    sets its title to "sent"."""

    def __init__(self, admin_origin, query):
        release = "%s/records/release?%s" % (admin_origin, query)
        resolve = "%s/records/resolve?%s&status=200" % (admin_origin, query)
        self.html = ("""<!DOCTYPE html><html><head><title>waiting</title></head><body>
<iframe name="sink"></iframe>
<form id="f" method="POST" target="sink" action="%s"></form>
<script>
document.getElementById("f").submit();
Promise.allSettled([
  fetch("%s", {method: "POST", mode: "no-cors", body: "x"}),
  fetch("%s", {method: "POST", mode: "no-cors", body: "{}",
               headers: {"Content-Type": "text/plain"}})
]).then(function () { setTimeout(function () { document.title = "sent"; }, 500); });
</script></body></html>""" % (release, release, resolve)).encode()
        super().__init__(("127.0.0.1", 0), ForeignHandler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def url(self):
        return "http://127.0.0.1:%d/" % self.server_address[1]

    def stop(self):
        self.shutdown()
        self.server_close()
        self.thread.join(WAIT)


class ForeignHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.server.html)))
        self.end_headers()
        self.wfile.write(self.server.html)

    def log_message(self, *args):
        pass


def test_page_of_another_origin_cannot_act(proxy, upstream, pg, ids, page):
    """Without admin_token (loopback peers naming a loopback Host) only the
    Origin rule stands between a page the operator visits and the records
    API: its posts reach the listener and are refused, the record stays."""
    p = admin_proxy(proxy)
    key = ids.key()
    make_unknown(p, ids, key)
    query = "actor=h:%s&operation=course.create&key=%s" % (ids.actor, key)
    foreign = ForeignPage(origin(p), query)
    try:
        page.driver.get(foreign.url())
        page.until(lambda: page.driver.title == "sent", "the foreign page's posts")
        page.until(lambda: len(page.answered("/records/")) >= 3, "the listener's answers")
    finally:
        foreign.stop()
    assert set(page.answered("/records/")) == {403}, page.answered("/records/")
    assert helpers.record_state(pg.records.one(ids.actor)) == "unknown"
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
            "outcome-unknown", 409)
    assert upstream.count(key=key) == 1

    # The operator page of that same listener may: no token is needed here.
    page.driver.get(origin(p) + "/ui")
    page.type_token("")
    page.open_record(key)
    page.confirm("release")
    page.until(lambda: "Released" in page.status(), "the release's result")
    assert pg.records.rows(key) == []
    assert_owner(p.post("/api/courses", key=key, actor=ids.actor, body=course()))
    assert upstream.count(key=key) == 2
    assert admin(p, "GET", "/records/scope", scope(ids.actor, key)).status == 200
