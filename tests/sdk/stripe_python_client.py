"""stripe-python (Debian's python3-stripe) against idemproxy, as an
application built on it would use it: Customer.create with an
idempotency_key, the library's own retries (stripe.max_network_retries)
and error classes. Run with /usr/bin/python3 (Debian's package is there).

    /usr/bin/python3 tests/sdk/stripe_python_client.py PORT failed KEY RETRIES
        one call with KEY that the upstream answers 500 (tests/sdk/upstream.py,
        metadata[action]=fail500), with max_network_retries RETRIES: its
        attempts show where the library stopped

Prints one JSON line, as the node scripts do: the call's outcome (returned:
id, status, headers; or raised: class, http_status, headers) and its
attempts as the library's HTTP client saw them (status and the headers
lib.js picks of every response)."""
import json
import sys
import time

import stripe
import stripe.http_client
import stripe.version

# The headers a test reads, as tests/sdk/lib.js picks them.
SEEN = ["content-type", "x-should-retry", "stripe-should-retry", "retry-after",
        "retry-after-ms", "idempotent-replayed", "idempotency-key-expires", "request-id"]


def pick(headers):
    out = {}
    for name in SEEN:
        v = headers.get(name) if headers is not None else None
        if v is not None:
            out[name] = str(v)
    return out


class CountingClient(stripe.http_client.RequestsClient):
    """The library's requests-based client, recording every attempt."""

    def __init__(self):
        super().__init__(timeout=30)
        self.attempts = []

    def request(self, method, url, headers, post_data=None):
        a = {"method": method, "url": url,
             "idempotency_key": (headers or {}).get("Idempotency-Key"), "t": time.time()}
        self.attempts.append(a)
        try:
            body, status, rheaders = super().request(method, url, headers, post_data)
        except Exception as e:
            a["error"] = type(e).__name__
            raise
        a["status"] = status
        a["headers"] = pick(rheaders)
        return body, status, rheaders


def failed(port, key, retries):
    http = CountingClient()
    stripe.default_http_client = http
    stripe.api_key = "sk_test_x"
    stripe.api_base = "http://127.0.0.1:%d" % port
    stripe.max_network_retries = retries
    stripe.enable_telemetry = False
    t0 = time.time()
    try:
        c = stripe.Customer.create(name="Fail", email="fail@example.com",
                                   metadata={"action": "fail500"}, idempotency_key=key)
        call = {"returned": True, "id": c.id, "attempts": http.attempts}
    except stripe.error.StripeError as e:
        call = {"raised": type(e).__name__, "http_status": e.http_status,
                "headers": pick(e.headers), "message": e.user_message,
                "attempts": http.attempts}
    call["ms"] = int((time.time() - t0) * 1000)
    return {"call": call}


def main(argv):
    port, scenario = int(argv[1]), argv[2]
    if scenario != "failed":
        raise SystemExit("unknown scenario " + scenario)
    result = failed(port, argv[3], int(argv[4]))
    result["sdk"] = {"name": "stripe-python", "version": stripe.version.VERSION}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
