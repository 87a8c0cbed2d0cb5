"""An OAuth identity provider for the embedded cluster's ``OIDC`` listener, made on the spot: a
signing key whose public half the brokers read as a JSON Web Key Set (a file: Kafka takes a
``file:`` URL for ``sasl.oauthbearer.jwks.endpoint.url``), and a token endpoint on 127.0.0.1 that
answers a client-credentials request with a JWT signed by that key (RS256), for the test kit's
SASL user.

Kafka's Java client (Spark's connector) takes only a token with a signature, and the broker's
``OAuthBearerValidatorCallbackHandler`` checks it against the key set: the listener a pipeline of
either format logs in to through the same provider. Since Kafka 4.0 both sides fetch only URLs
named in the ``org.apache.kafka.sasl.oauthbearer.allowed.urls`` system property
(``ALLOWED_URLS_PROPERTY``): the brokers get the key set's, the test's JVM the endpoint's.
"""
from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

ALLOWED_URLS_PROPERTY = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
KEY_ID = "eos-kafka-test-key"
CLIENT_ID, CLIENT_SECRET, SCOPE = "spark-pipeline", "s3cret", "kafka"


@dataclass(frozen=True)
class ProviderKeys:
    key: Path  # the signing key, PKCS#8 PEM
    jwks: Path  # its public half as a JSON Web Key Set

    @property
    def jwks_url(self) -> str:
        return self.jwks.resolve().as_uri()


def make_provider_keys(directory: Path) -> ProviderKeys:
    """Write a new RSA signing key and its key set into ``directory``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    numbers = key.public_key().public_numbers()
    jwk = {"kty": "RSA", "kid": KEY_ID, "use": "sig", "alg": "RS256",
           "n": _b64(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")),
           "e": _b64(numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big"))}
    keys = ProviderKeys(directory / "oidc-signing-key.pem", directory / "jwks.json")
    keys.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    keys.key.chmod(0o600)
    keys.jwks.write_text(json.dumps({"keys": [jwk]}))
    return keys


def signed_token(keys: ProviderKeys, subject: str, lifetime_s: int = 3600) -> str:
    """A JWT for ``subject``, signed with the provider's key (RS256)."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding

    now = int(time.time())
    header = {"alg": "RS256", "typ": "JWT", "kid": KEY_ID}
    claims = {"sub": subject, "iat": now, "exp": now + lifetime_s, "scope": SCOPE, "iss": "eos-kafka-test"}
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}".encode()
    key = serialization.load_pem_private_key(keys.key.read_bytes(), password=None)
    return f"{signing_input.decode()}.{_b64(key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256()))}"


class TokenEndpoint:
    """The provider's token endpoint (OAuth client_credentials): a request with ``CLIENT_ID`` and
    ``CLIENT_SECRET`` gets a token for ``subject``; every request is recorded."""

    def __init__(self, keys: ProviderKeys, subject: str):
        self.requests: list[tuple[str, dict]] = []
        endpoint = self
        expected = "Basic " + base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length", 0))).decode())
                endpoint.requests.append((self.headers.get("Authorization", ""), form))
                if self.headers.get("Authorization") != expected or form.get("grant_type") != ["client_credentials"]:
                    self.send_response(401)
                    self.end_headers()
                    return
                body = json.dumps({"access_token": signed_token(keys, subject), "token_type": "bearer",
                                   "expires_in": 3600}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/oauth2/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
