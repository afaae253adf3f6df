#!/usr/bin/python3
"""Small HTTP/1.1 clients for scripts/bench.sh.

  client.py warm PORT PREFIX COUNT [PATH [AUTHORIZATION]]
      POST once with each key PREFIX-0 .. PREFIX-(COUNT-1) (the body of
      replay.lua) to PATH [/api/items] on one keep-alive connection, as
      actor X-Actor-Id: bench or with the Authorization header given;
      every answer must be 201.

  client.py idle PORT PID COUNT SECONDS
      open COUNT keep-alive connections, send one GET /api/items on each
      and read its 200, hold them all open SECONDS, then print
      "VmRSS_KiB VmHWM_KiB" of process PID read while they are open.

  client.py slow PORT PID COUNT SECONDS PATH
      open COUNT connections, send GET PATH (a large response) on each,
      read its head and 64 KiB of body and then nothing more, hold them
      SECONDS, then print "VmRSS_KiB VmHWM_KiB" of PID read meanwhile.

Exits 1 with a message on stderr when anything is not as expected.
"""
import socket
import sys
import time

HOST = "127.0.0.1"
TIMEOUT = 10.0
BODY = b'{"name":"widget","qty":1,"tags":["bench"]}'


def read_response(sock, buf):
    """Read one response with Content-Length from sock; return (status, rest)."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise IOError("connection closed before the response head")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise IOError("connection closed inside the response body")
        rest += chunk
    return status, rest[length:]


def warm(port, prefix, count, path="/api/items", auth=None):
    sock = socket.create_connection((HOST, port), timeout=TIMEOUT)
    buf = b""
    actor = "Authorization: %s" % auth if auth else "X-Actor-Id: bench"
    for i in range(count):
        req = (
            "POST %s HTTP/1.1\r\nHost: %s:%d\r\n"
            "Idempotency-Key: %s-%d\r\n%s\r\n"
            "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % (path, HOST, port, prefix, i, actor, len(BODY))
        ).encode() + BODY
        sock.sendall(req)
        status, buf = read_response(sock, buf)
        if status != 201:
            raise IOError("warm-up request %d answered %d, expected 201" % (i, status))
    sock.close()


def proc_status(pid):
    fields = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            name, _, value = line.partition(":")
            fields[name] = value.split()[0] if value.split() else ""
    return int(fields["VmRSS"]), int(fields["VmHWM"])


def idle(port, pid, count, seconds):
    socks = []
    req = ("GET /api/items HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (HOST, port)).encode()
    try:
        for i in range(count):
            sock = socket.create_connection((HOST, port), timeout=TIMEOUT)
            socks.append(sock)
            sock.sendall(req)
            status, _ = read_response(sock, b"")
            if status != 200:
                raise IOError("connection %d: GET answered %d, expected 200" % (i, status))
        time.sleep(seconds)
        rss, hwm = proc_status(pid)
        # every connection must still be open: a closed one reads b"" at once
        for sock in socks:
            sock.setblocking(False)
            try:
                if sock.recv(1) == b"":
                    raise IOError("the proxy closed an idle connection early")
            except BlockingIOError:
                pass
        print(rss, hwm)
    finally:
        for sock in socks:
            sock.close()


def slow(port, pid, count, seconds, path):
    socks = []
    req = ("GET %s HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (path, HOST, port)).encode()
    try:
        for i in range(count):
            sock = socket.create_connection((HOST, port), timeout=TIMEOUT)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
            socks.append(sock)
            sock.sendall(req)
        for i, sock in enumerate(socks):
            buf = b""
            while b"\r\n\r\n" not in buf or len(buf) < 64 << 10:
                chunk = sock.recv(65536)
                if not chunk:
                    raise IOError("connection %d closed early" % i)
                buf += chunk
            if int(buf.split(b" ", 2)[1]) != 200:
                raise IOError("connection %d: GET %s answered %r" % (i, path, buf[:40]))
        time.sleep(seconds)
        rss, hwm = proc_status(pid)
        print(rss, hwm)
    finally:
        for sock in socks:
            sock.close()


def main(argv):
    try:
        if 5 <= len(argv) <= 7 and argv[1] == "warm":
            warm(int(argv[2]), argv[3], int(argv[4]), *argv[5:])
        elif len(argv) == 6 and argv[1] == "idle":
            idle(int(argv[2]), int(argv[3]), int(argv[4]), float(argv[5]))
        elif len(argv) == 7 and argv[1] == "slow":
            slow(int(argv[2]), int(argv[3]), int(argv[4]), float(argv[5]), argv[6])
        else:
            sys.stderr.write(__doc__)
            return 2
    except (OSError, ValueError, KeyError) as e:
        sys.stderr.write("client.py: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
