"""Identity (docs/identity.md): verified actors from JSON Web Tokens, the
hashed Authorization actor, and the 401s that stop everything else. Keys
and tokens are made here (jwtkit); every test counts upstream effects."""
import hashlib
import json
import signal
import time

from tests.lib import helpers, jwtkit
from tests.lib.helpers import assert_owner, assert_replay_of, course, problem
from tests.lib.proxy import wait_for_log

PATH = "/api/jwt"
ISSUER = "https://issuer.example"


def jwt_proxy(proxy, tmp_path, keys, options="", name="keys.json", settings=None):
    """A proxy whose route jwt.op (POST /api/jwt) takes its actor from a token."""
    f = tmp_path / name
    f.write_text(jwtkit.jwks(*keys))
    routes = """
route jwt.op {
    match        POST %s
    actor        jwt %s %s
}
""" % (PATH, f, options)
    p = proxy(settings, routes=routes)
    p.keyfile = f
    return p


def post(p, token, key, body=None, header="Authorization", scheme="Bearer "):
    headers = [(header, scheme + token)] if token is not None else []
    return p.request("POST", PATH, [("Idempotency-Key", key),
                                    ("Content-Type", "application/json")] + headers,
                     body if body is not None else course())


def stored_actors(pg, key):
    return [r["actor"] for r in pg.query("SELECT actor FROM idempotency_records WHERE idem_key = %s",
                                   (key,))]


def assert_refused(resp, name, invalid):
    problem(resp, name, 401)
    www = resp.headers.get("WWW-Authenticate") or ""
    assert www.startswith("Bearer"), resp
    assert ('error="invalid_token"' in www) == invalid, www


def test_every_algorithm(proxy, upstream, pg, ids, tmp_path):
    keys = [jwtkit.Key(alg, kid="k-" + alg) for alg in jwtkit.ALGS]
    p = jwt_proxy(proxy, tmp_path, keys)
    for k in keys:
        key = ids.key()
        tok = jwtkit.token(k, {"sub": "user-" + k.alg})
        owner = post(p, tok, key)
        assert_owner(owner)
        assert_replay_of(post(p, tok, key), owner)
        assert upstream.count(key=key) == 1, k.alg
        assert stored_actors(pg, key) == ["j:0::user-" + k.alg]


def test_key_without_kid_is_the_one_that_fits(proxy, upstream, ids, tmp_path):
    ec, rsa = jwtkit.Key("ES256"), jwtkit.Key("RS256")
    p = jwt_proxy(proxy, tmp_path, [ec, rsa])
    for k in (ec, rsa):
        key = ids.key()
        assert_owner(post(p, jwtkit.token(k), key))
        assert upstream.count(key=key) == 1


def test_two_subjects_one_key_are_two_scopes(proxy, upstream, pg, ids, tmp_path):
    k = jwtkit.Key("ES256", kid="one")
    p = jwt_proxy(proxy, tmp_path, [k])
    key = ids.key()
    alice = post(p, jwtkit.token(k, {"sub": "alice"}), key)
    bob = post(p, jwtkit.token(k, {"sub": "bob"}), key, body=course(title="Other"))
    assert_owner(alice)
    assert_owner(bob)
    assert upstream.count(key=key) == 2
    assert_replay_of(post(p, jwtkit.token(k, {"sub": "alice"}), key), alice)
    assert upstream.count(key=key) == 2
    assert sorted(stored_actors(pg, key)) == ["j:0::alice", "j:0::bob"]


def bad_tokens(k, other, base):
    """Tokens that must each be refused; base: the claims a good one has."""
    now = int(time.time())

    def tok(claims=None, **kw):
        return jwtkit.token(k, dict(base, **(claims or {})), **kw)

    good = tok()
    head, body, sig = good.split(".")
    flipped = sig[:-2] + ("A" if sig[-2] != "A" else "B") + sig[-1]
    return {
        "expired": tok({"exp": now - 120}),
        "not yet valid": tok({"nbf": now + 3600}),
        "issued in the future": tok({"iat": now + 3600}),
        "bad signature": ".".join([head, body, flipped]),
        "other key": jwtkit.token(other, base, header={"kid": k.kid}),
        "alg none": tok(alg="none", signer=lambda d: b""),
        "unknown kid": tok(header={"kid": "nobody"}),
        "wrong issuer": tok({"iss": "https://evil.example"}),
        "no issuer": tok({"iss": None}),
        "wrong audience": tok({"aud": "someone-else"}),
        "no subject": tok({"sub": None}),
        "subject object": tok({"sub": {"id": 1}}),
        "crit header": tok(header={"crit": ["exp"]}),
        "malformed": "not-a-token",
        "two parts": head + "." + body,
        "padded": good + "==",
    }


