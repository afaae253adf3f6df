"""TLS: an https upstream verified by CA and name, with an optional client
certificate and the keep-alive pool, and its failures logged; a TLS
listener (1.2 and later, Mozilla's "intermediate" suites unless
tls_ciphers says otherwise) whose certificate and suites a reload
replaces. Certificates are made here with the openssl command line
(jwtkit.Pki)."""
import re
import signal
import socket
import ssl
import subprocess

import pytest

from tests.lib import helpers, jwtkit
from tests.lib.helpers import assert_owner, assert_replay_of, course, problem
from tests.lib.proxy import wait_for_log


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("pki"))
    ca = jwtkit.Pki(d)
    pair = ca.issue("server")
    other = jwtkit.Pki(d, "otherca")
    client = other.issue("client", dns=("client.example",), ips=())
    return {"ca": ca.ca, "pair": pair, "ca_obj": ca, "other_ca": other.ca,
            "other_ca_key": other.ca_key, "client": client,
            "rsa": ca.issue("server-rsa", rsa=True)}


@pytest.fixture
def tls_upstream(start_upstream, pki):
    return start_upstream(tls=pki["pair"])


def https_settings(up, pki, **extra):
    s = {"upstream": "https://127.0.0.1:%d" % up.port, "upstream_ca": pki["ca"], "workers": "1"}
    s.update(extra)
    return s


def records(pg, key):
    return pg.query("SELECT state FROM idempotency_records WHERE idem_key = %s", (key,))


def test_https_upstream_pass_through_owner_replay_and_pool(proxy, tls_upstream, pki, pg, ids):
    p = proxy(https_settings(tls_upstream, pki))
    g1 = p.request("GET", "/api/things/1")
    g2 = p.request("GET", "/api/things/2")
    assert g1.status == 200 and g2.status == 200, (g1, g2)
    key = ids.key()
    owner = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_owner(owner)
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), owner)
    assert tls_upstream.count(key=key) == 1
    log = tls_upstream.log()
    assert [e.path for e in log] == ["/api/things/1", "/api/things/2", "/api/courses"]
    # One worker, one keep-alive connection for all three.
    assert len({e.peer for e in log}) == 1, [e.peer for e in log]


@pytest.mark.parametrize("setting", ["wrong-ca", "wrong-name", "no-client-cert"])
def test_unverified_upstream_gets_502_and_the_claim_is_released(proxy, start_upstream, pki, pg,
                                                                 ids, setting):
    if setting == "no-client-cert":
        up = start_upstream(tls=pki["pair"] + (pki["other_ca"],) + pki["client"])
        s = https_settings(up, pki)
    else:
        up = start_upstream(tls=pki["pair"])
        s = https_settings(up, pki)
        if setting == "wrong-ca":
            s["upstream_ca"] = pki["other_ca"]
        else:
            s["upstream_server_name"] = "other.example"
    p = proxy(s)
    key = ids.key()
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
            "upstream-unavailable", 502)
    assert records(pg, key) == []  # released: a retry may run it
    assert up.count() == 0
    if setting == "no-client-cert":
        s["upstream_client_certificate"] = "%s %s" % pki["client"]
    elif setting == "wrong-ca":
        s["upstream_ca"] = pki["ca"]
    else:
        s["upstream_server_name"] = "localhost"  # in the certificate, sent as SNI
    p2 = proxy(s)
    assert_owner(p2.post("/api/courses", key=key, actor=ids.actor, body=course()))
    assert up.count(key=key) == 1


