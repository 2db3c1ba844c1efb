"""TLS, SASL and ACLs: the source and the alerts sink against the broker fake's secured listeners.

The fake's TLS uses a CA and certificates made per test module (``cryptography``); its SASL
server side follows Kafka's SaslServerAuthenticator/PlainSaslServer/ScramSaslServer (see
tests/kafka_fake_security.py). No test needs a real Kafka.
"""

from __future__ import annotations

import io
import json
import logging
import secrets
import threading
from pathlib import Path

import pandas as pd
import pytest

from streaming.config import ConfigError, as_config, load
from streaming.sinks.kafka_topic import AlertSinkError, KafkaAlertSink
from streaming.sources.kafka import KafkaStreamReader, read_partition
from streaming.sources.kafka_security import (
    SECURITY_KEYS,
    KafkaSecurityError,
    check_source_options,
    kafka_python_kwargs,
    load_token_provider,
    spark_source_options,
)
from streaming.sources.kafka_wire import KafkaAuthorizationError, KafkaWire, KafkaWireError
from tests.conftest import kafka_watchdog
from tests.kafka_fake_broker import FakeKafkaBroker, stage_segment
from tests.kafka_fake_security import SaslConfig, make_tls, server_ssl_context
from tests.oauth_token_provider import TOKEN_ENV, StaticTokenProvider
from tests.streaming_wait import wait_until

SAMPLES = Path(__file__).resolve().parent / "fixtures" / "samples"
ORDERS = SAMPLES / "synthetic" / "scenario_orders-0_00000000000000000000.log"
TXN_STATE_40 = SAMPLES / "synthetic" / "tv2_txn_state-40_00000000000000000000.log"

FAST = dict(client_id="txnwatch-test", request_timeout_ms=1500, retries=2, retry_backoff_ms=20,
            retry_backoff_max_ms=200, reconnect_backoff_ms=20, reconnect_backoff_max_ms=200,
            bootstrap_timeout_ms=3000)
PASSWORD = "pw-" + secrets.token_hex(12)  # unique: any occurrence in an output is a leak


_watchdog = kafka_watchdog(120)


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def log_root(tmp_path: Path) -> Path:
    root = tmp_path / "kafka-logs"
    stage_segment(root, "orders", 0, ORDERS)
    stage_segment(root, "__transaction_state", 40, TXN_STATE_40)
    return root


def secured(root: Path, tls, *, mechanisms=("PLAIN", "SCRAM-SHA-512"), tokens=None, **kw) -> FakeKafkaBroker:
    return FakeKafkaBroker(root, ssl_context=server_ssl_context(tls),
                           sasl=SaslConfig.for_users({"alice": PASSWORD}, mechanisms, oauth_tokens=tokens), **kw)


def sasl_settings(tls, mechanism: str, password: str = PASSWORD) -> dict[str, str]:
    return {"security_protocol": "SASL_SSL", "sasl_mechanism": mechanism, "sasl_plain_username": "alice",
            "sasl_plain_password": password, "ssl_cafile": str(tls.ca)}


