"""The published idempotency contract (docs/http.md, "Publishing the contract"): `idemproxy
describe` as Markdown and as an OpenAPI 3.1 document, checked against the
structure the OpenAPI 3.1 specification prescribes, never showing a
conninfo, a password or a file path; and the admin listener's /contract and
/contract/openapi.json, the same bytes as `describe`, open without the
admin token, HEAD without a body, following a SIGHUP reload."""
import base64
import json
import os
import re
import signal
import subprocess

import pytest

from tests.lib import helpers, jwtkit, npmkit
from tests.lib.admin import admin, admin_proxy
from tests.lib.proxy import rewrite, wait_for_log

PASSWORD = "pw-Never-Shown-4711"
ISSUER = "https://id.example"
CONTRACT_URL = "https://api.example.com/idempotency-contract"
SERVER_URL = "https://api.example.com/v1"
MARKDOWN_TYPE = "text/markdown; charset=utf-8"
OPENAPI_TYPE = "application/json"
# A key the OpenAPI pattern must take and ones it must refuse (idemkey.c).
GOOD_KEYS = ["abc", "k" * 255, '"abc"', '"a\\"b\\\\c"', '"' + "q" * 255 + '"', "a\\b", "{}!~"]
BAD_KEYS = ["", "k" * 256, "a b", 'a"b', '""', '"a\\x"', '"' + "q" * 256 + '"', "caf\u00e9",
            "tab\there"]

ROUTES = """
route shop.course {
    match        POST /api/c/courses
    fingerprint  json title:trim topic lessons:int
}
route shop.pay {
    match        POST /api/c/orders/{id}/payments
    match        PATCH /api/c/orders/{id}/payments
    actor        jwt %(keys)s issuer=%(issuer)s claim=sub
    errors       stripe
    fingerprint_headers Stripe-Version X-Api-Version
    in_progress  wait 2s
    recovery     forward
    retention    1h
}
route shop.hook {
    match        POST /api/c/hooks/*
    key_from     json event.id
    actor        anonymous
    key          optional
}
route shop.lookup {
    match        PUT /api/c/things/{name}/items
    key_from     query idem
    actor        authorization
    fingerprint  none
    release_on   4xx
    unknown_on   500 502 504
}
"""

# ---- the OpenAPI 3.1 structure ----

METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
PATH_ITEM_FIELDS = {"$ref", "summary", "description", "servers", "parameters"} | METHODS
PARAM_IN = {"query", "header", "path", "cookie"}
STATUS_KEY = re.compile(r"^(default|[1-5](?:[0-9]{2}|XX))$")
COMPONENT_NAME = re.compile(r"^[a-zA-Z0-9.\-_]+$")
COMPONENT_KINDS = {"schemas", "responses", "parameters", "examples", "requestBodies",
                   "headers", "securitySchemes", "links", "callbacks", "pathItems"}


def pointer(doc, ref):
    """The value the local reference ref ("#/a/b") names in doc (KeyError if none)."""
    assert ref.startswith("#/"), "not a local reference: %r" % ref
    v = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        v = v[int(part)] if isinstance(v, list) else v[part]
    return v


def walk_refs(v, where="#"):
    """Every ($ref, where) under v."""
    if isinstance(v, dict):
        for k, sub in v.items():
            if k == "$ref" and isinstance(sub, str):
                yield sub, where
            else:
                yield from walk_refs(sub, where + "/" + k)
    elif isinstance(v, list):
        for i, sub in enumerate(v):
            yield from walk_refs(sub, "%s/%d" % (where, i))


def deref(doc, v):
    return pointer(doc, v["$ref"]) if isinstance(v, dict) and "$ref" in v else v


def check_parameter(doc, p, where):
    p = deref(doc, p)
    assert isinstance(p.get("name"), str) and p["name"], where
    assert p.get("in") in PARAM_IN, (where, p.get("in"))
    assert ("schema" in p) != ("content" in p), "%s: schema or content, one of them" % where
    if p["in"] == "path":
        assert p.get("required") is True, "%s: a path parameter must be required" % where
    return p


def check_parameters(doc, params, where):
    """The parameters' (name, in) pairs, each checked and unique."""
    assert isinstance(params, list), where
    seen = set()
    for i, p in enumerate(params):
        p = check_parameter(doc, p, "%s/%d" % (where, i))
        pair = (p["name"].lower() if p["in"] == "header" else p["name"], p["in"])
        assert pair not in seen, "%s: parameter %r twice" % (where, pair)
        seen.add(pair)
    return {(deref(doc, p)["name"], deref(doc, p)["in"]) for p in params}


def check_responses(doc, responses, where):
    assert isinstance(responses, dict) and responses, "%s: no responses" % where
    for code, r in responses.items():
        assert STATUS_KEY.match(code), "%s: response key %r" % (where, code)
        r = deref(doc, r)
        assert isinstance(r.get("description"), str), "%s/%s: no description" % (where, code)
        for name, h in (r.get("headers") or {}).items():
            h = deref(doc, h)
            assert "name" not in h and "in" not in h, (where, name)
            assert "schema" in h or "content" in h, (where, name)


