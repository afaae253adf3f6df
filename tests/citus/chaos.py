"""The chaos run on a Citus cluster (tests/citus/run.sh, `make citus`).

    /usr/bin/python3 -m tests.citus.chaos --base BASE [--seconds N] [--clients N] [--seed N]

BASE is a running cluster of scripts/citus.sh (coordinator and two
workers), its database migrated and idempotency_records distributed. Two
idemproxy instances on the coordinator take the keyed traffic of the chaos
test (tests/chaos/chaos.py: owners, retries across instances, overlaps,
conflicting bodies) while a fault thread, instead of killing instances,
follows a fixed plan over the run: SIGKILL worker 1's postmaster and start
it again, the same for worker 2, then restart the coordinator. Afterwards
the same checker holds (at most one upstream effect per scope, every 2xx
the same as the upstream's, nothing left in progress, no death), and every
scope that got a 2xx is sent once more and must be answered with a replay.

Printed: per outage the time keyed traffic was refused, from the clients'
view: from the first to the last answer around the outage that said the
store was unavailable (503 store-unavailable), or no answer at all, then `citus: requests=N
worker_kills=N coordinator_restarts=N effects=N violations=N`. Exit status
0 only without violations, 2 when the harness could not run.
"""
import random
import subprocess
import sys
import threading
import time

from tests.chaos import chaos
from tests.lib import harness
from tests.lib import checker, expect
from tests.lib.checker import is_2xx, is_replay, check, stuck_records
from tests.lib.harness import INSTANCES, HarnessError, guarded
from tests.lib.records import Records
from tests.lib.upstream import Upstream

DEFAULT_SECONDS = 90
DEFAULT_CLIENTS = 6
BUDGET_SLACK = 90
OUTAGE = 1.0                # seconds a killed worker stays down (under the lease)
AFTER_OUTAGE = 5.0          # the window after a restart still counted for the refusal
SCRIPT_TIMEOUT = 120
VERIFY_TIMEOUT = 60.0
VERIFY_PAUSE = 0.5


def citus(*args):
    """scripts/citus.sh ARGS; its stdout, HarnessError when it fails."""
    r = subprocess.run(["sh", "scripts/citus.sh"] + list(args), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=SCRIPT_TIMEOUT)
    if r.returncode != 0:
        raise HarnessError("scripts/citus.sh %s failed:\n%s%s" % (" ".join(args), r.stdout,
                                                                   r.stderr))
    return r.stdout.strip()


class CitusCluster:
    """What chaos's helpers read of a cluster: its conninfo and records."""

    def __init__(self, base):
        self.base = base
        self.conninfo = citus("status", base).splitlines()[-1]
        self.records = Records(self.conninfo)


class Run(chaos.Run):
    def __init__(self, seed, clients):
        super().__init__(seed, clients)
        self.base = None
        self.sent_bodies = {}       # ((actor, key), sha256 of a body) -> the body
        self.worker_kills = 0
        self.coordinator_restarts = 0
        self.outages = []           # (label, t_down, t_up)


def send(run, actor, key, inst, body, kind, extra=(), timeout=checker.REQUEST_TIMEOUT):
    """checker.send, keeping the body so that verify can send it again."""
    with run.lock:
        run.sent_bodies[((actor, key), expect.sha(body))] = body
    return checker.send(run, actor, key, inst, body, kind, extra, timeout)


chaos.send = send           # the chaos test's clients send through it


def setup(run):
    harness.check_binary()
    binary = harness.copy_binary(run.workdir)
    run.cluster = CitusCluster(run.base)
    run.upstream = Upstream()
    harness.start_instances(run, binary, run.cluster.conninfo, chaos.SETTINGS,
                            chaos.start_proxy)


def wait_until(run, t):
    """Sleep until monotonic t, watching the instances; False once stopping."""
    return chaos.pause(run, max(0.0, t - time.monotonic()))


def faults(run):
    """The plan: worker 1 down for OUTAGE s at a fifth of the run, worker 2
    at two fifths, the coordinator restarted at three fifths."""
    start = time.monotonic()
    span = run.run_end - start
    for frac, what in ((0.2, 1), (0.4, 2), (0.6, "coordinator")):
        if not wait_until(run, start + span * frac):
            return
        t_down = time.time()
        if what == "coordinator":
            run.event("restarting the coordinator")
            citus("restart-coordinator", run.base)
            with run.lock:
                run.coordinator_restarts += 1
            run.outages.append(("coordinator restart", t_down, time.time()))
        else:
            run.event("SIGKILL worker%d" % what)
            citus("kill-worker", run.base, str(what))
            with run.lock:
                run.worker_kills += 1
            time.sleep(OUTAGE)
            citus("start-worker", run.base, str(what))
            run.outages.append(("worker%d kill" % what, t_down, time.time()))
        run.event("%s back" % what)
    chaos.pause(run, run.run_end - time.monotonic())


def refused(a):
    """An answer that says the store could not be reached (503
    store-unavailable) or no answer at all: what a node outage causes, not
    the upstream faults the clients ask for (502, 504)."""
    return a["status"] is None or a.get("problem") == "store-unavailable"


