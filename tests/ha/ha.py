"""High-availability stage for idemproxy: failover and switchover of a
Patroni cluster under keyed traffic.

    /usr/bin/python3 -m tests.ha.ha [--seconds N] [--clients N] [--seed N] [--keep]
                            (from the repository root; `make ha`)

Starts, on loopback only and on free ports: one etcd (Debian's
etcd-server, v3 API, a private data directory on tmpfs), two PostgreSQL 15 nodes
managed by Patroni (Debian's patroni, `etcd3` store, `synchronous_mode`,
ttl 10 s, loop_wait 1 s, retry_timeout 4 s), the integration suite's test
upstream and two idemproxy instances (IDEMPROXY_BIN, default ./idemproxy)
that reach the cluster through one multi-host conninfo

    host=127.0.0.1,127.0.0.1 port=P0,P1 ... target_session_attrs=read-write

Patroni, and so PostgreSQL, and etcd run as user postgres in a 0700
directory it owns. Client threads send keyed POSTs (retried on 503 and
operation-in-progress, some deliberately replayed, some with a changed
body) and a probe sends a fresh key every PROBE_PAUSE, while the harness:

  1. kills the leader node: SIGKILL to its Patroni and to its postmaster's
     whole process group (every backend), as when the leader's machine
     dies. Killing postgres alone would let the surviving Patroni restart
     it in place, holding the leader key: a crash restart, not a failover.
     Measured from the SIGKILL: until Patroni's GET /cluster names the
     other node as the running leader (failover_s), and until the first
     2xx from a new claim, i.e. a request sent after the kill that was not
     a replay (first_ok_after_kill_s);
  2. restarts the dead node's Patroni, which rejoins as a replica
     (crash recovery and pg_rewind) and becomes the synchronous standby
     again (rejoin_s);
  3. switches over from the leader to the synchronous standby (the
     rejoined node) with POST /switchover {leader, candidate}:
     switchover_s until /cluster names the candidate as the running
     leader; switchover_gap_s, the longest time no new claim completed
     around it; first_ok_after_switchover_s, from the POST until the first
     new-claim 2xx sent after the new leader was reported.

Each step waits on states (Patroni's /cluster, the clients' successes),
never on fixed sleeps. Then the clients stop, every (actor, key) that got a
2xx is sent again and must be answered with a replay identical to that 2xx
(check 7: no completed record was lost in a failover), with no new upstream
effect (check 8), and the chaos checker (tests/lib/checker.py, checks 1-6)
runs over everything the clients saw and the upstream's request log.

Why synchronous_mode without synchronous_mode_strict: Patroni promotes
only the node named in its /sync key, so every commit the old leader
acknowledged (idemproxy's claims and finishes) is on the new one and a
failover loses none. Strict mode would also refuse commits while no
standby is synchronous: with two nodes, the survivor of a failover could
then take no claim until the dead node rejoined, i.e. no availability at
all while one node is down. Non-strict, the lone survivor accepts writes
(degraded: a second failure in that window could lose them), which is the
availability this stage measures.

The last line is `ha: requests=N effects=N failover_s=X first_ok_after_kill_s=Y
switchover_s=Z switchover_gap_s=W violations=N`; the figures are also
written to ha-figures.txt in the work directory and to build/ha/figures.txt
(build/ha/runs.log collects one line per run). The exit status is 0 only
without violations (2 when the harness itself could not run). A hard
budget (SIGALRM at --seconds + BUDGET_SLACK) bounds the whole run; every
process (etcd, Patroni, PostgreSQL, idemproxy, upstream) is cleaned up on
success, failure, SIGINT and SIGTERM, and a failed run keeps its work
directory (configurations, Patroni's and PostgreSQL's logs, etcd.log,
idemproxy stderr, ha-records.json) and prints its path; --keep keeps it
after a successful run too.
"""
import collections
import http.client
import json
import os
import pwd
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import psycopg2
import pytest  # (Proxy.start reports a failed start with pytest.fail)
import yaml  # (python3-yaml, a dependency of patroni)

from tests.lib import expect, harness, procs
from tests.lib.checker import (make_body, send, is_2xx, is_replay, check, stuck_records,
                               effects_by_scope)
from tests.lib.cluster import PGBIN, PG_USER
from tests.lib.harness import (INSTANCES, HarnessError, guarded, owner_extra, proxy_settings,
                               start_proxy)
from tests.lib.procs import ROOT, idemproxy_bin
from tests.lib.records import Records
from tests.lib.upstream import Upstream

ETCD_BIN = "/usr/bin/etcd"
ETCD_TMPFS = "/dev/shm"
PATRONI_BIN = "/usr/bin/patroni"