def check_operation(doc, op, path, path_params, op_ids, where):
    ids = op.get("operationId")
    assert isinstance(ids, str) and ids, "%s: no operationId" % where
    assert ids not in op_ids, "%s: operationId %r twice" % (where, ids)
    op_ids.add(ids)
    params = path_params | check_parameters(doc, op.get("parameters", []), where + "/parameters")
    templated = set(re.findall(r"\{([^{}/]+)\}", path))
    declared = {name for name, i in params if i == "path"}
    assert templated == declared, "%s: template %s, path parameters %s" % (
        where, sorted(templated), sorted(declared))
    for req in op.get("security", []):
        for name in req:
            assert name in doc["components"]["securitySchemes"], (where, name)
    if "requestBody" in op:
        assert isinstance(deref(doc, op["requestBody"]).get("content"), dict), where
    check_responses(doc, op.get("responses"), where + "/responses")


def validate_openapi(doc):
    """Fails unless doc has the structure of an OpenAPI 3.1 document."""
    assert isinstance(doc.get("openapi"), str) and doc["openapi"].startswith("3.1."), doc.get("openapi")
    info = doc.get("info")
    assert isinstance(info, dict) and isinstance(info.get("title"), str) and \
        isinstance(info.get("version"), str), info
    assert isinstance(doc.get("paths"), dict), "no paths"
    op_ids = set()
    hierarchies = set()
    for path, item in doc["paths"].items():
        assert path.startswith("/"), path
        shape = re.sub(r"\{[^{}/]+\}", "{}", path)
        assert shape not in hierarchies, "two templates of the same hierarchy: %s" % path
        hierarchies.add(shape)
        where = "#/paths/" + path.replace("~", "~0").replace("/", "~1")
        path_params = check_parameters(doc, item.get("parameters", []), where + "/parameters")
        for field, op in item.items():
            if field.startswith("x-"):
                continue
            assert field in PATH_ITEM_FIELDS, "%s: field %r" % (where, field)
            if field in METHODS:
                check_operation(doc, op, path, path_params, op_ids, where + "/" + field)
    for kind, entries in doc.get("components", {}).items():
        assert kind in COMPONENT_KINDS, kind
        for name in entries:
            assert COMPONENT_NAME.match(name), "components.%s: name %r" % (kind, name)
    for name, r in doc.get("components", {}).get("responses", {}).items():
        assert isinstance(deref(doc, r).get("description"), str), name
    refs = list(walk_refs(doc))
    for ref, where in refs:
        try:
            pointer(doc, ref)
        except (KeyError, IndexError, ValueError):
            pytest.fail("%s: $ref %s does not resolve" % (where, ref))
    return op_ids, refs


def test_validator_catches_broken_documents():
    """The validator can fail: each break of a good document is caught."""
    good = {
        "openapi": "3.1.0", "info": {"title": "t", "version": "1"},
        "paths": {"/a/{id}": {
            "parameters": [{"name": "id", "in": "path", "required": True,
                            "schema": {"type": "string"}}],
            "post": {"operationId": "a", "responses": {"default": {"$ref": "#/components/responses/R"}}}}},
        "components": {"responses": {"R": {"description": "r"}}},
    }
    validate_openapi(good)
    breaks = [
        lambda d: d.pop("info"),
        lambda d: d["paths"].update({"b": {}}),
        lambda d: d["paths"]["/a/{id}"]["parameters"][0].update({"required": False}),
        lambda d: d["paths"]["/a/{id}"]["parameters"][0].update({"in": "body"}),
        lambda d: d["paths"]["/a/{id}"]["parameters"][0].pop("schema"),
        lambda d: d["paths"]["/a/{id}"].pop("parameters"),
        lambda d: d["paths"]["/a/{id}"]["post"]["responses"].update({"2000": {"description": "x"}}),
        lambda d: d["paths"]["/a/{id}"]["post"].update({"responses": {}}),
        lambda d: d["paths"]["/a/{id}"]["post"]["responses"]["default"].update(
            {"$ref": "#/components/responses/Nope"}),
        lambda d: d["paths"].update({"/b": {"put": {"operationId": "a", "responses": {
            "default": {"description": "x"}}}}}),
        lambda d: d["paths"].update({"/a/{other}": {}}),
    ]
    for i, brk in enumerate(breaks):
        d = json.loads(json.dumps(good))
        brk(d)
        try:
            validate_openapi(d)
        except (AssertionError, KeyError, pytest.fail.Exception):
            continue
        pytest.fail("break %d was not caught" % i)


# ---- describe ----

def contract_files(tmp_path):
    """The files the configuration names: a JWKS, an admin token and encryption keys."""
    keys = tmp_path / "contract-jwks.json"
    keys.write_text(jwtkit.jwks(jwtkit.Key("HS256", kid="k1")))
    token = tmp_path / "contract-admin-token.txt"
    token.write_text("t" * 32 + "\n")
    seal = tmp_path / "contract-seal-keys.txt"
    seal.write_text("k1 %s\n" % base64.b64encode(os.urandom(32)).decode())
    return keys, token, seal


def contract_settings(tmp_path):
    keys, token, seal = contract_files(tmp_path)
    settings = {"contract_url": CONTRACT_URL, "admin_token": str(token),
                "body_encryption": str(seal), "max_request_body": "256k",
                "mismatch_status": "409"}
    return settings, ROUTES % {"keys": keys, "issuer": ISSUER}


def write_conf(tmp_path, settings, routes, name="contract.conf"):
    lines = ["listen 127.0.0.1:%d" % helpers.free_port(),
             "upstream http://127.0.0.1:%d" % helpers.free_port(),
             'database "host=/nonexistent/socket dbname=contractdb user=app password=%s"'
             % PASSWORD,
             "actor header X-Actor-Id"]
    lines += ["%s %s" % kv for kv in settings.items()]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n" + routes)
    return str(path)


