"""A real gRPC server for the gRPC tests: python3-grpcio (Debian's),
cleartext HTTP/2 on 127.0.0.1, raw bytes in and out (no protoc: generic
handlers whose messages are the bytes the test sends).

    /usr/bin/python3 -m tests.lib.grpc_upstream

Prints its port as the first line on stdout. Service demo.Pay:

- Charge (unary) and Watch (server streaming) take a JSON request:
  {"id": ID, "hold": bool, "code": NAME, "details": TEXT,
   "details_bin": HEX, "trailers": [[NAME, VALUE], ...], "n": COUNT}.
  Every call counts as an effect of its method and id before anything
  else. "hold" blocks it until control.Admin/Release names its id; "code"
  ends it with that status (and "details"), after setting the trailers and
  grpc-status-details-bin from "details_bin"; otherwise Charge answers
  {"id", "n": the id's count} and Watch answers "n" messages "ID:i".
- Upload (client streaming) and Chat (bidirectional) count one effect
  per call and answer the number of messages they read.

control.Admin/Count answers {"METHOD ID": effects, "entered": [ids held]}
as JSON; control.Admin/Release {"id": ID} lets a held call go on.
"""
import json
import sys
import threading
from concurrent import futures

import grpc

LOCK = threading.Lock()
EFFECTS = {}
HELD = {}  # id -> threading.Event, while a call waits for Release


def effect(method, ident):
    with LOCK:
        k = "%s %s" % (method, ident)
        EFFECTS[k] = EFFECTS.get(k, 0) + 1
        return EFFECTS[k]


def hold(ident):
    with LOCK:
        ev = HELD.setdefault(ident, threading.Event())
    ev.wait(60)
    with LOCK:
        HELD.pop(ident, None)


def finish(req, ctx):
    """End the call as req says: its trailers, then its status (or go on)."""
    trailers = [(k, v) for k, v in req.get("trailers", [])]
    if req.get("details_bin"):
        trailers.append(("grpc-status-details-bin", bytes.fromhex(req["details_bin"])))
    if trailers:
        ctx.set_trailing_metadata(tuple(trailers))
    if req.get("code"):
        ctx.abort(getattr(grpc.StatusCode, req["code"]), req.get("details", ""))


def charge(raw, ctx):
    req = json.loads(raw)
    n = effect("Charge", req.get("id"))
    if req.get("hold"):
        hold(req.get("id"))
    finish(req, ctx)
    return json.dumps({"id": req.get("id"), "n": n}).encode()


def watch(raw, ctx):
    req = json.loads(raw)
    effect("Watch", req.get("id"))
    for i in range(req.get("n", 3)):
        yield ("%s:%d" % (req.get("id"), i)).encode()
    finish(req, ctx)


def upload(it, ctx):
    effect("Upload", "-")
    return b"%d" % sum(1 for _ in it)


def chat(it, ctx):
    effect("Chat", "-")
    yield b"%d" % sum(1 for _ in it)


def count(raw, ctx):
    with LOCK:
        out = dict(EFFECTS)
        out["entered"] = sorted(HELD)
    return json.dumps(out).encode()


def release(raw, ctx):
    ident = json.loads(raw)["id"]
    with LOCK:
        ev = HELD.get(ident)
    if ev:
        ev.set()
    return b"released" if ev else b"none"


def main():
    pay = grpc.method_handlers_generic_handler("demo.Pay", {
        "Charge": grpc.unary_unary_rpc_method_handler(charge),
        "Watch": grpc.unary_stream_rpc_method_handler(watch),
        "Upload": grpc.stream_unary_rpc_method_handler(upload),
        "Chat": grpc.stream_stream_rpc_method_handler(chat),
    })
    admin = grpc.method_handlers_generic_handler("control.Admin", {
        "Count": grpc.unary_unary_rpc_method_handler(count),
        "Release": grpc.unary_unary_rpc_method_handler(release),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    server.add_generic_rpc_handlers((pay, admin))
    port = server.add_insecure_port("127.0.0.1:%s" % (sys.argv[1] if len(sys.argv) > 1 else 0))
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
