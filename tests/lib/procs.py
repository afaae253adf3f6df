"""Processes and ports: the repository root and the binary under test
(ROOT, idemproxy_bin), bounded waits (poll, wait_port), stopping a process
(terminate), a free loopback port (free_port), and what an idemproxy's
stderr must not hold (sanitizer_report, non_json_lines)."""
import json
import os
import socket
import subprocess
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def env_bin():
    return os.environ.get("IDEMPROXY_BIN", "./idemproxy")


def idemproxy_bin():
    """The binary under test: IDEMPROXY_BIN (default ./idemproxy), relative
    to the repository root."""
    path = env_bin()
    if not os.path.isabs(path):
        path = os.path.join(ROOT, path)
    return path


POLL_LIMIT = 10.0


def poll(fn, limit=POLL_LIMIT, step=0.1):
    """fn() until it returns something true, at most limit seconds; its
    last value."""
    end = time.monotonic() + limit
    while True:
        v = fn()
        if v or time.monotonic() > end:
            return v
        time.sleep(step)


def terminate(proc, timeout=5):
    """SIGTERM proc and wait; SIGKILL it if it does not exit in time."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


FREE_PORT_TRIES = 100
_ports_given = set()     # every port free_port has returned in this process
_ports_lock = threading.Lock()


def free_port():
    """A loopback port nothing listens on now, never one this process was
    given before: the kernel may hand a port just released out again, and
    two free_port() calls for one configuration (listen, admin) must not
    name the same address."""
    for _ in range(FREE_PORT_TRIES):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        with _ports_lock:
            if port not in _ports_given:
                _ports_given.add(port)
                return port
    raise RuntimeError("no new free port in %d tries" % FREE_PORT_TRIES)


def port_open(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def wait_port(port, proc=None, timeout=10.0):
    """Wait until 127.0.0.1:port accepts; False if proc exits or time runs out."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            return False
        if port_open(port):
            return True
        time.sleep(0.05)
    return False


SANITIZER_MARKERS = ("AddressSanitizer", "LeakSanitizer", "runtime error:")


def sanitizer_report(binary, text):
    """True when binary is the sanitizer build and text holds a report."""
    return os.path.basename(binary).endswith("-asan") and \
        any(m in text for m in SANITIZER_MARKERS)


def non_json_lines(text):
    """The lines of an idemproxy's stderr that are not JSON objects (the
    fixture's own "---- start N ----" markers aside)."""
    bad = []
    for line in text.splitlines():
        if line.startswith("---- start ") or not line:
            continue
        try:
            if isinstance(json.loads(line), dict):
                continue
        except ValueError:
            pass
        bad.append(line)
    return bad
