"""Command line: -t (and its warnings), --version, migrate, SIGTERM."""
import base64
import json
import os
import re
import shutil
import signal
import subprocess

import pytest

from tests.lib import helpers, jwtkit
from tests.lib.helpers import ROOT
from tests.lib.proxy import BASE_ROUTES, base_settings, render_conf, wait_for_log


def write_conf(tmp_path, text, name="test.conf"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def good_conf_text():
    return render_conf(base_settings(helpers.free_port(), "host=/nonexistent dbname=x"),
                       BASE_ROUTES)


def run(binary, *args):
    r = subprocess.run([binary] + list(args), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=30)
    assert not helpers.sanitizer_report(binary, r.stderr), r.stderr
    return r


def test_check_good_config(binary, tmp_path):
    conf = write_conf(tmp_path, good_conf_text())
    r = run(binary, "-t", "-c", conf)
    assert r.returncode == 0, r.stderr


def test_check_warns_of_a_jwt_route_without_audience(binary, tmp_path):
    """A token its issuer made for another service would be taken: -t says
    so as FILE:LINE: warning: and still exits 0; once per directive line."""
    keys = tmp_path / "keys.json"
    keys.write_text('{"keys": [{"kty": "oct", "kid": "h", "k": "%s"}]}' % ("A" * 43))
    keys.chmod(0o600)  # a secret: no warning of its own
    text = ("upstream http://127.0.0.1:1\nactor jwt %s\n"
            "route a.op {\n    match POST /a\n}\n"
            "route b.op {\n    match POST /b\n}\n"
            "route c.op {\n    match POST /c\n    actor jwt %s audience=api\n}\n"
            "route d.op {\n    match POST /d\n    actor jwt %s leeway=5s\n}\n"
            % (keys, keys, keys))
    conf = write_conf(tmp_path, text)
    r = run(binary, "-t", "-c", conf)
    assert r.returncode == 0, r.stderr
    warnings = [l for l in r.stderr.splitlines() if ": warning: " in l]
    assert [l.split(": warning: ")[0] for l in warnings] == ["%s:2" % conf, "%s:15" % conf], \
        r.stderr
    assert all("audience=" in l for l in warnings), warnings
    assert "configuration ok" in r.stdout
    quiet = write_conf(tmp_path, text.replace("actor jwt %s\n" % keys,
                                              "actor jwt %s audience=api\n" % keys, 1)
                       .replace("leeway=5s", "audience=api leeway=5s"), "quiet.conf")
    r = run(binary, "-t", "-c", quiet)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr


def test_check_unknown_directive_names_file_and_line(binary, tmp_path):
    text = "listen 127.0.0.1:8080\n# a comment\nfrobnicate yes\n" + \
        "actor header X-Actor-Id\n" + BASE_ROUTES
    conf = write_conf(tmp_path, text)
    r = run(binary, "-t", "-c", conf)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert re.search(r"^%s:3: \S" % re.escape(conf), r.stderr, re.M), r.stderr


BAD_CONFIGS = {
    "lease_not_longer_than_upstream_timeout": ({"upstream_timeout": "5s", "lease": "5s"}, ""),
    # The claim's round trip counts: 6s > 5s, but not > 5s + 2s.
    "lease_not_longer_than_upstream_and_store_timeouts": (
        {"upstream_timeout": "5s", "store_timeout": "2s", "lease": "6s"}, ""),
    "max_request_body_zero": ({"max_request_body": "0"}, ""),
    "max_stored_body_zero": ({"max_stored_body": "0"}, ""),
    "max_connections_zero": ({"max_connections": "0"}, ""),
    "trusted_proxies_not_a_block": ({"trusted_proxies": "10.0.0.1/8"}, ""),
    "match_path_not_normalised": ({}, "route slash.op {\n    match POST /api/slash/\n}\n"),
    "match_case_unknown": ({}, "route case.op {\n    match POST /api/case\n    match_case upper\n}\n"),
    "bad_duration": ({"upstream_timeout": "5 parsecs"}, ""),
    "bad_size": ({"max_request_body": "12q"}, ""),
    "bad_mismatch_status": ({"mismatch_status": "418"}, ""),
    "route_without_actor": ({"actor": None}, ""),
    "unclosed_block": ({}, "route broken.op {\n    match POST /api/broken\n"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_check_bad_config(binary, tmp_path, case):
    settings, tail = BAD_CONFIGS[case]
    s = base_settings(helpers.free_port(), "dbname=x")
    s.update(settings)
    conf = write_conf(tmp_path, render_conf(s, BASE_ROUTES + tail))
    r = run(binary, "-t", "-c", conf)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert re.search(r"^%s:\d+: \S" % re.escape(conf), r.stderr, re.M), r.stderr


LINE_ERRORS = [
    # (the offending directive's line, its text, what the message says)
    ("max_request_body 0", '"max_request_body" must be greater than 0'),
    ("max_stored_body 0", '"max_stored_body" must be greater than 0'),
    ("lease 31s", '"lease" (31000ms) must be longer than "upstream_timeout" plus '
                  '"store_timeout" (35000ms)'),
]


@pytest.mark.parametrize("line,message", LINE_ERRORS)
def test_check_names_the_line(binary, tmp_path, line, message):
    """-t refuses these at the directive's own FILE:LINE."""
    s = base_settings(helpers.free_port(), "dbname=x")
    s.update({"upstream_timeout": "30s", "store_timeout": "5s", "lease": None})
    text = render_conf(s, BASE_ROUTES)
    lines = text.splitlines()
    lines.insert(3, line)
    conf = write_conf(tmp_path, "\n".join(lines) + "\n")
    r = run(binary, "-t", "-c", conf)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stderr.strip() == "%s:4: %s" % (conf, message), r.stderr


def test_check_missing_file(binary, tmp_path):
    r = run(binary, "-t", "-c", str(tmp_path / "nope.conf"))
    assert r.returncode == 1
    assert "nope.conf" in r.stderr


SECRET_WARNING = '%s:%d: warning: secret file "%s" is %s (mode %04o); chmod 600'


def secret_warnings(text):
    return [l for l in text.splitlines() if "warning: secret file" in l]


def test_check_warns_about_secret_files_others_may_use(binary, tmp_path):
    """Readable or writable by others, or writable by its group: warned,
    the load goes on. Readable by its group is a key given to a service's
    group (a Kubernetes Secret mounted 0440 with fsGroup)."""
    token = tmp_path / "admin.token"
    token.write_text("t" * 32 + "\n")
    text = good_conf_text() + "admin_token %s\n" % token
    conf = write_conf(tmp_path, text)
    line = text.count("\n")
    for mode, how in ((0o644, "readable by others"), (0o604, "readable by others"),
                      (0o602, "writable by others"), (0o660, "writable by its group"),
                      (0o600, None), (0o640, None), (0o400, None), (0o440, None)):
        os.chmod(token, mode)
        r = run(binary, "-t", "-c", conf)
        assert r.returncode == 0 and "configuration ok" in r.stdout, r.stderr
        want = [SECRET_WARNING % (conf, line, token, how, mode)] if how else []
        assert secret_warnings(r.stderr) == want, (oct(mode), r.stderr)


def test_check_warns_about_every_kind_of_secret_file(binary, tmp_path):
    """The body encryption keys, the listener's TLS key and a JWT key set
    holding an HMAC key (once, however many routes read it); a key set of
    public keys is no secret."""
    def world_readable(name, text):
        f = tmp_path / name
        f.write_text(text)
        os.chmod(f, 0o644)
        return f
    seal = world_readable("body.keys", "k1 %s\n" % base64.b64encode(os.urandom(32)).decode())
    hmac = world_readable("hmac.json", jwtkit.jwks(jwtkit.Key("HS256")))
    world_readable("public.json", jwtkit.jwks(jwtkit.Key("ES256")))
    crt, key = jwtkit.Pki(str(tmp_path)).issue("server")
    os.chmod(key, 0o644)
    text = ("upstream http://127.0.0.1:1\nactor header X\nbody_encryption %s\n"
            "tls_certificate %s\ntls_certificate_key %s\n" % (seal, crt, key))
    for name, keys in (("a", "hmac.json"), ("b", "hmac.json"), ("c", "public.json")):
        text += "route %s {\n    match POST /%s\n    actor jwt %s\n}\n" % (name, name, keys)
    conf = write_conf(tmp_path, text)
    r = run(binary, "-t", "-c", conf)
    assert r.returncode == 0, r.stderr
    readable = "readable by others"
    assert sorted(secret_warnings(r.stderr)) == sorted([
        SECRET_WARNING % (conf, 3, seal, readable, 0o644),
        SECRET_WARNING % (conf, 5, key, readable, 0o644),
        SECRET_WARNING % (conf, 8, hmac, readable, 0o644)]), r.stderr


def test_a_secret_file_others_may_read_is_logged_at_start_and_reload(proxy, tmp_path):
    token = tmp_path / "admin.token"
    token.write_text("t" * 32 + "\n")
    os.chmod(token, 0o644)
    p = proxy({"admin_token": str(token)})
    text = open(p.conf).read()
    line = text[:text.index("admin_token")].count("\n") + 1
    want = SECRET_WARNING % (p.conf, line, token, "readable by others", 0o644)
    assert [(l["level"], l["msg"]) for l in p.log_lines() if "secret file" in l["msg"]] == \
        [("warn", want)], p.stderr_tail()
    p.signal(signal.SIGHUP)
    wait_for_log(p, "configuration reloaded")
    assert [l["msg"] for l in p.log_lines() if "secret file" in l["msg"]] == [want, want]


def test_version(binary):
    r = run(binary, "--version")
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert re.search(r"\d+\.\d+", out), out
    with open(os.path.join(ROOT, "VERSION")) as f:
        assert f.read().strip() in out


def test_migrate_twice_is_fine(binary, pg):
    r = run(binary, "migrate", "-c", pg.migrate_conf)
    assert r.returncode == 0, r.stdout + r.stderr
    pg.records.table()


def test_migrate_distribute_refuses_without_citus(binary, pg):
    """On a server without Citus, --distribute applies the schema and then
    refuses, saying what is missing; migrate status says nothing of Citus."""
    r = run(binary, "migrate", "--distribute", "-c", pg.migrate_conf)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "this server has no Citus" in r.stderr, r.stderr
    assert "CREATE EXTENSION citus" in r.stderr, r.stderr
    r = run(binary, "migrate", "status", "-c", pg.migrate_conf)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "istributed" not in r.stdout, r.stdout
    for args in (("migrate", "status", "--distribute"),
                 ("migrate", "--distribute", "--hash-partitions", "4"), ("--distribute",)):
        r = run(binary, *args, "-c", pg.migrate_conf)
        assert r.returncode == 2, (args, r.stdout + r.stderr)
        assert "--distribute is for migrate only" in r.stderr, (args, r.stderr)


def test_sigterm_exits_zero(proxy):
    p = proxy()
    assert p.stop() == 0, p.stderr_tail()


def test_sigint_exits_zero(proxy):
    p = proxy()
    p.signal(signal.SIGINT)
    assert p.proc.wait(10) == 0, p.stderr_tail()


def test_check_refuses_a_route_of_safe_methods_only(binary, tmp_path):
    """GET, HEAD, OPTIONS and TRACE pass through without a key: a route of
    only those can never enforce anything, and -t says where it is."""
    text = ("upstream http://127.0.0.1:1\nactor anonymous\n"
            "route reads.op {\n    match GET /a\n    match options /a\n}\n")
    conf = write_conf(tmp_path, text)
    r = run(binary, "-t", "-c", conf)
    assert r.returncode == 1, r
    assert r.stderr.startswith('%s:3: route "reads.op" matches only safe methods' % conf), \
        r.stderr
    assert "configuration ok" not in r.stdout


def test_check_refuses_a_match_an_earlier_route_has(binary, tmp_path):
    """The first route that matches wins: the same method and template in a
    later route is never reached, whatever its parameters are called."""
    text = ("upstream http://127.0.0.1:1\nactor anonymous\n"
            "route first.op {\n    match POST /o/{id}/pay\n}\n"
            "route second.op {\n    match PUT /o/{id}\n    match post /o/{order}/pay\n}\n")
    conf = write_conf(tmp_path, text)
    r = run(binary, "-t", "-c", conf)
    assert r.returncode == 1, r
    assert r.stderr.startswith(
        '%s:8: route "second.op": this match is the same as route "first.op"\'s at line 4'
        % conf), r.stderr
    fixed = write_conf(tmp_path, text.replace("post /o/{order}/pay", "post /o/{order}/refund"),
                       "fixed.conf")
    r = run(binary, "-t", "-c", fixed)
    assert r.returncode == 0, r.stderr


def test_dump_of_the_example_reads_back_and_shows_the_defaults(binary, tmp_path):
    """-T checks the file as -t does, then prints the effective
    configuration alone on stdout: saved to a file, it passes -t and prints
    the same again."""
    example = os.path.join(ROOT, "idemproxy.conf.example")
    r = run(binary, "-T", "-c", example)
    assert r.returncode == 0, r.stderr
    assert "configuration ok" in r.stderr and "configuration ok" not in r.stdout
    for line in ("listen 127.0.0.1:8080", "upstream_timeout 30s", "max_connections 8000",
                 "store_unavailable fail-closed", "route course.create {",
                 "    retention 1d", "    release_on 4xx 503", "    in_progress reject",
                 "#admin_token (not set)"):
        assert line in r.stdout.splitlines(), (line, r.stdout)
    saved = write_conf(tmp_path, r.stdout, "saved.conf")
    again = run(binary, "-t", "-c", saved)
    assert again.returncode == 0, again.stderr
    dumped = run(binary, "-T", "-c", saved)
    assert dumped.stdout.splitlines()[1:] == r.stdout.splitlines()[1:]


def test_dump_masks_secrets_and_never_reads_key_material(binary, tmp_path):
    """Planted secrets: a database password in either conninfo form, the
    admin token, body encryption keys, an HMAC JWT key and the listener's TLS
    key. Files are named, their contents never printed; passwords masked."""
    def secret(name, text):
        f = tmp_path / name
        f.write_text(text)
        os.chmod(f, 0o600)
        return f
    token = "AdminTokenPlanted%s" % os.urandom(8).hex()
    seal_key = base64.b64encode(os.urandom(32)).decode()
    hmac = jwtkit.Key("HS256")
    secret("admin.token", token + "\n")
    seal = secret("body.keys", "k1 %s\n" % seal_key)
    jwks = secret("hmac.json", jwtkit.jwks(hmac))
    crt, key = jwtkit.Pki(str(tmp_path)).issue("server")
    key_text = open(key).read()
    for database in ("host=/nonexistent user=u password=PlantedPw1 dbname=x",
                     "postgresql://u:PlantedPw2@db.invalid:5432/x?sslmode=disable"):
        text = ("upstream http://127.0.0.1:1\nadmin 127.0.0.1:%d\nadmin_token admin.token\n"
                "body_encryption %s\ntls_certificate %s\ntls_certificate_key %s\n"
                "database \"%s\"\nroute a {\n    match POST /a\n    actor jwt %s audience=x\n}\n"
                % (helpers.free_port(), seal, crt, key, database, jwks))
        conf = write_conf(tmp_path, text)
        r = run(binary, "-T", "-c", conf)
        assert r.returncode == 0, r.stderr
        out = r.stdout + r.stderr
        for planted in (token, seal_key, "PlantedPw1", "PlantedPw2", key_text.splitlines()[1]):
            assert planted not in out, planted
        assert json.loads(jwtkit.jwks(hmac))["keys"][0]["k"] not in out
        assert "password='<masked>'" in r.stdout, r.stdout
        assert "admin_token %s\n" % (tmp_path / "admin.token") in r.stdout
        assert "tls_certificate_key %s\n" % key in r.stdout
        saved = write_conf(tmp_path, r.stdout, "saved.conf")
        assert run(binary, "-t", "-c", saved).returncode == 0


# Every subcommand main.c knows (records has its own parser), with what its usage names.
SUBCOMMANDS = [
    ([], "idemproxy -T"),
    (["migrate"], "idemproxy migrate status"),
    (["migrate", "status"], "idemproxy migrate status"),
    (["describe"], "--format markdown|openapi"),
    (["records"], "idemproxy records [-c FILE] resolve"),
]


@pytest.mark.parametrize("words,names", SUBCOMMANDS, ids=lambda v: " ".join(v) if
                         isinstance(v, list) else None)
def test_every_subcommand_takes_help(binary, tmp_path, words, names):
    """--help anywhere among the options: usage on stdout, exit 0, nothing
    read (the -c file need not exist)."""
    for args in (words + ["--help"], words + ["-c", str(tmp_path / "none.conf"), "--help"]):
        r = run(binary, *args)
        assert r.returncode == 0, (args, r.stdout, r.stderr)
        assert r.stdout.startswith("usage:") and names in r.stdout, (args, r.stdout)
        assert r.stderr == "", (args, r.stderr)


def test_version_in_any_position(binary, tmp_path):
    with open(os.path.join(ROOT, "VERSION")) as f:
        want = "idemproxy %s\n" % f.read().strip()
    conf = write_conf(tmp_path, good_conf_text())
    for args in (["--version"], ["-c", conf, "--version"], ["--version", "-c", conf],
                 ["-t", "--version"], ["--config", conf, "--version"]):
        r = run(binary, *args)
        assert (r.returncode, r.stdout) == (0, want), (args, r.stdout, r.stderr)


def test_options_in_any_order(binary, tmp_path):
    conf = write_conf(tmp_path, good_conf_text())
    for args in (["-t", "-c", conf], ["-c", conf, "-t"], ["--config", conf, "--test"]):
        r = run(binary, *args)
        assert r.returncode == 0 and "configuration ok" in r.stdout, (args, r.stderr)
    for args in (["describe", "-c", conf, "--format", "openapi"],
                 ["describe", "--format", "openapi", "-c", conf]):
        r = run(binary, *args)
        assert r.returncode == 0 and r.stdout.startswith("{"), (args, r.stderr)
    r = run(binary, "-c", conf, "bogus")
    assert r.returncode == 2 and 'unexpected argument "bogus"' in r.stderr, r.stderr


def as_nobody():
    """A prefix that drops root, so that a mode-000 file is refused."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: no EACCES to provoke")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]


def test_a_file_that_cannot_be_read_is_named_with_the_reason(binary, tmp_path):
    """Missing, a directory, no permission: FILE: the system's reason, not
    a line of a file that was never read."""
    locked = tmp_path / "locked"
    locked.mkdir()
    secret = locked / "idemproxy.conf"
    secret.write_text(good_conf_text())
    secret.chmod(0o000)
    locked.chmod(0o755)
    tmp_path.chmod(0o755)
    cases = [(str(tmp_path / "missing.conf"), "cannot open: No such file or directory", []),
             (str(tmp_path), "cannot read: Is a directory", []),
             (str(secret), "cannot open: Permission denied", as_nobody())]
    for path, reason, prefix in cases:
        r = subprocess.run(prefix + [os.path.abspath(binary), "-t", "-c", path],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        assert r.returncode == 1, (path, r.stderr)
        assert r.stderr == "%s: %s\n" % (path, reason), r.stderr


def test_a_named_file_that_cannot_be_read_is_named_at_its_line(binary, tmp_path):
    """A file a directive names: the directive's line, the file and the
    system's reason (TLS files too, which OpenSSL alone would not explain)."""
    base = "upstream http://127.0.0.1:1\nactor anonymous\n"
    for text, want in (
            ("admin_token %s\n" % tmp_path, 'admin token "%s": Is a directory' % tmp_path),
            ("body_encryption %s/none\n" % tmp_path,
             'body encryption keys "%s/none": No such file or directory' % tmp_path),
            ("tls_certificate %s\ntls_certificate_key %s\n" % (tmp_path, tmp_path),
             'cannot read certificate "%s": Is a directory' % tmp_path)):
        conf = write_conf(tmp_path, base + text)
        r = run(binary, "-t", "-c", conf)
        assert r.returncode == 1
        assert r.stderr.startswith("%s:3: %s" % (conf, want)), r.stderr
