"""Kafka security settings (TLS, SASL) for the live source and the alerts sink, in one place.

The ``[kafka]`` configuration keys below map one to one onto kafka-python 3.0 connection
settings (``kafka.net.manager.KafkaConnectionManager.DEFAULT_CONFIG``); both the raw-protocol
client of the source (:class:`~streaming.sources.kafka_wire.KafkaWire`) and the alerts
producer/admin client take them as keyword arguments.

* ``security_protocol``: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT``, ``SASL_SSL``.
* ``ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile`` (PEM), ``ssl_password`` (decrypts
  ``ssl_keyfile``), ``ssl_check_hostname`` (boolean), ``ssl_crlfile`` (PEM CRL: kafka-python then
  checks the broker certificate against it, ``VERIFY_CRL_CHECK_LEAF``).
* ``sasl_mechanism``: ``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``, ``GSSAPI``,
  ``OAUTHBEARER``. kafka-python's SCRAM client (``kafka/net/sasl/scram.py``) takes its user and
  password from ``sasl_plain_username``/``sasl_plain_password``, exactly like PLAIN.
* ``sasl_kerberos_name``, ``sasl_kerberos_service_name`` (default ``kafka``),
  ``sasl_kerberos_domain_name``: GSSAPI (needs the ``gssapi`` package and a ticket cache).
* ``sasl_oauth_token_provider``: OAUTHBEARER token provider named by a dotted path,
  ``package.module:attr`` or ``package.module.attr``. ``attr`` is a subclass of
  ``kafka.net.sasl.oauth.AbstractTokenProvider`` (instantiated without arguments), a factory
  returning such an instance, or an instance. It is imported and instantiated in every process
  that connects: the Spark driver AND every executor's Python worker, so the module must be
  importable there (installed, or on ``PYTHONPATH``/``spark.submit.pyFiles``). One instance per
  process and path, so tokens are reused across connections.

Secrets (``sasl_plain_password``, ``ssl_password``) never travel as Spark data source options
(Spark shows those in query plans and in the UI). The source gets a *reference* instead, resolved
where the connection is made:

* ``env:NAME``: the environment variable ``NAME`` of that process. The runner passes
  ``env:TXNWATCH_KAFKA_SASL_PLAIN_PASSWORD`` (and ``..._SSL_PASSWORD``) and, when the secret came
  from the configuration file, exports it under that name before Spark starts, which a
  ``local[*]`` master's executors inherit. On a cluster, set the variable on executors
  (``spark.executorEnv.TXNWATCH_KAFKA_SASL_PLAIN_PASSWORD``, a Kubernetes secret, ...).
* ``file:PATH``: the first line of a file readable on every executor (a mounted secret).

A configuration value may itself be such a reference (``sasl_plain_password =
"file:/run/secrets/kafka"``); a literal secret that starts with ``env:`` or ``file:`` cannot be
given literally.
"""

from __future__ import annotations

import importlib
import logging
import os
import struct
import threading
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from streaming.config import ConfigError

#: ``[kafka]`` keys passed to kafka-python (empty strings mean "kafka-python's default").
SECURITY_KEYS: tuple[str, ...] = (
    "security_protocol", "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password", "ssl_check_hostname",
    "ssl_crlfile", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password", "sasl_kerberos_name",
    "sasl_kerberos_service_name", "sasl_kerberos_domain_name", "sasl_oauth_token_provider",
)
#: Keys whose values are secrets: passed to Spark only as ``env:``/``file:`` references.
SECRET_KEYS: tuple[str, ...] = ("sasl_plain_password", "ssl_password")
_BOOL_KEYS = frozenset({"ssl_check_hostname"})
_REF_PREFIXES = ("env:", "file:")
ENV_PREFIX = "TXNWATCH_KAFKA_"

_PROVIDERS: dict[str, Any] = {}
_PROVIDERS_LOCK = threading.Lock()


class KafkaSecurityError(ConfigError):
    """A security setting cannot be used; the message names the key (never the secret)."""


def secret_env_name(key: str) -> str:
    """The environment variable a secret is read from: ``TXNWATCH_KAFKA_SASL_PLAIN_PASSWORD``."""
    return ENV_PREFIX + key.upper()


def is_reference(value: str) -> bool:
    return value.startswith(_REF_PREFIXES)


