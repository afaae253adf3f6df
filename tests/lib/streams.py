"""Streaming clients for the relay tests: requests whose bodies are made
as they are sent and responses read as they arrive, hashed rather than
kept, so gigabytes pass through without filling the test's memory. Every
read has a timeout. Also the relay tests' proxies whose memory is
measured (bounded_proxy, footprint) and their request headers."""
import hashlib
import os
import time

from tests.lib import http1, procs

PATTERN = b"0123456789abcdef"   # the test upstream's BIG_PATTERN
BLOCK = 64 << 10
READ = 256 << 10
MIB = 1 << 20


def pattern_sha(n):
    """SHA-256 of the first n bytes of PATTERN repeated (what the test upstream sends)."""
    h = hashlib.sha256()
    block = PATTERN * (BLOCK // len(PATTERN))
    while n > 0:
        piece = block if n >= len(block) else block[:n]
        h.update(piece)
        n -= len(piece)
    return h.hexdigest()


def blocks(n):
    block = PATTERN * (BLOCK // len(PATTERN))
    while n > 0:
        piece = block if n >= len(block) else block[:n]
        n -= len(piece)
        yield piece


def is_asan():
    return os.path.basename(procs.env_bin()).endswith("-asan")


def scaled(n, asan_n):
    """n bytes, or asan_n under the sanitizer build (slower, with a larger
    baseline footprint): the assertions keep their meaning at either size."""
    return asan_n if is_asan() else n


def kernel_send_max():
    """The most a socket's send buffer grows to by itself (tcp_wmem's
    maximum): what the kernel may take of a response its client does not read."""
    try:
        with open("/proc/sys/net/ipv4/tcp_wmem") as f:
            return int(f.read().split()[2])
    except (OSError, ValueError, IndexError):
        return 4 * MIB


def stall_size(n, asan_n):
    """A response size for a client that stops reading: scaled(n, asan_n),
    and always more than the kernel's send buffer and the client's receive
    buffer take together, so the rest must wait in idemproxy."""
    return max(scaled(n, asan_n), kernel_send_max() + 4 * MIB)


def status_mib(proc, field):
    """A memory field of /proc/PID/status (VmRSS, VmHWM: the peak so far), in MiB."""
    with open("/proc/%d/status" % proc.pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise AssertionError("no %s for %d" % (field, proc.pid))


def peak_rss_mib(proc):
    return status_mib(proc, "VmHWM")


def rss_mib(proc):
    return status_mib(proc, "VmRSS")


# ---- the relay tests' proxies and requests ----

def passthrough(actor):
    return [("X-Actor-Id", actor)]


def act(action):
    return ("X-Test-Action", action)


# The sanitizer build keeps freed memory in a quarantine (256 MiB by
# default) to catch late uses; a small one keeps that checking without
# counting as the relay's memory.
ASAN_SMALL_QUARANTINE = "quarantine_size_mb=4:thread_local_quarantine_size_kb=64"


def bounded_proxy(proxy, settings=None):
    """A proxy whose memory the test measures."""
    p = proxy(settings, start=False)
    if is_asan():
        opts = os.environ.get("ASAN_OPTIONS", "")
        p.env = {"ASAN_OPTIONS": (opts + ":" if opts else "") + ASAN_SMALL_QUARANTINE}
    return p.start()


def footprint(p):
    """The proxy's resident set now, after start: the sanitizer build's baseline."""
    return rss_mib(p.proc)


class Result:
    """What a streamed response was: head, body length and digest, whether
    its framing said it was complete, interim responses, arrival times."""

    def __init__(self):
        self.interim = []        # (status, Headers)
        self.status = None
        self.headers = None
        self.length = 0
        self.sha = hashlib.sha256()
        self.complete = False    # the framing's end was seen
        self.closed = False      # the server closed the connection
        self.arrivals = []       # (monotonic time, bytes) of each body read
        self.keep = None         # the body itself, when asked for

    @property
    def digest(self):
        return self.sha.hexdigest()

    def __repr__(self):
        return "Result(%r, %r, len=%d, complete=%r, closed=%r)" % (
            self.status, self.headers, self.length, self.complete, self.closed)


class Conn(http1.Client):
    """A raw client connection that reads bodies as they arrive."""

    def fill(self, n=READ):
        """Read once; False at EOF (or a reset)."""
        try:
            data = self.sock.recv(n)
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            self.closed = True
            return False
        self.buf += data
        return True

    def until(self, sep, what):
        """The buffered bytes before sep, sep consumed; ConnectionClosed("no WHAT")
        when the peer closes first or more than a head's worth comes without it."""
        while sep not in self.buf:
            if len(self.buf) > http1.MAX_HEAD or not self.fill():
                raise http1.ConnectionClosed("no " + what)
        found, self.buf = self.buf.split(sep, 1)
        return found

    def line(self):
        return self.until(b"\r\n", "line")

    def head(self):
        """One response head: (status, Headers)."""
        lines = self.until(b"\r\n\r\n", "head").decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        pairs = []
        for line in lines[1:]:
            k, _, v = line.partition(":")
            pairs.append((k.strip(), v.strip()))
        return status, http1.Headers(pairs)

    def take(self, res, n):
        """Up to n buffered body bytes (reading when none are buffered) into res."""
        if not self.buf and not self.fill(min(n, READ)):
            return False
        data, self.buf = self.buf[:n], self.buf[n:]
        res.length += len(data)
        res.sha.update(data)
        res.arrivals.append((time.monotonic(), len(data)))
        if res.keep is not None:
            res.keep += data
        return True

    def send_request(self, method, path, headers=(), body_size=None, chunked=False):
        """Send a request; a body of body_size pattern bytes, Content-Length or chunked."""
        h = [("Host", "test")] + list(headers)
        if body_size is not None:
            h.append(("Transfer-Encoding", "chunked") if chunked
                     else ("Content-Length", str(body_size)))
        head = "%s %s HTTP/1.1\r\n" % (method, path) + \
            "".join("%s: %s\r\n" % kv for kv in h) + "\r\n"
        self.sock.sendall(head.encode("latin-1"))
        if body_size is None:
            return
        for piece in blocks(body_size):
            self.sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
        if chunked:
            self.sock.sendall(b"0\r\n\r\n")

    def read_response(self, method="GET", keep=False):
        """The response as it arrives; interim responses recorded apart."""
        res = Result()
        if keep:
            res.keep = bytearray()
        try:
            while True:
                status, headers = self.head()
                if 100 <= status < 200 and status != 101:
                    res.interim.append((status, headers))
                    continue
                break
        except http1.ConnectionClosed:
            res.closed = True
            return res
        res.status, res.headers = status, headers
        te = (headers.get("Transfer-Encoding") or "").lower()
        cl = headers.get("Content-Length")
        if method == "HEAD" or status in (101, 204, 304):
            res.complete = True
        elif "chunked" in te:
            try:
                while True:
                    size = int(self.line().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.line() != b"":
                            pass
                        res.complete = True
                        break
                    while size:
                        before = res.length
                        if not self.take(res, size):
                            raise http1.ConnectionClosed("cut in a chunk")
                        size -= res.length - before
                    self.line()
            except (http1.ConnectionClosed, ValueError):
                res.closed = True
        elif cl is not None:
            left = int(cl)
            while left:
                before = res.length
                if not self.take(res, left):
                    res.closed = True
                    break
                left -= res.length - before
            res.complete = left == 0
        else:
            while self.take(res, READ):
                pass
            res.complete = res.closed = True
        if res.complete and not res.closed:
            conn = ",".join(headers.get_all("Connection")).lower()
            res.closed = "close" in conn
        return res


def exchange(port, method, path, headers=(), body_size=None, chunked=False, keep=False):
    """One request on a fresh connection, its response streamed."""
    with Conn(port) as c:
        c.send_request(method, path, headers, body_size, chunked)
        return c.read_response(method, keep)