# ------------------------------------------------------------------ configuration mapping
def test_every_security_key_comes_from_config_and_env(tmp_path):
    env = {"TXNWATCH_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "TXNWATCH_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
           "TXNWATCH_KAFKA_SASL_PLAIN_USERNAME": "alice", "TXNWATCH_KAFKA_SASL_PLAIN_PASSWORD": PASSWORD,
           "TXNWATCH_KAFKA_SSL_CAFILE": "/ca.pem", "TXNWATCH_KAFKA_SSL_CERTFILE": "/c.pem",
           "TXNWATCH_KAFKA_SSL_KEYFILE": "/k.pem", "TXNWATCH_KAFKA_SSL_PASSWORD": "kp",
           "TXNWATCH_KAFKA_SSL_CHECK_HOSTNAME": "false", "TXNWATCH_KAFKA_SASL_KERBEROS_NAME": "txnwatch@EX",
           "TXNWATCH_KAFKA_SASL_KERBEROS_SERVICE_NAME": "kfk",
           "TXNWATCH_KAFKA_SASL_KERBEROS_DOMAIN_NAME": "kafka.example.com",
           "TXNWATCH_KAFKA_SASL_OAUTH_TOKEN_PROVIDER": "tests.oauth_token_provider:StaticTokenProvider"}
    cfg = load(None, env=env)["kafka"]
    kwargs = kafka_python_kwargs(cfg)
    # every key reaches kafka-python (ssl_crlfile becomes an ssl_context: test_crl_refuses_...)
    assert set(kwargs) == set(SECURITY_KEYS) - {"ssl_crlfile"}
    assert kwargs["ssl_check_hostname"] is False and kwargs["sasl_plain_password"] == PASSWORD
    assert kwargs["sasl_kerberos_service_name"] == "kfk" and kwargs["ssl_password"] == "kp"
    assert isinstance(kwargs["sasl_oauth_token_provider"], StaticTokenProvider)
    # empty values are left to kafka-python's defaults; the TOML file works the same way
    f = tmp_path / "t.toml"
    f.write_text('[kafka]\nsecurity_protocol = "SSL"\nssl_crlfile = ""\nssl_check_hostname = true\n')
    assert kafka_python_kwargs(load(str(f), env={})["kafka"]) == {"security_protocol": "SSL",
                                                                  "ssl_check_hostname": True}
    with pytest.raises(ConfigError, match="ssl_check_hostname"):
        load(None, env={"TXNWATCH_KAFKA_SSL_CHECK_HOSTNAME": "maybe"})


def test_spark_options_carry_references_never_secrets(tmp_path):
    environ: dict[str, str] = {}
    opts = spark_source_options({"security_protocol": "SASL_SSL", "sasl_plain_username": "alice",
                                 "sasl_plain_password": PASSWORD, "ssl_password": "file:/run/secrets/key",
                                 "ssl_check_hostname": False}, environ)
    assert opts == {"security_protocol": "SASL_SSL", "sasl_plain_username": "alice",
                    "sasl_plain_password": "env:TXNWATCH_KAFKA_SASL_PLAIN_PASSWORD",
                    "ssl_password": "file:/run/secrets/key", "ssl_check_hostname": "false"}
    assert environ == {"TXNWATCH_KAFKA_SASL_PLAIN_PASSWORD": PASSWORD}  # local executors inherit it
    assert PASSWORD not in json.dumps(opts)
    with pytest.raises(KafkaSecurityError, match="must be a reference"):
        check_source_options({"sasl_plain_password": PASSWORD})
    with pytest.raises(KafkaSecurityError, match="must be a reference") as err:
        KafkaStreamReader({"bootstrap_servers": "k:9092", "topics": '["t"]', "sasl_plain_password": PASSWORD})
    assert PASSWORD not in str(err.value)


def test_secret_references_resolve_or_name_what_is_missing(tmp_path, monkeypatch):
    secret_file = tmp_path / "pw"
    secret_file.write_text(PASSWORD + "\n")
    monkeypatch.setenv("MY_KAFKA_PW", PASSWORD)
    assert kafka_python_kwargs({"sasl_plain_password": f"file:{secret_file}"})["sasl_plain_password"] == PASSWORD
    assert kafka_python_kwargs({"sasl_plain_password": "env:MY_KAFKA_PW"})["sasl_plain_password"] == PASSWORD
    with pytest.raises(KafkaSecurityError, match="environment variable NOPE_PW is not set"):
        kafka_python_kwargs({"sasl_plain_password": "env:NOPE_PW"})
    with pytest.raises(KafkaSecurityError, match=r"cannot read secret file .*missing"):
        kafka_python_kwargs({"ssl_password": f"file:{tmp_path / 'missing'}"})


def test_token_provider_by_dotted_path():
    for path in ("tests.oauth_token_provider:StaticTokenProvider", "tests.oauth_token_provider.make_provider"):
        assert isinstance(load_token_provider(path), StaticTokenProvider)
    with pytest.raises(KafkaSecurityError, match="cannot import 'no_such_module'.*importable on the driver"):
        load_token_provider("no_such_module:Provider")
    with pytest.raises(KafkaSecurityError, match="has no attribute 'Nope'"):
        load_token_provider("tests.oauth_token_provider:Nope")
    with pytest.raises(KafkaSecurityError, match="not a kafka.net.sasl.oauth.AbstractTokenProvider"):
        load_token_provider("tests.oauth_token_provider:TOKEN_ENV")
    with pytest.raises(KafkaSecurityError, match="OAUTHBEARER needs sasl_oauth_token_provider"):
        kafka_python_kwargs({"sasl_mechanism": "OAUTHBEARER"})


