"""A throwaway PostgreSQL 15 cluster for the tests (Cluster, migrated on
request with the binary under test) and the way to run PostgreSQL's
programs as its owner (run_as_pg). The cluster's directory, data and
socket belong to user postgres; whoever makes a Cluster destroys it.
lock_waiters reads who waits on a lock in it. ExternalDatabase stands for
a database the suite did not start (IDEMPROXY_TEST_DATABASE, e.g. a Citus
coordinator): migrated the same way, never stopped or destroyed."""
import os
import shutil
import subprocess
import tempfile

from tests.lib import procs
from tests.lib.proxy import migrate
from tests.lib.records import Records

PGBIN = "/usr/lib/postgresql/15/bin"
PG_USER = "postgres"


def run_as_pg(args, **kw):
    return subprocess.run(["runuser", "-u", PG_USER, "--"] + args, cwd="/",
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=60, **kw)


class Cluster:
    """A throwaway PostgreSQL cluster with a unix socket in a short temp dir."""

    listen_addresses = "''"  # no TCP unless a subclass says so

    def __init__(self):
        self.layout()
        r = run_as_pg([PGBIN + "/initdb", "-D", self.data, "-A", "trust", "-U", PG_USER,
                       "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"])
        assert r.returncode == 0, r.stdout + r.stderr
        self.start()
        r = run_as_pg([PGBIN + "/createdb", "-h", self.dir, "-p", str(self.port),
                       "-U", PG_USER, "idemproxy"])
        assert r.returncode == 0, r.stderr

    def layout(self):
        """The cluster's directory (owned by postgres), port and conninfo."""
        self.dir = tempfile.mkdtemp(prefix="ipg", dir="/tmp")
        shutil.chown(self.dir, PG_USER, PG_USER)
        os.chmod(self.dir, 0o700)
        self.data = os.path.join(self.dir, "data")
        self.port = procs.free_port()
        self.conninfo = "host=%s port=%d dbname=idemproxy user=%s" % (
            self.dir, self.port, PG_USER)
        self.records = Records(self.conninfo)

    def start(self):
        r = run_as_pg([PGBIN + "/pg_ctl", "-D", self.data, "-l",
                       os.path.join(self.dir, "log"), "-w", "-t", "30", "-o",
                       "-c listen_addresses=%s -k %s -p %d"
                       % (self.listen_addresses, self.dir, self.port),
                       "start"], start_new_session=True)
        assert r.returncode == 0, r.stdout + r.stderr + self.log_tail()

    def stop(self):
        r = run_as_pg([PGBIN + "/pg_ctl", "-D", self.data, "-m", "fast", "-w", "-t", "30",
                       "stop"])
        assert r.returncode == 0, r.stdout + r.stderr

    def running(self):
        r = run_as_pg([PGBIN + "/pg_ctl", "-D", self.data, "status"])
        return r.returncode == 0

    def log_tail(self):
        try:
            with open(os.path.join(self.dir, "log")) as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def migrate(self, binary, workdir):
        """Apply idemproxy's migrations with binary, its configuration file
        written into workdir (kept as self.migrate_conf)."""
        self.migrate_conf = os.path.join(str(workdir), "migrate-%d.conf" % self.port)
        migrate(binary, self.conninfo, self.migrate_conf)

    def query(self, sql, args=()):
        return self.records.query(sql, args)

    def destroy(self):
        if self.running():
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class ExternalDatabase:
    """A database someone else runs, named by its libpq conninfo: the
    session's `pg` when IDEMPROXY_TEST_DATABASE is set. It has what tests
    read of a Cluster (conninfo, records, query, migrate) but cannot be
    stopped or restarted: tests that need that use private_pg or are left
    out of such runs."""

    def __init__(self, conninfo):
        self.conninfo = conninfo
        self.records = Records(conninfo)

    def migrate(self, binary, workdir):
        self.migrate_conf = os.path.join(str(workdir), "migrate-external.conf")
        migrate(binary, self.conninfo, self.migrate_conf)

    def query(self, sql, args=()):
        return self.records.query(sql, args)

    def stop(self):
        raise AssertionError("the external database (IDEMPROXY_TEST_DATABASE) is not "
                             "stopped by the tests")

    start = stop

    def running(self):
        return True

    def destroy(self):
        pass


def lock_waiters(cluster, app=None):
    """Backends of cluster's database waiting on a lock (not this one's own
    query), optionally only those whose application_name is app."""
    sql = """SELECT pid, application_name, query FROM pg_stat_activity
              WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()
                AND datname = current_database()"""
    if app is None:
        return cluster.query(sql)
    return cluster.query(sql + " AND application_name = %s", (app,))