def test_each_bad_token_is_refused_before_anything(proxy, upstream, pg, ids, tmp_path):
    k, other = jwtkit.Key("ES256", kid="main"), jwtkit.Key("ES256", kid="other")
    p = jwt_proxy(proxy, tmp_path, [k], "issuer=%s audience=api" % ISSUER)
    base = {"iss": ISSUER, "aud": ["x", "api"]}
    for name, tok in bad_tokens(k, other, base).items():
        key = ids.key()
        resp = post(p, tok, key)
        assert_refused(resp, "actor-invalid", True)
        assert upstream.count(key=key) == 0, name
        assert stored_actors(pg, key) == [], name
    key = ids.key()
    assert_refused(post(p, None, key), "actor-missing", False)
    assert_refused(post(p, "x", key, scheme="Basic "), "actor-missing", False)
    assert upstream.count(key=key) == 0
    good = jwtkit.token(k, base)
    assert_owner(post(p, good, key))
    assert upstream.count(key=key) == 1
    # The token never reaches the log.
    assert good not in p.stderr_text()
    assert good.split(".")[2] not in p.stderr_text()
    assert stored_actors(pg, key) == ["j:%d:%s:alice" % (len(ISSUER), ISSUER)]


def test_rsa_public_key_as_hmac_secret_is_refused(proxy, upstream, ids, tmp_path):
    k = jwtkit.Key("RS256", kid="rsa")
    p = jwt_proxy(proxy, tmp_path, [k])
    n = jwtkit.base64.urlsafe_b64decode(k.jwk["n"] + "==")
    for secret in (k.public_pem(), n, json.dumps(k.jwk).encode()):
        forged = jwtkit.token(k, {"sub": "mallory"}, alg="HS256",
                              signer=lambda d, s=secret: jwtkit.hmac.new(s, d, hashlib.sha256).digest())
        key = ids.key()
        assert_refused(post(p, forged, key), "actor-invalid", True)
        assert upstream.count(key=key) == 0


def test_key_alg_member_must_match(proxy, upstream, ids, tmp_path):
    k = jwtkit.Key("RS256", kid="rsa")
    k.jwk["alg"] = "RS256"
    p = jwt_proxy(proxy, tmp_path, [k])
    key = ids.key()
    assert_refused(post(p, jwtkit.token(k, alg="RS384"), key), "actor-invalid", True)
    assert_refused(post(p, jwtkit.token(k, alg="PS256"), key), "actor-invalid", True)
    assert upstream.count(key=key) == 0
    assert_owner(post(p, jwtkit.token(k), key))


def test_claim_header_and_issuer_options(proxy, upstream, pg, ids, tmp_path):
    k = jwtkit.Key("EdDSA", kid="ed")
    p = jwt_proxy(proxy, tmp_path, [k], "issuer=%s claim=uid header=X-Token leeway=5s" % ISSUER)
    key = ids.key()
    tok = jwtkit.token(k, {"iss": ISSUER, "uid": 4711, "sub": "ignored"})
    # Only the configured header carries the token, whole.
    assert_refused(post(p, tok, key), "actor-missing", False)
    owner = post(p, tok, key, header="X-Token", scheme="")
    assert_owner(owner)
    assert stored_actors(pg, key) == ["j:%d:%s#4711" % (len(ISSUER), ISSUER)]
    # A token past its exp by more than the leeway is refused; within, taken.
    now = int(time.time())
    late = jwtkit.token(k, {"iss": ISSUER, "uid": 4711, "exp": now - 2})
    assert_replay_of(post(p, late, key, header="X-Token", scheme=""), owner)
    later = jwtkit.token(k, {"iss": ISSUER, "uid": 4711, "exp": now - 60})
    assert_refused(post(p, later, key, header="X-Token", scheme=""), "actor-invalid", True)
    assert upstream.count(key=key) == 1


def test_two_issuers_subjects_never_share_a_scope(proxy, upstream, pg, ids, tmp_path):
    k = jwtkit.Key("ES384", kid="es")
    p = jwt_proxy(proxy, tmp_path, [k])
    key = ids.key()
    assert_owner(post(p, jwtkit.token(k, {"iss": "a:b", "sub": "c"}), key))
    assert_owner(post(p, jwtkit.token(k, {"iss": "a", "sub": "b:c"}), key))
    assert upstream.count(key=key) == 2
    assert sorted(stored_actors(pg, key)) == ["j:1:a:b:c", "j:3:a:b:c"]