@pytest.mark.parametrize("setting,reason", [
    ("wrong-ca", "certificate verify failed: unable to get local issuer certificate"),
    ("self-signed", "certificate verify failed: self.signed certificate"),
    ("wrong-name", "certificate verify failed: hostname mismatch"),
])
def test_upstream_certificate_failures_are_logged(proxy, start_upstream, pki, pg, ids, setting,
                                                  reason):
    """The 502 tells the client nothing about why; the log tells the operator."""
    if setting == "self-signed":  # a certificate that is its own issuer, trusted by nobody
        up = start_upstream(tls=(pki["other_ca"], pki["other_ca_key"]))
    else:
        up = start_upstream(tls=pki["pair"])
    s = https_settings(up, pki)
    if setting == "wrong-ca":
        s["upstream_ca"] = pki["other_ca"]
    elif setting == "wrong-name":
        s["upstream_server_name"] = "other.example"
    p = proxy(s)
    key = ids.key()
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
            "upstream-unavailable", 502)
    assert records(pg, key) == [] and up.count() == 0
    wait_for_log(p, "TLS handshake failed")
    lines = [l for l in p.log_lines() if "TLS handshake failed" in l.get("msg", "")]
    assert len(lines) == 1 and lines[0]["level"] == "warn", lines
    msg = lines[0]["msg"]
    assert msg.startswith("upstream 127.0.0.1:%d: TLS handshake failed: " % up.port), msg
    assert re.search(reason, msg), msg
    want = "other.example" if setting == "wrong-name" else "127.0.0.1"
    assert "name verified: %s;" % want in msg, msg


def client_ctx(pki):
    ctx = ssl.create_default_context(cafile=pki["ca"])
    return ctx


def tls_proxy(proxy, pki, tmp_path):
    crt, key = pki["pair"]
    cert = tmp_path / "listen.crt"
    cert.write_bytes(open(crt, "rb").read())
    p = proxy({"tls_certificate": str(cert), "tls_certificate_key": key})
    p.cert = cert
    return p


def test_tls_listener_end_to_end(proxy, upstream, pki, ids, tmp_path):
    p = tls_proxy(proxy, pki, tmp_path)
    ctx = client_ctx(pki)
    key = ids.key()
    h = [("Idempotency-Key", key), ("X-Actor-Id", ids.actor), ("Content-Type", "application/json")]
    with helpers.Client(p.port, tls=ctx) as c:
        owner = c.request("POST", "/api/courses", h, course())
        assert_owner(owner)
        # Keep-alive over TLS: the retry on the same connection.
        assert_replay_of(c.request("POST", "/api/courses", h, course()), owner)
        big = c.request("GET", "/api/big", [("X-Test-Action", "stream-chunked:3000000")])
        assert big.status == 200 and len(big.body) == 3000000, big.status
    assert upstream.count(key=key) == 1
    e = upstream.requests(key=key)[0]
    assert e.headers.get("X-Forwarded-Proto") == "https"
    assert "proto=https" in (e.headers.get("Forwarded") or "")
    # Plain HTTP to the TLS port is not served.
    with socket.create_connection(("127.0.0.1", p.port), timeout=5) as s:
        s.sendall(b"GET /plain-to-tls HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        try:
            while True:
                got = s.recv(4096)
                if not got:
                    break
                data += got
        except (ConnectionResetError, socket.timeout):
            pass
    assert b"HTTP/1." not in data, data
    assert upstream.count(path="/plain-to-tls") == 0
    # TLS 1.2 is served, 1.1 is refused by the server (the client, at
    # security level 0, would speak it).
    def s_client(version):
        return subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % p.port,
                               "-" + version, "-cipher", "DEFAULT@SECLEVEL=0",
                               "-CAfile", pki["ca"]], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=30)
    r = s_client("tls1_2")
    assert "Protocol  : TLSv1.2" in r.stdout or "TLSv1.2" in r.stdout, r.stdout + r.stderr
    r = s_client("tls1_1")
    assert r.returncode != 0, r.stdout
    assert "alert protocol version" in r.stderr, r.stderr


def rsa_listener(proxy, pki, settings=None):
    """A proxy whose listener has an RSA certificate: the suites with RSA
    key exchange and those with ECDHE_RSA are both possible with it."""
    crt, key = pki["rsa"]
    s = {"tls_certificate": crt, "tls_certificate_key": key}
    s.update(settings or {})
    return proxy(s)


def negotiated(p, pki, *args):
    """The cipher suite `openssl s_client ARGS` agrees with p's listener on,
    or None when the handshake fails."""
    r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % p.port,
                        "-CAfile", pki["ca"]] + list(args), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=30)
    m = re.search(r"^New, [^,]+, Cipher is (\S+)$", r.stdout, re.M)
    if r.returncode != 0 or not m:
        assert re.search(r"alert|no ciphers|no suitable", r.stderr), r.stdout + r.stderr
        return None
    return m.group(1)


