"""The development scripts: scripts/pg.sh (the private cluster, also from a
clone in a private directory), scripts/deps.sh's profiles and the Makefile
targets that use them, and scripts/run.sh's banner (the records CLI's
environment). Needs no session fixture: each test starts and removes what it
uses, even when it fails."""
import hashlib
import os
import pwd
import random
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import threading

import pytest

from tests.lib import helpers
from tests.lib.cluster import PGBIN, PG_USER
from tests.lib.helpers import ROOT

PG_SH = os.path.join(ROOT, "scripts", "pg.sh")
DEPS_SH = os.path.join(ROOT, "scripts", "deps.sh")
SUBST_ROOT = "/var/lib/idemproxy-dev"
SOCKET_PATH_MAX = 107
CMD_TIMEOUT = 60        # seconds for one script or psql call
BANNER_WAIT = 60        # seconds for `run.sh` to print its banner
RUN_STOP_WAIT = 45      # seconds for `run.sh` to stop after SIGTERM
RUN_PORTS = (3000, 8080, 9901)  # run.sh's fixed ports (upstream, proxy, admin)
RUN_PG_PORT = 54329     # run.sh's PGPORT_DEFAULT


def pg_sh(cmd, pgdir, port, script=PG_SH):
    return subprocess.run(["bash", script, cmd, pgdir, str(port)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=CMD_TIMEOUT)


def as_pg(args):
    return subprocess.run(["runuser", "-u", PG_USER, "--"] + args, cwd="/",
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=CMD_TIMEOUT)


def as_pg_uid():
    return pwd.getpwnam(PG_USER).pw_uid


def conninfo_fields(conninfo):
    return dict(kv.split("=", 1) for kv in conninfo.split())


def psql(fields, sql):
    r = as_pg([PGBIN + "/psql", "-h", fields["host"], "-p", fields["port"], "-U", fields["user"],
               "-d", fields["dbname"], "-X", "-Atq", "-v", "ON_ERROR_STOP=1", "-c", sql])
    assert r.returncode == 0, "psql %r: %s%s" % (sql, r.stdout, r.stderr)
    return r.stdout.strip()


def socket_port():
    """A port number to name a socket with (pg.sh listens on no TCP address)."""
    return 55000 + random.randrange(5000)


def expected_substitute(pgdir):
    return os.path.join(SUBST_ROOT, hashlib.sha256(
        os.path.realpath(pgdir).encode()).hexdigest()[:12])


def destroy(pgdir, port, host=None, script=PG_SH):
    """Stop and delete a cluster pg.sh started; a substitute directory goes
    even when pg.sh cannot remove it."""
    r = pg_sh("destroy", pgdir, port, script)
    if host and host.startswith(SUBST_ROOT + "/") and os.path.isdir(host):
        subprocess.run([PGBIN + "/pg_ctl", "-D", os.path.join(host, "data"), "-m",
                        "immediate", "stop"], cwd="/", capture_output=True, timeout=CMD_TIMEOUT,
                       user=PG_USER)
        shutil.rmtree(host, ignore_errors=True)
    return r


def test_pg_in_a_private_directory_uses_a_reachable_substitute():
    private = tempfile.mkdtemp(prefix="idemproxy-private.", dir="/tmp")
    os.chmod(private, 0o700)
    before = os.stat(private)
    pgdir = os.path.join(private, "pg")
    port = socket_port()
    host = expected_substitute(pgdir)
    try:
        r = pg_sh("start", pgdir, port)
        assert r.returncode == 0, r.stdout + r.stderr
        fields = conninfo_fields(r.stdout.strip().splitlines()[-1])
        host = fields["host"]
        assert host == expected_substitute(pgdir)
        assert not os.path.realpath(host).startswith(os.path.realpath(private) + "/")
        assert fields["port"] == str(port) and fields["dbname"] == "idemproxy"
        assert len(os.path.join(host, ".s.PGSQL.%d" % port)) <= SOCKET_PATH_MAX
        notice = "pg.sh: user postgres cannot reach %s; the cluster lives in %s" % (
            os.path.realpath(pgdir), host)
        assert r.stderr.count(notice) == 1, r.stderr
        # The substitute: 0700 and postgres's, in a 0755 directory of root's.
        st = os.stat(host)
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == as_pg_uid()
        parent = os.stat(SUBST_ROOT)
        assert stat.S_IMODE(parent.st_mode) == 0o755 and parent.st_uid == 0
        assert as_pg(["test", "-w", host]).returncode == 0

        psql(fields, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('across restarts')")
        r = pg_sh("stop", pgdir, port)
        assert r.returncode == 0, r.stderr
        r = pg_sh("status", pgdir, port)
        assert r.returncode == 3, r.stdout + r.stderr

        # The next start finds the same cluster, data and all.
        r = pg_sh("start", pgdir, port)
        assert r.returncode == 0, r.stdout + r.stderr
        again = conninfo_fields(r.stdout.strip().splitlines()[-1])
        assert again["host"] == host
        assert psql(again, "SELECT v FROM kept") == "across restarts"
        r = pg_sh("status", pgdir, port)
        assert r.returncode == 0, r.stderr
        assert conninfo_fields(r.stdout.strip())["host"] == host
        r = pg_sh("stop", pgdir, port)
        assert r.returncode == 0, r.stderr
        assert pg_sh("status", pgdir, port).returncode == 3

        # The private directory is as it was: mode, owner, and empty.
        after = os.stat(private)
        assert stat.S_IMODE(after.st_mode) == 0o700
        assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
        assert os.listdir(private) == []

        r = pg_sh("destroy", pgdir, port)
        assert r.returncode == 0, r.stderr
        assert not os.path.exists(host)
    finally:
        destroy(pgdir, port, host)
        shutil.rmtree(private, ignore_errors=True)


def test_pg_in_a_reachable_directory_uses_it():
    base = tempfile.mkdtemp(prefix="idemproxy-open.", dir="/tmp")
    os.chmod(base, 0o755)
    pgdir = os.path.join(base, "pg")
    port = socket_port()
    try:
        r = pg_sh("start", pgdir, port)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "cannot reach" not in r.stderr, r.stderr
        fields = conninfo_fields(r.stdout.strip().splitlines()[-1])
        assert fields["host"] == os.path.realpath(pgdir)
        assert os.path.isfile(os.path.join(pgdir, "data", "PG_VERSION"))
        assert not os.path.exists(expected_substitute(pgdir))
        st = os.stat(pgdir)
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == as_pg_uid()
        assert psql(fields, "SELECT current_database()") == "idemproxy"
        r = pg_sh("status", pgdir, port)
        assert r.returncode == 0 and conninfo_fields(r.stdout.strip()) == fields, r.stderr
        r = pg_sh("destroy", pgdir, port)
        assert r.returncode == 0, r.stderr
        assert not os.path.exists(pgdir)
    finally:
        destroy(pgdir, port)
        shutil.rmtree(base, ignore_errors=True)


def deps_list(*profiles):
    r = subprocess.run(["sh", DEPS_SH, "--list"] + list(profiles), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=CMD_TIMEOUT)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\n")[:-1]


def test_deps_profiles():
    run = deps_list("run")
    assert "postgresql" in run and "libevent-dev" in run and "python3" in run
    for tool in ("wrk", "nginx-light", "gnuplot-nox", "clang", "python3-pytest", "pgbouncer"):
        assert tool not in run, tool
    test = deps_list("test")
    bench = deps_list("bench")
    fuzz = deps_list("fuzz")
    ha = deps_list("ha")
    image = deps_list("image")
    assert {"mmdebstrap", "umoci", "podman", "runc"} <= set(image)
    assert "mmdebstrap" not in test and "python3-pytest" not in image
    assert "patroni" in ha and "etcd-server" in ha and "patroni" not in test
    assert "python3-pytest" in test and "pgbouncer" in test and "nginx-light" not in test
    # xxd compiles the operator page into the binary; a browser tests it.
    assert "xxd" in run
    assert {"chromium", "chromium-driver", "python3-selenium"} <= set(test)
    assert "chromium" not in run and "chromium" not in bench
    assert "wrk" in bench and "nginx-light" in bench and "python3-pytest" not in bench
    assert "clang" in fuzz and "libclang-rt-14-dev" in fuzz and "wrk" not in fuzz
    for profile in (test, bench, fuzz, ha, image):
        assert set(run) <= set(profile)
        assert len(profile) == len(set(profile))
    both = deps_list("test", "fuzz")
    assert set(both) == set(test) | set(fuzz) and len(both) == len(set(both))
    for args in (["--list"], ["--list", "nope"], ["nope"], ["--bogus"]):
        r = subprocess.run(["sh", DEPS_SH] + args, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=CMD_TIMEOUT)
        assert r.returncode == 2, (args, r.stdout, r.stderr)


def test_make_targets_install_their_profile():
    r = subprocess.run(["make", "-n", "--no-print-directory", "deps", "run", "test", "bench",
                        "chaos", "fuzz", "ha", "image", "image-test"], cwd=ROOT, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=CMD_TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    calls = [line.strip() for line in r.stdout.splitlines() if "scripts/deps.sh" in line]
    assert calls == ["sh scripts/deps.sh test fuzz", "sh scripts/deps.sh run",
                     "sh scripts/deps.sh test", "sh scripts/deps.sh bench",
                     "sh scripts/deps.sh test", "sh scripts/deps.sh fuzz",
                     "sh scripts/deps.sh ha", "sh scripts/deps.sh image",
                     "sh scripts/deps.sh image test"], r.stdout


class Banner:
    """run.sh's stdout, read by a thread until "Press Ctrl-C"."""

    def __init__(self, proc):
        self.lines = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.read, args=(proc.stdout,), daemon=True)
        self.thread.start()

    def read(self, out):
        for line in out:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("Press Ctrl-C"):
                self.done.set()
        self.done.set()

    def text(self):
        return "\n".join(self.lines)


def make_private_clone(binary):
    """A copy of what `make run` runs, in a 0700 directory: the scripts, the
    example configuration and the binary under test as ./idemproxy."""
    private = tempfile.mkdtemp(prefix="idemproxy-home.", dir="/tmp")
    os.chmod(private, 0o700)
    clone = os.path.join(private, "idemproxy")
    os.makedirs(os.path.join(clone, "scripts"))
    for name in ("run.sh", "lib.sh", "pg.sh", "demo-upstream.py"):
        shutil.copy2(os.path.join(ROOT, "scripts", name), os.path.join(clone, "scripts", name))
    shutil.copy2(os.path.join(ROOT, "idemproxy.conf.example"), clone)
    shutil.copy2(binary, os.path.join(clone, "idemproxy"))
    return private, clone


def banner_environment(text):
    """The banner's cd and export lines, as a shell prefix and as a dict."""
    cd = export = None
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["cd"] and len(words) == 2:
            cd = line.strip()
        if words[:1] == ["export"]:
            export = line.strip()
    assert cd and export, "no cd and export lines in the banner:\n" + text
    env = dict(w.split("=", 1) for w in shlex.split(export)[1:])
    return cd + " && " + export, env


def run_cli(prefix, command):
    """Run a banner command the way a second terminal would: a fresh shell
    with none of PG* set, the banner's cd and export lines first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.pop("IDEMPROXY_BIN", None)
    return subprocess.run(["bash", "-c", prefix + " && " + command], env=env, cwd="/",
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=CMD_TIMEOUT)


def test_run_banner_names_the_private_clusters_environment():
    busy = [p for p in RUN_PORTS if helpers.port_open(p)]
    if busy:
        pytest.fail("scripts/run.sh needs 127.0.0.1 ports %s; busy: %s. Stop what listens "
                    "there (a `make run`?) and run this test again"
                    % (" ".join(map(str, RUN_PORTS)), " ".join(map(str, busy))))
    binary = os.path.join(ROOT, helpers.env_bin())
    assert os.access(binary, os.X_OK), "%s is not built (set IDEMPROXY_BIN)" % binary
    private, clone = make_private_clone(binary)
    pgdir = os.path.join(clone, ".run", "pg")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    for name in ("IDEMPROXY_BIN", "IDEMPROXY_CONF"):
        env.pop(name, None)
    err_path = os.path.join(tempfile.gettempdir(), "idemproxy-run.%d.stderr" % os.getpid())
    proc = None
    host = expected_substitute(pgdir)
    try:
        with open(err_path, "w") as err:
            proc = subprocess.Popen(["bash", os.path.join(clone, "scripts", "run.sh")],
                                    cwd=clone, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=err, text=True,
                                    start_new_session=True)
        banner = Banner(proc)
        if not banner.done.wait(BANNER_WAIT) or "Press Ctrl-C" not in banner.text():
            state = ("it exited with status %d" % proc.returncode if proc.poll() is not None
                     else "not within %ds" % BANNER_WAIT)
            pytest.fail("run.sh printed no banner (%s):\n%s\n-- stderr:\n%s"
                        % (state, banner.text(), read(err_path)))
        text = banner.text()
        stderr = read(err_path)
        assert "cannot reach %s; the cluster lives in %s" % (pgdir, host) in stderr, stderr

        prefix, exported = banner_environment(text)
        assert exported == {"PGHOST": host, "PGPORT": str(RUN_PG_PORT),
                            "PGDATABASE": "idemproxy", "PGUSER": "postgres"}, text
        assert prefix.startswith("cd %s &&" % clone)
        commands = [line.strip() for line in text.splitlines()
                    if line.strip().startswith("./idemproxy records ")]
        assert commands == [
            "./idemproxy records -c idemproxy.conf.example list",
            "./idemproxy records -c idemproxy.conf.example show h:alice course.create demo-1",
        ], text

        # The banner's lines work from a terminal that has none of run.sh's
        # environment: list (and in the order the task's operator typed it).
        for command in (commands[0], "./idemproxy records list -c idemproxy.conf.example"):
            r = run_cli(prefix, command)
            assert r.returncode == 0, (command, r.stdout, r.stderr)
            assert r.stdout.strip().startswith(("[", "{")), r.stdout
        # show, for the record the banner's first curl creates.
        resp = helpers.request(8080, "POST", "/api/courses",
                               [("Idempotency-Key", "demo-1"), ("X-Actor-Id", "alice"),
                                ("Content-Type", "application/json")],
                               b'{"title": "SQL basics", "topic": "sql", "lessons": 3}')
        assert resp.status == 201, resp.body
        r = run_cli(prefix, commands[1])
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert "completed" in r.stdout and "demo-1" in r.stdout, r.stdout

        # SIGTERM: run.sh stops the proxy, the upstream and the cluster.
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(RUN_STOP_WAIT)
        except subprocess.TimeoutExpired:
            pytest.fail("run.sh did not stop within %ds of SIGTERM:\n%s"
                        % (RUN_STOP_WAIT, read(err_path)))
        assert rc == 0, read(err_path)
        assert "PostgreSQL stopped" in read(err_path)
        assert pg_sh("status", pgdir, RUN_PG_PORT).returncode == 3
        assert not any(helpers.port_open(p) for p in RUN_PORTS)
        st = os.stat(private)
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(RUN_STOP_WAIT)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        if proc is not None and proc.stdout:
            proc.stdout.close()
        destroy(pgdir, RUN_PG_PORT, host)
        shutil.rmtree(private, ignore_errors=True)
        if os.path.exists(err_path):
            os.unlink(err_path)


def read(path):
    try:
        with open(path) as f:
            return f.read()[-6000:]
    except OSError:
        return ""
