#!/usr/bin/python3
"""Keys and tokens for scripts/bench.sh's identity runs (python3-cryptography).

  jwt.py JWKS_FILE
      write a JWKS with an ES256 key (kid "es") and an RS256 key (kid "rs")
      to JWKS_FILE and print two tokens, ES256 then RS256, for subject
      "bench", valid for an hour.
"""
import base64
import json
import sys
import time

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature


def b64u(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64u_int(n, size=None):
    return b64u(n.to_bytes(size or (n.bit_length() + 7) // 8, "big"))


def main():
    es = ec.generate_private_key(ec.SECP256R1())
    rs = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ep, rp = es.public_key().public_numbers(), rs.public_key().public_numbers()
    keys = {"keys": [
        {"kty": "EC", "crv": "P-256", "kid": "es", "x": b64u_int(ep.x, 32), "y": b64u_int(ep.y, 32)},
        {"kty": "RSA", "kid": "rs", "n": b64u_int(rp.n), "e": b64u_int(rp.e)},
    ]}
    with open(sys.argv[1], "w") as f:
        json.dump(keys, f)
    now = int(time.time())
    claims = b64u(json.dumps({"sub": "bench", "iat": now, "exp": now + 3600}).encode())
    for alg, kid in (("ES256", "es"), ("RS256", "rs")):
        signing = (b64u(json.dumps({"alg": alg, "typ": "JWT", "kid": kid}).encode()) + "." + claims).encode()
        if alg == "ES256":
            r, s = decode_dss_signature(es.sign(signing, ec.ECDSA(hashes.SHA256())))
            sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        else:
            sig = rs.sign(signing, padding.PKCS1v15(), hashes.SHA256())
        print(signing.decode() + "." + b64u(sig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
