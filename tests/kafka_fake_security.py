"""Security layer of the broker fake (tests only): TLS material, SASL server side, ACL rules.

Every behaviour follows Apache Kafka's own server code (read from apache/kafka, trunk of
2024-10):

* ``clients/.../security/authenticator/SaslServerAuthenticator.java`` - the per-connection state
  machine (:class:`SaslAuthenticator`): before authentication only ApiVersions and SaslHandshake
  are accepted (``handleKafkaRequest``: any other API throws IllegalSaslStateException and the
  connection is closed without a response); ApiVersions at most once and before the handshake
  (``handleApiVersionsRequest``); SaslHandshake answers the enabled mechanisms, NONE or
  UNSUPPORTED_SASL_MECHANISM (then closes) (``handleHandshakeRequest``); SaslHandshake v1+ means
  the tokens come in SaslAuthenticate requests, v0 means raw size-prefixed tokens
  (``handleSaslToken``); a failure is answered with SASL_AUTHENTICATION_FAILED and the message of
  a SaslAuthenticationException, or - for any other SaslException - the generic "Authentication
  failed during authentication due to invalid credentials with SASL mechanism <M>" (so that the
  existence of a user is not disclosed), and the connection is then closed.
* ``.../plain/internals/PlainSaslServer.java`` - RFC 4616 message, its error messages.
* ``.../scram/internals/ScramSaslServer.java``, ``ScramMessages.java``, ``ScramFormatter.java``,
  ``ScramMechanism.java`` - RFC 5802 server side: client-first ``n,[a=authzid],n=user,r=nonce``;
  server-first ``r=<client nonce><server nonce>,s=<salt>,i=<iterations>``; client-final
  ``c=biws,r=<nonce>,p=<proof>`` checked by recomputing StoredKey from the proof; server-final
  ``v=<ServerSignature>``. Unknown user and wrong proof are SaslExceptions (generic message).
  Credentials are kept as Kafka keeps them: salt, iterations (4096, the minimum), StoredKey and
  ServerKey, never the password.
* ``.../oauthbearer/internals/OAuthBearerSaslServer.java`` - ``n,,\\x01auth=Bearer <token>\\x01\\x01``;
  an invalid token gets a JSON error challenge, the client answers ``\\x01`` and then fails with
  SASL_AUTHENTICATION_FAILED carrying that JSON.
* ``core/.../server/KafkaApis.scala`` ``handleSaslHandshakeRequest``/``handleSaslAuthenticateRequest``
  - after authentication (or on a listener without SASL) both answer ILLEGAL_SASL_STATE.
* Principals (``DefaultKafkaPrincipalBuilder``): ``User:<authorization id>`` after SASL,
  ``User:<subject DN>`` for a TLS client certificate, else ``User:ANONYMOUS``.

Not modelled: GSSAPI, SCRAM delegation tokens and extensions, KIP-368 re-authentication
(``session_lifetime_ms`` is always 0), ``ssl.principal.mapping.rules``.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import os
import re
import secrets
import ssl
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58

SCRAM_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
SCRAM_MIN_ITERATIONS = 4096  # ScramMechanism: minIterations of both mechanisms


# --------------------------------------------------------------------------------------------
# TLS material made at test time
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TlsFiles:
    ca: Path  # CA certificate (PEM) - the client's ssl_cafile
    server_cert: Path
    server_key: Path
    client_cert: Path  # signed by the CA, subject CN=txnwatch-client,O=txnwatch-tests
    client_key: Path  # encrypted with client_key_password
    client_key_password: str
    crl_revoking_server: Path  # CRL (PEM) of the CA listing the server certificate as revoked
    crl_empty: Path  # CRL (PEM) of the CA listing nothing


def make_tls(directory: str | os.PathLike, *, hostname: str = "localhost", ip: str = "127.0.0.1") -> TlsFiles:
    """A throw-away CA, a broker certificate for ``hostname``/``ip`` and a client certificate."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    valid = (now - datetime.timedelta(days=1), now + datetime.timedelta(days=2))

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "txnwatch-tests"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (x509.CertificateBuilder().subject_name(name("txnwatch-test-ca")).issuer_name(name("txnwatch-test-ca"))
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(valid[0]).not_valid_after(valid[1])
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                            content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, encipher_only=False,
                                            decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))

    def leaf(cn: str, san: list[x509.GeneralName] | None) -> tuple[Any, Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        b = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca_cert.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(valid[0]).not_valid_after(valid[1])
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
        if san:
            b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return key, b.sign(ca_key, hashes.SHA256())

    srv_key, srv_cert = leaf(hostname, [x509.DNSName(hostname), x509.IPAddress(ipaddress.ip_address(ip))])
    cli_key, cli_cert = leaf("txnwatch-client", None)
    password = "key-" + secrets.token_hex(8)

    def crl(revoked: list[Any]) -> bytes:
        b = (x509.CertificateRevocationListBuilder().issuer_name(ca_cert.subject)
             .last_update(valid[0]).next_update(valid[1]))
        for cert in revoked:
            b = b.add_revoked_certificate(x509.RevokedCertificateBuilder().serial_number(cert.serial_number)
                                          .revocation_date(valid[0]).build())
        return b.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)

    pem = serialization.Encoding.PEM
    files = TlsFiles(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key", password,
                     d / "crl-revoked.pem", d / "crl-empty.pem")
    files.ca.write_bytes(ca_cert.public_bytes(pem))
    files.server_cert.write_bytes(srv_cert.public_bytes(pem))
    files.server_key.write_bytes(srv_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    files.client_cert.write_bytes(cli_cert.public_bytes(pem))
    files.client_key.write_bytes(cli_key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(password.encode())))
    files.crl_revoking_server.write_bytes(crl([srv_cert]))
    files.crl_empty.write_bytes(crl([]))
    return files


