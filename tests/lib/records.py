"""idemproxy's records from a test: the command `idemproxy records`
(records) and a record left unknown (make_unknown)."""
import subprocess

from tests.lib import helpers
from tests.lib.helpers import course, problem

CLI_TIMEOUT = 30


def records(binary, conf, *args, stdin=b""):
    """Run `idemproxy records -c conf ARGS`; stdout and stderr as bytes."""
    r = subprocess.run([binary, "records", "-c", conf] + list(args), input=stdin,
                       capture_output=True, timeout=CLI_TIMEOUT)
    assert not helpers.sanitizer_report(binary, r.stderr.decode("utf-8", "replace")), r.stderr
    return r


def make_unknown(p, ids, key):
    """An owner whose upstream resets the connection: a 502 and an unknown
    record; a retry is held with outcome-unknown."""
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
               headers=[("X-Test-Action", "reset")])
    problem(r, "upstream-error", 502)
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
            "outcome-unknown", 409)