def resolve_secret(key: str, value: str) -> str:
    """The secret behind ``value``: a literal, ``env:NAME`` or ``file:PATH``."""
    if value.startswith("env:"):
        name = value[4:]
        if name not in os.environ:
            raise KafkaSecurityError(f"kafka {key}: environment variable {name} is not set in this process "
                                     f"(pid {os.getpid()}); executors need it too")
        return os.environ[name]
    if value.startswith("file:"):
        path = value[5:]
        try:
            with open(path, encoding="utf-8") as f:
                return f.readline().rstrip("\r\n")
        except OSError as exc:
            raise KafkaSecurityError(f"kafka {key}: cannot read secret file {path}: {exc.strerror}") from None
    return value


def load_token_provider(path: str) -> Any:
    """The OAUTHBEARER token provider named ``module:attr`` or ``module.attr`` (cached per process)."""
    from kafka.net.sasl.oauth import AbstractTokenProvider

    with _PROVIDERS_LOCK:
        if path in _PROVIDERS:
            return _PROVIDERS[path]
        module_name, sep, attr = path.partition(":")
        if not sep:
            module_name, _, attr = path.rpartition(".")
        if not module_name or not attr:
            raise KafkaSecurityError(f"kafka sasl_oauth_token_provider: {path!r} is not 'module:attr' or "
                                     f"'module.attr'")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise KafkaSecurityError(f"kafka sasl_oauth_token_provider: cannot import {module_name!r} in this "
                                     f"process (pid {os.getpid()}; it must be importable on the driver and "
                                     f"every executor): {exc}") from None
        target = getattr(module, attr, None)
        if target is None:
            raise KafkaSecurityError(f"kafka sasl_oauth_token_provider: {module_name!r} has no attribute {attr!r}")
        try:
            provider = target if isinstance(target, AbstractTokenProvider) or not callable(target) else target()
        except Exception as exc:  # a provider's own start-up failure, reported by path
            raise KafkaSecurityError(f"kafka sasl_oauth_token_provider: {path}() failed: "
                                     f"{type(exc).__name__}: {exc}") from None
        if not isinstance(provider, AbstractTokenProvider):
            raise KafkaSecurityError(f"kafka sasl_oauth_token_provider: {path} gave {type(provider).__name__}, "
                                     f"not a kafka.net.sasl.oauth.AbstractTokenProvider")
        _PROVIDERS[path] = provider
        return provider


def _as_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise KafkaSecurityError(f"kafka {key}: expected true or false, got {value!r}")


_SASL_AUTHENTICATE = 36


def _carries_sasl_token(data: bytes | bytearray | memoryview) -> bool:
    """Whether raw request frames hold a SASL token: a SaslAuthenticate request (api key 36), or
    a frame without a plausible request header (a SaslHandshake v0 raw token, brokers < 1.0)."""
    buf = bytes(data)
    pos = 0
    while pos + 8 <= len(buf):
        size, api_key, version = struct.unpack_from(">ihh", buf, pos)
        if api_key == _SASL_AUTHENTICATE or not 0 <= api_key < 1000 or not 0 <= version < 100 or size < 4:
            return True
        pos += 4 + size
    return pos != len(buf)


class _SaslPayloadRedactor(logging.Filter):
    """kafka-python logs every request object and every raw frame it sends at DEBUG
    (``kafka/net/connection.py`` ``'%s Request %d: %s'``, ``kafka/protocol/parser.py``
    ``'%s Sending request %d %s'`` and ``'%s Send: %r'``). A SaslAuthenticate request carries the
    PLAIN password, the OAUTHBEARER token or the SCRAM proof in clear. ``KafkaAdminClient`` logs
    its whole configuration (``kafka/admin/client.py``: ``'Starting KafkaAdminClient with
    configuration: %s'``), passwords included. Such arguments are replaced before the record is
    formatted."""

    def filter(self, record: logging.LogRecord) -> bool:
        from kafka.protocol.sasl import SaslAuthenticateRequest, SaslBytesRequest

        args = record.args
        if isinstance(args, Mapping):  # log.debug("... %s", config) stores the dict itself as args
            if any(k in args for k in SECRET_KEYS):
                record.args = ({k: "<redacted>" if k in SECRET_KEYS and v else v for k, v in args.items()},)
            return True
        if not isinstance(args, tuple):
            return True
        out = []
        for a in args:
            if isinstance(a, SaslAuthenticateRequest | SaslBytesRequest):
                a = f"{type(a).__name__}(auth_bytes=<redacted>)"
            elif isinstance(a, bytes | bytearray | memoryview) and _carries_sasl_token(a):
                a = f"<{len(a)} bytes with a SASL token: redacted>"
            out.append(a)
        record.args = tuple(out)
        return True


_REDACTOR = _SaslPayloadRedactor()
_REDACTED_LOGGERS = ("kafka.net.connection", "kafka.protocol.parser", "kafka.admin.client")


