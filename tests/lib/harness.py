"""The harness shared by the chaos test (tests/chaos/chaos.py) and the
high-availability stage (tests/ha/ha.py), besides the checker
(tests/lib/checker.py): the idemproxy instances both run (their
settings, route, binary, migration and start), the state of a run, its
totals and clean-up, and main's frame (arguments, seed, signals and the
wall-time budget, the exit status and the work directory).
"""
import argparse
import collections
import os
import random
import shutil
import signal
import subprocess
import sys
import threading

import pytest  # (Proxy.start reports a failed start with pytest.fail)

from tests.lib.checker import ROUTE_PATH, History, is_replay, report_violations, dump_records
from tests.lib.procs import idemproxy_bin
from tests.lib.proxy import Proxy, render_conf, base_settings, migrate

INSTANCES = 2
ROUTES = """
route chaos.op {
    match        POST %s
    actor        header X-Actor-Id
    fingerprint  json
    recovery     hold
    in_progress  reject
}
""" % ROUTE_PATH


def proxy_settings(lease):
    """The instances' settings over base_settings, with a lease of lease
    seconds."""
    return {
        "workers": "2",
        "upstream_timeout": "1s",
        "lease": "%ds" % lease,
        "store_timeout": "1s",
        "shutdown_timeout": "2s",
        "sweep_interval": "1s",
    }


class Abort(Exception):
    """SIGTERM or the wall-time budget ran out."""


class HarnessError(Exception):
    """The harness could not set up or run (not a product violation)."""


def on_signal(signum, frame):
    raise Abort("signal %d" % signum)


class Run(History):
    """Shared state of one run besides the clients' History: its seed and
    client count, the stop event, the threads' exceptions, the upstream,
    the actors ("LABEL-actor-N") and its work directory."""

    def __init__(self, label, seed, clients, workdir, actor_count):
        super().__init__()
        self.seed = seed
        self.clients = clients
        self.stop = threading.Event()
        self.run_end = 0.0
        self.workdir = workdir
        self.upstream = None
        self.actors = ["%s-actor-%d" % (label, i) for i in range(actor_count)]
        self.errors = []                          # exceptions from the threads


# ---- the instances ----

def check_binary():
    if not os.access(idemproxy_bin(), os.X_OK):
        raise HarnessError("%s is not built (set IDEMPROXY_BIN)" % idemproxy_bin())


def copy_binary(workdir):
    """The binary, copied into workdir/bin (same name, so sanitizer_report
    still knows an -asan build) so that a rebuild during the run cannot
    break a restart; its path."""
    bindir = os.path.join(workdir, "bin")
    os.mkdir(bindir)
    binary = os.path.join(bindir, os.path.basename(idemproxy_bin()))
    shutil.copy2(idemproxy_bin(), binary)
    return binary


def start_proxy(p):
    """Start p and wait for its port; raises HarnessError when it does not come up."""
    try:
        p.start()
    except pytest.fail.Exception as e:
        raise HarnessError(str(e))


