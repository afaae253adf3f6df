"""operation_from: the scope's operation named by the request's body. Two
GraphQL mutations sent to one endpoint with one key are two scopes (two
upstream effects, each retry replays its own), while a query with that
key passes through untouched (every call reaches the upstream, no record
is made); two JSON-RPC methods with one key are two scopes, and a retry
that sends a new id is the same call: one upstream effect, and its replay
carries the retry's own id. Bodies that name no operation are refused
with 400 before anything goes upstream."""
import json
import subprocess

from tests.lib import h2, helpers
from tests.lib.helpers import Records, assert_owner, problem

ROUTES = """
route gql {
    match           POST /graphql
    operation_from  graphql
}
route rpc {
    match           POST /rpc
    operation_from  jsonrpc
}
route mcp {
    match           POST /mcp
    operation_from  jsonrpc params.name
}
"""
JSONRPC = {"X-Test-Action": "jsonrpc"}


def gql(query, name=None):
    doc = {"query": query, "variables": {}}
    if name is not None:
        doc["operationName"] = name
    return json.dumps(doc).encode()


def call(method, id_, params=None):
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": method,
                       "params": params if params is not None else {}}).encode()


def replayed(r):
    return (r.headers.get("Idempotent-Replayed") or "").lower() == "true"


def operations(pg, key):
    """The operations of the records of key, sorted."""
    return sorted(row[0] for row in helpers.sql(
        pg.conninfo, "SELECT operation FROM idempotency_records WHERE idem_key = %s", (key,)))


def test_two_mutations_with_one_key_are_two_scopes(proxy, upstream, ids, pg):
    p = proxy(routes=ROUTES)
    key = ids.key()
    pay = gql("mutation Pay($a: Int) { pay(amount: $a) { id } }")
    # An anonymous mutation is named by its first field (an alias does not count).
    refund = gql("# a comment\nmutation { r1: refund(id: \"} mutation X {\") { id } }")
    first_pay = p.post("/graphql", key=key, actor=ids.actor, body=pay)
    first_refund = p.post("/graphql", key=key, actor=ids.actor, body=refund)
    assert_owner(first_pay)
    assert_owner(first_refund)
    assert first_pay.body != first_refund.body
    assert upstream.count(key=key) == 2
    assert operations(pg, key) == ["gql:Pay", "gql:refund"]
    # Each retry replays its own mutation's answer.
    again_pay = p.post("/graphql", key=key, actor=ids.actor, body=pay)
    again_refund = p.post("/graphql", key=key, actor=ids.actor, body=refund)
    assert replayed(again_pay) and again_pay.body == first_pay.body
    assert replayed(again_refund) and again_refund.body == first_refund.body
    assert upstream.count(key=key) == 2


def test_operation_name_chooses_the_mutation(proxy, upstream, ids, pg):
    p = proxy(routes=ROUTES)
    key = ids.key()
    doc = "query Look { a } mutation Make { make { id } } fragment F on T { f }"
    r = p.post("/graphql", key=key, actor=ids.actor, body=gql(doc, "Make"))
    assert_owner(r)
    assert operations(pg, key) == ["gql:Make"]
    # The query of the same document passes: no record, every call upstream.
    for _ in range(2):
        q = p.post("/graphql", key=key, actor=ids.actor, body=gql(doc, "Look"))
        assert q.status == 201 and not replayed(q), q
    assert upstream.count(key=key) == 3
    assert operations(pg, key) == ["gql:Make"]


def test_a_query_passes_through_untouched(proxy, upstream, ids, pg):
    p = proxy(routes=ROUTES)
    key = ids.key()
    query = gql("query Who { me { id } }")
    bodies = set()
    for _ in range(3):
        r = p.post("/graphql", key=key, actor=ids.actor, body=query)
        assert r.status == 201 and not replayed(r), r
        bodies.add(r.body)
    # Shorthand queries and subscriptions too, and without a key or an actor.
    for body in (gql("{ me { id } }"), gql("subscription S { ticks }")):
        r = p.post("/graphql", key=key, body=body)
        assert r.status == 201 and not replayed(r), r
    raw = p.request("POST", "/graphql", [("Content-Type", "application/graphql"),
                                         ("Idempotency-Key", key)], b"query { me { id } }")
    assert raw.status == 201 and not replayed(raw), raw
    assert len(bodies) == 3                 # three effects, none replayed
    assert upstream.count(key=key) == 6
    assert operations(pg, key) == []
    # Forwarded as it came: the body byte for byte.
    assert [e.body for e in upstream.requests(key=key)][:3] == [query] * 3