WEAK_TLS12 = ("AES128-SHA",                  # RSA key exchange: no forward secrecy, CBC
              "AES128-GCM-SHA256",           # RSA key exchange
              "ECDHE-RSA-AES128-SHA",        # CBC with SHA-1
              "ECDHE-RSA-AES256-SHA384")     # CBC
INTERMEDIATE_TLS12 = ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384",
                      "ECDHE-RSA-CHACHA20-POLY1305")


def test_listener_speaks_the_intermediate_profile(proxy, upstream, pki):
    """TLS 1.2 with ECDHE and an AEAD only; TLS 1.3 as OpenSSL has it; the
    groups X25519, P-256 and P-384; the client's order decides."""
    p = rsa_listener(proxy, pki)
    for cipher in WEAK_TLS12:
        assert negotiated(p, pki, "-tls1_2", "-cipher", cipher) is None, cipher
    for cipher in INTERMEDIATE_TLS12:
        assert negotiated(p, pki, "-tls1_2", "-cipher", cipher) == cipher, cipher
    # Offered a weak suite first, the server takes the strong one behind it.
    assert negotiated(p, pki, "-tls1_2", "-cipher",
                      "ECDHE-RSA-AES128-SHA:ECDHE-RSA-AES256-GCM-SHA384") == \
        "ECDHE-RSA-AES256-GCM-SHA384"
    # No server preference: of two good ones, the client's first.
    assert negotiated(p, pki, "-tls1_2", "-cipher",
                      "ECDHE-RSA-CHACHA20-POLY1305:ECDHE-RSA-AES128-GCM-SHA256") == \
        "ECDHE-RSA-CHACHA20-POLY1305"
    for suite in ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                  "TLS_CHACHA20_POLY1305_SHA256"):
        assert negotiated(p, pki, "-tls1_3", "-ciphersuites", suite) == suite
    for group in ("X25519", "P-256", "P-384"):
        assert negotiated(p, pki, "-tls1_3", "-groups", group) is not None, group
    assert negotiated(p, pki, "-tls1_3", "-groups", "P-521") is None
    assert negotiated(p, pki, "-tls1_2", "-groups", "P-521") is None


def set_tls_ciphers(p, value):
    text = re.sub(r"^tls_ciphers .*$", "tls_ciphers " + value, open(p.conf).read(), flags=re.M)
    open(p.conf, "w").write(text)


def test_tls_ciphers_replaces_the_suites_and_a_reload_takes_it(proxy, upstream, pki):
    p = rsa_listener(proxy, pki, {"tls_ciphers": "ECDHE-RSA-AES256-GCM-SHA384"})
    assert negotiated(p, pki, "-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256") is None
    assert negotiated(p, pki, "-tls1_2", "-cipher", "ECDHE-RSA-AES256-GCM-SHA384") == \
        "ECDHE-RSA-AES256-GCM-SHA384"
    # An operator who must serve an old client says so; new handshakes get it.
    set_tls_ciphers(p, "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-SHA")
    p.signal(signal.SIGHUP)
    wait_for_log(p, "configuration reloaded")
    assert negotiated(p, pki, "-tls1_2", "-cipher", "ECDHE-RSA-AES128-SHA") == \
        "ECDHE-RSA-AES128-SHA"
    assert negotiated(p, pki, "-tls1_2", "-cipher", "ECDHE-RSA-AES256-GCM-SHA384") is None
    # TLS 1.3 is not what it changes.
    assert negotiated(p, pki, "-tls1_3") is not None
    # A list that matches nothing is refused; the running suites stay.
    set_tls_ciphers(p, "ECDHE-RSA-AES128-GCM-SHA265")
    p.signal(signal.SIGHUP)
    wait_for_log(p, "reload failed")
    assert any('"tls_ciphers ECDHE-RSA-AES128-GCM-SHA265": no TLS 1.2 cipher suite matches'
               in l["msg"] for l in p.log_lines()), p.stderr_tail()
    assert negotiated(p, pki, "-tls1_2", "-cipher", "ECDHE-RSA-AES128-SHA") == \
        "ECDHE-RSA-AES128-SHA"