# ------------------------------------------------------------------ the source's client over TLS + SASL
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256"])
def test_wire_reads_over_sasl_ssl(log_root, tls, mechanism):
    with secured(log_root, tls, mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")) as broker, \
            KafkaWire(broker.bootstrap_servers, **kafka_python_kwargs(sasl_settings(tls, mechanism)), **FAST) as w:
        assert w.partitions(["orders"]) == {"orders": [0]}
        offs = w.offsets([("orders", 0)])[("orders", 0)]
        assert (offs.log_start, offs.high_watermark, offs.lso) == (0, 13, 9)
        res = w.fetch("orders", 0, 0, 1 << 20)
        assert res.ok and res.records == ORDERS.read_bytes()[:len(res.records)] and len(res.records) > 0
        handshakes = broker.requests_for("sasl_handshake")
        assert handshakes == []  # SASL happens before the request log: nothing reached the handlers


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_wrong_password_is_one_clear_error(log_root, tls, mechanism, caplog):
    caplog.set_level(logging.DEBUG)
    wrong = "wrong-" + secrets.token_hex(6)
    with secured(log_root, tls) as broker, \
            KafkaWire(broker.bootstrap_servers, **kafka_python_kwargs(sasl_settings(tls, mechanism, wrong)),
                      **FAST) as w:
        with pytest.raises(KafkaWireError) as err:
            w.partitions(["orders"])
    msg = str(err.value)
    assert msg.startswith("Kafka authentication failed at 127.0.0.1:")
    assert f"SASL_SSL, {mechanism}, user alice" in msg and "SaslAuthenticationFailedError" in msg
    # PLAIN's server says why; SCRAM's says only "invalid credentials" (never whether the user exists)
    assert ("Invalid username or password" if mechanism == "PLAIN" else
            f"invalid credentials with SASL mechanism {mechanism}") in msg
    assert wrong not in msg and wrong not in caplog.text  # DEBUG logs of kafka-python redacted too


def test_unsupported_mechanism_and_untrusted_certificate(log_root, tls, tmp_path):
    with secured(log_root, tls, mechanisms=("SCRAM-SHA-512",)) as broker:
        with KafkaWire(broker.bootstrap_servers, **kafka_python_kwargs(sasl_settings(tls, "PLAIN")), **FAST) as w:
            with pytest.raises(KafkaWireError, match="does not enable PLAIN on this listener"):
                w.partitions(["orders"])
        other = make_tls(tmp_path / "other-ca")
        with KafkaWire(broker.bootstrap_servers, **{**kafka_python_kwargs(sasl_settings(tls, "SCRAM-SHA-512")),
                                                    "ssl_cafile": str(other.ca)}, **FAST) as w:
            with pytest.raises(KafkaWireError, match="TLS handshake with .* failed: .*CERTIFICATE_VERIFY_FAILED"):
                w.partitions(["orders"])


def test_sasl_against_a_listener_without_sasl(log_root):
    """A broker answers SaslHandshake on a listener that is already authenticated (PLAINTEXT)
    with ILLEGAL_SASL_STATE (KafkaApis.handleSaslHandshakeRequest)."""
    settings = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
                "sasl_plain_password": PASSWORD}
    with FakeKafkaBroker(log_root) as broker, \
            KafkaWire(broker.bootstrap_servers, **kafka_python_kwargs(settings), **FAST) as w:
        with pytest.raises(KafkaWireError, match="Kafka authentication failed .*IllegalSaslStateError"):
            w.partitions(["orders"])