def server_ssl_context(tls: TlsFiles, *, require_client_cert: bool = False) -> ssl.SSLContext:
    """The broker side (``ssl.client.auth=required`` when ``require_client_cert``)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(tls.server_cert), str(tls.server_key))
    if require_client_cert:
        ctx.load_verify_locations(str(tls.ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def tls_principal(sock: Any) -> str:
    """``User:<subject DN>`` of a verified client certificate (RFC 2253 order), else ANONYMOUS."""
    cert = sock.getpeercert() if hasattr(sock, "getpeercert") else None
    if not cert:
        return "User:ANONYMOUS"
    short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C"}
    parts = [f"{short.get(k, k)}={v}" for rdn in cert.get("subject", ()) for k, v in rdn]
    return "User:" + ",".join(reversed(parts))


# --------------------------------------------------------------------------------------------
# SASL mechanisms (server side)
# --------------------------------------------------------------------------------------------
class SaslFailure(Exception):
    """``detailed``: a SaslAuthenticationException (its message reaches the client); otherwise
    a SaslException, answered with Kafka's generic message."""

    def __init__(self, message: str, *, detailed: bool):
        super().__init__(message)
        self.detailed = detailed


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def scram_credential(mechanism: str, password: str, iterations: int = SCRAM_MIN_ITERATIONS) -> ScramCredential:
    """What ``kafka-configs.sh --add-config 'SCRAM-SHA-512=[password=...]'`` stores (ScramFormatter)."""
    h = SCRAM_HASHES[mechanism]
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac(h().name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", h).digest()
    return ScramCredential(salt, iterations, h(client_key).digest(), hmac.new(salted, b"Server Key", h).digest())


class PlainServer:
    def __init__(self, users: dict[str, str]):
        self.users = users
        self.complete = False
        self.authorization_id: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        parts = token.decode("utf-8", "replace").split("\0")
        if len(parts) != 3:
            raise SaslFailure("Invalid SASL/PLAIN response: expected 3 tokens, got " + str(len(parts)), detailed=True)
        authzid, user, password = parts
        if not user:
            raise SaslFailure("Authentication failed: username not specified", detailed=True)
        if not password:
            raise SaslFailure("Authentication failed: password not specified", detailed=True)
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslFailure("Authentication failed: Invalid username or password", detailed=True)
        if authzid and authzid != user:
            raise SaslFailure("Authentication failed: Client requested an authorization id that is different "
                              "from username", detailed=True)
        self.authorization_id = user
        self.complete = True
        return b""


_SCRAM_CLIENT_FIRST = re.compile(r"^n,(?:a=(?P<authzid>[^,]*))?,(?:m=[^,]*,)?n=(?P<user>[^,]+),r=(?P<nonce>[^,]+)"
                                 r"(?P<ext>(?:,[a-zA-Z]+=[^,]*)*)$")
_SCRAM_CLIENT_FINAL = re.compile(r"^c=(?P<c>[A-Za-z0-9+/=]*),r=(?P<nonce>[^,]+)(?:,[a-zA-Z]+=[^,]*)*,"
                                 r"p=(?P<proof>[A-Za-z0-9+/=]+)$")


class ScramServer:
    def __init__(self, mechanism: str, credentials: dict[str, ScramCredential]):
        self.mechanism = mechanism
        self.hash = SCRAM_HASHES[mechanism]
        self.credentials = credentials
        self.state = "first"
        self.complete = False
        self.authorization_id: str | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._cred: ScramCredential | None = None

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self.hash).digest()

    def evaluate(self, token: bytes) -> bytes:
        text = token.decode("utf-8", "replace")
        if self.state == "first":
            m = _SCRAM_CLIENT_FIRST.match(text)
            if not m:
                self.state = "failed"
                raise SaslFailure("Invalid SCRAM client first message format", detailed=False)
            user = m.group("user").replace("=2C", ",").replace("=3D", "=")
            cred = self.credentials.get(user)
            if cred is None:
                self.state = "failed"
                raise SaslFailure("Authentication failed: Invalid user credentials", detailed=False)
            if m.group("authzid") and m.group("authzid") != user:
                self.state = "failed"
                raise SaslFailure("Authentication failed: Client requested an authorization id that is different "
                                  "from username", detailed=True)
            self._cred = cred
            self.authorization_id = user
            self._client_first_bare = text[text.index(",", 2) + 1:]  # after the GS2 header "n,[a=..],"
            self._nonce = m.group("nonce") + secrets.token_urlsafe(18)
            self._server_first = (f"r={self._nonce},s={base64.b64encode(cred.salt).decode()},"
                                  f"i={cred.iterations}")
            self.state = "final"
            return self._server_first.encode()
        if self.state == "final":
            self.state = "failed"
            m = _SCRAM_CLIENT_FINAL.match(text)
            if not m or not m.group("nonce").endswith(self._nonce):
                raise SaslFailure("Invalid client nonce in the final client message.", detailed=False)
            without_proof = text[:text.rindex(",p=")]
            auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
            assert self._cred is not None
            signature = self._hmac(self._cred.stored_key, auth_message)
            proof = base64.b64decode(m.group("proof"))
            client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=False))
            if len(proof) != len(signature) or not hmac.compare_digest(self.hash(client_key).digest(),
                                                                       self._cred.stored_key):
                raise SaslFailure("Invalid client credentials", detailed=False)
            server_signature = self._hmac(self._cred.server_key, auth_message)
            self.state = "complete"
            self.complete = True
            return b"v=" + base64.b64encode(server_signature)
        raise SaslFailure(f"Unexpected challenge in Sasl server state {self.state}", detailed=True)