DEFAULT_SECONDS = 60
DEFAULT_CLIENTS = 6
BUDGET_SLACK = 150          # hard stop: SIGALRM at seconds + this
END_RESERVE = 12.0          # of --seconds, kept for the verification and checks
TAIL_MIN = 2.0              # traffic after the last fault, whatever --seconds says
NODES = 2
ACTOR_COUNT = 4
SCOPE = "idemproxy-ha"

# Patroni's timing (bootstrap.dcs): failover within about ttl + loop_wait
# of the leader's death; Patroni wants loop_wait + 2 * retry_timeout <= ttl.
TTL = 10
LOOP_WAIT = 1
RETRY_TIMEOUT = 4

# The lease outlasts the failover, so an owner whose finish could not be
# written while no primary was up keeps retrying it until it lands on the
# new primary: every 2xx a client saw must then replay.
LEASE = 30
SETTINGS = proxy_settings(LEASE)

# Client behaviour.
REQUEST_TIMEOUT = 8.0
MAX_ATTEMPTS = 6            # per scope until a terminal answer
RETRY_PAUSE = (0.1, 0.5)
SEQUENCE_PAUSE = (0.05, 0.2)
REPLAY_PROB = 0.3           # one more retry after the terminal answer
CONFLICT_PROB = 0.1         # a retry with a different body
OWNER_ACTIONS = (           # (cumulative probability, header, value)
    (0.04, "X-Test-Action", "reset"),
    (0.20, "X-Test-Delay", "0.3"),
)
PROBE_PAUSE = 0.1

# Waiting on states.
STATE_POLL = 0.1
REST_TIMEOUT = 2.0
ETCD_START_TIMEOUT = 30.0
ETCD_TRIES = 3
BOOTSTRAP_TIMEOUT = 120.0   # initdb, the replica's base backup, synchronous
FAILOVER_TIMEOUT = 4 * TTL + 20.0
FIRST_OK_TIMEOUT = 30.0
REJOIN_TIMEOUT = 120.0
SWITCHOVER_TIMEOUT = 60.0
SWITCHOVER_POST_TIMEOUT = 45.0
WARMUP_OKS = 20             # new-claim 2xx before each fault
WARMUP_TIMEOUT = 30.0
KILL_WAIT = 15.0
JOIN_TIMEOUT = REQUEST_TIMEOUT * MAX_ATTEMPTS + 10
VERIFY_THREADS = 4
VERIFY_TIMEOUT = LEASE + 15.0
VERIFY_PAUSE = 0.5
LOG_TAIL = 40
SWEEP_TRIES = 3             # SIGKILL rounds for leftovers at cleanup


def child_env(home):
    """The environment of etcd and Patroni: no proxy variables (everything
    is on loopback), HOME in the run's directory."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()
           and not k.startswith("PATRONI_") and not k.startswith("ETCD")}
    env.update(HOME=home, USER=PG_USER, LOGNAME=PG_USER, LANG="C.UTF-8", LC_ALL="C.UTF-8")
    return env


def as_pg():
    return {"user": PG_USER, "group": PG_USER, "extra_groups": []}


def tail(path, n=LOG_TAIL):
    try:
        with open(path, "rb") as f:
            return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-n:])
    except OSError:
        return ""


TAKEN_PORTS = set()         # every port handed out in this run, never twice


def free_ports(n):
    ports = []
    for _ in range(n * 20):
        p = procs.free_port()
        if p not in TAKEN_PORTS:
            TAKEN_PORTS.add(p)
            ports.append(p)
            if len(ports) == n:
                return ports
    raise HarnessError("no %d free ports" % n)


OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def rest(port, path, body=None, timeout=REST_TIMEOUT):
    """(status, bytes) of a request to 127.0.0.1:port; status None when no
    answer came."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data,
                                 method="POST" if data is not None else "GET",
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with OPENER.open(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (OSError, http.client.HTTPException) as e:
        return None, str(e).encode()


def process_group_alive(pgid):
    """True while a process other than a zombie is in process group pgid."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def processes_in(path):
    """Pids of live processes whose command line or working directory is
    under path (what a run started and may have left behind)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                cmd = f.read().decode("utf-8", "replace")
            cwd = os.readlink("/proc/%s/cwd" % name)
            with open("/proc/%s/stat" % name) as f:
                state = f.read().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state != "Z" and (path in cmd or cwd == path or cwd.startswith(path + "/")):
            out.append(int(name))
    return out


class Etcd:
    """One etcd member on loopback, run as postgres; its log in the run's
    directory."""

    def __init__(self, workdir):
        # The data lives on tmpfs when there is one: the store is thrown
        # away after the run, and fsync stalls of a disk shared with other
        # tests must not delay Patroni's leader key past retry_timeout.
        base = ETCD_TMPFS if os.path.isdir(ETCD_TMPFS) and os.access(ETCD_TMPFS, os.W_OK) \
            else workdir
        self.top = tempfile.mkdtemp(prefix="idemproxy-ha-etcd.", dir=base)
        shutil.chown(self.top, PG_USER, PG_USER)
        os.chmod(self.top, 0o700)
        self.dir = os.path.join(self.top, "data")
        self.log = os.path.join(workdir, "etcd.log")
        self.proc = None
        self.port = None

    def start(self):
        last = ""
        for _ in range(ETCD_TRIES):
            self.port, peer = free_ports(2)
            client = "http://127.0.0.1:%d" % self.port
            peer = "http://127.0.0.1:%d" % peer
            args = [ETCD_BIN, "--name", "ha", "--data-dir", self.dir,
                    "--listen-client-urls", client, "--advertise-client-urls", client,
                    "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                    "--initial-cluster", "ha=" + peer, "--initial-cluster-state", "new",
                    "--initial-cluster-token", "idemproxy-ha-" + secrets.token_hex(4),
                    "--logger", "zap", "--log-outputs", "stderr"]
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=log, cwd=self.top,
                                             env=child_env(self.top),
                                             start_new_session=True, **as_pg())
            end = time.monotonic() + ETCD_START_TIMEOUT
            while time.monotonic() < end and self.proc.poll() is None:
                status, body = rest(self.port, "/health")
                if status == 200 and b'"true"' in body:
                    return
                time.sleep(STATE_POLL)
            last = tail(self.log)
            self.kill()
            shutil.rmtree(self.dir, ignore_errors=True)
        raise HarnessError("etcd did not become healthy:\n%s" % last)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def destroy(self):
        self.kill()
        shutil.rmtree(self.top, ignore_errors=True)