def test_crl_refuses_a_revoked_broker_certificate(log_root, tls):
    with FakeKafkaBroker(log_root, ssl_context=server_ssl_context(tls)) as broker:
        base = {"security_protocol": "SSL", "ssl_cafile": str(tls.ca)}
        with KafkaWire(broker.bootstrap_servers, **kafka_python_kwargs({**base, "ssl_crlfile": str(tls.crl_empty)}),
                       **FAST) as w:
            assert w.partitions(["orders"]) == {"orders": [0]}
        with KafkaWire(broker.bootstrap_servers,
                       **kafka_python_kwargs({**base, "ssl_crlfile": str(tls.crl_revoking_server)}), **FAST) as w:
            with pytest.raises(KafkaWireError, match="certificate revoked"):
                w.partitions(["orders"])


def test_client_certificate_with_encrypted_key_and_its_principal(log_root, tls):
    """ssl_certfile + ssl_keyfile + ssl_password against a listener with ssl.client.auth=required;
    the broker's principal is the certificate's subject, and an ACL on it applies."""
    ctx = server_ssl_context(tls, require_client_cert=True)
    with FakeKafkaBroker(log_root, ssl_context=ctx) as broker:
        base = {"security_protocol": "SSL", "ssl_cafile": str(tls.ca)}
        with KafkaWire(broker.bootstrap_servers, **kafka_python_kwargs(base), **FAST) as w:
            with pytest.raises(KafkaWireError, match="TLS handshake"):
                w.partitions(["orders"])
        client = {**base, "ssl_certfile": str(tls.client_cert), "ssl_keyfile": str(tls.client_key),
                  "ssl_password": tls.client_key_password}
        broker.deny("Read", "Topic", "orders", principal="User:CN=txnwatch-client,O=txnwatch-tests")
        with KafkaWire(broker.bootstrap_servers, **kafka_python_kwargs(client), **FAST) as w:
            assert w.partitions(["orders"]) == {"orders": [0]}
            with pytest.raises(KafkaAuthorizationError, match="Kafka denied Read on Topic:orders"):
                w.fetch("orders", 0, 0, 1 << 20)