class OAuthBearerServer:
    def __init__(self, tokens: dict[str, str]):
        self.tokens = tokens  # token -> principal name
        self.complete = False
        self.authorization_id: str | None = None
        self._error: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if token == b"\x01" and self._error is not None:
            raise SaslFailure(self._error, detailed=True)
        self._error = None
        m = re.match(rb"^n,(?:a=[^,]*)?,\x01auth=Bearer ([^\x01]+)\x01(?:[^\x01]*\x01)*\x01$", token)
        if not m:
            raise SaslFailure("Invalid OAUTHBEARER client first message", detailed=False)
        principal = self.tokens.get(m.group(1).decode("utf-8", "replace"))
        if principal is None:
            self._error = json.dumps({"status": "invalid_token"})
            return self._error.encode()
        self.authorization_id = principal
        self.complete = True
        return b""


# --------------------------------------------------------------------------------------------
# The per-connection authenticator
# --------------------------------------------------------------------------------------------
@dataclass
class SaslConfig:
    """``sasl.enabled.mechanisms`` and the credentials the fake's listeners accept."""

    mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-512")
    users: dict[str, str] = field(default_factory=dict)  # PLAIN: user -> password
    scram: dict[str, dict[str, ScramCredential]] = field(default_factory=dict)  # mechanism -> user -> cred
    oauth_tokens: dict[str, str] = field(default_factory=dict)  # token -> principal name

    @classmethod
    def for_users(cls, users: dict[str, str], mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-512"),
                  oauth_tokens: dict[str, str] | None = None) -> SaslConfig:
        scram = {m: {u: scram_credential(m, p) for u, p in users.items()} for m in mechanisms if m in SCRAM_HASHES}
        return cls(tuple(mechanisms), dict(users), scram, dict(oauth_tokens or {}))

    def server(self, mechanism: str) -> Any:
        if mechanism == "PLAIN":
            return PlainServer(self.users)
        if mechanism in SCRAM_HASHES:
            return ScramServer(mechanism, self.scram.get(mechanism, {}))
        if mechanism == "OAUTHBEARER":
            return OAuthBearerServer(self.oauth_tokens)
        raise ValueError(f"the fake has no SASL server for {mechanism}")