def describe(binary, conf, *extra):
    r = subprocess.run([binary, "describe", "-c", conf] + list(extra), stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=30)
    assert not helpers.sanitizer_report(binary, r.stderr.decode("utf-8", "replace")), r.stderr
    return r


def assert_no_secrets(text, tmp_path):
    for needle in (PASSWORD, "password", "host=", "contractdb", "/nonexistent",
                   "contract-jwks", "contract-admin-token", "contract-seal-keys", str(tmp_path)):
        assert needle not in text, "%r appears in the contract" % needle


def section(md, operation):
    """The Markdown section of operation, up to the next one."""
    head = "\n## `%s`\n" % operation
    assert head in md, "no section for %s" % operation
    rest = md.split(head, 1)[1]
    return rest.split("\n## ", 1)[0]


SHARED_HEAD = "\n## Every route\n"
STRIPE_TABLE = "\nThe statuses a route with `errors stripe` answers:\n"
NEVER = "\nNever answered here (of the shared statuses): "


def shared_parts(md):
    """The Markdown's shared part: (facts, problem status table, Stripe status table)."""
    assert SHARED_HEAD in md, "no shared section"
    rest = md.split(SHARED_HEAD, 1)[1].split("\n## ", 1)[0]
    rest, _, stripe = rest.partition(STRIPE_TABLE)
    facts, _, problem = rest.partition("\nThe statuses a route answers")
    return facts, problem, stripe


def route_view(md, operation):
    """What the Markdown tells of operation: its own section, and the shared
    facts and status rows it does not restate or say it never answers."""
    sec = section(md, operation)
    facts, problem, stripe = shared_parts(md)
    own = {r[0] for r in table_rows(sec)}
    lines = [sec]
    lines += [l for l in facts.splitlines()
              if l.startswith("| ") and table_rows(l) and table_rows(l)[0][0] not in own]
    errors = [r[1] for r in table_rows("\n".join(lines)) if r[0] == "Errors"]
    assert len(errors) == 1, (operation, errors)
    # the route's own rows stand in place of the shared ones of their error,
    # and it names the shared ones it never answers
    left_out = {r[1].split(" ")[0].strip("`") for r in table_rows(sec) if r[0].isdigit()}
    if NEVER in sec:
        for item in sec.split(NEVER, 1)[1].split("\n", 1)[0].rstrip(".").split(", "):
            left_out.add(item.split(" ")[1].strip("`"))
    table = stripe if "Stripe's shape" in errors[0] else problem
    for line in table.splitlines():
        rows = table_rows(line)
        if rows and rows[0][0].isdigit() and rows[0][1].split(" ")[0].strip("`") in left_out:
            continue
        lines.append(line)
    return "\n".join(lines)


def table_rows(text):
    """The cells of every table row of text, the separator rows left out."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
            rows.append([c.strip() for c in cells])
    return rows


def statuses(sec):
    """{(status, error name)} of a section's status table."""
    return {(r[0], r[1].split(" ")[0].strip("`")) for r in table_rows(sec) if r[0].isdigit()}


def test_describe_markdown(binary, tmp_path):
    settings, routes = contract_settings(tmp_path)
    conf = write_conf(tmp_path, settings, routes)
    r = describe(binary, conf)
    assert r.returncode == 0, r.stderr
    md = r.stdout.decode("utf-8")
    assert_no_secrets(md, tmp_path)
    assert md.startswith("# Idempotency contract\n"), md[:200]
    assert "one key per intent" in md and "new key" in md, md
    assert "`Link: <%s>; rel=\"describedby\"`" % CONTRACT_URL in md
    assert "`Idempotent-Replayed: true`" in md and "`Idempotency-Key-Expires`" in md

    c = route_view(md, "shop.course")
    assert "`POST /api/c/courses`" in c
    assert "the `Idempotency-Key` header" in c and "1 to 255 visible ASCII characters" in c
    assert "| Key required | yes" in c
    assert "the `X-Actor-Id` header" in c
    assert "`title` (trimmed), `topic`, `lessons` (as an integer)" in c
    assert "24h from completion" in c
    assert "409 `operation-in-progress` at once" in c
    assert "409 `outcome-unknown`" in c
    assert "the body is larger than 262144 bytes" in c
    assert statuses(c) == {
        ("400", "idempotency-key-missing"), ("400", "idempotency-key-invalid"),
        ("401", "actor-missing"), ("401", "actor-invalid"), ("409", "idempotency-conflict"),
        ("409", "operation-in-progress"), ("409", "outcome-unknown"),
        ("413", "request-too-large"), ("502", "upstream-unavailable"),
        ("502", "upstream-error"), ("503", "store-unavailable"), ("503", "key-unavailable"),
        ("504", "upstream-timeout")}
    rows = {r[1].split(" ")[0].strip("`"): r for r in table_rows(c) if r[0].isdigit()}
    assert "`X-Should-Retry: true`" in rows["operation-in-progress"][3]
    assert "`Retry-After`" in rows["operation-in-progress"][3]
    assert "`Retry-After`" in rows["store-unavailable"][3]
    # body_encryption is on: a key another instance has first is a retry.
    assert "`X-Should-Retry: true`" in rows["key-unavailable"][3]
    assert "`Retry-After`" in rows["key-unavailable"][3]
    assert "`X-Should-Retry: true`" in rows["upstream-unavailable"][3]
    assert "`X-Should-Retry: false`" in rows["idempotency-conflict"][3]

    o = route_view(md, "shop.pay")
    assert "`POST /api/c/orders/{id}/payments`, `PATCH /api/c/orders/{id}/payments`" in o
    assert "a bearer token (JWT) from issuer `%s`, claim `sub`" % ISSUER in o
    assert "the headers `Stripe-Version`, `X-Api-Version`" in o
    assert "held up to 2s" in o and "a retry runs again" in o and "1h from completion" in o
    assert "Stripe's shape" in o
    # errors stripe: a reused key is 400, as Stripe answers; no outcome-unknown with forward
    assert ("400", "idempotency_conflict") in statuses(o)
    assert not any(name == "outcome_unknown" for _, name in statuses(o))
    assert "(`idempotency_error`)" in o and "`Stripe-Should-Retry: true`" in o

    h = route_view(md, "shop.hook")
    assert "`POST /api/c/hooks/*` (a final `*` matches zero or more segments)" in h
    assert "the string or integer at `event.id` in the JSON body" in h
    assert "anonymous: every client shares one scope" in h
    assert not any(s in ("401",) or n == "idempotency-key-missing" for s, n in statuses(h))

    q = route_view(md, "shop.lookup")
    assert "the `idem` query parameter" in q
    assert "the `Authorization` header's value (hashed" in q
    assert "the body does not count" in q
    assert "the API's `4xx` release the key" in q and "`500`, `502`, `504` make the outcome" in q
    # in file order
    assert md.index("## `shop.course`") < md.index("## `shop.pay`") < md.index("## `shop.hook`")