def test_oauthbearer_token_provider_by_dotted_path(log_root, tls, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    token = "tok-" + secrets.token_hex(10)
    monkeypatch.setenv(TOKEN_ENV, token)
    settings = {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER", "ssl_cafile": str(tls.ca),
                "sasl_oauth_token_provider": "tests.oauth_token_provider:StaticTokenProvider"}
    with secured(log_root, tls, mechanisms=("OAUTHBEARER",), tokens={token: "svc-txnwatch"}) as broker:
        broker.deny("Describe", "Topic", "orders", principal="User:svc-txnwatch")
        with KafkaWire(broker.bootstrap_servers, **kafka_python_kwargs(settings), **FAST) as w:
            with pytest.raises(KafkaAuthorizationError, match="Describe on Topic:orders"):
                w.partitions(["orders"])  # authenticated as the token's principal, then denied
        monkeypatch.setenv(TOKEN_ENV, "expired-token")
        with KafkaWire(broker.bootstrap_servers, **kafka_python_kwargs(settings), **FAST) as w:
            with pytest.raises(KafkaWireError, match="invalid_token"):
                w.partitions(["orders"])
    assert token not in caplog.text


def test_source_reads_partitions_over_sasl_ssl_with_env_reference(log_root, tls, monkeypatch):
    """Driver planning and executor reads (read_partition) of the kafka-txn source, the password
    given as env:NAME as the runner passes it."""
    monkeypatch.setenv("TXNWATCH_KAFKA_SASL_PLAIN_PASSWORD", PASSWORD)
    with secured(log_root, tls) as broker:
        opts = {"bootstrap_servers": broker.bootstrap_servers, "topics": '["orders"]', "cluster": "sec",
                "starting_offsets": "earliest", "request_timeout_ms": "3000", "retries": "2",
                **spark_source_options(sasl_settings(tls, "SCRAM-SHA-512"), environ={})}
        assert opts["sasl_plain_password"] == "env:TXNWATCH_KAFKA_SASL_PLAIN_PASSWORD"
        r = KafkaStreamReader(opts)
        init = r.initialOffset()
        end = r.latestOffset(init, None)
        ev = pd.concat([read_partition(p, r.opts) for p in r.partitions(init, end)], ignore_index=True)
    data = ev[ev["kind"] == "data"]
    assert set(data["topic"]) == {"orders"} and len(data) > 0
    assert {"txn_state", "progress"} <= set(ev["kind"])
    assert PASSWORD not in ev.to_json()


# ------------------------------------------------------------------ the alerts sink
def test_alert_sink_over_tls_and_sasl_plain(log_root, tls, caplog):
    caplog.set_level(logging.DEBUG)  # kafka-python's admin client logs its configuration at DEBUG
    alerts = [{"key": "c/orders/0/7/3", "status": "hanging"}, {"key": "c/orders/0/8/9", "status": "late"}]
    with secured(log_root, tls) as broker:
        cfg = load(None, env={})
        cfg["kafka"].update(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=5000,
                            **sasl_settings(tls, "PLAIN"))
        sink = KafkaAlertSink.from_config(as_config(cfg).kafka, as_config(cfg).sinks)
        sink(alerts)
        sink.close()
        with KafkaWire(broker.bootstrap_servers, **kafka_python_kwargs(sasl_settings(tls, "SCRAM-SHA-512")),
                       **FAST) as w:
            raw = w.fetch("txnwatch-alerts", 0, 0, 1 << 20).records
        assert all(a["key"].encode() in raw and json.dumps(a, separators=(",", ":")).encode() in raw
                   for a in alerts)
        assert PASSWORD.encode() not in raw
        # a denied Write on the alerts topic fails the micro-batch with the ACL to add
        broker.deny("Write", "Topic", "txnwatch-alerts")
        sink = KafkaAlertSink.from_config(as_config(cfg).kafka, as_config(cfg).sinks)
        with pytest.raises(AlertSinkError) as err:
            sink(alerts[:1])
        sink.close()
    assert PASSWORD not in caplog.text
    assert "Kafka denied Write on Topic:txnwatch-alerts to User:alice" in str(err.value)
    assert "--operation Write --topic txnwatch-alerts" in str(err.value)


# ------------------------------------------------------------------ ACLs
def test_missing_acls_give_one_clear_error_per_resource(log_root, tls):
    with secured(log_root, tls) as broker:
        settings = sasl_settings(tls, "SCRAM-SHA-512")
        opts = {"bootstrap_servers": broker.bootstrap_servers, "topics": '["orders"]', "cluster": "sec",
                "request_timeout_ms": "3000", "retries": "2",
                **spark_source_options(settings, environ={}), "sasl_plain_password": "env:SEC_TEST_PW"}
        import os

        os.environ["SEC_TEST_PW"] = PASSWORD
        try:
            # Metadata: no Describe on __transaction_state (always read) -> TOPIC_AUTHORIZATION_FAILED
            broker.deny("Describe", "Topic", "__transaction_state", principal="User:alice")
            with pytest.raises(KafkaAuthorizationError) as err:
                KafkaStreamReader(opts).initialOffset()
            msg = str(err.value)
            assert msg.startswith("Kafka denied Describe on Topic:__transaction_state to User:alice "
                                  "(TOPIC_AUTHORIZATION_FAILED from Metadata")
            assert (f"kafka-acls.sh --bootstrap-server {broker.bootstrap_servers} --add --allow-principal "
                    f"User:alice --operation Describe --topic __transaction_state") in msg
            broker.clear_acls()
            # Fetch: Describe allowed, Read denied -> the planned read fails naming Read
            broker.deny("Read", "Topic", "orders")
            r = KafkaStreamReader(opts)
            init = r.initialOffset()
            end = r.latestOffset(init, None)
            parts = [p for g in r.partitions(init, end) for p in g.parts if p.topic == "orders"]
            with pytest.raises(KafkaAuthorizationError, match=r"Kafka denied Read on Topic:orders to User:alice "
                                                                r"\(TOPIC_AUTHORIZATION_FAILED from Fetch at node 1"):
                read_partition(parts[0], r.opts)
            broker.clear_acls()
            # ListOffsets: leaders known from Metadata, then Describe withdrawn
            with KafkaWire(broker.bootstrap_servers, **kafka_python_kwargs(settings), **FAST) as w:
                w.partitions(["orders"])
                broker.deny("Describe", "Topic", "orders")
                with pytest.raises(KafkaAuthorizationError, match="Describe on Topic:orders .*from ListOffsets"):
                    w.offsets([("orders", 0)])
                # a pattern never sees a topic it may not Describe (Kafka leaves it out, no error)
                assert "orders" not in w.partitions(None, ".*", True)
        finally:
            del os.environ["SEC_TEST_PW"]


# ------------------------------------------------------------------ end to end: nothing leaks
@pytest.mark.spark
def test_job_over_sasl_ssl_leaks_no_secret(spark, tmp_path, tls, caplog):
    """``txnwatch run --source kafka`` over SASL_SSL/SCRAM-SHA-512 with every sink: the password
    appears in no log record (DEBUG included), progress line, console or JSONL alert, alert on
    the topic, or query plan. The password reaches executors as a file: reference."""
    from kafka import KafkaConsumer

    from streaming.runner import run_job, source_options
    from streaming.sinks.jsonl import read_jsonl
    from tests.test_kafka_source import live_scenario

    caplog.set_level(logging.DEBUG)
    secret_file = tmp_path / "kafka-password"
    secret_file.write_text(PASSWORD)
    sc = live_scenario(tmp_path)
    with secured(sc.root, tls) as broker:
        cfg = load(None, env={})
        cfg["cluster"] = "live"
        cfg["kafka"].update(bootstrap_servers=broker.bootstrap_servers, topic_pattern=".*",
                            request_timeout_ms=5000,
                            **{**sasl_settings(tls, "SCRAM-SHA-512"), "sasl_plain_password": f"file:{secret_file}"})
        cfg["streaming"].update(checkpoint=str(tmp_path / "ck"), trigger_interval="1 second")
        jsonl = tmp_path / "alerts.jsonl"
        cfg["sinks"].update(enabled=["jsonl", "console", "kafka"], jsonl_path=str(jsonl))
        stop = threading.Event()
        out = io.StringIO()
        rc: dict = {}
        th = threading.Thread(target=lambda: rc.setdefault("rc", run_job(as_config(cfg), source="kafka", path=None,
                                                                           stop_event=stop, console_out=out)))
        th.start()
        plans: list[str] = []
        try:
            wait_until(lambda: jsonl.exists() and bool(read_jsonl(str(jsonl))), "the job's first alerts",
                       timeout_s=120, check=lambda: _job_alive(th, rc))
            plans = [q._jsq.explainInternal(True) for q in spark.streams.active]
        finally:
            stop.set()
        th.join(60)
        assert rc.get("rc") == 0
        alerts = read_jsonl(str(jsonl))
        assert alerts and plans
        consumer = KafkaConsumer("txnwatch-alerts", bootstrap_servers=broker.bootstrap_servers,
                                 auto_offset_reset="earliest", consumer_timeout_ms=5000, group_id=None,
                                 **kafka_python_kwargs(sasl_settings(tls, "PLAIN")))
        topic_alerts = [m.value.decode() for m in consumer]
        consumer.close()
        # The source's own plan lists its options; Spark masks keys matching spark.redaction.regex
        # (default "(?i)secret|password|token|access[.]?key"), and the value is only a reference.
        c = as_config(cfg)
        fmt, opts, _ = source_options(c, "kafka", None)
        source_plan = spark.readStream.format(fmt).options(**opts).load()._jdf.queryExecution().toString()
        plans.append(source_plan)
    assert len(topic_alerts) == len(alerts)
    assert "batch " in caplog.text  # progress lines were logged (and captured)
    assert opts["sasl_plain_password"] == f"file:{secret_file}"
    assert "sasl_plain_password=*********(redacted)" in source_plan and "sasl_plain_username=alice" in source_plan
    for where, text in {"logs": caplog.text, "console": out.getvalue(), "jsonl": jsonl.read_text(),
                        "alerts topic": "".join(topic_alerts), "plan": "".join(plans)}.items():
        assert PASSWORD not in text, f"password leaked into {where}"  # ... never the secret


def _job_alive(th, rc: dict) -> None:
    assert th.is_alive(), f"the job ended early (rc {rc.get('rc')})"
