"""An ASGI app for the HTTP/2 upstream tests, served by hypercorn, which
speaks h2c with prior knowledge on a plain socket: test_h2up_smoke.py puts
idemproxy (`upstream h2c://...`) in front of it.

  POST /api/courses   runs once per request (the effect counted), 201 with
                      a JSON body naming the HTTP version it was asked in
                      and the body's length, and an X-Order-Id header;
                      with X-Test-Action: silent it runs, then never answers
  GET  /__count       {"count": N, "versions": [...]}: POSTs run so far and
                      the HTTP versions of every request
  PUT  /anything      200, {"length": N, "sha256": HEX} of the request body
  GET  /big           200, BIG bytes of "x"
  GET  /slow?S        200 after S seconds (5 by default)
  GET  /anything      200, a text body, and the request's headers echoed as
                      JSON in X-Seen (lower-cased names)

Run: /usr/bin/python3 -m hypercorn --bind 127.0.0.1:PORT tests.lib.h2_app:app
"""
import asyncio
import hashlib
import json

BIG = 4 * 1024 * 1024

STATE = {"count": 0, "versions": []}


async def _body(receive):
    chunks = []
    while True:
        msg = await receive()
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body"):
            return b"".join(chunks)


async def _send(send, status, headers, body):
    await send({"type": "http.response.start", "status": status,
                "headers": [(k.encode(), v.encode()) for k, v in headers]})
    await send({"type": "http.response.body", "body": body})


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = await _body(receive)
    if scope["path"] == "/__count":
        await _send(send, 200, [("content-type", "application/json")],
                    json.dumps(STATE).encode())
        return
    STATE["versions"].append(scope["http_version"])
    if scope["method"] == "POST" and scope["path"] == "/api/courses":
        STATE["count"] += 1
        n = STATE["count"]
        if dict(scope["headers"]).get(b"x-test-action") == b"silent":
            await asyncio.sleep(30)  # the effect happened; the answer never comes
        out = json.dumps({"id": n, "http_version": scope["http_version"],
                          "length": len(body)}).encode()
        await _send(send, 201, [("content-type", "application/json"),
                                ("x-order-id", "order-%d" % n),
                                ("content-length", str(len(out)))], out)
        return
    if scope["method"] == "PUT":
        out = json.dumps({"length": len(body),
                          "sha256": hashlib.sha256(body).hexdigest()}).encode()
        await _send(send, 200, [("content-type", "application/json")], out)
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(float(scope["query_string"] or b"5"))
        await _send(send, 200, [("content-type", "text/plain")], b"late\n")
        return
    if scope["path"] == "/big":
        await _send(send, 200, [("content-type", "application/octet-stream")],
                    b"x" * BIG)
        return
    seen = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
    await _send(send, 200, [("content-type", "text/plain"), ("x-seen", json.dumps(seen))],
                b"hello over " + scope["http_version"].encode() + b"\n")
