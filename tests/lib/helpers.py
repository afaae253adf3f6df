"""The integration tests' one import: `from tests.lib import helpers`,
then helpers.NAME (or `from tests.lib.helpers import NAME`) for any of
the names below. Each is defined in the module it is imported from here;
this module defines nothing of its own, so that a test file needs one
import line for the harness's everyday tools, and the harness's own
modules, the chaos run and the HA stage import the defining module."""
from tests.lib.expect import (PROBLEM_BASE, PROBLEM_CTYPE, RACE_THREADS, Background, SlowOwner,
                              assert_owner, assert_replay_of, check_race, course, problem, race,
                              sha)
from tests.lib.http1 import (IO_TIMEOUT, MAX_HEAD, Client, ConnectionClosed, Headers, Response,
                             build_request, raw_exchange, request)
from tests.lib.procs import (POLL_LIMIT, ROOT, SANITIZER_MARKERS, env_bin, free_port,
                             idemproxy_bin, non_json_lines, poll, port_open, sanitizer_report,
                             terminate, wait_port)
from tests.lib.proxy import check_config, show_config
from tests.lib.records import Records, record_state, record_status, record_text, sql
from tests.lib.upstream import LogEntry, Upstream

__all__ = [
    # expect: bodies, problem+json, owners and replays, requests on threads
    "PROBLEM_BASE", "PROBLEM_CTYPE", "RACE_THREADS", "Background", "SlowOwner", "assert_owner",
    "assert_replay_of", "check_race", "course", "problem", "race", "sha",
    # http1: the raw-socket HTTP/1.1 client
    "IO_TIMEOUT", "MAX_HEAD", "Client", "ConnectionClosed", "Headers", "Response",
    "build_request", "raw_exchange", "request",
    # procs: the root and the binary, bounded waits, ports, stderr checks
    "POLL_LIMIT", "ROOT", "SANITIZER_MARKERS", "env_bin", "free_port", "idemproxy_bin",
    "non_json_lines", "poll", "port_open", "sanitizer_report", "terminate", "wait_port",
    # proxy: `idemproxy -t` on a configuration text, `idemproxy -T` on a file
    "check_config", "show_config",
    # records: the record table
    "Records", "record_state", "record_status", "record_text", "sql",
    # upstream: the test upstream's client side
    "LogEntry", "Upstream",
]
