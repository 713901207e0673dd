"""Access tokens checked by tools that share no code with the server
(host/tests/it/oauth.rs): PyJWT (with cryptography) mints the tokens, two
identity providers served here publish their keys, and Authlib, a standard
OAuth 2.0 client, obtains a token and pages through a collection.

Protocol: prints one JSON line {"issuers": [A, B]} once the providers
serve, then reads one JSON line (the server's URL, organizations and an API
client) from stdin, runs every case and prints one JSON line per case:
{"case", "status", "www_authenticate", "content_type", "detail"}, then a
line {"paged", "pages"} with what Authlib read.
"""

import base64
import json
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import requests
from authlib.integrations.requests_client import OAuth2Session
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm


class Provider:
    """An identity provider: a key pair, its discovery document and key set."""

    def __init__(self, name, algorithm, key):
        self.name = name
        self.algorithm = algorithm
        self.key = key
        self.kid = f"{name}-{uuid.uuid4()}"
        self.issuer = None

    def jwk(self):
        public = self.key.public_key()
        if self.algorithm == "RS256":
            jwk = json.loads(RSAAlgorithm.to_jwk(public))
        else:
            jwk = json.loads(ECAlgorithm.to_jwk(public))
        jwk.update({"kid": self.kid, "use": "sig", "alg": self.algorithm})
        return jwk

    def mint(self, claims, headers=None, key=None, kid=None):
        header = {"typ": "at+jwt", "kid": kid or self.kid}
        header.update(headers or {})
        return jwt.encode(claims, key or self.key, algorithm=self.algorithm, headers=header)