MANY_ROUTES = 20


def many_routes():
    """MANY_ROUTES routes that differ in a few facts each: {operation: (route text, the
    words of its own facts)}."""
    routes = {}
    for i in range(MANY_ROUTES):
        op = "fleet.r%02d" % i
        lines = ["    match        POST /api/fleet/r%02d/{id}" % i,
                 "    fingerprint  json f%02d:trim shared" % i]
        words = ["`POST /api/fleet/r%02d/{id}`" % i, "`f%02d` (trimmed)" % i]
        if i % 4 == 3:
            lines.append("    retention    %dh" % (i + 1))
            words.append("%dh from completion" % (i + 1))
        if i % 5 == 4:
            lines.append("    in_progress  wait 3s")
            words.append("held up to 3s")
        if i % 7 == 6:
            lines.append("    errors       stripe")
            words.append("Stripe's shape")
        routes[op] = ("route %s {\n%s\n}\n" % (op, "\n".join(lines)), words)
    return routes


def test_markdown_states_the_shared_rules_once(binary, tmp_path):
    """20 routes fit in a few hundred lines: the facts and statuses they
    share are told once, each route's section tells what differs."""
    settings, _ = contract_settings(tmp_path)
    routes = many_routes()
    conf = write_conf(tmp_path, settings, "".join(text for text, _ in routes.values()))
    r = describe(binary, conf)
    assert r.returncode == 0, r.stderr
    md = r.stdout.decode("utf-8")
    assert len(md.splitlines()) < 400, len(md.splitlines())
    facts, problem, stripe = shared_parts(md)
    assert "24h from completion" in facts and "409 `operation-in-progress` at once" in facts
    assert statuses(problem) >= {("409", "idempotency-conflict"), ("401", "actor-missing"),
                                 ("400", "idempotency-key-missing")}
    assert ("400", "idempotency_conflict") in statuses(stripe)
    for op, (_, words) in routes.items():
        sec = section(md, op)
        for w in words:
            assert w in sec, (op, w, sec)
        # told once: the shared facts are not repeated
        assert "24h from completion" not in sec and "| Key required |" not in sec, (op, sec)
        # its own rows: the only status it tells otherwise
        own = {("409", "operation-in-progress")} if "held up to 3s" in words else set()
        assert statuses(sec) == own, (op, sec)
        view = route_view(md, op)
        assert len(statuses(view)) == 13, (op, view)
    assert md.count("| 409 | `idempotency-conflict` |") == 1
    # in file order
    ops = list(routes)
    assert [md.index("## `%s`" % op) for op in ops] == sorted(md.index("## `%s`" % op)
                                                                for op in ops)