def refusal(run, t_down, t_up):
    """(seconds from the first to the last refused answer, their count) for
    the attempts that ended between t_down and t_up + AFTER_OUTAGE."""
    ends = sorted(a["t1"] for v in run.history.values() for a in v
                  if t_down <= a["t1"] <= t_up + AFTER_OUTAGE and refused(a))
    if not ends:
        return 0.0, 0
    return ends[-1] - ends[0], len(ends)


def verify(run):
    """Every scope with a 2xx sent again: each must be a replay of it."""
    out = []
    bodies = {}
    for scope, attempts in run.history.items():
        ok = [a for a in attempts if is_2xx(a)]
        if ok:
            bodies[scope] = ok[0]
    end = time.monotonic() + VERIFY_TIMEOUT
    pending = list(bodies.items())
    inst = 0
    while pending:
        later = []
        for scope, ref in pending:
            body = run.sent_bodies.get((scope, ref["sent_sha"]))
            if body is None:
                continue
            a = chaos.send(run, scope[0], scope[1], inst, body, "verify")
            inst = (inst + 1) % INSTANCES
            if is_2xx(a):
                if not is_replay(a) or a["body"] != ref["body"]:
                    out.append((7, scope, "re-sent after the run: not the replay of its 2xx"))
            elif a["status"] is None or a["status"] >= 500:
                later.append((scope, ref))
            else:
                out.append((7, scope, "re-sent after the run: %d %s" % (a["status"],
                                                                         a.get("problem"))))
        pending = later
        if pending and time.monotonic() > end:
            out += [(7, s, "re-sent after the run: no replay within %.0fs" % VERIFY_TIMEOUT)
                    for s, _ in pending]
            break
        if pending:
            time.sleep(VERIFY_PAUSE)
    return len(bodies), out


def execute(run, args):
    run.base = args.base
    setup(run)
    print("citus: setup done in %.1fs, work dir %s" % (time.time() - run.t0, run.workdir))
    sys.stdout.flush()
    run.run_end = time.monotonic() + max(chaos.MIN_RUN, args.seconds - (time.time() - run.t0)
                                         - chaos.END_RESERVE - VERIFY_TIMEOUT / 2)
    fault = threading.Thread(target=guarded, args=(run, faults, run), daemon=True)
    run.chaos_thread = fault
    clients = [threading.Thread(target=chaos.client_main, args=(run, i), daemon=True)
               for i in range(run.clients)]
    for t in clients:
        t.start()
    fault.start()
    for t in clients:
        t.join(max(0.0, run.run_end - time.monotonic()) + chaos.JOIN_TIMEOUT)
    run.stop.set()
    fault.join(SCRIPT_TIMEOUT)
    if run.errors:
        raise HarnessError("%s: %s" % (type(run.errors[0]).__name__, run.errors[0]))
    if fault.is_alive() or any(t.is_alive() for t in clients):
        raise HarnessError("client or fault threads did not finish")
    chaos.check_alive(run)
    run.event("drained; waiting %.0fs for the sweeper" % chaos.SWEEP_WAIT)
    time.sleep(chaos.SWEEP_WAIT)
    chaos.check_alive(run)
    n_verified, replay_violations = verify(run)

    log = run.upstream.log()
    stuck = stuck_records(run.cluster.records)
    harness.stop_instances(run)
    violations, effects = check(run, log, stuck)
    violations += replay_violations

    harness.report_failures(run, violations, effects, "citus")
    harness.print_counts(run, "citus")
    for label, t_down, t_up in run.outages:
        secs, n = refusal(run, t_down, t_up)
        print("citus: %s at t=%.1fs: down %.1fs, keyed traffic refused for %.1fs "
              "(%d refused answers)" % (label, run.rel(t_down), t_up - t_down, secs, n))
    n_effects = sum(len(v) for v in effects.values())
    print("citus: verified_replays=%d" % n_verified)
    print("citus: requests=%d worker_kills=%d coordinator_restarts=%d effects=%d "
          "violations=%d" % (run.requests, run.worker_kills, run.coordinator_restarts,
                             n_effects, len(violations)))
    return len(violations)


def cleanup(run):
    """Stop the fault thread and the processes; bring every node back up
    (the cluster itself is its starter's to stop)."""
    run.stop.set()
    if run.chaos_thread is not None:
        run.chaos_thread.join(SCRIPT_TIMEOUT)
    harness.kill_processes(run)
    if run.base:
        for n in ("1", "2"):
            try:
                citus("start-worker", run.base, n)
            except (HarnessError, OSError, subprocess.SubprocessError) as e:
                print("citus: worker%s not restarted: %s" % (n, e), file=sys.stderr)


def main():
    ap = harness.arg_parser("idemproxy's chaos run on a Citus cluster", DEFAULT_SECONDS,
                            DEFAULT_CLIENTS, "wall time budget")
    ap.add_argument("--base", required=True, help="the cluster's directory (scripts/citus.sh)")
    return harness.run_main("citus", ap, BUDGET_SLACK, Run, execute, cleanup)


if __name__ == "__main__":
    sys.exit(main())