def test_sighup_rotates_keys_and_refuses_a_bad_file(proxy, upstream, ids, tmp_path):
    old, new = jwtkit.Key("ES256", kid="old"), jwtkit.Key("ES256", kid="new")
    p = jwt_proxy(proxy, tmp_path, [old])
    t_old, t_new = jwtkit.token(old), jwtkit.token(new)
    key = ids.key()
    assert_owner(post(p, t_old, key))
    assert_refused(post(p, t_new, ids.key()), "actor-invalid", True)
    p.keyfile.write_text(jwtkit.jwks(new))
    p.signal(signal.SIGHUP)
    wait_for_log(p, "configuration reloaded")
    # The cached verification of t_old went with the old key set.
    assert_refused(post(p, t_old, key), "actor-invalid", True)
    assert_owner(post(p, t_new, ids.key()))
    p.keyfile.write_text('{"keys": [{"kty": "RSA", "n": "AQAB", "e": "AQAB"}]}')
    p.signal(signal.SIGHUP)
    wait_for_log(p, "reload failed")
    assert "JWT key set" in p.stderr_text()
    assert_owner(post(p, t_new, ids.key()))
    assert upstream.count(key=key) == 1


def test_check_reports_a_bad_key_set(binary, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"keys": [{"kty": "oct"}]}')
    conf = tmp_path / "c.conf"
    r = helpers.check_config(binary, conf, "upstream http://127.0.0.1:1\nroute x {\n"
                             "    match POST /x\n    actor jwt %s\n}\n" % bad)
    assert r.returncode == 1, r
    assert r.stderr.startswith("%s:4: JWT key set \"%s\": " % (conf, bad)), r.stderr
    r = helpers.check_config(binary, conf, "upstream http://127.0.0.1:1\nactor jwt nowhere.json\n"
                             "route x {\n    match POST /x\n}\n")
    assert r.returncode == 1, r
    assert r.stderr.startswith("%s:2: JWT key set \"%s\": No such file" % (
        conf, tmp_path / "nowhere.json")), r.stderr


def canonical(authorization):
    """An Authorization value as actor authorization hashes it: the scheme
    in lower case, one blank, the credential as sent."""
    scheme, cred = authorization.strip().split(None, 1)
    return scheme.lower() + " " + cred.strip()


def test_authorization_actor_is_a_hash(proxy, upstream, pg, ids):
    routes = """
route authz.op {
    match        POST /api/authz
    actor        authorization
}
"""
    p = proxy(routes=routes)
    key = ids.key()
    secret_a, secret_b = "Bearer sk_live_" + ids.key(), "Bearer sk_live_" + ids.key()

    def call(auth, body=None):
        h = [("Idempotency-Key", key), ("Content-Type", "application/json")]
        if auth:
            h.append(("Authorization", auth))
        return p.request("POST", "/api/authz", h, body or course())

    a = call(secret_a)
    assert_owner(a)
    assert_owner(call(secret_b, course(title="B")))
    assert_replay_of(call(secret_a), a)
    assert upstream.count(key=key) == 2
    assert sorted(stored_actors(pg, key)) == sorted(
        "a:" + hashlib.sha256(canonical(s).encode()).hexdigest() for s in (secret_a, secret_b))
    assert_refused(call(None), "actor-missing", False)
    assert upstream.count(key=key) == 2
    for s in (secret_a, secret_b):
        assert s.split()[1] not in p.stderr_text()


def authz_proxy(proxy):
    return proxy(routes="""
route authz.op {
    match        POST /api/authz
    actor        authorization
}
""")


def authz_post(p, key, auth, body=None):
    h = [("Idempotency-Key", key), ("Content-Type", "application/json")]
    if auth is not None:
        h.append(("Authorization", auth))
    return p.request("POST", "/api/authz", h, body or course())