def test_describe_openapi(binary, tmp_path):
    settings, routes = contract_settings(tmp_path)
    conf = write_conf(tmp_path, settings, routes)
    r = describe(binary, conf, "--format", "openapi")
    assert r.returncode == 0, r.stderr
    text = r.stdout.decode("utf-8")
    assert_no_secrets(text, tmp_path)
    doc = json.loads(text)
    op_ids, refs = validate_openapi(doc)
    assert doc["openapi"] == "3.1.0"
    assert doc["info"]["title"] == "idemproxy idempotency contract"
    assert doc["info"]["version"] == subprocess.run(
        [binary, "--version"], capture_output=True, text=True).stdout.split()[1]
    assert len(refs) > 20
    assert {"shop.course_post", "shop.pay_post", "shop.pay_patch", "shop.hook_post",
            "shop.lookup_put"} <= op_ids

    c = doc["paths"]["/api/c/courses"]["post"]
    key = [p for p in c["parameters"] if p["name"] == "Idempotency-Key"][0]
    assert key["in"] == "header" and key["required"] is True
    assert key["schema"]["type"] == "string" and key["schema"]["maxLength"] >= 255
    pattern = re.compile(key["schema"]["pattern"])
    for k in GOOD_KEYS:
        assert pattern.search(k) and len(k) <= key["schema"]["maxLength"], k
    for k in BAD_KEYS:
        assert not pattern.search(k), k
    # the actor header is a credential of its own, not a parameter
    assert not [p for p in c["parameters"] if p["name"] == "X-Actor-Id"]
    assert c["security"] == [{"actorHeader.x-actor-id": []}]
    assert doc["components"]["securitySchemes"]["actorHeader.x-actor-id"] == {
        "type": "apiKey", "in": "header", "name": "X-Actor-Id",
        "description": doc["components"]["securitySchemes"]["actorHeader.x-actor-id"][
            "description"]}
    # the fingerprinted fields are properties of an open JSON object
    cbody = c["requestBody"]["content"]
    assert list(cbody) == ["application/json"]
    cschema = cbody["application/json"]["schema"]
    assert cschema["type"] == "object" and cschema["additionalProperties"] is True
    assert list(cschema["properties"]) == ["title", "topic", "lessons"]
    assert "`trim`" in cschema["properties"]["title"]["description"]
    assert "required" not in cschema and c["requestBody"]["required"] is False
    # no contract_server: the document's own origin
    assert [s["url"] for s in doc["servers"]] == ["/"]
    assert set(c["responses"]) == {"default", "400", "401", "409", "413", "502", "503", "504"}
    assert c["responses"]["409"]["$ref"] == "#/components/responses/Problem409"
    assert "idempotency-conflict" in c["responses"]["409"]["description"]  # mismatch_status 409
    p409 = pointer(doc, c["responses"]["409"]["$ref"])
    assert p409["content"]["application/problem+json"]["schema"]["$ref"] == \
        "#/components/schemas/Problem"
    assert {"Retry-After", "Retry-After-Ms", "X-Should-Retry", "Link",
            "X-Request-Id"} <= set(p409["headers"])
    # Every response names the request id: the API's own and every problem.
    assert "X-Request-Id" in pointer(doc, "#/components/responses/Response")["headers"]
    for name, r in doc["components"]["responses"].items():
        assert r["headers"]["X-Request-Id"]["$ref"] == "#/components/headers/X-Request-Id", name
    assert "128 visible ASCII" in doc["components"]["headers"]["X-Request-Id"]["description"]
    assert CONTRACT_URL in json.dumps(doc["components"]["headers"]["Link"])
    problem = doc["components"]["schemas"]["Problem"]
    assert {"type", "title", "status", "detail"} <= set(problem["properties"])
    x = c["x-idempotency"]
    assert x["retention_seconds"] == 86400 and x["in_progress"]["mode"] == "reject"
    assert [f["path"] for f in x["fingerprint"]["fields"]] == ["title", "topic", "lessons"]

    item = doc["paths"]["/api/c/orders/{id}/payments"]
    assert [p["name"] for p in item["parameters"]] == ["id"]
    o = item["post"]
    assert o["security"] == [{"bearerJWT": []}]
    assert doc["components"]["securitySchemes"]["bearerJWT"]["scheme"] == "bearer"
    assert o["responses"]["400"]["$ref"] == "#/components/responses/Stripe400"
    assert "idempotency_conflict" in o["responses"]["400"]["description"]
    s400 = pointer(doc, o["responses"]["400"]["$ref"])
    assert s400["content"]["application/json"]["schema"]["$ref"] == \
        "#/components/schemas/StripeError"
    assert "Stripe-Should-Retry" in s400["headers"]
    assert o["x-idempotency"]["fingerprint"]["headers"] == ["Stripe-Version", "X-Api-Version"]
    assert o["x-idempotency"]["in_progress"] == {"mode": "wait", "wait_ms": 2000}
    assert o["x-idempotency"]["recovery"] == "forward" and o["x-idempotency"]["errors"] == "stripe"
    assert o["x-idempotency"]["actor"]["issuer"] == ISSUER
    assert "patch" in item

    hooks = doc["paths"]["/api/c/hooks/{rest}"]
    rest = hooks["parameters"][0]
    assert rest["name"] == "rest" and "zero or more" in rest["description"]
    h = hooks["post"]
    assert not any(p["in"] in ("header", "query") for p in h["parameters"])
    assert h["security"] == []  # anonymous: no credential
    assert "`event.id`" in h["requestBody"]["description"]
    assert "401" not in h["responses"]
    idp = h["requestBody"]["content"]["application/json"]["schema"]["properties"]["event"]
    assert idp["properties"]["id"]["type"] == ["string", "integer"]

    q = doc["paths"]["/api/c/things/{name}/items"]["put"]
    qkey = [p for p in q["parameters"] if p["in"] == "query"][0]
    assert qkey["name"] == "idem" and qkey["required"] is True and "pattern" in qkey["schema"]
    assert q["security"] == [{"authorizationHeader": []}]
    # fingerprint none, key in the query: any body
    assert q["requestBody"]["content"] == {"*/*": {"schema": {}}}
    assert o["requestBody"]["content"]["application/json"]["schema"] == {
        "type": "object", "additionalProperties": True}
    assert q["x-idempotency"]["release_on"] == ["4xx"]
    assert q["x-idempotency"]["unknown_on"] == ["500", "502", "504"]


