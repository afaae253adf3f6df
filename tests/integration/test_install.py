"""What an operator installs (docs/operations.md, "Install"): `make install` and
`make uninstall` into a DESTDIR (the exact files, their modes and contents,
nothing written outside DESTDIR), the man pages (lint-clean, every directive
of conf/conf.c and every records command documented), the systemd unit, the
Kubernetes sidecar example and the Grafana dashboard.

Needs no PostgreSQL. Tools: mandoc, groff (groff-base) and python3-yaml
(scripts/deps.sh's test profile); systemd-analyze is used when present.

The install tests install the binary under test (IDEMPROXY_BIN) and never
rebuild it: make runs with -o BIN."""
import filecmp
import json
import os
import re
import shutil
import stat
import subprocess

import pytest

try:
    import yaml
except ImportError:  # reported by the test that needs it, not skipped
    yaml = None

from tests.lib.admin import DASHBOARD, DASHBOARD_METRICS, METRIC_NAME, dashboard_exprs
from tests.lib.helpers import ROOT

CONF_C = os.path.join(ROOT, "conf", "conf.c")
RECORDS_CLI_C = os.path.join(ROOT, "proxy", "records_cli.c")
EXAMPLE = os.path.join(ROOT, "idemproxy.conf.example")
LICENSE = os.path.join(ROOT, "LICENSE")
MAN8 = os.path.join(ROOT, "docs", "man", "idemproxy.8")
MAN5 = os.path.join(ROOT, "docs", "man", "idemproxy.conf.5")
UNIT = os.path.join(ROOT, "deploy", "systemd", "idemproxy.service")
K8S = os.path.join(ROOT, "deploy", "kubernetes", "idemproxy-sidecar.yaml")
CHECK_CONF_DOC = os.path.join(ROOT, "scripts", "check-conf-doc.sh")
CMD_TIMEOUT = 120
ADMIN_PORT = 9901
PROXY_PORT = 8080

# The metric families the dashboard may use: what the proxy exposes.
ALLOWED_METRICS = {
    "idemproxy_build_info", "idemproxy_requests_total", "idemproxy_request_duration_seconds",
    "idemproxy_http_refusals_total", "idemproxy_store_seconds", "idemproxy_upstream_seconds",
    "idemproxy_replay_cache_hits_total", "idemproxy_replay_cache_misses_total",
    "idemproxy_replay_cache_bytes", "idemproxy_replay_cache_bytes_limit",
    "idemproxy_client_connections", "idemproxy_client_connections_limit",
    "idemproxy_records_needing_operator", "idemproxy_store_pending",
    "idemproxy_record_writes_fenced_total", "idemproxy_claims_total", "idemproxy_replays_total",
    "idemproxy_conflicts_total", "idemproxy_upstream_connections", "idemproxy_store_connections",
    "idemproxy_requests_active", "idemproxy_waits_total", "idemproxy_sweeper_runs_total",
    "idemproxy_sweeper_errors_total", "idemproxy_store_retries_total",
    "idemproxy_relay_budget_bytes", "idemproxy_relay_budget_bytes_limit",
    "idemproxy_relay_budget_pauses_total",
    "process_open_fds", "process_max_fds", "process_resident_memory_bytes",
    "process_cpu_seconds_total",
}
# ... and those it must show.
REQUIRED_METRICS = ALLOWED_METRICS - {
    "idemproxy_upstream_connections", "idemproxy_store_connections",
    "idemproxy_requests_active", "idemproxy_waits_total", "idemproxy_sweeper_runs_total",
    "idemproxy_sweeper_errors_total",
}
DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


# ---- what the sources say ----

def split_args(text):
    """The top-level comma-separated arguments of a C macro call's text."""
    args, depth, cur, quoted = [], 0, "", False
    for i, ch in enumerate(text):
        if quoted:
            cur += ch
            if ch == '"' and text[i - 1] != "\\":
                quoted = False
        elif ch == '"':
            quoted = True
            cur += ch
        elif ch == "(":
            depth += 1
            cur += ch
        elif ch == ")":
            depth -= 1
            cur += ch
        elif ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
    args.append(cur.strip())
    return args