def test_authorization_scheme_spelling_is_one_actor(proxy, upstream, pg, ids):
    """A client library that re-spells the scheme between retries is still
    one actor; the credential's own case is not the scheme's."""
    p = authz_proxy(proxy)
    key, cred = ids.key(), "sk_live_" + ids.key()
    owner = authz_post(p, key, "bearer " + cred)
    assert_owner(owner)
    for spelling in ("Bearer  " + cred, "BEARER\t" + cred, " Bearer " + cred + " "):
        assert_replay_of(authz_post(p, key, spelling), owner)
    assert upstream.count(key=key) == 1
    # Another credential case is another credential: a second actor.
    assert_owner(authz_post(p, key, "Bearer " + cred.upper(), course(title="Other")))
    assert upstream.count(key=key) == 2
    assert sorted(stored_actors(pg, key)) == sorted(
        "a:" + hashlib.sha256(("bearer " + c).encode()).hexdigest() for c in (cred, cred.upper()))
    # A scheme with no credential is no actor.
    for bare in ("Bearer", "Bearer   ", "Basic"):
        refused = ids.key()
        assert_refused(authz_post(p, refused, bare), "actor-invalid", True)
        assert upstream.count(key=refused) == 0
    assert cred not in p.stderr_text()


def test_integer_and_string_subjects_are_two_scopes(proxy, upstream, pg, ids, tmp_path):
    k = jwtkit.Key("ES256", kid="one")
    p = jwt_proxy(proxy, tmp_path, [k], "audience=api")
    key = ids.key()
    number = post(p, jwtkit.token(k, {"sub": 123, "aud": "api"}), key)
    text = post(p, jwtkit.token(k, {"sub": "123", "aud": "api"}), key)
    assert_owner(number)
    assert_owner(text)
    assert upstream.count(key=key) == 2
    assert_replay_of(post(p, jwtkit.token(k, {"sub": 123, "aud": "api"}), key), number)
    assert_replay_of(post(p, jwtkit.token(k, {"sub": "123", "aud": "api"}), key), text)
    assert upstream.count(key=key) == 2
    # A string subject keeps the form records made before had.
    assert sorted(stored_actors(pg, key)) == ["j:0:#123", "j:0::123"]


def test_subject_the_parser_would_repair_is_refused(proxy, upstream, pg, ids, tmp_path):
    """yajl reads a lone surrogate "a\\ud800" as "a?": such a subject is
    refused, never one actor with "a?"."""
    k = jwtkit.Key("ES256", kid="one")
    p = jwt_proxy(proxy, tmp_path, [k], "audience=api")
    key = ids.key()
    for sub in ("a\ud800", "a\udc00", "a\ud800\u0041"):
        tok = jwtkit.token(k, {"sub": sub, "aud": "api"})
        assert "\\u" in jwtkit.base64.urlsafe_b64decode(tok.split(".")[1] + "==").decode()
        assert_refused(post(p, tok, key), "actor-invalid", True)
    assert upstream.count(key=key) == 0
    assert stored_actors(pg, key) == []
    owner = post(p, jwtkit.token(k, {"sub": "a?", "aud": "api"}), key)
    assert_owner(owner)
    assert_replay_of(post(p, jwtkit.token(k, {"sub": "a?", "aud": "api"}), key), owner)
    assert_refused(post(p, jwtkit.token(k, {"sub": "a\ud800", "aud": "api"}), key),
                   "actor-invalid", True)
    assert upstream.count(key=key) == 1
    assert stored_actors(pg, key) == ["j:0::a?"]


def test_require_exp(proxy, upstream, ids, tmp_path):
    k = jwtkit.Key("EdDSA", kid="ed")
    p = jwt_proxy(proxy, tmp_path, [k], "audience=api require=exp")
    key = ids.key()
    resp = post(p, jwtkit.token(k, {"exp": None, "aud": "api"}), key)
    assert_refused(resp, "actor-invalid", True)
    assert "no-exp" in resp.json()["detail"], resp.json()
    assert upstream.count(key=key) == 0
    assert_owner(post(p, jwtkit.token(k, {"aud": "api"}), key))
    assert upstream.count(key=key) == 1


def test_start_up_warns_of_a_jwt_route_without_audience(proxy, upstream, ids, tmp_path):
    p = jwt_proxy(proxy, tmp_path, [jwtkit.Key("ES256", kid="one")])
    line = 1 + open(p.conf).read().split("\n").index("    actor        jwt %s " % p.keyfile)

    def warned(proc):
        return [d for d in proc.log_lines() if d["level"] == "warn" and
                "without audience=" in d.get("msg", "")]
    got = helpers.poll(lambda: warned(p))
    assert len(got) == 1, p.stderr_tail()
    assert got[0]["msg"].startswith("%s:%d: warning: " % (p.conf, line)), got
    quiet = jwt_proxy(proxy, tmp_path, [jwtkit.Key("ES256", kid="two")], "audience=api",
                      name="other.json")
    # Warnings are written before the workers start, whose lines came in.
    assert warned(quiet) == []