def start_instances(run, binary, conninfo, settings, start=start_proxy):
    """Migrate the database conninfo names, then INSTANCES idemproxy
    instances of binary on it (base_settings updated with settings, ROUTES,
    run.upstream) into run.proxies, each configuration checked with -t,
    each started with start(p)."""
    migrate(binary, conninfo, os.path.join(run.workdir, "migrate.conf"))
    for i in range(INSTANCES):
        s = base_settings(run.upstream.port, conninfo)
        s.update(settings)
        p = Proxy(run.workdir, render_conf(s, ROUTES), "idemproxy%d" % i)
        p.bin = binary
        r = subprocess.run([binary, "-t", "-c", p.conf], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise HarnessError("idemproxy -t rejects the configuration:\n%s%s"
                               % (r.stdout, r.stderr))
        run.proxies.append(p)
        start(p)


def stop_instances(run):
    """SIGTERM every instance; an exit status other than 0 is a death."""
    for i, p in enumerate(run.proxies):
        code = p.stop()
        if code != 0:
            with run.lock:
                run.deaths.append("idemproxy%d exited with %r after SIGTERM:\n%s"
                                  % (i, code, p.stderr_tail()))


def kill_processes(run):
    """At clean-up: SIGKILL the instances still running, stop the upstream."""
    for p in run.proxies:
        try:
            if p.running():
                p.kill()
        except OSError:
            pass
    if run.upstream is not None:
        try:
            run.upstream.stop()
        except OSError:
            pass


# ---- clients ----

def owner_extra(rng, actions):
    """The headers of an owner request: the first of actions ((cumulative
    probability, header, value), ...) whose probability a draw is under."""
    x = rng.random()
    for p, name, value in actions:
        if x < p:
            return [(name, value)]
    return []


def guarded(run, fn, *args):
    """fn(*args) on a client or fault thread: an exception is kept in
    run.errors for the main thread and stops the run."""
    try:
        fn(*args)
    except Exception as e:  # reported by the main thread
        run.errors.append(e)
        run.stop.set()


# ---- reporting ----

def print_counts(run, label):
    """The statuses, problems, requests without a response and replays the
    clients saw."""
    statuses = collections.Counter()
    problems = collections.Counter()
    noresp = replays = 0
    for attempts in run.history.values():
        for a in attempts:
            if a["status"] is None:
                noresp += 1
                continue
            statuses[a["status"]] += 1
            if a.get("problem"):
                problems[a["problem"]] += 1
            if is_replay(a):
                replays += 1
    print("%s: statuses %s" % (label, " ".join("%d=%d" % kv for kv in sorted(statuses.items()))))
    print("%s: problems %s" % (label, " ".join("%s=%d" % kv for kv in sorted(problems.items()))))
    print("%s: no_response=%d replays=%d" % (label, noresp, replays))


def report_failures(run, violations, effects, label):
    """The violations and the histories they name (report_violations);
    with any, every record into LABEL-records.json in the work directory."""
    report_violations(run, violations, effects, label)
    if violations:
        path = os.path.join(run.workdir, "%s-records.json" % label)
        dump_records(run, effects, path, run.seed)
        print("%s: records in %s" % (label, path))


# ---- main ----

def arg_parser(description, seconds, clients, seconds_help):
    """--seconds, --clients and --seed; the caller may add its own."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--seconds", type=int, default=seconds, help=seconds_help)
    ap.add_argument("--clients", type=int, default=clients)
    ap.add_argument("--seed", type=int, default=None)
    return ap


def run_main(label, ap, budget_slack, new_run, execute, cleanup, errors=()):
    """main(): parse ap, choose the seed, print the first line, take SIGINT,
    SIGTERM and the hard budget (SIGALRM at --seconds + budget_slack), then
    run = new_run(seed, clients) and execute(run, args), which returns the
    number of violations; cleanup(run) stops what the run started, and its
    work directory goes unless the run failed or --keep says so. The exit
    status: 0 without violations, 1 with, 2 when the harness itself could
    not run (HarnessError, Abort, errors and the like), 130 on SIGINT."""
    args = ap.parse_args()
    if args.seconds < 1 or args.clients < 1:
        ap.error("--seconds and --clients must be positive")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    os.environ.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    os.environ.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")

    print("%s: seed=%d binary=%s seconds=%d clients=%d" % (
        label, seed, idemproxy_bin(), args.seconds, args.clients))
    sys.stdout.flush()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGALRM, on_signal)
    signal.alarm(args.seconds + budget_slack)
    harness_errors = (Abort, HarnessError, AssertionError, OSError,
                      subprocess.SubprocessError) + tuple(errors)
    status = 2
    run = None
    try:
        run = new_run(seed, args.clients)
        status = 0 if execute(run, args) == 0 else 1
    except KeyboardInterrupt:
        print("%s: interrupted (seed=%d)" % (label, seed))
        status = 130
    except harness_errors as e:
        print("%s: harness error (seed=%d): %s" % (label, seed, e))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if run is not None:
            cleanup(run)
            if status != 0 or getattr(args, "keep", False):
                print("%s: kept %s" % (label, run.workdir))
            else:
                shutil.rmtree(run.workdir, ignore_errors=True)
    return status