def test_graphql_that_names_no_mutation_is_refused(proxy, upstream, ids, pg):
    p = proxy(routes=ROUTES)
    key = ids.key()
    bad = [
        gql("query A { a } mutation B { b }"),            # two operations, none chosen
        gql("mutation B { b }", "Other"),                 # no such operation
        gql("mutation B { b "),                           # not a document
        gql("type Query { a: Int }"),                     # not executable
        json.dumps({"operationName": "B"}).encode(),      # no query
        b"mutation B { b }",                              # not JSON, not application/graphql
        json.dumps([{"query": "{ a }"}, {"query": "mutation M { m }"}]).encode(),
    ]
    for body in bad:
        r = p.post("/graphql", key=key, actor=ids.actor, body=body)
        problem(r, "bad-request", 400)
    # A mutation still needs its key.
    problem(p.post("/graphql", actor=ids.actor, body=gql("mutation B { b }")),
            "idempotency-key-missing", 400)
    raw = p.request("POST", "/graphql", [("Content-Type", "application/graphql"),
                                         ("Idempotency-Key", key), ("X-Actor-Id", ids.actor)],
                    b"mutation Raw { r }")
    assert_owner(raw)
    assert upstream.count(key=key) == 1
    assert operations(pg, key) == ["gql:Raw"]


def test_two_jsonrpc_methods_with_one_key_are_two_scopes(proxy, upstream, ids, pg):
    p = proxy(routes=ROUTES)
    key = ids.key()
    a = p.post("/rpc", key=key, actor=ids.actor, body=call("transfer", 1), headers=JSONRPC)
    b = p.post("/rpc", key=key, actor=ids.actor, body=call("refund", 2), headers=JSONRPC)
    assert_owner(a)
    assert_owner(b)
    assert a.json()["result"]["method"] == "transfer" and a.json()["id"] == 1
    assert b.json()["result"]["method"] == "refund" and b.json()["id"] == 2
    assert upstream.count(key=key) == 2
    assert operations(pg, key) == ["rpc:refund", "rpc:transfer"]


def test_a_jsonrpc_replay_carries_the_retrys_id(proxy, upstream, ids):
    p = proxy(routes=ROUTES)
    key = ids.key()
    params = {"to": "acct-9", "amount": 5}
    first = p.post("/rpc", key=key, actor=ids.actor, body=call("transfer", 41, params),
                   headers=JSONRPC)
    assert_owner(first)
    assert first.json()["id"] == 41
    n = first.json()["result"]["n"]
    # Retries with new ids of every kind: the same call, replayed with each one's id.
    for retry_id in ("retry-\u00e9", 42, None, {"odd": [1]}):
        body = call("transfer", retry_id, params)
        r = p.post("/rpc", key=key, actor=ids.actor, body=body, headers=JSONRPC)
        assert replayed(r), r
        doc = r.json()
        assert doc == {"jsonrpc": "2.0", "id": retry_id, "result": {"n": n, "method": "transfer"}}
        assert int(r.headers.get("Content-Length")) == len(r.body)
    # Only the id is set aside: other params are another request.
    changed = p.post("/rpc", key=key, actor=ids.actor, body=call("transfer", 43, {"amount": 6}),
                     headers=JSONRPC)
    problem(changed, "idempotency-conflict", 422)
    assert upstream.count(key=key) == 1


def test_mcp_tool_calls_are_scoped_by_tool(proxy, upstream, ids, pg):
    p = proxy(routes=ROUTES)
    key = ids.key()
    send = call("tools/call", 1, {"name": "send_email", "arguments": {"to": "a@b"}})
    book = call("tools/call", 2, {"name": "book_room", "arguments": {"room": 4}})
    assert_owner(p.post("/mcp", key=key, actor=ids.actor, body=send, headers=JSONRPC))
    assert_owner(p.post("/mcp", key=key, actor=ids.actor, body=book, headers=JSONRPC))
    r = p.post("/mcp", key=key, actor=ids.actor,
               body=call("tools/call", 3, {"name": "send_email", "arguments": {"to": "a@b"}}),
               headers=JSONRPC)
    assert replayed(r) and r.json()["id"] == 3
    assert upstream.count(key=key) == 2
    assert operations(pg, key) == ["mcp:book_room", "mcp:send_email"]