def conf_directives():
    """{name: (default literal or None, needs restart)} from the table
    conf_directives[] of conf/conf.c, read as scripts/check-conf-doc.sh
    reads it (one row per line)."""
    with open(CONF_C) as f:
        text = f.read()
    m = re.search(r"conf_directives\[\] = \{\n(.*?)^\};", text, re.S | re.M)
    assert m, "no conf_directives[] table in conf/conf.c"
    rows = {}
    for line in m.group(1).splitlines():
        r = re.match(r'\s*(CONF_[A-Z_]*ROW)\((.*)\),\s*(/\*.*)?$', line)
        if not r:
            continue
        args = split_args(r.group(2))
        name = args[0].strip('"')
        default = args[7] if r.group(1) == "CONF_ROW" else args[3]
        literal = default[1:-1] if default.startswith('"') else None
        rows[name] = (literal, "CF_RESTART" in line)
    assert len(rows) > 30, rows
    return rows


def records_cli():
    """The records commands and long options of proxy/records_cli.c."""
    with open(RECORDS_CLI_C) as f:
        text = f.read()
    cmds = re.findall(r'\{"([a-z]+)", RECORDS_[A-Z]+,', text)
    opts = re.findall(r'\{"([a-z-]+)", required_argument,', text)
    assert cmds and opts
    return cmds, opts


def man_items(path):
    """{tag name: item source} for the .TP items of a man page whose tag line
    is .B/.BI/.BR: the first word of the tag (quotes and a trailing font
    escape dropped), the item running to the next .TP or .SH. The first
    item of a name wins."""
    with open(path) as f:
        lines = f.read().splitlines()
    items = {}
    for i in range(1, len(lines)):
        if lines[i - 1] != ".TP" or not re.match(r"\.B[IR]?[ \t]", lines[i]):
            continue
        word = lines[i].split()[1].replace('"', "")
        word = re.sub(r"\\.*", "", word)
        body = []
        for line in lines[i:]:
            if body and (line.startswith(".TP") or line.startswith(".SH")):
                break
            body.append(line)
        items.setdefault(word, "\n".join(body))
    return items


def need(tool, package):
    path = shutil.which(tool)
    assert path, "%s is not installed: it comes with the Debian package %s " \
                 "(scripts/deps.sh test)" % (tool, package)
    return path


def render(page):
    """The page as plain text, blanks collapsed."""
    need("mandoc", "mandoc")
    r = subprocess.run(["mandoc", "-T", "ascii", page], capture_output=True, text=True,
                       timeout=CMD_TIMEOUT)
    assert r.returncode == 0, r.stderr
    return " ".join(re.sub(r".\x08", "", r.stdout).split())


def seconds(dur):
    m = re.fullmatch(r"(\d+)(ms|s|m|h|d)", dur)
    assert m, "not a duration: %r" % dur
    return int(m.group(1)) * DURATION_UNITS[m.group(2)]