class SaslAuthenticator:
    """SaslServerAuthenticator's states for one connection.

    :meth:`handle` takes one request frame (without its 4-byte size) and returns ``(reply, close)``;
    ``reply`` is a framed response or None. ``api_versions`` answers an ApiVersions frame.
    """

    def __init__(self, config: SaslConfig, api_versions):
        self.config = config
        self.api_versions = api_versions
        self.state = "handshake_or_versions"
        self.headers = True
        self.server: Any = None
        self.mechanism: str | None = None
        self.principal: str | None = None

    @property
    def complete(self) -> bool:
        return self.state == "complete"

    def handle(self, payload: bytes) -> tuple[bytes | None, bool]:
        if self.state == "authenticate":
            return self._token(payload)
        api_key, version, correlation_id = struct.unpack_from(">hhi", payload, 0)
        if api_key == ApiVersionsRequest.API_KEY:
            if self.state != "handshake_or_versions":
                return None, True  # IllegalStateException: fail the connection without a response
            self.state = "handshake"
            reply = self.api_versions(payload)
            return (bytes(reply), False) if isinstance(reply, bytes | bytearray | memoryview) else (None, True)
        if api_key != SaslHandshakeRequest.API_KEY:
            return None, True  # IllegalSaslStateException before the handshake: closed, no response
        request = SaslHandshakeRequest.decode(payload, version=version, header=True)
        self.headers = version >= 1
        enabled = list(self.config.mechanisms)
        if request.mechanism not in enabled:
            resp = SaslHandshakeResponse(version=version, error_code=UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)
            resp.with_header(correlation_id=correlation_id)
            return resp.encode(header=True, framed=True), True
        self.mechanism = request.mechanism
        self.server = self.config.server(request.mechanism)
        self.state = "authenticate"
        resp = SaslHandshakeResponse(version=version, error_code=0, mechanisms=enabled)
        resp.with_header(correlation_id=correlation_id)
        return resp.encode(header=True, framed=True), False

    def _finish(self) -> None:
        if self.server.complete:
            self.state = "complete"
            self.principal = f"User:{self.server.authorization_id}"

    def _token(self, payload: bytes) -> tuple[bytes | None, bool]:
        if not self.headers:  # SaslHandshake v0: raw tokens, raw answers, failure = close
            try:
                answer = self.server.evaluate(payload)
            except SaslFailure:
                return None, True
            self._finish()
            return struct.pack(">i", len(answer)) + answer, False
        api_key, version, correlation_id = struct.unpack_from(">hhi", payload, 0)
        if api_key != SaslAuthenticateRequest.API_KEY:
            return None, True  # Kafka first sends that request's ILLEGAL_SASL_STATE error response
        request = SaslAuthenticateRequest.decode(payload, version=version, header=True)
        try:
            answer = self.server.evaluate(bytes(request.auth_bytes or b""))
        except SaslFailure as exc:
            message = str(exc) if exc.detailed else (
                f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
                f"{self.mechanism}")
            resp = SaslAuthenticateResponse(version=version, error_code=SASL_AUTHENTICATION_FAILED,
                                            error_message=message, auth_bytes=b"", session_lifetime_ms=0)
            resp.with_header(correlation_id=correlation_id)
            return resp.encode(header=True, framed=True), True
        self._finish()
        resp = SaslAuthenticateResponse(version=version, error_code=0, error_message=None, auth_bytes=answer,
                                        session_lifetime_ms=0)
        resp.with_header(correlation_id=correlation_id)
        return resp.encode(header=True, framed=True), False


# --------------------------------------------------------------------------------------------
# ACLs
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DenyRule:
    principal: str  # "User:alice" or "*"
    operation: str  # "Read", "Write", "Describe", "Create", "IdempotentWrite", ...
    resource_type: str  # "Topic", "Cluster", "TransactionalId", "Group"
    name: str  # resource name ("kafka-cluster" for the cluster)

    def matches(self, principal: str, operation: str, resource_type: str, name: str) -> bool:
        return (self.principal in ("*", principal) and self.operation == operation
                and self.resource_type == resource_type and self.name == name)
