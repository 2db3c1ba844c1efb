"""Configuration: ``conf/txnwatch.toml`` < ``TXNWATCH_*`` environment variables < flags.

The options are the fields of the frozen section dataclasses below (:class:`KafkaConfig`,
:class:`ThresholdsConfig`, ...), gathered in :class:`Config`. A field's default is the built-in
default and fixes the option's type, so **adding an option is one line**: a field with its
default in its section class. The TOML table, the ``TXNWATCH_<SECTION>_<KEY>`` variable, flag
overrides, the type check and the typed attribute all follow from it (a new section is one
class plus one field of :class:`Config`). Document it in ``docs/configuration.md``.

:func:`load_config` reads and checks everything once and returns a :class:`Config`; each part
of the job then receives only its section (``cfg.kafka``, ``cfg.quality``...). :func:`load`
returns the same layered values as a plain nested dict (the "document") for callers that adjust
a few keys before starting a job; :func:`as_config` turns such a document into a
:class:`Config` with the same checks. Past this module there is only :class:`Config`: the job,
the scan, the UI and validate take it, never a document. Errors name the key and the expected type
(:class:`ConfigError`), never a traceback.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streaming.state_machine import EngineConfig
from streaming.verdict import Thresholds

DEFAULT_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf", "txnwatch.toml")

# Marks the [kafka] options that are passed to kafka-python as client security settings.
SECURITY = {"security": True}


@dataclass(frozen=True)
class KafkaConfig:
    """``[kafka]``: the live source and the clients txnwatch opens (docs/configuration.md)."""

    bootstrap_servers: str = ""
    topics: tuple[str, ...] = ()
    topic_pattern: str = ""
    include_internal: bool = False
    # issue 25: open transactional offset commits on __consumer_offsets hold consumer groups
    watch_consumer_offsets: bool = True
    starting_offsets: str = "lso"
    max_offsets_per_trigger: int = 0
    fetch_max_bytes: int = 4194304
    client_id: str = "txnwatch"
    request_timeout_ms: int = 30000
    # all brokers are asked at once; one that has not answered after this long leaves its
    # partitions unavailable for that trigger, so it does not hold up the others (issue 20)
    broker_timeout_ms: int = 10000
    groups_refresh_ms: int = 60000  # blocked consumer groups: offsets cache age (0 = lookup off)
    # per-partition availability (issue 14) and per-broker planning (issue 12)
    unavailable_timeout_ms: int = 600000
    once_ride_through_ms: int = 60000
    groups_per_broker: int = 1
    security_protocol: str = field(default="PLAINTEXT", metadata=SECURITY)
    sasl_mechanism: str = field(default="", metadata=SECURITY)
    sasl_plain_username: str = field(default="", metadata=SECURITY)
    sasl_plain_password: str = field(default="", repr=False, metadata=SECURITY)
    ssl_cafile: str = field(default="", metadata=SECURITY)
    ssl_certfile: str = field(default="", metadata=SECURITY)
    ssl_keyfile: str = field(default="", metadata=SECURITY)
    ssl_password: str = field(default="", repr=False, metadata=SECURITY)
    ssl_check_hostname: bool = field(default=True, metadata=SECURITY)
    ssl_crlfile: str = field(default="", metadata=SECURITY)
    sasl_kerberos_name: str = field(default="", metadata=SECURITY)
    sasl_kerberos_service_name: str = field(default="", metadata=SECURITY)
    sasl_kerberos_domain_name: str = field(default="", metadata=SECURITY)
    sasl_oauth_token_provider: str = field(default="", metadata=SECURITY)
    # Live look-back for a producer's last marker below a finding (detection.md §4 rule 2): bytes
    # read per finding at most (headers only are decoded); 0 turns the look-back off.
    lookback_max_bytes: int = 1 << 30
    # Live read mode (issue 12): "probe" reads only what is open (ListOffsets every trigger, a
    # Fetch at a moved LSO, every byte only of partitions whose oldest open transaction is older
    # than the smallest max_timeout_ms); "full" reads every byte of every watched partition.
    read_mode: str = "probe"
    # Topic discovery reuses a Metadata answer this long (Kafka clients' metadata.max.age.ms,
    # default 5 min there); refreshed at once after any error, deletion check or offsets going back.
    metadata_max_age_ms: int = 30000
    probe_bytes: int = 16384  # bytes asked at each moved LSO (a larger first batch is asked for again)
    # probe mode: a finding's data-loss preview is read forwards from its first offset, at most this much
    span_max_bytes: int = 256 << 20

    def security(self) -> dict[str, Any]:
        """The security options that are set (an empty string means kafka-python's default), as
        ``streaming.sources.kafka_security`` takes them; secrets are still unresolved here."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.metadata.get("security") and getattr(self, f.name) != ""}


@dataclass(frozen=True)
class TopicThresholds:
    """``[thresholds.topics.<name>]``: per-topic overrides (None = inherit)."""

    max_timeout_ms: int | None = None
    padding_ms: int | None = None


@dataclass(frozen=True)
class ThresholdsConfig:
    """``[thresholds]``: when an open transaction becomes a finding (spec/detection.md §3)."""

    max_timeout_ms: int = 900000
    padding_ms: int = 300000
    evict_after_ms: int = 604800000
    # The clock of files and dumps (detection.md §2): a timestamp more than this far ahead of the
    # wall clock, or of the newest timestamp of every other partition, is an outlier (clock_skew),
    # never the clock; a finding resting on one is unverified (clock-skew).
    clock_skew_tolerance_ms: int = 3600000
    topics: dict[str, TopicThresholds] = field(default_factory=dict)


@dataclass(frozen=True)
class StreamingConfig:
    """``[streaming]``: the Spark query."""

    checkpoint: str = ""
    trigger_interval: str = "10 seconds"
    shuffle_partitions: int = 4
    state_store: str = "hdfs"
    master: str = "local[2]"
    # ``txnwatch scan`` inputs up to this many bytes run in process (streaming/local_engine.py)
    local_scan_max_bytes: int = 256 << 20


@dataclass(frozen=True)
class SinksConfig:
    """``[sinks]``: where alerts are published."""

    enabled: tuple[str, ...] = ("jsonl", "console")
    jsonl_path: str = "alerts.jsonl"
    kafka_topic: str = "txnwatch-alerts"
    kafka_create_topic: bool = True
    # CreateTopics before Kafka 2.4 refuses -1 (broker default): explicit values are always sent.
    kafka_topic_partitions: int = 1
    kafka_topic_replication_factor: int = 0  # 0 = min(3, number of brokers)
    kafka_idempotence: str = "auto"  # auto | true | false (auto: fall back without IDEMPOTENT_WRITE)


@dataclass(frozen=True)
class MetricsConfig:
    """``[metrics]``: the Prometheus endpoint (0 = off)."""

    port: int = 0


STALE_FACTOR = 3  # the status page: stale after this many trigger intervals without a micro-batch ...
STALE_FLOOR_S = 30.0  # ... but never sooner (the first micro-batch of a large cluster is slow)

_UNITS = {"ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001, "s": 1.0, "sec": 1.0, "second": 1.0,
          "seconds": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0,
          "hour": 3600.0, "hours": 3600.0}


def interval_seconds(text: str) -> float:
    """A Spark trigger interval ("10 seconds", "500 milliseconds", "1 minute") in seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text or "")
    if not m or m.group(2).lower() not in _UNITS | {"": 1.0}:
        raise ConfigError(f"streaming.trigger_interval: expected e.g. '10 seconds', got {text!r}")
    return float(m.group(1)) * _UNITS.get(m.group(2).lower(), 1.0)


@dataclass(frozen=True)
class UiConfig:
    """``[ui]``: the status page (``streaming.ui``; the one settings class its server takes)."""

    enabled: bool = False
    port: int = 9465
    bind: str = "127.0.0.1"
    basic_user: str = ""
    basic_password: str = field(default="", repr=False)
    token: str = field(default="", repr=False)
    stale_after_s: int = 0  # 0 = 3 trigger intervals, at least 30 s

    @property
    def auth_required(self) -> bool:
        return bool(self.token or self.basic_user)

    def stale_limit_s(self, trigger_interval: str) -> float:
        """Seconds without news after which the page calls the job stale: ``stale_after_s``, or
        (when 0) three of the job's trigger intervals (``streaming.trigger_interval``), at least 30 s."""
        if self.stale_after_s > 0:
            return float(self.stale_after_s)
        return max(STALE_FACTOR * interval_seconds(trigger_interval or "10 seconds"), STALE_FLOOR_S)


@dataclass(frozen=True)
class DumpsConfig:
    """``[dumps]``: the drop directory source."""

    coordinator_view: bool = False


@dataclass(frozen=True)
class CoordinatorConfig:
    """``[coordinator]``: the coordinator view of file and dump inputs (spec/detection.md §3.1)."""

    # n of __transaction_state for files and dumps (the live path asks the cluster's metadata):
    # only a view holding every partition 0..n-1 proves that no coordinator knows a producer.
    txn_state_partitions: int = 50


@dataclass(frozen=True)
class QualityConfig:
    """``[quality]``: the data-quality gate (``streaming.quality``)."""

    enabled: bool = False
    engine: str = "pandas"
    sample_every: int = 0
    row_fraction: float = 1.0
    quarantine_path: str = "quarantine.jsonl"
    scan: bool = False  # the scan's quality check: a second read of the inputs plus GX's import


@dataclass(frozen=True)
class AbortConfig:
    """``[abort]``: the guarded abort, ``txnwatch abort KEY`` (``streaming/abort/``)."""

    audit_path: str = "abort-audit.jsonl"  # every attempt, one JSON line each
    publish: bool = True  # also publish every attempt on the alerts topic (sinks.kafka_topic) as an abort record
    lso_wait_ms: int = 30000  # --execute: how long to watch the LSO move past the first offset


@dataclass(frozen=True)
class Config:
    """The effective configuration: the top-level ``cluster`` and one object per TOML table."""

    cluster: str = "default"
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    thresholds: ThresholdsConfig = field(default_factory=ThresholdsConfig)
    streaming: StreamingConfig = field(default_factory=StreamingConfig)
    sinks: SinksConfig = field(default_factory=SinksConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    ui: UiConfig = field(default_factory=UiConfig)
    dumps: DumpsConfig = field(default_factory=DumpsConfig)
    coordinator: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    quality: QualityConfig = field(default_factory=QualityConfig)
    abort: AbortConfig = field(default_factory=AbortConfig)


class ConfigError(ValueError):
    """A configuration value is missing or has the wrong type; the message names the key."""


def _document(obj: Any) -> Any:
    """A config object as its TOML-shaped document (tables as dicts, tuples as lists)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: _document(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple):
        return list(obj)
    if isinstance(obj, dict):
        return {k: _document(v) for k, v in obj.items()}
    return obj


# The built-in defaults as a document: every option and its type, derived from the classes above.
_BUILT_IN = Config()
DEFAULTS: dict[str, Any] = _document(_BUILT_IN)
# Tables whose keys are names chosen by the user (each value a table of known options).
_OPEN_TABLES = {"thresholds.topics": TopicThresholds}


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
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key}: expected a list of strings, got {value!r}")
        value = list(value)
    elif isinstance(expected, dict):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a table, got {value!r}")
    return value


def _merge(base: dict[str, Any], over: Mapping[str, Any], prefix: str = "") -> None:
    for k, v in over.items():
        key = f"{prefix}{k}"
        if prefix.rstrip(".") in _OPEN_TABLES:
            base[k] = v  # a user-chosen name: its options are checked by _check_open_tables
            continue
        if k not in base:
            raise ConfigError(f"{key}: unknown option")
        if isinstance(base[k], dict):
            if not isinstance(v, Mapping):
                raise ConfigError(f"{key}: expected a table")
            _merge(base[k], v, f"{key}.")
        else:
            base[k] = _check(key, v, base[k])


def _check_open_tables(doc: dict[str, Any]) -> None:
    for dotted, cls in _OPEN_TABLES.items():
        section, _, name = dotted.partition(".")
        known = {f.name for f in dataclasses.fields(cls)}
        for entry, t in doc[section][name].items():
            if not isinstance(t, Mapping):
                raise ConfigError(f"{dotted}.{entry}: expected a table")
            for k, v in t.items():
                if k not in known:
                    raise ConfigError(f"{dotted}.{entry}.{k}: unknown option")
                _check(f"{dotted}.{entry}.{k}", v, 0)


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


def load(path: str | None = None, env: Mapping[str, str] | None = None,
         overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The layered configuration as a checked nested dict (the "document"; see the module doc)."""
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
    _check_open_tables(cfg)
    return cfg


def _section(name: str, cls: type, doc: Mapping[str, Any]) -> Any:
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        v = doc[f.name]
        open_table = _OPEN_TABLES.get(f"{name}.{f.name}")
        if open_table is not None:
            v = {entry: open_table(**t) for entry, t in v.items()}
        elif isinstance(v, list):
            v = tuple(v)
        kw[f.name] = v
    return cls(**kw)


def as_config(cfg: Config | Mapping[str, Any]) -> Config:
    """A :class:`Config` from a :class:`Config` (unchanged) or a document such as :func:`load`
    returns, possibly adjusted or partial (missing keys take their defaults); checked like a file."""
    if isinstance(cfg, Config):
        return cfg
    doc = copy.deepcopy(DEFAULTS)
    _merge(doc, cfg)
    _check_open_tables(doc)
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(Config):
        if isinstance(DEFAULTS[f.name], dict):
            kw[f.name] = _section(f.name, type(getattr(_BUILT_IN, f.name)), doc[f.name])
        else:
            kw[f.name] = doc[f.name]
    ui = kw["ui"]
    if bool(ui.basic_user) != bool(ui.basic_password):
        raise ConfigError("ui.basic_user and ui.basic_password go together (both set, or neither)")
    if not 0 <= ui.port <= 65535:
        raise ConfigError(f"ui.port: expected 0-65535, got {ui.port}")
    if kw["coordinator"].txn_state_partitions < 1:
        # n = 0 would make an empty view "complete" and prove every producer unknown.
        raise ConfigError(f"coordinator.txn_state_partitions: expected at least 1, got "
                          f"{kw['coordinator'].txn_state_partitions}")
    return Config(**kw)


def load_config(path: str | None = None, env: Mapping[str, str] | None = None,
                overrides: Mapping[str, Any] | None = None) -> Config:
    """Read the file, the environment and the flags once into a checked :class:`Config`."""
    return as_config(load(path, env, overrides))


def engine_config(cfg: Config, *, coordinator_available: bool) -> EngineConfig:
    """The state machine's configuration: the cluster and its thresholds (per topic too)."""
    t = cfg.thresholds
    base = Thresholds(t.max_timeout_ms, t.padding_ms)
    per_topic = {
        topic: Thresholds(v.max_timeout_ms if v.max_timeout_ms is not None else base.max_timeout_ms,
                          v.padding_ms if v.padding_ms is not None else base.padding_ms)
        for topic, v in t.topics.items()
    }
    return EngineConfig(cluster=cfg.cluster, thresholds=base, topic_thresholds=per_topic,
                        coordinator_available=coordinator_available, evict_after_ms=t.evict_after_ms)


def spark_conf(streaming: StreamingConfig) -> dict[str, str]:
    """The ``[streaming]`` settings that are Spark settings (shuffle partitions, state store)."""
    conf = {"spark.sql.shuffle.partitions": str(streaming.shuffle_partitions)}
    store = streaming.state_store
    if store == "rocksdb":
        conf["spark.sql.streaming.stateStore.providerClass"] = (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    elif store != "hdfs":
        raise ConfigError(f"streaming.state_store: expected 'hdfs' or 'rocksdb', got {store!r}")
    return conf