def test_describe_errors(binary, tmp_path):
    settings, routes = contract_settings(tmp_path)
    conf = write_conf(tmp_path, settings, routes)
    r = describe(binary, conf, "--format", "yaml")
    assert r.returncode == 2 and b"markdown" in r.stderr and b"openapi" in r.stderr, r.stderr
    assert r.stdout == b""
    r = subprocess.run([binary, "-c", conf, "--format", "openapi"], capture_output=True,
                       timeout=30)
    assert r.returncode == 2 and b"describe" in r.stderr, r.stderr
    # a file that does not load: FILE:LINE: message, as -t says it
    bad = write_conf(tmp_path, settings, routes + "\nno_such_directive 1\n", "bad.conf")
    line = len(open(bad).read().splitlines())
    r = describe(binary, bad)
    assert r.returncode == 1 and r.stdout == b"", r
    assert r.stderr.decode().startswith("%s:%d: " % (bad, line)), r.stderr
    os.unlink(str(tmp_path / "contract-jwks.json"))
    r = describe(binary, conf)
    assert r.returncode == 1 and b"contract-jwks.json" in r.stderr, r.stderr
    r = describe(binary, str(tmp_path / "missing.conf"))
    assert r.returncode == 1 and r.stderr.decode().startswith(str(tmp_path / "missing.conf") + ":")


def test_contract_server_names_the_documents_server(binary, tmp_path):
    settings, routes = contract_settings(tmp_path)
    settings["contract_server"] = SERVER_URL
    conf = write_conf(tmp_path, settings, routes)
    r = describe(binary, conf, "--format", "openapi")
    assert r.returncode == 0, r.stderr
    assert [s["url"] for s in json.loads(r.stdout)["servers"]] == [SERVER_URL]
    dump = subprocess.run([binary, "-T", "-c", conf], capture_output=True, text=True, timeout=30)
    assert dump.returncode == 0, dump
    assert "contract_server %s" % SERVER_URL in dump.stdout.splitlines(), dump.stdout
    for bad, why in (("ftp://api.example.com", "http:// or https://"),
                     ("https://", "no host"), ("https:///v1", "no host"),
                     ("https://api.example.com/v1?x=1", "invalid contract_server"),
                     ("https://api.example.com/{tenant}", "invalid contract_server")):
        settings["contract_server"] = bad
        conf = write_conf(tmp_path, settings, routes, "bad-server.conf")
        line = next(i for i, l in enumerate(open(conf).read().splitlines(), 1)
                    if l.startswith("contract_server"))
        t = subprocess.run([binary, "-t", "-c", conf], capture_output=True, text=True, timeout=30)
        assert t.returncode != 0 and t.stderr.startswith("%s:%d: " % (conf, line)), (bad, t)
        assert why in t.stderr, (bad, t.stderr)


# ---- what typed clients read: Redocly's linter, openapi-typescript and tsc ----

LINT_TIMEOUT = 180       # one npx run on a loaded machine
# A client that sends a course (fingerprint json title:trim topic lessons:int)
# and a hook (key_from json event.id) with bodies typed from the document.
CLIENT_TS = """import type { paths } from "./api";

type Body<P extends keyof paths, M extends keyof paths[P]> =
    NonNullable<paths[P][M] extends { requestBody?: infer B } ? B : never> extends
        { content: { "application/json": infer J } } ? J : never;
type CourseBody = Body<"/api/c/courses", "post">;
type HookBody = Body<"/api/c/hooks/{rest}", "post">;
type IsNever<T> = [T] extends [never] ? true : false;
const courseTyped: IsNever<CourseBody> = false;
const hookTyped: IsNever<HookBody> = false;

export async function send(base: string, key: string): Promise<number> {
    const course: CourseBody = %(course)s;
    const hook: HookBody = %(hook)s;
    let status = 0;
    for (const [path, body] of [["/api/c/courses", course], ["/api/c/hooks/x", hook]] as const) {
        const r = await fetch(base + path, {
            method: "POST",
            headers: { "Content-Type": "application/json", "Idempotency-Key": key },
            body: JSON.stringify(body),
        });
        status = r.status;
    }
    return courseTyped || hookTyped ? -1 : status;
}
"""
GOOD_BODIES = {"course": '{ title: " Rust ", topic: "systems", lessons: 12, extra: [1] }',
               "hook": '{ event: { id: "evt_1", kind: "paid" }, at: 1 }'}
# The key at event.id is a string or an integer, never a boolean; a body is an object.
BAD_BODIES = [dict(GOOD_BODIES, hook='{ event: { id: true } }'),
              dict(GOOD_BODIES, course='"a course"')]


@pytest.fixture(scope="module")
def node_tools():
    """tests/sdk's packages (@redocly/cli, openapi-typescript, typescript), installed."""
    return npmkit.install()


def openapi_file(binary, tmp_path, settings=None):
    base, routes = contract_settings(tmp_path)
    base.update(settings or {})
    conf = write_conf(tmp_path, base, routes)
    r = describe(binary, conf, "--format", "openapi")
    assert r.returncode == 0, r.stderr
    path = tmp_path / "openapi.json"
    path.write_bytes(r.stdout)
    return path


def redocly_lint(path):
    """Redocly's recommended ruleset on path: (totals, problems)."""
    code, out, err = npmkit.npx("redocly", "lint", "--extends", "recommended", "--format",
                                "json", str(path), timeout=LINT_TIMEOUT)
    assert code is not None, err
    try:
        report = json.loads(out)
    except ValueError:
        pytest.fail("redocly lint printed no report (exit %s):\n%s%s" % (code, out, err))
    assert (code == 0) == (report["totals"]["errors"] == 0), (code, report["totals"])
    return report["totals"], report["problems"]