class Node:
    """One Patroni-managed PostgreSQL node: its directory (owned by
    postgres), ports, configuration and Patroni process."""

    def __init__(self, workdir, i, etcd_port, secrets_):
        self.name = "node%d" % i
        self.dir = os.path.join(workdir, self.name)
        os.mkdir(self.dir, 0o700)
        shutil.chown(self.dir, PG_USER, PG_USER)
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "patroni.log")
        self.conf = os.path.join(self.dir, "patroni.yml")
        self.pg_port, self.rest_port = free_ports(2)
        self.proc = None
        self.starts = 0
        conf = {
            "scope": SCOPE,
            "name": self.name,
            "restapi": {"listen": "127.0.0.1:%d" % self.rest_port,
                        "connect_address": "127.0.0.1:%d" % self.rest_port},
            "etcd3": {"hosts": ["127.0.0.1:%d" % etcd_port], "protocol": "http"},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL, "loop_wait": LOOP_WAIT, "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 1 << 20,
                    "synchronous_mode": True,
                    "synchronous_mode_strict": False,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_level": "replica", "hot_standby": "on",
                            "wal_log_hints": "on", "max_wal_senders": 10,
                            "max_replication_slots": 10, "max_connections": 100,
                            "wal_keep_size": "64MB", "shared_buffers": "32MB",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}, "data-checksums"],
            },
            "postgresql": {
                "listen": "127.0.0.1:%d" % self.pg_port,
                "connect_address": "127.0.0.1:%d" % self.pg_port,
                "data_dir": self.data,
                "bin_dir": PGBIN,
                "pgpass": os.path.join(self.dir, "pgpass"),
                "authentication": {
                    "superuser": {"username": PG_USER, "password": secrets_["superuser"]},
                    "replication": {"username": "replicator",
                                    "password": secrets_["replication"]},
                },
                # Dynamic shared memory as files in the data directory
                # (pg_dynshmem), not /dev/shm: a SIGKILLed node leaves
                # nothing outside the work directory.
                "parameters": {"unix_socket_directories": self.dir,
                               "logging_collector": "off",
                               "dynamic_shared_memory_type": "mmap"},
                "pg_hba": [
                    "local all all trust",
                    "host replication replicator 127.0.0.1/32 scram-sha-256",
                    "host all all 127.0.0.1/32 scram-sha-256",
                ],
                "basebackup": [{"checkpoint": "fast"}],
                "remove_data_directory_on_rewind_failure": True,
                "remove_data_directory_on_diverged_timelines": True,
            },
            "watchdog": {"mode": "off"},
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False,
                     "nosync": False},
        }
        with open(self.conf, "w") as f:
            yaml.safe_dump(conf, f, default_flow_style=False, sort_keys=False)
        shutil.chown(self.conf, PG_USER, PG_USER)
        os.chmod(self.conf, 0o600)

    def start(self):
        self.starts += 1
        with open(self.log, "ab") as log:
            log.write(b"---- ha.py: start %d ----\n" % self.starts)
            log.flush()
            self.proc = subprocess.Popen([PATRONI_BIN, self.conf], stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, cwd=self.dir,
                                         env=child_env(self.dir), start_new_session=True,
                                         **as_pg())

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def postmaster_pid(self):
        """The pid in postmaster.pid when that process is a postgres of this
        data directory, else None."""
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                pid = int(f.readline())
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                cmd = f.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return None
        return pid if self.data in cmd else None

    def shm_id(self):
        """The SysV shared memory id postmaster.pid names, or None."""
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                return int(f.read().splitlines()[6].split()[1])
        except (OSError, ValueError, IndexError):
            return None

    def kill(self):
        """SIGKILL Patroni's and the postmaster's process groups, as if the
        node's machine died; returns once none of them is left, its SysV
        shared memory segment removed as a reboot would."""
        pm = self.postmaster_pid()
        shm = self.shm_id() if pm is not None else None
        groups = []
        if self.proc is not None and self.proc.poll() is None:
            # Patroni leads its own process group (start_new_session): that
            # takes any pg_rewind, pg_basebackup or single-user postgres
            # it runs along with it.
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
                groups.append(self.proc.pid)
            except ProcessLookupError:
                pass
        if pm is not None:
            try:
                pgid = os.getpgid(pm)
                if pgid not in (os.getpgrp(), 0, 1):
                    os.killpg(pgid, signal.SIGKILL)
                    groups.append(pgid)
                else:
                    os.kill(pm, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            try:
                self.proc.wait(KILL_WAIT)
            except subprocess.TimeoutExpired:
                raise HarnessError("%s: Patroni survived SIGKILL" % self.name)
        end = time.monotonic() + KILL_WAIT
        while any(process_group_alive(g) for g in groups):
            if time.monotonic() > end:
                raise HarnessError("%s: postgres survived SIGKILL" % self.name)
            time.sleep(0.02)
        if shm is not None:
            subprocess.run(["ipcrm", "-m", str(shm)], stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=10)
        return pm


def members(cl):
    return {m["name"]: m for m in (cl or {}).get("members", [])}


def leader_of(cl):
    """The running leader's name in a /cluster document, or None."""
    for name, m in members(cl).items():
        if m.get("role") == "leader" and m.get("state") == "running":
            return name
    return None


def sync_of(cl):
    """The synchronous standby's name (running, lag known), or None."""
    for name, m in members(cl).items():
        if m.get("role") == "sync_standby" and m.get("state") in ("running", "streaming") \
                and isinstance(m.get("lag"), int):
            return name
    return None


class Run(harness.Run):
    """Shared state of one HA run. Client threads add attempts under lock;
    the main thread owns the cluster and the faults."""

    def __init__(self, seed, clients):
        super().__init__("ha", seed, clients,
                         tempfile.mkdtemp(prefix="idemproxy-ha.", dir="/tmp"), ACTOR_COUNT)
        shutil.chown(self.workdir, PG_USER, PG_USER)
        os.chmod(self.workdir, 0o700)
        self.etcd = None
        self.nodes = []
        self.records = None
        self.conninfo = None
        self.conninfo_shown = None
        self.bodies = {}          # (actor, key) -> {sha: body sent}
        self.fresh = []           # (t0, t1) of every 2xx that was not a replay
        self.threads = []
        self.figures = collections.OrderedDict()

    def new_scope(self, rng, prefix, client, seq):
        actor = rng.choice(self.actors)
        key = "%s%d-%d-%012x" % (prefix, client, seq, rng.getrandbits(48))
        with self.lock:
            self.key_actors[key] = {actor}
        return actor, key

    def post(self, actor, key, inst, body, kind, extra=()):
        with self.lock:
            self.bodies.setdefault((actor, key), {})[expect.sha(body)] = body
        a = send(self, actor, key, inst, body, kind, extra, timeout=REQUEST_TIMEOUT)
        if is_2xx(a) and not is_replay(a):
            with self.lock:
                self.fresh.append((a["t0"], a["t1"]))
        return a

    def fresh_since(self, t):
        """New-claim 2xx of requests sent at or after t, by completion."""
        with self.lock:
            return sorted(t1 for t0, t1 in self.fresh if t0 >= t)

    def cluster(self):
        """GET /cluster from the first node whose Patroni is up and answers."""
        for n in self.nodes:
            if not n.running():
                continue
            status, body = rest(n.rest_port, "/cluster")
            if status == 200:
                try:
                    return json.loads(body)
                except ValueError:
                    continue
        return None

    def node(self, name):
        return next(n for n in self.nodes if n.name == name)

    def diagnostics(self):
        parts = ["cluster: %s" % json.dumps(self.cluster())]
        for n in self.nodes:
            parts.append("---- %s (%s) ----\n%s" % (n.log, "up" if n.running() else "down",
                                                    tail(n.log)))
        return "\n".join(parts)

    def check_alive(self):
        """Record and restart an idemproxy that exited (the harness never
        kills one: any exit is a violation)."""
        for i, p in enumerate(self.proxies):
            if p.running():
                continue
            code = p.proc.returncode if p.proc else None
            with self.lock:
                self.deaths.append("idemproxy%d exited with %r at t=%.1f:\n%s" % (
                    i, code, self.rel(time.time()), p.stderr_tail()))
            self.event("idemproxy%d died (%r), restarting" % (i, code))
            start_proxy(p)

    def wait(self, what, timeout, fn):
        """fn() until it returns something true, polling every STATE_POLL,
        at most timeout seconds; its value, or HarnessError."""
        end = time.monotonic() + timeout
        while True:
            if self.errors:
                raise HarnessError("client thread: %r" % self.errors[0])
            self.check_alive()
            v = fn()
            if v:
                return v
            if time.monotonic() > end:
                raise HarnessError("timed out after %.0fs waiting for %s\n%s"
                                   % (timeout, what, self.diagnostics()))
            time.sleep(STATE_POLL)


# ---- set-up ----

def preflight():
    if os.geteuid() != 0:
        raise HarnessError("must run as root (Patroni and PostgreSQL run as %s)" % PG_USER)
    for path in (ETCD_BIN, PATRONI_BIN, PGBIN + "/postgres"):
        if not os.access(path, os.X_OK):
            raise HarnessError("%s is missing (scripts/deps.sh ha)" % path)
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        raise HarnessError("no user %s (the postgresql package creates it)" % PG_USER)
    harness.check_binary()


def new_run(seed, clients):
    """The run, once preflight() found what it needs."""
    preflight()
    return Run(seed, clients)


def setup(run):
    binary = harness.copy_binary(run.workdir)

    pw = {"superuser": secrets.token_hex(12), "replication": secrets.token_hex(12),
          "app": secrets.token_hex(12)}
    run.etcd = Etcd(run.workdir)
    run.etcd.start()
    run.event("etcd up on 127.0.0.1:%d" % run.etcd.port)
    run.nodes = [Node(run.workdir, i, run.etcd.port, pw) for i in range(NODES)]
    run.nodes[0].start()
    run.wait("node0 to bootstrap as leader", BOOTSTRAP_TIMEOUT,
             lambda: leader_of(run.cluster()) == "node0")
    for n in run.nodes[1:]:
        n.start()
    run.wait("a synchronous standby", BOOTSTRAP_TIMEOUT,
             lambda: (lambda cl: leader_of(cl) and sync_of(cl))(run.cluster()))
    run.event("cluster up: %s" % json.dumps(run.cluster()))

    leader = run.node(leader_of(run.cluster()))
    admin = Records("host=127.0.0.1 port=%d dbname=postgres user=%s password=%s"
                            % (leader.pg_port, PG_USER, pw["superuser"]))
    admin.query("CREATE ROLE idemproxy LOGIN PASSWORD %s", (pw["app"],))
    admin.query("CREATE DATABASE idemproxy OWNER idemproxy")

    conninfo = ("host=%s port=%s dbname=idemproxy user=idemproxy password=%%s "
                "target_session_attrs=read-write connect_timeout=2" % (
                    ",".join("127.0.0.1" for _ in run.nodes),
                    ",".join(str(n.pg_port) for n in run.nodes)))
    run.conninfo = conninfo % pw["app"]
    run.conninfo_shown = conninfo % "..."
    run.records = Records(run.conninfo)
    run.upstream = Upstream()
    harness.start_instances(run, binary, run.conninfo, SETTINGS)


# ---- clients ----

def terminal(a):
    """An answer a client would not retry: anything but no response, 503
    and operation-in-progress."""
    if a["status"] is None or a["status"] == 503:
        return False
    return not (a["status"] == 409 and a.get("problem") == "operation-in-progress")


def sequence(run, rng, client, seq):
    """One scope: the owner, retried across the instances until a terminal
    answer, sometimes with a changed body, sometimes replayed once more."""
    actor, key = run.new_scope(rng, "hk", client, seq)
    body = make_body(actor, key, rng)
    inst = rng.randrange(INSTANCES)
    a = run.post(actor, key, inst, body, "owner", owner_extra(rng, OWNER_ACTIONS))
    replay = rng.random() < REPLAY_PROB
    for _ in range(MAX_ATTEMPTS - 1):
        if run.stop.is_set():
            return
        if terminal(a):
            if not replay:
                return
            replay = False
        time.sleep(rng.uniform(*RETRY_PAUSE))
        inst = (inst + 1) % INSTANCES
        if rng.random() < CONFLICT_PROB:
            run.post(actor, key, inst, make_body(actor, key, rng), "conflict")
        else:
            a = run.post(actor, key, inst, body, "retry")


def client_loop(run, client):
    rng = random.Random(run.seed * 1000 + client)
    seq = 0
    while not run.stop.is_set():
        sequence(run, rng, client, seq)
        seq += 1
        time.sleep(rng.uniform(*SEQUENCE_PAUSE))


def client_main(run, client):
    guarded(run, client_loop, run, client)


def probe_loop(run):
    """A fresh key every PROBE_PAUSE, alternating instances: the resolution
    of the recovery times."""
    rng = random.Random(run.seed * 1000 + 999)
    seq = 0
    while not run.stop.is_set():
        actor, key = run.new_scope(rng, "hp", 0, seq)
        run.post(actor, key, seq % INSTANCES, make_body(actor, key, rng), "probe")
        seq += 1
        time.sleep(PROBE_PAUSE)


def probe_main(run):
    guarded(run, probe_loop, run)


# ---- faults ----

def warm(run, what):
    t = time.time()
    run.wait("%d new claims to succeed (%s)" % (WARMUP_OKS, what), WARMUP_TIMEOUT,
             lambda: len(run.fresh_since(t)) >= WARMUP_OKS)


def healthy(run):
    """(leader, sync standby) names once both are up, else None."""
    cl = run.cluster()
    leader, sync = leader_of(cl), sync_of(cl)
    return (leader, sync) if leader and sync else None


def gap(times, lo, hi):
    """The longest interval without a completion in times (sorted) that
    overlaps [lo, hi]: from the last completion before lo to the first
    after it, and so on up to the first completion at or after hi."""
    before = [t for t in times if t < lo]
    inside = [t for t in times if lo <= t <= hi]
    after = [t for t in times if t > hi][:1]
    pts = before[-1:] + inside + after
    if len(pts) < 2:
        return None
    return max(b - a for a, b in zip(pts, pts[1:]))


def switch_pending(answer):
    """False when Patroni's answer to POST /switchover says it refused or
    failed; its "status unknown" (no new leader within its own wait) and a
    timeout leave the outcome to /cluster."""
    status, body = answer
    return status in (200, None) or (status == 503 and b"unknown" in body)


def faults(run):
    f = run.figures
    warm(run, "before the kill")
    leader, sync = run.wait("a leader and a synchronous standby", REJOIN_TIMEOUT,
                            lambda: healthy(run))
    dead, survivor = run.node(leader), run.node(sync)

    # 1. the leader's machine dies
    t_kill = time.time()
    pm = dead.kill()
    run.event("SIGKILL %s: patroni and postmaster %s's process group" % (dead.name, pm))
    run.wait("%s to become the leader" % survivor.name, FAILOVER_TIMEOUT,
             lambda: leader_of(run.cluster()) == survivor.name)
    t_leader = time.time()
    run.event("%s is the leader" % survivor.name)
    first = run.wait("a new claim to succeed after the kill", FIRST_OK_TIMEOUT,
                     lambda: run.fresh_since(t_kill))[0]
    run.event("first new claim after the kill succeeded")
    f["failover_s"] = t_leader - t_kill
    f["first_ok_after_kill_s"] = first - t_kill

    # 2. the dead node comes back, as the synchronous standby
    t_rejoin = time.time()
    dead.start()
    run.event("restarted %s's patroni" % dead.name)
    leader, sync = run.wait("%s to rejoin as synchronous standby" % dead.name, REJOIN_TIMEOUT,
                            lambda: (lambda h: h if h and dead.name in h else None)(
                                healthy(run)))
    f["rejoin_s"] = time.time() - t_rejoin
    run.event("%s rejoined: leader %s, synchronous standby %s" % (dead.name, leader, sync))
    warm(run, "before the switchover")

    # 3. planned switchover from the leader to the synchronous standby (the
    # rejoined node, unless the cluster failed over again on its own).
    # Patroni answers the POST only once it saw the new leader (it polls
    # once a second), so the POST runs on a thread while this one watches
    # /cluster.
    leader, sync = run.wait("a leader and a synchronous standby", REJOIN_TIMEOUT,
                            lambda: healthy(run))
    answer = []

    def post_switchover():
        answer.append(rest(run.node(leader).rest_port, "/switchover",
                           {"leader": leader, "candidate": sync},
                           timeout=SWITCHOVER_POST_TIMEOUT))

    poster = threading.Thread(target=post_switchover, daemon=True)
    t_sw = time.time()
    run.event("POST /switchover leader=%s candidate=%s" % (leader, sync))
    poster.start()

    def switched():
        if answer and not switch_pending(answer[0]):
            raise HarnessError("POST /switchover: %s %r\n%s"
                               % (answer[0][0], answer[0][1], run.diagnostics()))
        return leader_of(run.cluster()) == sync

    run.wait("%s to become the leader" % sync, SWITCHOVER_TIMEOUT, switched)
    t_sw_leader = time.time()
    run.event("%s is the leader" % sync)
    poster.join(SWITCHOVER_POST_TIMEOUT + 5)
    if answer:
        run.event("switchover answered %s %s" % (
            answer[0][0], answer[0][1].decode("utf-8", "replace").strip()))
    first_sw = run.wait("a new claim to succeed after the switchover", FIRST_OK_TIMEOUT,
                        lambda: run.fresh_since(t_sw_leader))[0]
    f["switchover_s"] = t_sw_leader - t_sw
    f["first_ok_after_switchover_s"] = first_sw - t_sw
    run.wait("%s to come back as synchronous standby" % leader, REJOIN_TIMEOUT,
             lambda: (lambda h: h if h and leader in h else None)(healthy(run)))
    run.event("%s is back as synchronous standby" % leader)
    warm(run, "after the switchover")

    times = run.fresh_since(0)
    f["kill_gap_s"] = gap(times, t_kill, first)
    f["switchover_gap_s"] = gap(times, t_sw, first_sw)


# ---- the end: replays of every completed scope ----

def verify(run):
    """Send every (actor, key) that got a 2xx again: each must get a replay
    (attempts of kind "verify", which check() then holds to the owner's
    response); returns the violations of check 7."""
    todo = []
    for scope, attempts in run.history.items():
        ok = [a for a in attempts if is_2xx(a)]
        if ok:
            todo.append((scope, run.bodies[scope][ok[0]["sent_sha"]]))
    out = []
    lock = threading.Lock()
    end = time.monotonic() + VERIFY_TIMEOUT

    def worker(items, inst):
        pending = items
        while pending:
            later = []
            for scope, body in pending:
                a = run.post(scope[0], scope[1], inst, body, "verify")
                if is_2xx(a):
                    if not is_replay(a):
                        with lock:
                            out.append((7, scope, "re-sent after the run: a 2xx that is "
                                        "not a replay (executed again)"))
                elif terminal(a):
                    with lock:
                        out.append((7, scope, "re-sent after the run: %d %s instead of "
                                    "the replay of its 2xx" % (a["status"], a.get("problem"))))
                else:
                    later.append((scope, body))
                inst = (inst + 1) % INSTANCES
            pending = later
            if pending:
                if time.monotonic() > end:
                    with lock:
                        for scope, _ in pending:
                            out.append((7, scope, "re-sent after the run: no replay within "
                                        "%.0fs" % VERIFY_TIMEOUT))
                    return
                time.sleep(VERIFY_PAUSE)

    threads = [threading.Thread(target=worker, args=(todo[i::VERIFY_THREADS], i % INSTANCES),
                                daemon=True) for i in range(VERIFY_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(VERIFY_TIMEOUT + REQUEST_TIMEOUT * 2)
    if any(t.is_alive() for t in threads):
        raise HarnessError("verification threads did not finish")
    return len(todo), out


# ---- reporting ----

def fmt(v):
    return "-" if v is None else "%.1f" % v


def report(run, effects, violations, verified):
    f = run.figures
    n_effects = sum(len(v) for v in effects.values())
    f["requests"] = run.requests
    f["effects"] = n_effects
    f["verified"] = verified
    f["violations"] = len(violations)
    print("ha: seed=%d clients=%d wall=%.1fs" % (run.seed, run.clients, time.time() - run.t0))
    print("ha: scopes=%d scopes_with_2xx=%d verified=%d" % (
        len(run.history), sum(1 for v in run.history.values() if any(is_2xx(a) for a in v)),
        verified))
    harness.print_counts(run, "ha")
    for t, text in run.events:
        print("ha: t=%6.1f %s" % (run.rel(t), text))
    print("ha: rejoin_s=%s kill_gap_s=%s first_ok_after_switchover_s=%s" % (
        fmt(f.get("rejoin_s")), fmt(f.get("kill_gap_s")),
        fmt(f.get("first_ok_after_switchover_s"))))
    write_figures(run)
    print("ha: requests=%d effects=%d failover_s=%s first_ok_after_kill_s=%s "
          "switchover_s=%s switchover_gap_s=%s violations=%d" % (
              run.requests, n_effects, fmt(f.get("failover_s")),
              fmt(f.get("first_ok_after_kill_s")), fmt(f.get("switchover_s")),
              fmt(f.get("switchover_gap_s")), len(violations)))


def write_figures(run):
    f = run.figures
    lines = ["%s=%s" % (k, fmt(v) if isinstance(v, float) else v) for k, v in f.items()]
    text = "".join(l + "\n" for l in lines)
    path = os.path.join(run.workdir, "ha-figures.txt")
    with open(path, "w") as out:
        out.write(text)
    build = os.path.join(ROOT, "build", "ha")
    os.makedirs(build, exist_ok=True)
    with open(os.path.join(build, "figures.txt"), "w") as out:
        out.write(text)
    with open(os.path.join(build, "runs.log"), "a") as out:
        out.write("%s binary=%s seed=%d %s\n" % (
            time.strftime("%Y-%m-%dT%H:%M:%S"), os.path.basename(idemproxy_bin()), run.seed,
            " ".join(lines)))
    print("ha: figures (build/ha/figures.txt, and %s while the work directory is kept):"
          % os.path.basename(path))
    for l in lines:
        print("ha:   " + l)


# ---- main ----

def execute(run, args):
    setup(run)
    print("ha: setup done in %.1fs, work dir %s" % (time.time() - run.t0, run.workdir))
    print("ha: conninfo %s" % run.conninfo_shown)
    sys.stdout.flush()
    run.threads = [threading.Thread(target=client_main, args=(run, i), daemon=True)
                   for i in range(run.clients)]
    run.threads.append(threading.Thread(target=probe_main, args=(run,), daemon=True))
    for t in run.threads:
        t.start()
    faults(run)
    tail_end = max(time.time() + TAIL_MIN, run.t0 + args.seconds - END_RESERVE)
    run.wait("the end of the client phase", tail_end - time.time() + 5,
             lambda: time.time() >= tail_end)
    run.stop.set()
    for t in run.threads:
        t.join(JOIN_TIMEOUT)
    if run.errors:
        raise HarnessError("%s: %s" % (type(run.errors[0]).__name__, run.errors[0]))
    if any(t.is_alive() for t in run.threads):
        raise HarnessError("client threads did not finish")
    run.check_alive()
    run.event("clients drained; re-sending every completed scope")

    before = {e.n for e in run.upstream.log()}
    verified, lost = verify(run)
    log = run.upstream.log()
    again = [e for es in effects_by_scope(log).values() for e in es if e.n not in before]
    stuck = stuck_records(run.records)
    run.check_alive()
    harness.stop_instances(run)
    violations, effects = check(run, log, stuck)
    violations += lost
    for e in again:
        violations.append((8, (e.headers.get("X-Actor-Id"), e.headers.get("Idempotency-Key")),
                           "upstream effect n=%d during the verification re-sends" % e.n))
    harness.report_failures(run, violations, effects, "ha")
    report(run, effects, violations, verified)
    return len(violations)


def cleanup(run):
    """Stop everything the run started: clients first, then idemproxy,
    the upstream, Patroni and PostgreSQL (SIGKILL: the data is thrown
    away), etcd, then anything else still running from the work directory."""
    run.stop.set()
    for t in run.threads:
        t.join(REQUEST_TIMEOUT + 2)
    harness.kill_processes(run)
    for n in run.nodes:
        try:
            n.kill()
        except (HarnessError, OSError) as e:
            print("ha: cleanup of %s: %s" % (n.name, e), file=sys.stderr)
    if run.etcd is not None:
        run.etcd.kill()
    dirs = [run.workdir] + ([run.etcd.top] if run.etcd is not None else [])
    for attempt in range(SWEEP_TRIES + 1):
        left = [pid for d in dirs for pid in processes_in(d)]
        if not left:
            break
        if attempt == SWEEP_TRIES:
            print("ha: processes left from %s: %s" % (" ".join(dirs), left), file=sys.stderr)
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    if run.etcd is not None:
        run.etcd.destroy()


def main():
    ap = harness.arg_parser("HA stage for idemproxy: Patroni failover and switchover under "
                            "keyed traffic", DEFAULT_SECONDS, DEFAULT_CLIENTS,
                            "target wall time of the whole run; hard stop %d s later"
                            % BUDGET_SLACK)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    return harness.run_main("ha", ap, BUDGET_SLACK, new_run, execute, cleanup,
                            (pytest.fail.Exception, psycopg2.Error))


if __name__ == "__main__":
    sys.exit(main())
