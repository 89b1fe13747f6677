#!/usr/bin/env python3
"""A minimal OIDC token endpoint for the OAUTHBEARER tests (standard library + openssl).

  oidc.py jwks KEY.pem          print the JWKS (RS256 public key, kid "local") for Kafka
  oidc.py serve KEY.pem PORT    serve POST /token: client_credentials with HTTP basic
                                auth router:router-oidc-secret, answered with an RS256
                                JWT (sub "router", 10 minutes); anything else is 401

Only for the local broker: it listens on 127.0.0.1 and knows one client.
"""
import base64
import http.server
import json
import subprocess
import sys
import time

CLIENT_ID, CLIENT_SECRET = "router", "router-oidc-secret"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwks(key: str) -> dict:
    out = subprocess.run(["openssl", "rsa", "-in", key, "-noout", "-modulus"],
                         check=True, capture_output=True, text=True).stdout
    modulus = bytes.fromhex(out.strip().split("=", 1)[1])
    return {"keys": [{"kty": "RSA", "kid": "local", "use": "sig", "alg": "RS256",
                      "n": b64url(modulus), "e": b64url((65537).to_bytes(3, "big"))}]}


def token(key: str) -> str:
    now = int(time.time())
    header = b64url(json.dumps({"alg": "RS256", "typ": "JWT", "kid": "local"}).encode())
    claims = b64url(json.dumps({"sub": CLIENT_ID, "iss": "outbox-router-local", "iat": now,
                                "exp": now + 600, "scope": "kafka"}).encode())
    signing_input = f"{header}.{claims}".encode()
    signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key], input=signing_input,
                               check=True, capture_output=True).stdout
    return f"{header}.{claims}.{b64url(signature)}"


def serve(key: str, port: int) -> None:
    expected = "Basic " + base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode()
            if self.path != "/token" or "grant_type=client_credentials" not in body \
                    or self.headers.get("Authorization") != expected:
                self.answer(401, {"error": "invalid_client"})
                return
            self.answer(200, {"access_token": token(key), "token_type": "Bearer",
                              "expires_in": 600})

        def answer(self, code, doc):
            data = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    if sys.argv[1:2] == ["jwks"]:
        print(json.dumps(jwks(sys.argv[2])))
    elif sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)