def redact_sasl_in_kafka_logs() -> None:
    """Install the redaction filter on kafka-python's loggers that print requests (idempotent)."""
    for name in _REDACTED_LOGGERS:
        logger = logging.getLogger(name)
        if _REDACTOR not in logger.filters:
            logger.addFilter(_REDACTOR)


def _given(settings: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """The security keys that have a value (empty means kafka-python's default)."""
    for key in SECURITY_KEYS:
        value = settings.get(key)
        if value is not None and value != "":
            yield key, value


def kafka_python_kwargs(settings: Mapping[str, Any]) -> dict[str, Any]:
    """kafka-python keyword arguments from ``[kafka]`` settings or source options.

    Empty values are left out (kafka-python's defaults apply), secrets are resolved
    (:func:`resolve_secret`) and the token provider is loaded (:func:`load_token_provider`).
    Runs in the process that connects: the driver for the sink, each executor for the source.
    """
    redact_sasl_in_kafka_logs()
    out: dict[str, Any] = {}
    for key, value in _given(settings):
        if key in _BOOL_KEYS:
            out[key] = _as_bool(key, value)
        elif key in SECRET_KEYS:
            out[key] = resolve_secret(key, str(value))
        elif key == "sasl_oauth_token_provider":
            out[key] = load_token_provider(str(value))
        else:
            out[key] = str(value)
    if "ssl_crlfile" in out:
        out = _with_crl_context(out)
    if out.get("sasl_mechanism") == "OAUTHBEARER" and "sasl_oauth_token_provider" not in out:
        raise KafkaSecurityError("kafka sasl_mechanism OAUTHBEARER needs sasl_oauth_token_provider "
                                 "(a dotted path to a kafka.net.sasl.oauth.AbstractTokenProvider)")
    return out


def _with_crl_context(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Replace the ``ssl_*`` files by an ``ssl_context`` that checks the CRL.

    kafka-python 3.0.12 (``KafkaSSLTransport._build_ssl_context``, also in its ``kafka/net/ssl.py``
    upstream) loads ``ssl_crlfile`` with ``load_verify_locations(crl=...)``, which Python's ``ssl``
    rejects (TypeError on every connection). The same context is built here with the CRL loaded
    as a PEM file into the verify store (``load_verify_locations(cafile=...)``, which accepts
    CRLs) and ``VERIFY_CRL_CHECK_LEAF``, as kafka-python intends.
    """
    import ssl

    out = {k: v for k, v in kwargs.items() if not k.startswith("ssl_")}
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = kwargs.get("ssl_check_hostname", True)
    try:
        if kwargs.get("ssl_cafile"):
            ctx.load_verify_locations(cafile=kwargs["ssl_cafile"])
        else:
            ctx.load_default_certs()
        if kwargs.get("ssl_certfile"):
            ctx.load_cert_chain(certfile=kwargs["ssl_certfile"], keyfile=kwargs.get("ssl_keyfile"),
                                password=kwargs.get("ssl_password"))
        ctx.load_verify_locations(cafile=kwargs["ssl_crlfile"])
    except (OSError, ssl.SSLError) as exc:
        raise KafkaSecurityError(f"kafka ssl settings: cannot load the CA, client certificate or CRL "
                                 f"({kwargs.get('ssl_crlfile')}): {exc}") from None
    ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    out["ssl_context"] = ctx
    return out


def spark_source_options(settings: Mapping[str, Any],
                         environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Security options for the ``kafka-txn`` Spark source: strings, secrets as references.

    A literal secret is exported into ``environ`` (default ``os.environ``) as
    ``TXNWATCH_KAFKA_<KEY>`` and passed as ``env:TXNWATCH_KAFKA_<KEY>``; call this before the
    SparkSession starts so that local executors inherit it.
    """
    environ = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for key, value in _given(settings):
        if key in _BOOL_KEYS:
            out[key] = str(_as_bool(key, value)).lower()
        elif key in SECRET_KEYS and not is_reference(str(value)):
            name = secret_env_name(key)
            environ[name] = str(value)
            out[key] = f"env:{name}"
        else:
            out[key] = str(value)
    return out


def check_source_options(options: Mapping[str, str]) -> dict[str, str]:
    """The security options of a ``kafka-txn`` source, refusing literal secrets.

    Spark prints data source options in query plans (``explain``, the SQL tab); only a
    reference may travel there.
    """
    out = {k: str(v) for k, v in _given(options)}
    for key in SECRET_KEYS:
        if key in out and not is_reference(out[key]):
            raise KafkaSecurityError(f"kafka source: option {key!r} must be a reference (env:NAME or file:PATH), "
                                     f"not the secret itself: Spark shows data source options in query plans")
    return out


# --------------------------------------------------------------------------------------------
# Authorization failures: one message naming the missing ACL
# --------------------------------------------------------------------------------------------
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
AUTHORIZATION_ERRORS = frozenset({TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED,
                                  CLUSTER_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED})

# (api, error code) -> (ACL operation, resource type), from the authorize() calls of Kafka's
# core/src/main/scala/kafka/server/KafkaApis.scala: handleTopicMetadataRequest (DESCRIBE TOPIC),
# handleListOffsetRequestV1AndAbove (DESCRIBE TOPIC), handleFetchRequest (READ TOPIC),
# handleDescribeProducersRequest (READ TOPIC), handleDescribeTransactionsRequest (DESCRIBE
# TRANSACTIONAL_ID), handleProduceRequest (WRITE TOPIC), handleCreateTopicsRequest (CREATE
# CLUSTER or TOPIC), handleInitProducerIdRequest (IDEMPOTENT_WRITE CLUSTER; since 2.8, KIP-679,
# WRITE on any topic also does).
_REQUIRED: dict[tuple[str, int], tuple[str, str]] = {
    ("Metadata", TOPIC_AUTHORIZATION_FAILED): ("Describe", "Topic"),
    ("ListOffsets", TOPIC_AUTHORIZATION_FAILED): ("Describe", "Topic"),
    ("Fetch", TOPIC_AUTHORIZATION_FAILED): ("Read", "Topic"),
    ("DescribeProducers", TOPIC_AUTHORIZATION_FAILED): ("Read", "Topic"),
    ("DescribeTransactions", TRANSACTIONAL_ID_AUTHORIZATION_FAILED): ("Describe", "TransactionalId"),
    ("Produce", TOPIC_AUTHORIZATION_FAILED): ("Write", "Topic"),
    ("CreateTopics", TOPIC_AUTHORIZATION_FAILED): ("Create", "Topic"),
    ("InitProducerId", CLUSTER_AUTHORIZATION_FAILED): ("IdempotentWrite", "Cluster"),
}
_ERROR_NAMES = {TOPIC_AUTHORIZATION_FAILED: "TOPIC_AUTHORIZATION_FAILED",
                GROUP_AUTHORIZATION_FAILED: "GROUP_AUTHORIZATION_FAILED",
                CLUSTER_AUTHORIZATION_FAILED: "CLUSTER_AUTHORIZATION_FAILED",
                TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"}


def principal_of(settings: Mapping[str, Any]) -> str | None:
    """The Kafka principal this client authenticates as, when the configuration tells it.

    SASL PLAIN/SCRAM: ``User:<username>`` (Kafka's DefaultKafkaPrincipalBuilder). Otherwise
    (TLS client certificate, Kerberos, OAuth, ANONYMOUS) the broker's mapping rules decide: None.
    """
    protocol = str(settings.get("security_protocol") or "PLAINTEXT").upper()
    mechanism = str(settings.get("sasl_mechanism") or "").upper()
    user = settings.get("sasl_plain_username")
    if protocol.startswith("SASL_") and (mechanism == "PLAIN" or mechanism.startswith("SCRAM-")) and user:
        return f"User:{user}"
    if protocol == "PLAINTEXT":
        return "User:ANONYMOUS"
    return None


def authorization_message(api: str, code: int, resource: str, *, principal: str | None, bootstrap: str,
                          broker: str | None = None) -> str:
    """One clear message for an authorization error: the missing ACL, the principal, the resource,
    and the ``kafka-acls.sh`` command that grants it (docs/deployment.md lists all of them)."""
    operation, rtype = _REQUIRED.get((api, code), ("?", "Cluster" if code == CLUSTER_AUTHORIZATION_FAILED
                                                   else "Topic"))
    who = principal or "this client's principal (set by the broker's principal mapping)"
    name = "kafka-cluster" if rtype == "Cluster" else resource
    flag = {"Topic": f"--topic {resource}", "Cluster": "--cluster",
            "TransactionalId": f"--transactional-id {resource}"}.get(rtype, f"--{rtype.lower()} {resource}")
    grant = (f"kafka-acls.sh --bootstrap-server {bootstrap} --add --allow-principal {principal or '<principal>'} "
             f"--operation {operation} {flag}")
    where = f" at {broker}" if broker else ""
    return (f"Kafka denied {operation} on {rtype}:{name} to {who} ({_ERROR_NAMES.get(code, code)} from {api}"
            f"{where}). txnwatch needs this ACL; grant it with: {grant} (docs/deployment.md lists every ACL)")
