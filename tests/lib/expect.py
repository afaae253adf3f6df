"""What a test sends and expects of idemproxy: a request body (course),
problem+json answers (problem), an owner's response and its replays
(assert_owner, assert_replay_of), requests on threads (SlowOwner, an owner
held by the upstream; Background, any call; race and check_race, many
identical requests at once), and sha for bodies."""
import hashlib
import json
import threading
import time

from tests.lib.http1 import IO_TIMEOUT, Response

PROBLEM_BASE = "https://idemproxy.dev/problems/"
PROBLEM_CTYPE = "application/problem+json"


def problem(resp, name, status=None):
    """Assert resp is the problem NAME (full type URI) and return its JSON."""
    ctype = (resp.headers.get("Content-Type") or "").split(";")[0].strip().lower()
    assert ctype == PROBLEM_CTYPE, "expected %s, got %r: %r" % (PROBLEM_CTYPE, ctype, resp)
    doc = resp.json()
    assert doc.get("type") == PROBLEM_BASE + name, "problem %r, wanted %s" % (doc, name)
    if status is not None:
        assert resp.status == status, resp
    assert doc.get("status") == resp.status, doc
    assert isinstance(doc.get("title"), str) and doc["title"], doc
    return doc


class SlowOwner:
    """An owner POST running on a thread while the upstream holds it for
    `delay` seconds (X-Test-Delay). Entering waits until the upstream has
    the request; leaving joins the thread. .response is the owner's
    Response, or the exception its client raised (e.g. when the proxy was
    killed)."""

    def __init__(self, proxy, upstream, path, key, actor, delay, body=None, headers=()):
        self.proxy, self.upstream, self.actor, self.key = proxy, upstream, actor, key
        self.response = None
        self._args = (path, key, actor, body if body is not None else course(),
                      [("X-Test-Delay", str(delay))] + list(headers))
        self._thread = threading.Thread(target=self._run)

    def _run(self):
        path, key, actor, body, headers = self._args
        try:
            self.response = self.proxy.post(path, key=key, actor=actor, body=body,
                                            headers=headers)
        except Exception as e:  # reported through .response
            self.response = e

    def __enter__(self):
        self._thread.start()
        # This key's request, not just this actor's: the actor may have
        # sent others before.
        got = self.upstream.wait_for(1, actor=self.actor, key=self.key)
        assert len(got) == 1, "the upstream never got the slow owner's request"
        return self

    def __exit__(self, *exc):
        self._thread.join(IO_TIMEOUT)

class Background:
    """One call on a thread: .result is its return value or exception,
    .at the monotonic time it ended."""

    def __init__(self, fn):
        self.result = None
        self.at = None
        self._fn = fn
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self):
        try:
            self.result = self._fn()
        except Exception as e:  # reported through .result
            self.result = e
        self.at = time.monotonic()

    def join(self):
        self._thread.join(IO_TIMEOUT)
        assert not self._thread.is_alive(), "request still running"
        return self.result


def assert_owner(resp, status=201):
    """The owner's response: the upstream's, not marked as a replay."""
    assert resp.status == status, resp
    assert resp.headers.get("Idempotent-Replayed") is None, resp


def assert_replay_of(resp, owner):
    """resp replays owner: same status and body, marked as a replay."""
    assert resp.status == owner.status, resp
    assert (resp.headers.get("Idempotent-Replayed") or "").lower() == "true", resp
    assert resp.body == owner.body, (resp.body, owner.body)


RACE_THREADS = 20


def race(proxies, key, actor, delay="0.5"):
    """RACE_THREADS simultaneous identical requests spread over proxies."""
    results = [None] * RACE_THREADS
    barrier = threading.Barrier(RACE_THREADS)

    def one(i):
        p = proxies[i % len(proxies)]
        try:
            barrier.wait(10)
            results[i] = p.post("/api/courses", key=key, actor=actor, body=course(),
                                headers=[("X-Test-Delay", delay)])
        except Exception as e:  # reported by the assertions below
            results[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(RACE_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def check_race(results):
    for r in results:
        assert isinstance(r, Response), r
    owners = [r for r in results
              if r.status == 201 and r.headers.get("Idempotent-Replayed") is None]
    assert len(owners) == 1, results
    owner = owners[0]
    for r in results:
        if r is owner:
            continue
        if r.status == 409:
            problem(r, "operation-in-progress", 409)
            assert r.headers.get("Retry-After") is not None
        else:
            assert_replay_of(r, owner)
    return owner

def sha(data):
    return hashlib.sha256(data).hexdigest()


def course(title="Intro to SQL", topic="sql", lessons=3):
    return json.dumps({"title": title, "topic": topic, "lessons": lessons})
