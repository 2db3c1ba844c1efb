"""``kafka`` source: the live path. Raw Fetch of data partitions and ``__transaction_state``
(PySpark 4.2+ ``DataSourceStreamReader``), header-only decoding, Arrow rows of the event schema.

Options: ``bootstrap_servers`` (required), ``topics`` (JSON list) and/or ``topic_pattern``
(regex, re-evaluated every trigger), ``include_internal`` (let the pattern match internal topics
such as ``__consumer_offsets``), ``watch_consumer_offsets`` (default true: ``__consumer_offsets`` is
watched whatever the pattern, for its open transactional offset commits), ``starting_offsets`` (``lso`` default, ``earliest``, ``latest`` or
JSON ``{"topic": {"0": offset}}``), ``max_offsets_per_trigger`` (per data partition; the
coordinator log is never throttled), ``fetch_max_bytes`` (per Fetch request), ``validate_crc``,
``cluster``, ``read_mode`` (``full`` default here; ``probe``: see below), ``probe_bytes`` (per
partition), ``broker_timeout_ms`` (default ``min(request_timeout_ms, 10000)``: all brokers are
asked at once and a broker that has not answered by then leaves its partitions *unavailable*
for that trigger, so one stalled broker does not hold up the others),
``probe_follow_after_ms``, ``max_input_partitions`` (default 16: at most this many Spark input
partitions per micro-batch; a larger cluster's brokers share them, each still read with one
request per leader; 0 = one per broker), ``client_id``, ``request_timeout_ms``, ``retries``, ``retry_backoff_ms``,
``empty_fetch_retries`` (default 4: how often an empty answer below the planned end is retried,
with a metadata refresh and doubling backoff, before the unread rest is left to the next plan),
``unread_ledger`` (set by ``pipeline.start_query``: the file through which ``foreachBatch`` tells
the next plan where reads stopped short, streaming/sources/kafka_unread.py),
``deletion_confirmations`` (default 3: agreeing Metadata answers before a partition counts as
deleted), ``metadata_max_age_ms`` (default 0 here, 30000 from ``txnwatch run``: how long topic
discovery reuses a Metadata answer, as a Kafka client's ``metadata.max.age.ms``; see KafkaWire), ``unavailable_timeout_ms`` (default 600000: how long no broker may answer before the
query fails with one error naming the bootstrap servers), ``ride_through_ms`` (default 0; ``run
--once`` sets it: how long planning waits for unavailable partitions to come back before
planning without them), and the kafka-python security settings of
:data:`streaming.sources.kafka_security.SECURITY_KEYS`. Secrets
(``sasl_plain_password``, ``ssl_password``) must be references (``env:NAME``, ``file:PATH``),
never the secret itself, because Spark prints data source options in query plans; they are
resolved (and the OAUTHBEARER token provider imported) in each process that connects.

Read modes (``read_mode``): ``full`` reads every byte of every watched data partition from its
starting offset. ``probe`` (what ``txnwatch run`` uses by default) reads only what is open, so a
trigger's cost grows with open transactions, not with bytes or partitions:

* every trigger, ListOffsets for all watched partitions (one request per leader broker and
  isolation level): a partition whose LSO equals its high watermark has nothing open and costs
  nothing more — not even a progress row unless its offsets changed (the driver keeps the last);
* where the LSO is below the high watermark and **moved** since the last probe, one Fetch at the
  LSO (multi-partition, per leader, ``probe_bytes`` each, on the driver): the first transactional
  data batch there opens the oldest open transaction (producer id, epoch, first offset, first
  write). The window ``[LSO, that batch]`` is read by the executors like any range, so the state
  sees it as full mode would;
* when the LSO moves past a probed transaction, an ``lso_passed`` row closes it in the state
  (the LSO is the first offset of the oldest open transaction; ``UnifiedLog.updateFirstUnstableOffset``
  pins it at the log start when retention deleted that offset, hence ``max(first, log start)``);
* once a partition's oldest open transaction is older than ``probe_follow_after_ms`` (``run``
  passes the smallest ``max_timeout_ms``: no coordinator keeps a transaction open longer), the
  partition is *followed*: read in full from that LSO on (``max_offsets_per_trigger`` applies),
  so the transactions stuck behind it are seen exactly as full mode sees them, until it is read
  through with nothing open. Without following, only the oldest open transaction of a partition
  is known (the others when the LSO reaches them);
* on a finding of a probed transaction the driver reads its span forwards
  (``BrokerEvidence.span_after``) and P's previous marker backwards (``last_marker_before``).

Why starting at the LSO is correct: every transaction that began before the LSO is closed by
definition (the LSO is the first offset of the oldest open transaction), so nothing before it can
hang, and start-up work no longer depends on how much log is retained. What it costs: the legacy
abort's coordinator epoch cannot come from a marker read before the LSO; ``earliest`` reads the
full history so the ``last-marker``/``log-start`` sources (detection.md §4) apply.
``__transaction_state`` is always read from its log start (compacted: one record per id).

Availability (per partition): a partition whose leader is unknown (Metadata leader -1,
LEADER_NOT_AVAILABLE), whose leader answers a leader/storage error (NOT_LEADER_OR_FOLLOWER,
REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, FENCED/UNKNOWN_LEADER_EPOCH) after a metadata refresh,
or whose leader does not answer, is *unavailable* for that plan: it is not read, its next offset
stays where reading stopped, and it is asked again with doubling backoff
(``retry_backoff_ms`` up to ``unavailable_backoff_max_ms``, default 60000) in later triggers.
Its read emits one ``gap`` row with reason ``unavailable: <error>`` and **no progress row**, so
nothing downstream treats it as read up to now. The same holds for a partition that becomes
unreadable after planning, or whose Fetch answers stay empty below the planned end (tiered
storage, a new leader catching up): offsets advance only over data read or proven gone
(OFFSET_OUT_OF_RANGE with a log start above them), the rest is read again from where reading
stopped by the next plan (streaming/sources/kafka_unread.py), and ``ride_through_ms`` rides
faults out within the same plan first (the enricher's view-completeness rule for
``__transaction_state``; no verdict and no LSO resolution for a data partition). Every other
partition is read and judged in the same micro-batch. Offsets carry
``"unavail": {"topic<TAB>partition": {"error", "since", "tries", "retry_at"}}``. Only when no
broker answers Metadata for ``unavailable_timeout_ms`` does planning raise.

Clock (detection.md §2): the driver's wall clock when it planned the micro-batch, carried by
every row as ``event_time``; it moves every trigger. A data partition planned short of its high
watermark (``max_offsets_per_trigger``) is *lagging*: every row of its read carries
``lagging = true``, and the driver publishes no new verdict on it until a read takes it through
the clock again (streaming/availability.py), because a transaction there may be closed by a
marker not read yet. One lagging partition therefore no longer stops verdicts elsewhere.
Coordinator partitions are read to their high watermark in every micro-batch; one whose read (or
whose replay rebuilt from its log start) has a gap or fails gets no progress row, so the
coordinator view is incomplete until it is read again, never "complete and empty".

Where the code is (as PySpark's ``datasource.py`` separates the reader, its offsets and its
input partitions):

* kafka_source.py: the shell, Spark's ``DataSource`` / ``DataSourceStreamReader`` methods;
* kafka_planner.py: the driver-side planner (metadata, ListOffsets, probe fetches, planning);
* kafka_plan_state.py: the planner's state as typed objects, and its JSON form in Spark's offset log;
* kafka_partitions.py: the input partitions a plan becomes;
* kafka_reader.py: the executor side, a planned group of ranges to event rows;
* kafka_options.py, kafka_clients.py: the parsed options and the per-process client cache.

This module keeps the names other code imports from it.
"""

from streaming.sources.kafka_clients import close_wires
from streaming.sources.kafka_options import TXN_TOPIC
from streaming.sources.kafka_partitions import KafkaGroup, KafkaPartition
from streaming.sources.kafka_reader import read_arrow, read_group, read_partition
from streaming.sources.kafka_source import KafkaDataSource, KafkaStreamReader

__all__ = ["TXN_TOPIC", "KafkaDataSource", "KafkaGroup", "KafkaPartition", "KafkaStreamReader", "close_wires",
           "read_arrow", "read_group", "read_partition"]
