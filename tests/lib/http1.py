"""A small HTTP/1.1 client on raw sockets, so a test sends exactly the
bytes it means (duplicate headers, bad framing, pipelining) and reads
exactly what came back: requests (build_request, request, raw_exchange),
one keep-alive connection (Client) and what it read (Response, Headers).
Every read has a timeout."""
import json
import socket

IO_TIMEOUT = 15.0
MAX_HEAD = 64 * 1024


class Headers:
    """Response headers: ordered (name, value) pairs, looked up case-insensitively."""

    def __init__(self, pairs):
        self.pairs = list(pairs)

    def get(self, name, default=None):
        name = name.lower()
        for k, v in self.pairs:
            if k.lower() == name:
                return v
        return default

    def get_all(self, name):
        name = name.lower()
        return [v for k, v in self.pairs if k.lower() == name]

    def __contains__(self, name):
        return self.get(name) is not None

    def __repr__(self):
        return "Headers(%r)" % self.pairs


class Response:
    def __init__(self, status, reason, headers, body, closed):
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
        self.closed = closed    # the server closed the connection after it

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self):
        return "Response(%d, %r, %r)" % (self.status, self.headers, self.body[:300])


class ConnectionClosed(Exception):
    pass


def _encode(v):
    return v if isinstance(v, bytes) else str(v).encode("latin-1")


def build_request(method, path, headers=(), body=None, chunked=None, host="test"):
    """Bytes of one request. headers: dict or (name, value) pairs, sent as
    given (duplicates kept). Content-Length is added for a body unless a
    framing header was given; chunked: a list of chunks to send instead."""
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers)
    names = {k.lower() for k, _ in pairs}
    out = [b"%s %s HTTP/1.1\r\n" % (_encode(method), _encode(path))]
    if "host" not in names:
        out.append(b"Host: %s\r\n" % _encode(host))
    payload = b""
    if chunked is not None:
        if "transfer-encoding" not in names:
            pairs.append(("Transfer-Encoding", "chunked"))
        payload = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunked) + b"0\r\n\r\n"
    elif body is not None:
        payload = body if isinstance(body, bytes) else body.encode("utf-8")
        if "content-length" not in names and "transfer-encoding" not in names:
            pairs.append(("Content-Length", str(len(payload))))
    for k, v in pairs:
        out.append(_encode(k) + b": " + _encode(v) + b"\r\n")
    out.append(b"\r\n")
    return b"".join(out) + payload


class Client:
    """One client connection (keep-alive) to 127.0.0.1:port."""

    def __init__(self, port, timeout=IO_TIMEOUT, tls=None, source=None):
        """tls: an ssl.SSLContext to speak TLS with (server name "localhost");
        source: the local address to connect from (any of 127/8), else the
        kernel's choice."""
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname="localhost")
        self.buf = b""
        self.closed = False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            raise ConnectionClosed("connection closed by the server")
        self.buf += data

    def _read_line(self):
        while b"\r\n" not in self.buf:
            if len(self.buf) > MAX_HEAD:
                raise ValueError("line too long")
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _read_n(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def _read_to_close(self):
        while True:
            try:
                self._fill()
            except ConnectionClosed:
                data, self.buf = self.buf, b""
                return data

    def read_response(self, method="GET"):
        """Read one response; 1xx interim responses are skipped."""
        while True:
            while b"\r\n\r\n" not in self.buf:
                if len(self.buf) > MAX_HEAD:
                    raise ValueError("response head too large")
                self._fill()
            head, self.buf = self.buf.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
                raise ValueError("bad status line %r" % lines[0])
            status = int(parts[1])
            reason = parts[2] if len(parts) > 2 else ""
            pairs = []
            for line in lines[1:]:
                k, _, v = line.partition(":")
                pairs.append((k.strip(), v.strip()))
            headers = Headers(pairs)
            if 100 <= status < 200:
                continue
            break
        conn_tokens = ",".join(headers.get_all("Connection")).lower()
        if method == "HEAD" or status in (204, 304):
            body = b""
        elif "chunked" in (headers.get("Transfer-Encoding") or "").lower():
            body = bytearray()
            while True:
                size = int(self._read_line().split(b";")[0].strip(), 16)
                if size == 0:
                    while self._read_line() != b"":
                        pass
                    break
                body += self._read_n(size)
                self._read_line()
            body = bytes(body)
        elif headers.get("Content-Length") is not None:
            body = self._read_n(int(headers.get("Content-Length")))
        else:
            body = self._read_to_close()
        closed = self.closed or "close" in conn_tokens
        return Response(status, reason, headers, body, closed)

    def request(self, method, path, headers=(), body=None, chunked=None):
        self.send(build_request(method, path, headers, body, chunked))
        return self.read_response(method)

    def wait_closed(self, timeout=3.0):
        """True when the server closes the connection within timeout."""
        if self.closed:
            return True
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False
        finally:
            self.sock.settimeout(IO_TIMEOUT)


def request(port, method, path, headers=(), body=None, chunked=None, timeout=IO_TIMEOUT,
            tls=None):
    """One request on a fresh connection (TLS with the ssl.SSLContext tls)."""
    with Client(port, timeout, tls) as c:
        return c.request(method, path, headers, body, chunked)

def raw_exchange(port, data, timeout=5.0):
    """Send raw bytes, read one response; returns (Response, closed) where
    closed says whether the server then closed the connection."""
    with Client(port, timeout) as c:
        c.send(data)
        r = c.read_response()
        return r, c.wait_closed(timeout)