def unit_settings(text):
    """[(section, key, value)] of a systemd unit file."""
    out, section = [], None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line.startswith(";"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.append((section, key.strip(), value.strip()))
    return out


def service(text, key):
    values = [v for s, k, v in unit_settings(text) if s == "Service" and k == key]
    assert values, "no %s= in [Service]" % key
    return values[-1]


# ---- make install / uninstall ----

def make(binary, target, destdir, prefix, *extra):
    """make TARGET into destdir, installing binary without rebuilding it."""
    return subprocess.run(["make", "--no-print-directory", "-o", binary, "BIN=" + binary,
                           target, "DESTDIR=" + str(destdir), "PREFIX=" + prefix] + list(extra),
                          cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=CMD_TIMEOUT)


def expected_files(prefix):
    """{path relative to DESTDIR: (mode, source file or None)}."""
    p = prefix.strip("/")
    etc = "etc"  # /etc whatever the prefix: the unit and docs/operations.md name it
    return {
        p + "/sbin/idemproxy": (0o755, None),
        p + "/share/man/man8/idemproxy.8": (0o644, MAN8),
        p + "/share/man/man5/idemproxy.conf.5": (0o644, MAN5),
        etc + "/idemproxy/idemproxy.conf.example": (0o644, EXAMPLE),
        p + "/lib/systemd/system/idemproxy.service": (0o644, None),
        p + "/share/doc/idemproxy/LICENSE": (0o644, LICENSE),
    }


def files_under(root):
    """Every non-directory under root, relative, with its mode."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            full = os.path.join(dirpath, name)
            found[os.path.relpath(full, root)] = stat.S_IMODE(os.lstat(full).st_mode)
    return found


@pytest.mark.parametrize("prefix,sysconfdir", [("/usr", "/etc"), ("/usr/local", "/etc")])
def test_install_puts_exactly_the_files_in_place(binary, tmp_path, prefix, sysconfdir):
    dest = tmp_path / "dest"
    r = make(binary, "install", dest, prefix)
    assert r.returncode == 0, r.stdout + r.stderr
    expected = expected_files(prefix)
    assert files_under(dest) == {path: mode for path, (mode, _) in expected.items()}
    for path, (mode, source) in expected.items():
        if source:
            assert filecmp.cmp(source, dest / path, shallow=False), path
    sbin = dest / prefix.strip("/") / "sbin" / "idemproxy"
    assert filecmp.cmp(binary, sbin, shallow=False)
    with open(os.path.join(ROOT, "VERSION")) as f:
        version = f.read().strip()
    r = subprocess.run([str(sbin), "--version"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout == "idemproxy %s\n" % version, r.stdout + r.stderr
    # The installed example is a valid configuration for the installed binary.
    example = dest / sysconfdir.strip("/") / "idemproxy" / "idemproxy.conf.example"
    r = subprocess.run([str(sbin), "-t", "-c", str(example)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr

    unit = (dest / prefix.strip("/") / "lib/systemd/system/idemproxy.service").read_text()
    assert not re.search(r"@[A-Za-z_]*@", unit), unit
    conf = sysconfdir + "/idemproxy/idemproxy.conf"
    assert service(unit, "ExecStart") == "%s/sbin/idemproxy -c %s" % (prefix, conf)
    # Every path the unit names is one make install wrote, or the
    # configuration beside the installed example.
    for _, key, value in unit_settings(unit):
        if key.startswith("Exec") and value.startswith("/") and "idemproxy" in value.split()[0]:
            args = value.split()
            assert (dest / args[0].lstrip("/")).is_file(), value
            assert args[args.index("-c") + 1] == conf, value
    assert (dest / (conf + ".example").lstrip("/")).is_file()
    with open(UNIT) as f:
        template = f.read()
    assert unit == template.replace("@SBINDIR@", prefix + "/sbin") \
                           .replace("@SYSCONFDIR@", sysconfdir)

    if shutil.which("systemd-analyze"):
        # Verified as installed, but naming the binary where DESTDIR holds it.
        check = tmp_path / "verify" / "idemproxy.service"
        check.parent.mkdir()
        check.write_text(unit.replace(prefix + "/sbin/idemproxy", str(sbin)))
        r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(check)],
                           capture_output=True, text=True, timeout=CMD_TIMEOUT)
        assert r.returncode == 0 and r.stdout + r.stderr == "", r.stdout + r.stderr


def test_uninstall_removes_every_file(binary, tmp_path):
    dest = tmp_path / "dest"
    r = make(binary, "install", dest, "/usr")
    assert r.returncode == 0, r.stdout + r.stderr
    assert files_under(dest)
    r = make(binary, "uninstall", dest, "/usr")
    assert r.returncode == 0, r.stdout + r.stderr
    assert files_under(dest) == {}
    # Its own directories go too; the shared ones (usr/sbin, man8, ...) stay.
    assert not (dest / "etc/idemproxy").exists()
    assert not (dest / "usr/share/doc/idemproxy").exists()
    assert (dest / "usr/sbin").is_dir()
    # A second uninstall has nothing to do and still succeeds.
    r = make(binary, "uninstall", dest, "/usr")
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_operators_configuration_is_never_touched(binary, tmp_path):
    dest = tmp_path / "dest"
    conf = dest / "etc/idemproxy/idemproxy.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("listen 127.0.0.1:1\n# the operator's own\n")
    before = os.stat(conf).st_mtime_ns
    r = make(binary, "install", dest, "/usr")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (dest / "etc/idemproxy/idemproxy.conf.example").is_file()
    r = make(binary, "uninstall", dest, "/usr")
    assert r.returncode == 0, r.stdout + r.stderr
    assert conf.read_text() == "listen 127.0.0.1:1\n# the operator's own\n"
    assert os.stat(conf).st_mtime_ns == before
    assert files_under(dest) == {"etc/idemproxy/idemproxy.conf": 0o644}


def outside_paths():
    paths = ["/etc/idemproxy", "/etc/systemd/system/idemproxy.service"]
    for prefix in ("/usr", "/usr/local"):
        paths += [prefix + "/sbin/idemproxy", prefix + "/share/man/man8/idemproxy.8",
                  prefix + "/share/man/man5/idemproxy.conf.5",
                  prefix + "/lib/systemd/system/idemproxy.service",
                  prefix + "/share/doc/idemproxy"]
    paths.append("/usr/local/etc/idemproxy")
    return paths


def snapshot(paths):
    out = {}
    for p in paths:
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            out[p] = None
            continue
        listing = sorted(os.listdir(p)) if stat.S_ISDIR(st.st_mode) else None
        out[p] = (st.st_ino, st.st_mtime_ns, st.st_size, listing)
    return out


def test_nothing_is_written_outside_destdir(binary, tmp_path):
    paths = outside_paths()
    before = snapshot(paths)
    for prefix in ("/usr", "/usr/local"):
        dest = tmp_path / prefix.strip("/").replace("/", "-")
        for target in ("install", "uninstall"):
            r = make(binary, target, dest, prefix)
            assert r.returncode == 0, r.stdout + r.stderr
    assert snapshot(paths) == before


# ---- man pages ----

@pytest.mark.parametrize("page", [MAN8, MAN5], ids=os.path.basename)
def test_man_page_lints_clean(page):
    need("mandoc", "mandoc")
    need("groff", "groff-base")
    for cmd in (["mandoc", "-T", "lint", "-W", "warning", page],
                ["groff", "-man", "-ww", "-z", page]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=CMD_TIMEOUT)
        assert r.returncode == 0 and r.stdout + r.stderr == "", (cmd, r.stdout + r.stderr)
    with open(page) as f:
        text = f.read()
    assert not re.search(r"^\.(Dd|Dt|Os|Sh|Nm)\b", text, re.M), "mdoc macros in a man(7) page"


def test_idemproxy_8_documents_commands_signals_and_admin():
    text = render(MAN8)
    for phrase in ("idemproxy -t", "idemproxy migrate status", "idemproxy describe",
                   "--format markdown|openapi", "/contract", "idemproxy --version", "/healthz", "/readyz",
                   "/metrics", "/records/scope", "/records/release", "/records/resolve",
                   "SIGHUP", "SIGTERM", "SIGINT", "NOTIFY_SOCKET", "READY=1", "RELOADING=1",
                   "STOPPING=1", "ENVIRONMENT", "EXIT STATUS", "FILES", "idemproxy.conf(5)",
                   "migrations are pending", "from SIGTERM on", "read-only"):
        assert phrase in text, phrase
    cmds, opts = records_cli()
    for cmd in cmds:
        assert re.search(r"idemproxy records \[-c file\] %s\b" % cmd, text), cmd
    for opt in opts:
        assert "--" + opt in text, opt
    # migrate status: 0 when nothing is pending, 1 otherwise.
    assert re.search(r"Exit 0 when no migration is pending, 1 otherwise", text)


def test_idemproxy_conf_5_names_every_directive():
    rows = conf_directives()
    items = man_items(MAN5)
    missing = sorted(set(rows) - set(items))
    assert not missing, "not an item of idemproxy.conf.5: %s" % " ".join(missing)
    for name, (default, restart) in rows.items():
        body = items[name]
        assert ("Needs a restart" in body) == restart, \
            "%s: the table says restart=%s, the page says otherwise" % (name, restart)
        if default is not None:
            assert default in body, "%s: default %r not in its item" % (name, default)
    text = render(MAN5)
    assert re.search(r"shutdown_timeout dur .*? Default 20s\.", text)


def test_check_conf_doc_passes_and_names_a_missing_item(tmp_path):
    r = subprocess.run(["sh", CHECK_CONF_DOC], cwd=ROOT, capture_output=True, text=True,
                       timeout=CMD_TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "docs/man/idemproxy.conf.5" in r.stdout
    # A tree whose man page lacks the lease item (the word still occurs in
    # other items' text): the check fails and names it.
    (tmp_path / "conf").mkdir()
    (tmp_path / "docs/man").mkdir(parents=True)
    shutil.copy(CONF_C, tmp_path / "conf/conf.c")
    shutil.copy(EXAMPLE, tmp_path / "idemproxy.conf.example")
    with open(MAN5) as f:
        page = f.read()
    assert "\n.TP\n.BI lease " in page and ".B lease\n" not in page
    page = page.replace("\n.TP\n.BI lease ", "\n.PP\n.BI lease ")
    assert re.search(r"\blease\b", page)
    (tmp_path / "docs/man/idemproxy.conf.5").write_text(page)
    r = subprocess.run(["sh", CHECK_CONF_DOC], cwd=tmp_path, capture_output=True, text=True,
                       timeout=CMD_TIMEOUT)
    assert r.returncode == 1
    assert r.stderr.strip().endswith("docs/man/idemproxy.conf.5: lease"), r.stderr


# ---- deploy/ ----

def k8s_docs():
    assert yaml is not None, "python3-yaml is not installed (scripts/deps.sh test)"
    with open(K8S) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def conf_value(conf, name):
    for line in conf.splitlines():
        words = line.split()
        if words and words[0] == name:
            return " ".join(words[1:]).strip('"')
    return None


def test_kubernetes_sidecar_probes_and_grace_period(binary, tmp_path):
    docs = k8s_docs()
    kinds = {d["kind"]: d for d in docs}
    assert {"Deployment", "ConfigMap", "Service"} <= set(kinds)
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    with open(os.path.join(ROOT, "VERSION")) as f:
        image = "idemproxy:" + f.read().strip()
    sidecars = [c for c in pod["containers"] if c["image"] == image]
    assert len(sidecars) == 1 and len(pod["containers"]) == 3, pod["containers"]
    proxy = sidecars[0]
    # The ConfigMap is a directory mount (a subPath one never sees a
    # change); the reload container signals idemproxy across the shared
    # process namespace, as the same user.
    assert [c["image"] for c in pod["initContainers"]] == [image]
    for c in pod["initContainers"] + pod["containers"]:
        for m in c.get("volumeMounts", ()):
            assert "subPath" not in m, (c["name"], m)
    config = [m for m in proxy["volumeMounts"] if m["name"] == "idemproxy-config"]
    assert [m["mountPath"] for m in config] == ["/etc/idemproxy"]
    assert pod["shareProcessNamespace"] is True
    reload = [c for c in pod["containers"] if c["name"] == "reload"][0]
    assert "pkill -HUP -x idemproxy" in reload["command"][-1]
    assert reload["securityContext"]["runAsUser"] == proxy["securityContext"]["runAsUser"]
    assert {m["mountPath"] for m in reload["volumeMounts"]} == {"/etc/idemproxy"}
    assert proxy["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": ADMIN_PORT}
    assert proxy["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": ADMIN_PORT}
    assert {p["containerPort"] for p in proxy["ports"]} == {PROXY_PORT, ADMIN_PORT}

    conf = kinds["ConfigMap"]["data"]["idemproxy.conf"]
    assert conf_value(conf, "listen") == "0.0.0.0:%d" % PROXY_PORT
    assert conf_value(conf, "upstream") == "http://127.0.0.1:3000"
    assert conf_value(conf, "admin") == "0.0.0.0:%d" % ADMIN_PORT
    rows = conf_directives()
    shutdown = seconds(conf_value(conf, "shutdown_timeout") or rows["shutdown_timeout"][0])
    store = seconds(conf_value(conf, "store_timeout") or rows["store_timeout"][0])
    assert (shutdown, store) == (20, 5)

    pre = proxy["lifecycle"]["preStop"]
    sleep = pre["sleep"]["seconds"] if "sleep" in pre else int(pre["exec"]["command"][-1])
    assert sleep >= 1
    assert pod["terminationGracePeriodSeconds"] >= sleep + shutdown + store
    # The app behind it lives until idemproxy has drained.
    app = [c for c in pod["containers"] if c is not proxy and c is not reload][0]
    assert app["lifecycle"]["preStop"]["sleep"]["seconds"] >= sleep + shutdown + store

    # The admin token is a file of a mounted Secret.
    token = conf_value(conf, "admin_token")
    mounts = {m["mountPath"]: m["name"] for m in proxy["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    mount = os.path.dirname(token)
    assert mount in mounts and "secret" in volumes[mounts[mount]], (token, mounts)
    ports = kinds["Service"]["spec"]["ports"]
    assert [p["targetPort"] for p in ports] == [PROXY_PORT]

    # The configuration itself is valid (the token file made locally).
    (tmp_path / "token").write_text("x" * 32 + "\n")
    (tmp_path / "idemproxy.conf").write_text(conf.replace(token, str(tmp_path / "token")))
    r = subprocess.run([binary, "-t", "-c", str(tmp_path / "idemproxy.conf")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


def test_systemd_unit_settings():
    with open(UNIT) as f:
        unit = f.read()
    assert service(unit, "Type") == "notify"
    # A reload checks the file first, so `systemctl reload` fails on a bad one.
    reloads = [v for sec, k, v in unit_settings(unit) if sec == "Service" and k == "ExecReload"]
    assert reloads[0] == "@SBINDIR@/idemproxy -t -c @SYSCONFDIR@/idemproxy/idemproxy.conf"
    reload_cmd = reloads[-1].split()
    assert len(reloads) == 2
    assert reload_cmd[0].endswith("kill") and "-HUP" in reload_cmd and "$MAINPID" in reload_cmd
    assert service(unit, "ExecStart") == \
        "@SBINDIR@/idemproxy -c @SYSCONFDIR@/idemproxy/idemproxy.conf"
    for key, value in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                       ("DynamicUser", "yes"), ("Restart", "on-failure"),
                       ("CapabilityBoundingSet", ""), ("PrivateDevices", "yes"),
                       ("MemoryDenyWriteExecute", "yes"), ("LimitNOFILE", "65536"),
                       ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6")):
        assert service(unit, key) == value, key
    rows = conf_directives()
    drain = seconds(rows["shutdown_timeout"][0]) + seconds(rows["store_timeout"][0])
    assert int(service(unit, "TimeoutStopSec")) > drain


def test_dashboard_uses_only_exposed_metrics():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    assert dash["uid"] == "idemproxy" and dash["schemaVersion"] == 39
    assert [i["name"] for i in dash["__inputs"]] == ["DS_PROMETHEUS"]
    exprs = dashboard_exprs()
    assert exprs
    for e in exprs:
        names = METRIC_NAME.findall(e)
        assert any(n.startswith("idemproxy_") for n in names), "no idemproxy metric in %r" % e
        for n in names:
            assert re.fullmatch(r"(idemproxy|process)_[a-z_]+", n), n
    assert set(DASHBOARD_METRICS) <= ALLOWED_METRICS, set(DASHBOARD_METRICS) - ALLOWED_METRICS
    assert REQUIRED_METRICS <= set(DASHBOARD_METRICS), REQUIRED_METRICS - set(DASHBOARD_METRICS)
    # The p99 of each outcome on its own: a replay's time beside an owner's.
    assert any(re.fullmatch(r"histogram_quantile\(0\.99, sum by \(le, outcome\) \(rate\("
                            r"idemproxy_request_duration_seconds_bucket\{[^}]*\}\[5m\]\)\)\)", e)
               for e in exprs), exprs
    panels = dash["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for p in panels:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]
    version = [p for p in panels if p["type"] == "stat"
               and any("idemproxy_build_info" in t["expr"] for t in p["targets"])]
    assert version and version[0]["options"]["reduceOptions"]["fields"] == "/^version$/"


def test_reload_commands_refuse_a_bad_file_before_any_signal(binary, tmp_path):
    """The installed unit's ExecReload= lines run as systemd runs them, in
    order, stopping at the first that fails: on a file with an error the
    check fails with FILE:LINE: and the SIGHUP is never sent (a process
    standing in for idemproxy would die of it); on a good file it is sent."""
    dest = tmp_path / "dest"
    r = make(binary, "install", dest, "/usr/local")
    assert r.returncode == 0, r.stdout + r.stderr
    unit = (dest / "usr/local/lib/systemd/system/idemproxy.service").read_text()
    reloads = [v for sec, k, v in unit_settings(unit) if sec == "Service" and k == "ExecReload"]
    conf = tmp_path / "idemproxy.conf"

    def run_reload(text):
        conf.write_text(text)
        main = subprocess.Popen(["sleep", "60"])
        try:
            for cmd in reloads:
                args = [a.replace("$MAINPID", str(main.pid)) for a in cmd.split()]
                args = [str(dest / a.lstrip("/")) if a == "/usr/local/sbin/idemproxy" else
                        str(conf) if a == "/etc/idemproxy/idemproxy.conf" else a for a in args]
                r = subprocess.run(args, capture_output=True, text=True, timeout=CMD_TIMEOUT)
                if r.returncode != 0:
                    return r, main.poll() is None
            main.wait(timeout=CMD_TIMEOUT)
            return None, False
        finally:
            if main.poll() is None:
                main.kill()
                main.wait()

    good = "upstream http://127.0.0.1:3000\nactor anonymous\nroute r {\n    match POST /r\n}\n"
    failed, alive = run_reload(good + "no_such_directive 1\n")
    assert failed is not None and alive, "the bad file was not refused before the signal"
    assert failed.stderr.startswith("%s:6: unknown directive" % conf), failed.stderr
    failed, alive = run_reload(good)
    assert failed is None and not alive


def test_docs_install_steps_use_the_installed_paths(binary, tmp_path):
    """docs/operations.md's systemd steps and its Install table name the
    files a default make install writes and the installed unit reads."""
    dest = tmp_path / "dest"
    r = make(binary, "install", dest, "/usr/local")
    assert r.returncode == 0, r.stdout + r.stderr
    unit = (dest / "usr/local/lib/systemd/system/idemproxy.service").read_text()
    start = service(unit, "ExecStart").split()
    conf = start[start.index("-c") + 1]
    with open(os.path.join(ROOT, "docs/operations.md")) as f:
        ops = f.read()
    steps = ops.split("## systemd", 1)[1].split("```")[1]
    named = set(re.findall(r"/[\w/.-]*idemproxy\.conf(?:\.example)?\b", steps))
    assert named == {conf, conf + ".example"}, named
    for path in named:
        if path.endswith(".example"):
            assert (dest / path.lstrip("/")).is_file(), path
    table = ops.split("## Install", 1)[1].split("## systemd", 1)[0]
    for row in table.splitlines():
        cells = [c.strip() for c in row.split("|")]
        if len(cells) > 3 and cells[2].startswith("/"):
            assert (dest / cells[2].lstrip("/")).is_file(), row
    assert start[0] == "/usr/local/sbin/idemproxy" and "| /usr/local/sbin/idemproxy |" in table
