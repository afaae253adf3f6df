#!/usr/bin/python3
"""The upload sink of scripts/bench.sh (f): an HTTP/1.1 server that reads
each request body whole (Content-Length or chunked) into one reused buffer,
keeps nothing, and only then answers 201 with the byte count. Prints its
port on the first line of stdout.

    sink.py [PORT]      (0 or nothing: any free port)
"""
import socket
import sys
import threading

HOST = "127.0.0.1"
BUF = 1 << 20
HEAD_MAX = 65536


class Conn:
    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray(BUF)
        self.view = memoryview(self.buf)
        self.pending = b""

    def recv(self):
        if self.pending:
            data, self.pending = self.pending, b""
            return data
        return self.sock.recv(BUF)

    def until(self, sep):
        """The bytes before sep (at most HEAD_MAX of them), sep consumed."""
        data = b""
        while sep not in data:
            if len(data) > HEAD_MAX:
                raise ValueError("line or head too long")
            more = self.recv()
            if not more:
                raise EOFError
            data += more
        found, _, self.pending = data.partition(sep)
        return found

    def line(self):
        return self.until(b"\r\n")

    def head(self):
        return self.until(b"\r\n\r\n").decode("latin-1").split("\r\n")

    def skip(self, n):
        """Read and drop n body bytes."""
        if self.pending:
            take = min(n, len(self.pending))
            self.pending = self.pending[take:]
            n -= take
        while n > 0:
            got = self.sock.recv_into(self.view, min(n, BUF))
            if got == 0:
                raise EOFError
            n -= got

    def serve(self):
        while True:
            lines = self.head()
            headers = {}
            for h in lines[1:]:
                k, _, v = h.partition(":")
                headers[k.strip().lower()] = v.strip()
            if "100-continue" in headers.get("expect", "").lower():
                self.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            total = 0
            if "chunked" in headers.get("transfer-encoding", "").lower():
                while True:
                    size = int(self.line().split(b";")[0], 16)
                    if size == 0:
                        while self.line():
                            pass
                        break
                    self.skip(size)
                    self.line()
                    total += size
            else:
                total = int(headers.get("content-length", "0"))
                self.skip(total)
            body = b"%d" % total
            self.sock.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s"
                              % (len(body), body))


def handle(sock):
    try:
        Conn(sock).serve()
    except (EOFError, OSError, ValueError):
        pass
    finally:
        sock.close()


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((HOST, port))
    srv.listen(128)
    sys.stdout.write("%d\n" % srv.getsockname()[1])
    sys.stdout.flush()
    while True:
        sock, _ = srv.accept()
        threading.Thread(target=handle, args=(sock,), daemon=True).start()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
