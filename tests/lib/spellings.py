"""The three real servers test_spellings.py and test_upgrades.py put behind
idemproxy (App): tests/lib/spelling_apps.py under wsgiref and under
hypercorn, tests/lib/spelling_app.js under Node, each on a free port and
started from the repository root. Whoever starts an App stops it."""
import os
import subprocess

from tests.lib import http1, procs

HERE = os.path.dirname(os.path.abspath(__file__))
START_TIMEOUT = 15.0


class App:
    """One upstream server process on a free port."""

    def __init__(self, name):
        self.name = name
        self.port = procs.free_port()
        bind = "127.0.0.1:%d" % self.port
        argv = {
            "wsgi": ["/usr/bin/python3", "-m", "tests.lib.spelling_apps", "wsgi", str(self.port)],
            "asgi": ["/usr/bin/python3", "-m", "hypercorn", "--bind", bind,
                     "tests.lib.spelling_apps:asgi"],
            "node": ["node", os.path.join(HERE, "spelling_app.js"), str(self.port)],
        }[name]
        self.proc = subprocess.Popen(argv, cwd=procs.ROOT, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not procs.wait_port(self.port, self.proc, START_TIMEOUT):
            procs.terminate(self.proc)
            raise RuntimeError("%s upstream did not listen on %d" % (name, self.port))

    def count(self):
        """Executions of the protected handler so far."""
        r = http1.request(self.port, "GET", "/__count")
        assert r.status == 200, r
        return r.json()["count"]

    def stop(self):
        procs.terminate(self.proc)