def test_redocly_recommended_reports_no_error(binary, tmp_path, node_tools):
    for settings in ({}, {"contract_server": SERVER_URL}):
        totals, problems = redocly_lint(openapi_file(binary, tmp_path, settings))
        errors = [(p["ruleId"], p["message"], p["location"]) for p in problems
                  if p["severity"] == "error"]
        assert totals["errors"] == 0 and not errors, errors
    # The linter can fail: without servers and with an operation that says
    # no security, the same ruleset reports errors.
    path = openapi_file(binary, tmp_path)
    doc = json.loads(path.read_text())
    del doc["servers"]
    del doc["paths"]["/api/c/courses"]["post"]["security"]
    path.write_text(json.dumps(doc))
    totals, problems = redocly_lint(path)
    assert totals["errors"] >= 2, totals
    assert {"no-empty-servers", "security-defined"} <= {p["ruleId"] for p in problems}


def tsc(tmp_path, bodies):
    """tsc --noEmit --strict of CLIENT_TS with bodies, next to the generated api.d.ts."""
    client = tmp_path / "client.ts"
    client.write_text(CLIENT_TS % bodies)
    return npmkit.npx("tsc", "--noEmit", "--strict", "--target", "es2022", "--module",
                      "esnext", "--moduleResolution", "bundler", "--lib", "es2022,dom",
                      str(client), timeout=LINT_TIMEOUT, cwd=str(tmp_path))


def test_generated_types_type_the_request_bodies(binary, tmp_path, node_tools):
    path = openapi_file(binary, tmp_path, {"contract_server": SERVER_URL})
    code, out, err = npmkit.npx("openapi-typescript", str(path), "-o",
                                str(tmp_path / "api.d.ts"), timeout=LINT_TIMEOUT)
    assert code == 0, out + err
    api = (tmp_path / "api.d.ts").read_text()
    assert '"/api/c/courses"' in api and "lessons?: unknown" in api, api[:2000]
    code, out, err = tsc(tmp_path, GOOD_BODIES)
    assert code == 0, out + err
    for bodies in BAD_BODIES:
        code, out, err = tsc(tmp_path, bodies)
        assert code not in (0, None), (bodies, out, err)
        assert "client.ts(" in out and "TS2322" in out, (bodies, out, err)


# ---- the admin listener ----

def contract_proxy(proxy, pg, tmp_path):
    settings, routes = contract_settings(tmp_path)
    p = admin_proxy(proxy, settings, routes=routes,
                    database=pg.conninfo + " password=" + PASSWORD, wait_store=True)
    return p


def test_admin_serves_the_describe_bytes(proxy, pg, binary, tmp_path):
    p = contract_proxy(proxy, pg, tmp_path)
    for path, fmt, ctype in (("/contract", "markdown", MARKDOWN_TYPE),
                             ("/contract/openapi.json", "openapi", OPENAPI_TYPE)):
        r = describe(binary, p.conf, "--format", fmt)
        assert r.returncode == 0, r.stderr
        # open like /healthz, with admin_token set and no token sent
        got = admin(p, "GET", path)
        assert got.status == 200, got
        assert got.headers.get("Content-Type") == ctype, got
        assert got.body == r.stdout, path
        assert PASSWORD.encode() not in got.body and b"password" not in got.body
        head = admin(p, "HEAD", path)
        assert head.status == 200 and head.body == b"", head
        assert head.headers.get("Content-Type") == ctype
        for method in ("POST", "DELETE", "PUT"):
            r = admin(p, method, path, body=b"")
            assert r.status == 405 and r.headers.get("Allow") == "GET, HEAD", (method, r)
    validate_openapi(json.loads(admin(p, "GET", "/contract/openapi.json").body))
    # the records API still wants the token
    assert admin(p, "GET", "/records").status == 401
    assert admin(p, "GET", "/contract/other").status == 404


def test_the_published_key_pattern_is_what_the_proxy_takes(proxy, pg, upstream, ids, tmp_path):
    p = contract_proxy(proxy, pg, tmp_path)
    doc = json.loads(admin(p, "GET", "/contract/openapi.json").body)
    op = doc["paths"]["/api/c/courses"]["post"]
    schema = [q for q in op["parameters"] if q["name"] == "Idempotency-Key"][0]["schema"]
    pattern = re.compile(schema["pattern"])
    # an actor each: "abc" and "\"abc\"" are the same key
    for i, k in enumerate(GOOD_KEYS + BAD_KEYS):
        r = p.post("/api/c/courses", key=k, actor="%s-%d" % (ids.actor, i),
                   body=helpers.course(title="pattern %d" % i))
        published = bool(pattern.search(k)) and len(k) <= schema["maxLength"]
        if published:
            assert r.status == 201, (k, r)
        else:
            helpers.problem(r, "idempotency-key-invalid", 400)
        assert published == (k in GOOD_KEYS), k
    assert sum(upstream.count(actor="%s-%d" % (ids.actor, i))
               for i in range(len(GOOD_KEYS) + len(BAD_KEYS))) == len(GOOD_KEYS)


KEY_SOURCES = """
route source.header {
    match        POST /api/s/header
}
route source.other {
    match        POST /api/s/other
    key_from     header X-Delivery-Id
}
route source.json {
    match        POST /api/s/json
    key_from     json event.id
}
route source.query {
    match        POST /api/s/query
    key_from     query delivery
}
"""


