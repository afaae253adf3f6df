#!/usr/bin/python3
"""gRPC helpers for section (l) of scripts/bench.sh (python3-grpcio).

  grpc_client.py probe PORT MESSAGE_FILE [CALLS]
      call /bench.Echo/Unary CALLS times [10] on one channel to
      127.0.0.1:PORT with the message of MESSAGE_FILE (a 5-byte
      length-prefixed gRPC message, as h2load sends it); every call must
      end with status OK and the same message back.

  grpc_client.py serve PORT PROCESSES
      a unary echo server for /bench.Echo/Unary (raw bytes, no protobuf)
      in PROCESSES processes sharing 127.0.0.1:PORT (grpc.so_reuseport):
      the upstream of (l) when nginx's echo module is not installed.
      Runs until SIGTERM.

Exits 1 with a message on stderr when anything is not as expected.
"""
import os
import signal
import sys
from concurrent import futures

import grpc

HOST = "127.0.0.1"
TIMEOUT = 10.0
METHOD = "/bench.Echo/Unary"
PREFIX = 5  # compressed flag and 4-byte length


def fail(msg):
    print("grpc_client.py: " + msg, file=sys.stderr)
    sys.exit(1)


def message(path):
    """The payload of the one length-prefixed message in file path."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < PREFIX or data[0] != 0 or int.from_bytes(data[1:PREFIX], "big") != len(data) - PREFIX:
        fail(path + " is not one uncompressed length-prefixed gRPC message")
    return data[PREFIX:]


def probe(port, path, calls):
    payload = message(path)
    with grpc.insecure_channel("%s:%d" % (HOST, port)) as channel:
        call = channel.unary_unary(METHOD)
        for i in range(calls):
            try:
                answer, state = call.with_call(payload, timeout=TIMEOUT)
            except grpc.RpcError as e:
                fail("call %d to port %d: %s %s" % (i, port, e.code(), e.details()))
            if state.code() != grpc.StatusCode.OK or answer != payload:
                fail("call %d to port %d: status %s, %d bytes back for %d"
                     % (i, port, state.code(), len(answer), len(payload)))


def serve_one(port):
    def echo(request, context):
        return request

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                         options=[("grpc.so_reuseport", 1)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "bench.Echo", {"Unary": grpc.unary_unary_rpc_method_handler(echo)}),))
    if server.add_insecure_port("%s:%d" % (HOST, port)) != port:
        fail("cannot listen on port %d" % port)
    server.start()
    signal.signal(signal.SIGTERM, lambda *_: server.stop(0))
    server.wait_for_termination()


def serve(port, processes):
    kids = []
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            serve_one(port)
            os._exit(0)
        kids.append(pid)

    def stop(*_):
        for pid in kids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, stop)
    for pid in kids:
        os.waitpid(pid, 0)


def main(argv):
    if len(argv) >= 4 and argv[1] == "probe":
        probe(int(argv[2]), argv[3], int(argv[4]) if len(argv) > 4 else 10)
    elif len(argv) == 4 and argv[1] == "serve":
        serve(int(argv[2]), int(argv[3]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv)
