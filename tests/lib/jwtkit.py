"""Keys, key sets and tokens the identity tests make themselves: JWKS
documents and compact JWS tokens for every algorithm idemproxy accepts,
signed with python3-cryptography (Debian's), and a small PKI made with the
openssl command line for the TLS tests."""
import base64
import hashlib
import hmac
import json
import os
import subprocess
import time

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

HASHES = {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}
ALGS = ["HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"]


def b64u(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int(n):
    return b64u(n.to_bytes((n.bit_length() + 7) // 8, "big"))


class Key:
    """One signing key of algorithm alg, and its public JWK."""

    def __init__(self, alg, kid=None):
        self.alg, self.kid = alg, kid
        if alg.startswith("HS"):
            self.secret = os.urandom(32 if alg == "HS256" else 64)
            self.jwk = {"kty": "oct", "k": b64u(self.secret)}
        elif alg[:2] in ("RS", "PS"):
            self.priv = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            pub = self.priv.public_key().public_numbers()
            self.jwk = {"kty": "RSA", "n": _int(pub.n), "e": _int(pub.e)}
        elif alg.startswith("ES"):
            curve, crv, size = (ec.SECP256R1(), "P-256", 32) if alg == "ES256" \
                else (ec.SECP384R1(), "P-384", 48)
            self.priv = ec.generate_private_key(curve)
            pub = self.priv.public_key().public_numbers()
            self.size = size
            self.jwk = {"kty": "EC", "crv": crv,
                        "x": b64u(pub.x.to_bytes(size, "big")),
                        "y": b64u(pub.y.to_bytes(size, "big"))}
        else:
            self.priv = ed25519.Ed25519PrivateKey.generate()
            raw = self.priv.public_key().public_bytes(serialization.Encoding.Raw,
                                                      serialization.PublicFormat.Raw)
            self.jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64u(raw)}
        if kid:
            self.jwk["kid"] = kid

    def sign(self, data, alg=None):
        alg = alg or self.alg
        h = HASHES.get(alg[2:])
        if alg.startswith("HS"):
            return hmac.new(self.secret, data, getattr(hashlib, "sha" + alg[2:])).digest()
        if alg.startswith("RS"):
            return self.priv.sign(data, padding.PKCS1v15(), h())
        if alg.startswith("PS"):
            return self.priv.sign(data, padding.PSS(mgf=padding.MGF1(h()),
                                                    salt_length=h().digest_size), h())
        if alg.startswith("ES"):
            r, s = decode_dss_signature(self.priv.sign(data, ec.ECDSA(h())))
            return r.to_bytes(self.size, "big") + s.to_bytes(self.size, "big")
        return self.priv.sign(data)

    def public_pem(self):
        return self.priv.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def jwks(*keys):
    return json.dumps({"keys": [k.jwk for k in keys]})


def token(key, claims=None, header=None, alg=None, signer=None, now=None):
    """A compact JWS of claims (sub "alice", iat and a 10-minute exp by
    default; None values are left out) signed by key (or signer(data))."""
    now = int(time.time()) if now is None else now
    body = {"sub": "alice", "iat": now, "exp": now + 600}
    body.update(claims or {})
    body = {k: v for k, v in body.items() if v is not None}
    head = {"alg": alg or key.alg, "typ": "JWT"}
    if key.kid:
        head["kid"] = key.kid
    head.update(header or {})
    head = {k: v for k, v in head.items() if v is not None}
    signing = (b64u(json.dumps(head).encode()) + "." + b64u(json.dumps(body).encode())).encode()
    sig = signer(signing) if signer else key.sign(signing, alg)
    return signing.decode() + "." + b64u(sig)


def openssl(*args, cwd):
    r = subprocess.run(["openssl"] + list(args), cwd=cwd, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    assert r.returncode == 0, r.stderr
    return r


class Pki:
    """A CA and certificates it signs, in directory d (openssl CLI)."""

    def __init__(self, d, name="ca"):
        self.d = d
        self.ca = os.path.join(d, name + ".pem")
        self.ca_key = os.path.join(d, name + ".key")
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-nodes", "-keyout", self.ca_key, "-out", self.ca, "-days", "2",
                "-subj", "/CN=idemproxy test " + name, cwd=d)

    def issue(self, name, dns=("localhost",), ips=("127.0.0.1",), rsa=False):
        """(certificate, key) for the given names, signed by this CA; the key
        is P-256, or RSA 2048 with rsa."""
        crt, key, csr = (os.path.join(self.d, name + ext) for ext in (".crt", ".key", ".csr"))
        ext = os.path.join(self.d, name + ".ext")
        sans = ["DNS:" + n for n in dns] + ["IP:" + i for i in ips]
        with open(ext, "w") as f:
            f.write("subjectAltName=%s\n" % ",".join(sans))
        keyopts = ["-newkey", "rsa:2048"] if rsa else \
            ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
        openssl("req", *keyopts, "-nodes",
                "-keyout", key, "-out", csr, "-subj", "/CN=" + (dns[0] if dns else name), cwd=self.d)
        openssl("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key,
                "-CAcreateserial", "-out", crt, "-days", "2", "-extfile", ext, cwd=self.d)
        return crt, key