def test_a_missing_key_is_told_in_the_contracts_words(proxy, upstream, binary, ids):
    """The detail of idempotency-key-missing says where the key goes as the
    contract's Key fact does (its code spans as plain text)."""
    p = proxy(routes=KEY_SOURCES)
    r = describe(binary, p.conf)
    assert r.returncode == 0, r.stderr
    md = r.stdout.decode("utf-8")
    for operation, path in (("source.header", "/api/s/header"), ("source.other", "/api/s/other"),
                            ("source.json", "/api/s/json"), ("source.query", "/api/s/query?x=1")):
        facts = {row[0]: row[1] for row in table_rows(route_view(md, operation))}
        doc = helpers.problem(p.post(path, actor=ids.actor, body=b'{"event": {}}'),
                              "idempotency-key-missing", 400)
        assert doc["detail"] == "this operation requires an idempotency key (%s)" % (
            facts["Key"].replace("`", "")), (operation, doc)
    assert upstream.count(actor=ids.actor) == 0


ADVICE = {"X-Should-Retry", "Stripe-Should-Retry", "Retry-After", "Retry-After-Ms",
          "WWW-Authenticate", "Link"}
HEADER_ROUTES = """
route headers.problem {
    match        POST /api/h/problem
}
route headers.stripe {
    match        POST /api/h/stripe
    errors       stripe
}
"""


def headers_cell(md, operation, error):
    """{name: value or None} of the Headers cell of error's row in operation's status table."""
    for row in table_rows(route_view(md, operation)):
        if row[0].isdigit() and row[1].split(" ")[0].strip("`") == error:
            return {name: value or None for name, _, value in
                    (item.partition(": ") for item in re.findall(r"`([^`]*)`", row[3]))}
    raise AssertionError("no %s row for %s" % (error, operation))


def test_a_problem_carries_the_headers_its_contract_row_names(proxy, upstream, binary, ids):
    """The advice headers of each problem response are those its row of the
    contract names (with the value, where the row says one), and Link, which
    the contract states once for every error."""
    p = proxy({"contract_url": CONTRACT_URL}, routes=HEADER_ROUTES)
    r = describe(binary, p.conf)
    assert r.returncode == 0, r.stderr
    md = r.stdout.decode("utf-8")
    link = '<%s>; rel="describedby"' % CONTRACT_URL
    assert "`Link: %s` on every error" % link in md
    for operation, path, stripe in (("headers.problem", "/api/h/problem", False),
                                    ("headers.stripe", "/api/h/stripe", True)):
        name = (lambda n: n.replace("-", "_")) if stripe else (lambda n: n)
        key, actor = ids.key(), "%s-%s" % (ids.actor, operation)
        answers = [("idempotency-key-missing", p.post(path, actor=actor, body=helpers.course(title="one"))),
                   ("idempotency-key-invalid", p.post(path, key="a b", actor=actor,
                                                      body=helpers.course(title="one"))),
                   ("actor-missing", p.post(path, key=key, body=helpers.course(title="one")))]
        with helpers.SlowOwner(p, upstream, path, key, actor, 1.0, body=helpers.course(title="one")) as owner:
            answers.append(("operation-in-progress",
                            p.post(path, key=key, actor=actor, body=helpers.course(title="one"))))
        assert owner.response.status == 201, owner.response
        answers.append(("idempotency-conflict", p.post(path, key=key, actor=actor,
                                                       body=helpers.course(title="two"))))
        for error, resp in answers:
            cell = headers_cell(md, operation, name(error))
            got = {h: resp.headers.get(h) for h in ADVICE if resp.headers.get(h) is not None}
            assert set(got) == set(cell) | {"Link"}, (operation, error, got, cell)
            assert got["Link"] == link, resp
            for h, value in cell.items():
                assert value is None or got[h] == value, (operation, error, h, got)
        assert upstream.count(actor=actor) == 1


def test_reload_changes_the_contract(proxy, pg, binary, tmp_path):
    p = contract_proxy(proxy, pg, tmp_path)
    before = admin(p, "GET", "/contract").body.decode()
    before_oa = json.loads(admin(p, "GET", "/contract/openapi.json").body)
    assert "reload.added" not in before
    assert "/api/c/added" not in before_oa["paths"]
    rewrite(p, lambda t: t.replace("retention    1h", "retention    3h") +
            "\nroute reload.added {\n    match POST /api/c/added\n    in_progress wait 1s\n}\n")
    p.signal(signal.SIGHUP)
    wait_for_log(p, "configuration reloaded")
    after = admin(p, "GET", "/contract").body.decode()
    assert after != before
    assert "## `reload.added`" in after and "`POST /api/c/added`" in after
    assert "3h from completion" in route_view(after, "shop.pay")
    assert "1h from completion" in route_view(before, "shop.pay")
    after_oa = json.loads(admin(p, "GET", "/contract/openapi.json").body)
    validate_openapi(after_oa)
    assert after_oa["paths"]["/api/c/added"]["post"]["x-idempotency"]["in_progress"] == \
        {"mode": "wait", "wait_ms": 1000}
    assert after_oa["paths"]["/api/c/orders/{id}/payments"]["post"]["x-idempotency"][
        "retention_seconds"] == 3 * 3600
    assert admin(p, "GET", "/contract").body == describe(binary, p.conf).stdout
    assert p.running()
