"""Typed configuration: loaded and checked once, each part of the job gets its section."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest

from streaming.config import (
    DEFAULT_PATH,
    DEFAULTS,
    Config,
    ConfigError,
    KafkaConfig,
    QualityConfig,
    TopicThresholds,
    as_config,
    engine_config,
    load,
    load_config,
)
from streaming.runner import checkpoint_dir, source_options
from streaming.verdict import Thresholds


def test_layers_give_typed_sections(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('cluster = "prod"\n[thresholds]\npadding_ms = 1000\n[thresholds.topics.payments]\n'
                 'max_timeout_ms = 3600000\n[quality]\nrow_fraction = 1\n')
    cfg = load_config(str(f), env={"TXNWATCH_THRESHOLDS_PADDING_MS": "2000", "TXNWATCH_SINKS_ENABLED": "jsonl,kafka",
                                   "TXNWATCH_QUALITY_ENABLED": "yes", "TXNWATCH_CLUSTER": "env-wins-over-file"},
                      overrides={"kafka.bootstrap_servers": "k1:9092", "cluster": "flag-wins", "metrics.port": None})
    assert cfg.cluster == "flag-wins"
    assert cfg.thresholds.padding_ms == 2000 and cfg.thresholds.max_timeout_ms == 900000
    assert cfg.thresholds.topics == {"payments": TopicThresholds(max_timeout_ms=3600000)}
    assert cfg.sinks.enabled == ("jsonl", "kafka") and cfg.kafka.bootstrap_servers == "k1:9092"
    assert cfg.quality.enabled is True and cfg.quality.row_fraction == 1
    assert cfg.metrics.port == 0  # a flag left unset (None) does not override
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.cluster = "x"  # type: ignore[misc]
    ecfg = engine_config(cfg, coordinator_available=True)
    assert ecfg.cluster == "flag-wins" and ecfg.thresholds == Thresholds(900000, 2000)
    assert ecfg.topic_thresholds == {"payments": Thresholds(3600000, 2000)}


def test_errors_name_the_key_and_the_type(tmp_path):
    f = tmp_path / "c.toml"
    cases = {
        "[sinks]\nenabled = \"jsonl\"\n": r"sinks.enabled: expected a list of strings",
        "[quality]\nrow_fraction = \"all\"\n": r"quality.row_fraction: expected a number",
        "[dumps]\ncoordinator_view = 1\n": r"dumps.coordinator_view: expected a boolean",
        "[metrics]\nport = -1\n": r"metrics.port: expected a non-negative integer",
        "[thresholds.topics.payments]\npadding = 1\n": r"thresholds.topics.payments.padding: unknown option",
        "[thresholds.topics.payments]\npadding_ms = \"x\"\n": r"thresholds.topics.payments.padding_ms: expected an integer",
        "[nope]\nx = 1\n": r"nope: unknown option",
        "kafka = 1\n": r"kafka: expected a table",
    }
    for text, message in cases.items():
        f.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_config(str(f), env={})
    with pytest.raises(ConfigError, match=r"streaming.shuffle_partitions \(flag\): expected an integer"):
        load_config(None, env={}, overrides={"streaming.shuffle_partitions": "four"})
    with pytest.raises(ConfigError, match=r"thresholds.topics \(env TXNWATCH_THRESHOLDS_TOPICS\): expected a table"):
        load_config(None, env={"TXNWATCH_THRESHOLDS_TOPICS": "payments"})
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "missing.toml"), env={})


def test_documents_adjusted_by_callers_are_checked():
    doc = load(None, env={})
    doc["kafka"]["bootstrap_servers"] = "k:9092"
    cfg = as_config(dict(doc, quality={"quarantine_path": "q.jsonl"}))  # a partial table keeps the defaults
    assert cfg.kafka.bootstrap_servers == "k:9092"
    assert cfg.quality == QualityConfig(quarantine_path="q.jsonl")
    assert as_config(cfg) is cfg
    doc["streaming"]["shuffle_partitions"] = "4"
    with pytest.raises(ConfigError, match=r"streaming.shuffle_partitions: expected an integer"):
        as_config(doc)


def test_defaults_file_matches_the_built_in_defaults():
    with open(DEFAULT_PATH, "rb") as f:
        doc = tomllib.load(f)
    doc["thresholds"].setdefault("topics", {})  # per-topic overrides are only shown as a comment there
    assert doc == DEFAULTS  # conf/txnwatch.toml documents every option with its default
    assert load_config(None, env={}) == Config()


def test_consumers_get_their_section(tmp_path):
    kafka = KafkaConfig(bootstrap_servers="k1:9092", topics=("orders",), sasl_mechanism="PLAIN",
                        sasl_plain_password="secret")
    assert kafka.security() == {"security_protocol": "PLAINTEXT", "sasl_mechanism": "PLAIN",
                                "sasl_plain_password": "secret", "ssl_check_hostname": True}
    assert "secret" not in repr(kafka)
    prod = dataclasses.replace(Config(), cluster="prod", kafka=kafka)
    fmt, opts, coord = source_options(prod, "kafka", None)
    assert (fmt, coord) == ("kafka-txn", True)
    assert opts["topics"] == '["orders"]' and opts["security_protocol"] == "PLAINTEXT"
    assert opts["sasl_mechanism"] == "PLAIN" and "ssl_cafile" not in opts
    # the smallest max_timeout_ms (transaction.max.timeout.ms default 900000, TransactionStateManager)
    assert opts["probe_follow_after_ms"] == "900000" and "ride_through_ms" not in opts
    assert source_options(prod, "kafka", None, once=True)[1]["ride_through_ms"] == "60000"
    with pytest.raises(ConfigError, match="kafka.bootstrap_servers is required"):
        source_options(dataclasses.replace(prod, kafka=KafkaConfig()), "kafka", None)
    fmt, opts, coord = source_options(dataclasses.replace(prod, dumps=dataclasses.replace(prod.dumps, coordinator_view=True)),
                                      "dumps", str(tmp_path))
    assert (fmt, opts, coord) == ("dumps", {"dir": str(tmp_path), "cluster": "prod", "txn_state_partitions": "50",
                                            "clock_skew_tolerance_ms": "3600000"}, True)
    cfg = Config()
    assert checkpoint_dir(cfg.streaming, "prod").endswith("checkpoints/prod")
    assert checkpoint_dir(dataclasses.replace(cfg.streaming, checkpoint="s3a://b/ck"), "prod") == "s3a://b/ck"