PROVIDERS = {
    "a": Provider("a", "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
    "b": Provider("b", "ES256", ec.generate_private_key(ec.SECP256R1())),
}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        parts = self.path.strip("/").split("/", 1)
        provider = PROVIDERS.get(parts[0])
        if provider is None or len(parts) < 2:
            self.send_error(404)
            return
        if parts[1] == ".well-known/openid-configuration":
            body = {"issuer": provider.issuer, "jwks_uri": f"{provider.issuer}/jwks"}
        elif parts[1] == "jwks":
            body = {"keys": [provider.jwk()]}
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


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def with_payload(token, change):
    """The token with its payload changed and its signature kept."""
    header, payload, signature = token.split(".")
    claims = json.loads(unb64url(payload))
    change(claims)
    return ".".join([header, b64url(json.dumps(claims).encode()), signature])


def main():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    for name, provider in PROVIDERS.items():
        provider.issuer = f"{base}/{name}"
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    print(json.dumps({"issuers": [PROVIDERS["a"].issuer, PROVIDERS["b"].issuer]}), flush=True)

    job = json.loads(sys.stdin.readline())
    api = job["api"]
    organization, other = job["organization"], job["other_organization"]
    findings = f"{api}/v1/vulnerability-findings?limit=1"
    a, b = PROVIDERS["a"], PROVIDERS["b"]
    now = int(time.time())

    def claims_of(provider, **changes):
        claims = {
            "iss": provider.issuer,
            "sub": "svc-siem",
            "aud": job["audiences"][provider.name],
            "iat": now,
            "exp": now + 600,
            "jti": str(uuid.uuid4()),
            "esr_org": organization,
            "scope": "findings:read endpoints:read",
        }
        claims.update(changes)
        return {name: value for name, value in claims.items() if value is not None}

    # This server's own token, through the token endpoint (client_secret_post).
    issued = requests.post(
        f"{api}/oauth2/token",
        data={
            "grant_type": "client_credentials",
            "client_id": job["client_id"],
            "client_secret": job["client_secret"],
            "scope": "findings:read",
        },
        timeout=30,
    ).json()
    own = issued["access_token"]
    own_header = jwt.get_unverified_header(own)
    own_claims = jwt.decode(own, options={"verify_signature": False})
    server_jwk = requests.get(f"{api}/.well-known/jwks.json", timeout=30).json()["keys"][0]
    stranger = ed25519.Ed25519PrivateKey.generate()

    def own_forged(**changes):
        claims = dict(own_claims)
        claims.update(changes)
        return claims

    cases = {
        # Accepted: the baselines the refusals are measured against.
        "accepted: own token": own,
        "accepted: provider a": a.mint(claims_of(a)),
        "accepted: provider b, scopes as an array": b.mint(claims_of(b, scope=["findings:read"])),
        "accepted: provider a, typ JWT": a.mint(claims_of(a), headers={"typ": "JWT"}),
        "forbidden: provider a without findings:read": a.mint(claims_of(a, scope="endpoints:read")),
        # Refused: each for one reason.
        "expired": a.mint(claims_of(a, iat=now - 7200, exp=now - 3600)),
        "not yet valid": a.mint(claims_of(a, nbf=now + 3600)),
        "wrong aud": a.mint(claims_of(a, aud="https://elsewhere.example/v1")),
        "wrong iss": a.mint(claims_of(a, iss=f"{a.issuer}-untrusted")),
        "wrong typ": a.mint(claims_of(a), headers={"typ": "dpop+jwt"}),
        "own token, wrong typ": jwt.encode(
            own_forged(), stranger, algorithm="EdDSA", headers={"kid": own_header["kid"], "typ": "JWT"}
        ),
        "alg none": jwt.encode(own_forged(), None, algorithm="none", headers={"kid": own_header["kid"], "typ": "at+jwt"}),
        "provider a, alg none": jwt.encode(claims_of(a), None, algorithm="none", headers={"kid": a.kid, "typ": "at+jwt"}),
        "HS256 signed with the public key": jwt.encode(
            own_forged(), unb64url(server_jwk["x"]), algorithm="HS256", headers={"kid": own_header["kid"], "typ": "at+jwt"}
        ),
        "HS256 signed with the provider's public key": jwt.encode(
            claims_of(a),
            json.dumps(a.jwk()).encode(),
            algorithm="HS256",
            headers={"kid": a.kid, "typ": "at+jwt"},
        ),
        "own token, a key not in the JWKS": jwt.encode(
            own_forged(), stranger, algorithm="EdDSA", headers={"kid": str(uuid.uuid4()), "typ": "at+jwt"}
        ),
        "provider a, a key not in its JWKS": a.mint(
            claims_of(a), key=rsa.generate_private_key(public_exponent=65537, key_size=2048), kid="a-unknown"
        ),
        "provider a, its kid on another key": a.mint(
            claims_of(a), key=rsa.generate_private_key(public_exponent=65537, key_size=2048)
        ),
        "own token, modified payload (scope)": with_payload(
            own, lambda claims: claims.update(scope="findings:read endpoints:read")
        ),
        "own token, modified payload (organization)": with_payload(own, lambda claims: claims.update(org=other)),
        "own token, modified payload (expiry)": with_payload(own, lambda claims: claims.update(exp=now + 86400)),
        "provider a, organization it may not speak for": a.mint(claims_of(a, esr_org=other)),
        "provider a, an organization that does not exist": a.mint(claims_of(a, esr_org=str(uuid.uuid4()))),
        "provider a, no organization claim": a.mint(claims_of(a, esr_org=None)),
        "provider a, scopes it was not given (modified payload)": with_payload(
            a.mint(claims_of(a, scope="endpoints:read")), lambda claims: claims.update(scope="findings:read")
        ),
        "issuer a presented as issuer b": a.mint(claims_of(a, iss=b.issuer, aud=job["audiences"]["b"])),
        "issuer b's key, a's kid, as issuer a": b.mint(claims_of(a), kid=a.kid),
        "not a JWT at all": "a.b.c",
    }
    for case, token in cases.items():
        response = requests.get(findings, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        detail = response.json().get("detail") if response.headers.get("content-type", "").endswith("json") else None
        print(
            json.dumps(
                {
                    "case": case,
                    "status": response.status_code,
                    "www_authenticate": response.headers.get("www-authenticate"),
                    "content_type": response.headers.get("content-type"),
                    "detail": detail,
                }
            ),
            flush=True,
        )

    # A standard client: Authlib fetches a token (client_secret_basic, its
    # default) and pages through the endpoints with it.
    session = OAuth2Session(job["client_id"], job["client_secret"], scope="endpoints:read findings:read")
    session.fetch_token(f"{api}/oauth2/token", grant_type="client_credentials")
    paged, pages, url = 0, 0, f"{api}/v1/endpoints?limit=7"
    while url:
        pages += 1
        page = session.get(url, timeout=30)
        page.raise_for_status()
        body = page.json()
        paged += len(body["data"])
        cursor = body.get("next_cursor")
        url = f"{api}/v1/endpoints?limit=7&cursor={cursor}" if cursor else None
    print(json.dumps({"paged": paged, "pages": pages}), flush=True)


if __name__ == "__main__":
    main()