def test_check_validates_tls_ciphers(binary, pki, tmp_path):
    crt, key = pki["pair"]
    base = "upstream http://127.0.0.1:1\nactor header X\nroute r {\n    match POST /r\n}\n"
    tls = base + "tls_certificate %s\ntls_certificate_key %s\n" % (crt, key)
    conf = tmp_path / "c.conf"
    for ok in ("ECDHE+AESGCM", "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-SHA"):
        r = helpers.check_config(binary, conf, tls + "tls_ciphers %s\n" % ok)
        assert r.returncode == 0, (ok, r.stderr)
    cases = [
        (tls + "tls_ciphers NOPE\n", 8, '"tls_ciphers NOPE": no TLS 1.2 cipher suite matches'),
        # TLS 1.3 suites are not TLS 1.2's
        (tls + "tls_ciphers TLS_AES_128_GCM_SHA256\n", 8,
         '"tls_ciphers TLS_AES_128_GCM_SHA256": no TLS 1.2 cipher suite matches'),
        (tls + 'tls_ciphers ""\n', 8, '"tls_ciphers ": no TLS 1.2 cipher suite matches'),
        (base + "tls_ciphers ECDHE+AESGCM\n", 6, '"tls_ciphers" needs "tls_certificate"'),
    ]
    for text, line, want in cases:
        r = helpers.check_config(binary, conf, text)
        assert r.returncode == 1, (text, r)
        assert r.stderr.startswith("%s:%d: %s" % (conf, line, want)), (text, r.stderr)


def peer_cert(p, pki):
    with socket.create_connection(("127.0.0.1", p.port), timeout=5) as s:
        with client_ctx(pki).wrap_socket(s, server_hostname="localhost") as t:
            return t.getpeercert(binary_form=True)


def test_reload_rereads_the_listener_certificate(proxy, upstream, pki, tmp_path):
    p = tls_proxy(proxy, pki, tmp_path)
    first = peer_cert(p, pki)
    assert first == ssl.PEM_cert_to_DER_cert(open(p.cert).read())
    crt, key = pki["ca_obj"].issue("server2")
    p.cert.write_bytes(open(crt, "rb").read())
    # The new certificate has its own key: a reload with only one of them
    # changed is refused, the old pair stays.
    p.signal(signal.SIGHUP)
    wait_for_log(p, "reload failed")
    assert "cannot load key" in p.stderr_text()
    assert peer_cert(p, pki) == first
    text = open(p.conf).read().replace(pki["pair"][1], key)
    open(p.conf, "w").write(text)
    p.signal(signal.SIGHUP)
    wait_for_log(p, "configuration reloaded")
    assert peer_cert(p, pki) == ssl.PEM_cert_to_DER_cert(open(crt).read())


def test_check_reads_certificates_keys_and_cas(binary, pki, tmp_path):
    crt, key = pki["pair"]
    base = "upstream https://127.0.0.1:1\nactor header X\nroute r {\n    match POST /r\n}\n"
    conf = tmp_path / "c.conf"
    good = base + "upstream_ca %s\ntls_certificate %s\ntls_certificate_key %s\n" % (
        pki["ca"], crt, key)
    r = helpers.check_config(binary, conf, good)
    assert r.returncode == 0, r.stderr
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    cases = [
        (base + "upstream_ca %s\n" % junk, 6, 'cannot load CA certificates "%s"' % junk),
        # A file that cannot be read says why, as OpenSSL alone would not.
        (base + "upstream_ca %s\n" % (tmp_path / "none.pem"), 6,
         'cannot read CA certificates "%s": No such file or directory' % (tmp_path / "none.pem")),
        (base + "tls_certificate %s\ntls_certificate_key %s\n" % (junk, key), 6,
         'cannot load certificate "%s"' % junk),
        (base + "tls_certificate %s\ntls_certificate_key %s\n" % (crt, junk), 7,
         'cannot load key "%s"' % junk),
        (base + "tls_certificate_key %s\ntls_certificate %s\n" % (pki["client"][1], crt), 6,
         'cannot load key "%s": ' % pki["client"][1]),
        (base + "upstream_client_certificate %s %s\n" % (crt, junk), 6,
         'cannot load key "%s"' % junk),
    ]
    for text, line, want in cases:
        r = helpers.check_config(binary, conf, text)
        assert r.returncode == 1, (text, r)
        assert r.stderr.startswith("%s:%d: %s" % (conf, line, want)), (text, r.stderr)
