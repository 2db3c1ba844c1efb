"""Configuration: ``conf/txnwatch.toml`` < ``TXNWATCH_*`` environment variables < flags.

Errors name the key and the expected type (:class:`ConfigError`), never a traceback.
"""

from __future__ import annotations

import copy
import os
import tomllib
from typing import Any

from streaming.state_machine import EngineConfig
from streaming.verdict import Thresholds

DEFAULT_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf", "txnwatch.toml")

DEFAULTS: dict[str, Any] = {
    "cluster": "default",
    "kafka": {
        "bootstrap_servers": "", "topics": [], "topic_pattern": "", "include_internal": False,
        "starting_offsets": "lso", "max_offsets_per_trigger": 0, "fetch_max_bytes": 4194304,
        "client_id": "txnwatch",
        "request_timeout_ms": 30000, "security_protocol": "PLAINTEXT", "sasl_mechanism": "",
        "sasl_plain_username": "", "sasl_plain_password": "", "ssl_cafile": "", "ssl_certfile": "",
        "ssl_keyfile": "", "ssl_password": "", "ssl_check_hostname": True, "ssl_crlfile": "",
        "sasl_kerberos_name": "", "sasl_kerberos_service_name": "", "sasl_kerberos_domain_name": "",
        "sasl_oauth_token_provider": "",
    },
    "thresholds": {"max_timeout_ms": 900000, "padding_ms": 300000, "evict_after_ms": 604800000, "topics": {}},
    "streaming": {"checkpoint": "", "trigger_interval": "10 seconds", "shuffle_partitions": 4,
                  "state_store": "hdfs", "master": "local[2]",
                  "local_scan_max_bytes": 16 << 20},
    "sinks": {"enabled": ["jsonl", "console"], "jsonl_path": "alerts.jsonl", "kafka_topic": "txnwatch-alerts",
              "kafka_create_topic": True},
    "metrics": {"port": 0},
    # the status page (streaming/ui/settings.py reads these keys)
    "ui": {"enabled": False, "port": 9465, "bind": "127.0.0.1", "basic_user": "", "basic_password": "",
           "token": "", "stale_after_s": 0},
    "dumps": {"coordinator_view": False},
    "quality": {"enabled": False, "engine": "pandas", "sample_every": 0, "row_fraction": 1.0,
                "quarantine_path": "quarantine.jsonl", "scan": False},
}


class ConfigError(ValueError):
    """A configuration value is missing or has the wrong type; the message names the key."""


def _check(key: str, value: Any, expected: Any) -> Any:
    if isinstance(expected, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected a boolean (true/false), got {value!r}")
    elif isinstance(expected, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
    elif isinstance(expected, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        if value < 0:
            raise ConfigError(f"{key}: expected a non-negative integer, got {value}")
    elif isinstance(expected, str):
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
    elif isinstance(expected, list):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key}: expected a list of strings, got {value!r}")
    return value


def _merge(base: dict[str, Any], over: dict[str, Any], prefix: str = "") -> None:
    for k, v in over.items():
        key = f"{prefix}{k}"
        if k not in base:
            if prefix == "thresholds.topics.":
                base[k] = v
                continue
            raise ConfigError(f"{key}: unknown option")
        if isinstance(base[k], dict):
            if not isinstance(v, dict):
                raise ConfigError(f"{key}: expected a table")
            _merge(base[k], v, f"{key}.")
        else:
            base[k] = _check(key, v, base[k])


def _parse_env(value: str, expected: Any) -> Any:
    if isinstance(expected, bool):
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
        return value
    if isinstance(expected, float):
        try:
            return float(value)
        except ValueError:
            return value
    if isinstance(expected, int):
        try:
            return int(value)
        except ValueError:
            return value
    if isinstance(expected, list):
        return [v.strip() for v in value.split(",") if v.strip()]
    return value


def load(path: str | None = None, env: dict[str, str] | None = None,
         overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load the effective configuration as a nested dict."""
    cfg = copy.deepcopy(DEFAULTS)
    path = path or DEFAULT_PATH
    if path and os.path.exists(path):
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        _merge(cfg, doc)
    elif path != DEFAULT_PATH:
        raise ConfigError(f"config file {path} does not exist")
    env = os.environ if env is None else env
    for name, value in env.items():
        if not name.startswith("TXNWATCH_"):
            continue
        parts = name[len("TXNWATCH_"):].lower()
        if parts == "cluster":
            cfg["cluster"] = value
            continue
        section, _, key = parts.partition("_")
        if section in cfg and isinstance(cfg[section], dict) and key in cfg[section]:
            cfg[section][key] = _check(f"{section}.{key} (env {name})", _parse_env(value, cfg[section][key]),
                                       cfg[section][key])
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        section, _, key = dotted.partition(".")
        if not key:
            cfg[section] = value
        else:
            cfg[section][key] = _check(f"{dotted} (flag)", value, cfg[section][key])
    for topic, t in cfg["thresholds"]["topics"].items():
        if not isinstance(t, dict):
            raise ConfigError(f"thresholds.topics.{topic}: expected a table")
        for k, v in t.items():
            if k not in ("max_timeout_ms", "padding_ms"):
                raise ConfigError(f"thresholds.topics.{topic}.{k}: unknown option")
            _check(f"thresholds.topics.{topic}.{k}", v, 0)
    return cfg


def engine_config(cfg: dict[str, Any], *, coordinator_available: bool) -> EngineConfig:
    t = cfg["thresholds"]
    base = Thresholds(t["max_timeout_ms"], t["padding_ms"])
    per_topic = {
        topic: Thresholds(v.get("max_timeout_ms", base.max_timeout_ms), v.get("padding_ms", base.padding_ms))
        for topic, v in t["topics"].items()
    }
    return EngineConfig(cluster=cfg["cluster"], thresholds=base, topic_thresholds=per_topic,
                        coordinator_available=coordinator_available, evict_after_ms=t["evict_after_ms"])
