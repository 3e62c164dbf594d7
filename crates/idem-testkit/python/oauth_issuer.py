"""An OAuth authorization server on loopback, as far as a resource server
sees one, for the Python cases of `idem proxy` and of the example MCP
server: its metadata (RFC 8414), its key set, and the access tokens it
signs (ES256, with PyJWT)."""

import json
import time


class Issuer:
    """An OAuth authorization server as far as a resource server sees one:
    its metadata (RFC 8414) and its key set, served on loopback, and the
    access tokens it signs (ES256, with PyJWT)."""

    def __init__(self) -> None:
        import http.server
        import threading

        from cryptography.hazmat.primitives.asymmetric import ec
        from jwt.algorithms import ECAlgorithm

        self.key = ec.generate_private_key(ec.SECP256R1())
        self.stranger = ec.generate_private_key(ec.SECP256R1())  # not published
        public = json.loads(ECAlgorithm.to_jwk(self.key.public_key()))
        self.jwks = {"keys": [{**public, "kid": "k1", "alg": "ES256", "use": "sig"}]}
        self.key_fetches = 0
        issuer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path == "/.well-known/oauth-authorization-server":
                    body = {"issuer": issuer.url, "jwks_uri": issuer.url + "/jwks.json"}
                elif self.path == "/jwks.json":
                    issuer.key_fetches += 1
                    body = issuer.jwks
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(self, sub: str, audience: str, *, key=None, kid="k1", issuer=None, expires_in=300, alg="ES256") -> str:
        import jwt

        now = int(time.time())
        claims = {"iss": issuer or self.url, "aud": audience, "sub": sub, "iat": now, "exp": now + expires_in}
        return jwt.encode(claims, key or self.key, algorithm=alg, headers={"kid": kid})

    def close(self) -> None:
        self.server.shutdown()