def test_jsonrpc_bodies_that_name_no_method_are_refused(proxy, upstream, ids):
    p = proxy(routes=ROUTES)
    key = ids.key()
    bad = [
        json.dumps({"jsonrpc": "2.0", "id": 1}).encode(),
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": 7}).encode(),
        json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "a"}]).encode(),
        b'{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}',
        b'{"jsonrpc":"2.0","id":1,"id":2,"method":"a"}',
        b"method=transfer",
    ]
    for body in bad:
        doc = problem(p.post("/rpc", key=key, actor=ids.actor, body=body, headers=JSONRPC),
                      "bad-request", 400)
        assert doc.get("detail"), doc
    assert upstream.count(key=key) == 0


def test_records_of_named_operations(proxy, upstream, ids, pg):
    """The records and the access log show the named operation."""
    p = proxy(routes=ROUTES)
    key = ids.key()
    assert_owner(p.post("/rpc", key=key, actor=ids.actor, body=call("transfer", 1),
                        headers=JSONRPC))
    row = Records(pg.conninfo).one(key)
    assert row["operation"] == "rpc:transfer", row
    # The access lines name it too: an owner, its replay, and a query of the GraphQL route
    # under the route's own name.
    assert replayed(p.post("/rpc", key=key, actor=ids.actor, body=call("transfer", 2),
                           headers=JSONRPC))
    assert p.post("/graphql", key=key, body=gql("{ a }")).status == 201

    def lines():
        out = []
        for line in p.stderr_text().splitlines():
            doc = json.loads(line) if line.startswith("{") else {}
            if doc.get("msg") == "request":
                out.append((doc.get("route"), doc.get("outcome")))
        return sorted(out)
    want = [("gql", "pass"), ("rpc:transfer", "owner"), ("rpc:transfer", "replay")]
    assert helpers.poll(lambda: lines() == want) or lines() == want, lines()


def test_configuration_errors_name_their_line(binary, tmp_path):
    """`idemproxy -t` names the file and line of a wrong operation_from, and -T shows a right one."""
    head = "upstream http://127.0.0.1:1\nactor anonymous\nroute x {\n    match POST /x\n"
    cases = [
        ("    operation_from yaml doc\n",
         '"operation_from" takes json PATH, jsonrpc [PATH] or graphql'),
        ("    operation_from json\n", '"operation_from json" needs a JSON path'),
        ("    operation_from jsonrpc a..b\n", 'invalid JSON path "a..b"'),
        ("    operation_from graphql query\n", '"operation_from graphql" takes no path'),
    ]
    conf = tmp_path / "o.conf"
    for line, message in cases:
        r = helpers.check_config(binary, conf, head + line + "}\n")
        assert r.returncode == 1, r
        assert r.stderr.startswith("%s:5: %s" % (conf, message)), r.stderr
    r = helpers.check_config(binary, conf, "operation_from graphql\n" + head + "}\n")
    assert r.returncode == 1 and r.stderr.startswith(
        '%s:1: "operation_from" is only allowed inside a route block' % conf), r.stderr
    helpers.check_config(binary, conf, head + "    operation_from jsonrpc params.name\n}\n")
    dump = subprocess.run([binary, "-T", "-c", str(conf)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30)
    assert dump.returncode == 0, dump
    assert "    operation_from jsonrpc params.name\n" in dump.stdout


def test_jsonrpc_replay_over_http2(proxy, upstream, ids):
    """Over HTTP/2 (prior knowledge) a replay carries the retry's id too, its
    content-length the rewritten body's."""
    p = proxy(routes=ROUTES)
    key = ids.key()
    url = "http://127.0.0.1:%d/rpc" % p.port
    headers = [("Idempotency-Key", key), ("X-Actor-Id", ids.actor),
               ("Content-Type", "application/json"), ("X-Test-Action", "jsonrpc")]
    first = h2.curl(url, method="POST", headers=headers, data=call("transfer", 1))
    assert first.http_version == "2" and first.status == 201, first
    again = h2.curl(url, method="POST", headers=headers,
                    data=call("transfer", "a-much-longer-retry-id"))
    assert again.status == 201 and replayed(again), again
    assert again.json() == dict(first.json(), id="a-much-longer-retry-id")
    assert int(again.headers.get("content-length")) == len(again.body)
    assert upstream.count(key=key) == 1
