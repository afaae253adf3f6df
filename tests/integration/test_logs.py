"""The log: one JSON object per line on stderr, with request ids, routes,
key hashes, outcomes and durations, and never credentials, keys or bodies."""
import hashlib
import json
import re

from tests.lib import helpers
from tests.lib.helpers import course, assert_owner, assert_replay_of

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
SECRET = "Bearer s3cret-token-value"


def request_lines(p, route):
    """The access lines of route, once they are flushed (every 100 ms)."""
    def lines():
        out = []
        for line in p.stderr_text().splitlines():
            if line.startswith("{"):
                doc = json.loads(line)
                if doc.get("msg") == "request" and doc.get("route") == route:
                    out.append(doc)
        return out
    return helpers.poll(lambda: len(lines()) >= 3 and lines()) or lines()


def test_log_lines(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    body = course(title="Private title 1234")
    headers = [("Authorization", SECRET), ("Cookie", "session=abcdef")]
    owner = p.post("/api/courses", key=key, actor=ids.actor, body=body, headers=headers)
    assert_owner(owner)
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=body,
                            headers=headers), owner)
    helpers.problem(p.post("/api/courses", key=key, actor=ids.actor,
                           body=course(title="Other"), headers=headers),
                    "idempotency-conflict", 422)
    # Workers flush their lines on their own: the order in the file is free.
    lines = request_lines(p, "course.create")
    by_outcome = {d["outcome"]: d for d in lines}
    assert sorted(by_outcome) == ["conflict", "owner", "replay"] and len(lines) == 3, lines
    assert [by_outcome[o]["status"] for o in ("owner", "replay", "conflict")] == [201, 201, 422]
    digest = hashlib.sha256(key.encode()).hexdigest()
    for d in lines:
        assert TIME.match(d["time"]), d
        assert d["level"] == "info" and d["method"] == "POST" and d["path"] == "/api/courses"
        assert isinstance(d["request_id"], str) and re.fullmatch(r"[0-9a-f]{32}", d["request_id"])
        assert re.fullmatch(r"[0-9a-f]{12}", d["key_hash"]) and digest.startswith(d["key_hash"])
        for field in ("duration_us", "upstream_us", "store_us"):
            assert isinstance(d[field], int) and d[field] >= 0, d
    assert len({d["request_id"] for d in lines}) == 3
    assert by_outcome["owner"]["upstream_us"] > 0 and by_outcome["owner"]["store_us"] > 0
    assert by_outcome["replay"]["upstream_us"] == 0  # a replay never goes upstream
    text = p.stderr_text()
    for line in text.splitlines():
        assert line.startswith("----") or json.loads(line)["level"] in (
            "debug", "info", "warn", "error"), line
    for secret in (key, ids.actor, SECRET, "abcdef", "Private title 1234"):
        assert secret not in text, secret
    assert upstream.count(actor=ids.actor) == 1
