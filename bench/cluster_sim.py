"""A simulated Kafka cluster under kafka-python's transport, for bench/cluster_scale.py.

The watchdog's own code runs unchanged above the bytes: KafkaWire (the live source's client) and
kafka-python's ``KafkaAdminClient`` (DescribeProducers/DescribeTransactions/ListTransactions in
``streaming.broker_confirm``) both talk through ``kafka.net.KafkaConnectionManager``, whose
``_build_transport(node)`` opens a TCP socket and hands back a transport (``KafkaTCPTransport``:
``write(bytes)`` out, ``protocol.data_received(bytes)`` in). :func:`install` replaces only that
method: the transport it returns hands each framed request to :class:`SimCluster` and feeds the
framed response back to the connection on the IO thread. Everything above it - ApiVersions
negotiation, kafka-python's request encoding and response parsing, KafkaWire's per-leader
batching, retries and decoding, the planner, state and verdicts - is the product's real code.
(The narrowest seam in txnwatch itself would be ``KafkaWire._send_nowait``; kafka-python's
transport sits below it and also covers the admin client, so no product code is patched.)

The model is cheap enough for 200,000 partitions: offsets live in numpy arrays, a partition's
log is a list of encoded record batches only where something was written, and the two request
types sent per partition per trigger (ListOffsets, Fetch) are decoded and answered by hand
(layouts from apache/kafka ``clients/src/main/resources/common/message/ListOffsetsRequest.json``,
``ListOffsetsResponse.json``, ``FetchRequest.json``, ``FetchResponse.json``); everything else
(ApiVersions, Metadata, FindCoordinator, DescribeProducers, DescribeTransactions,
ListTransactions, ListGroups) goes through kafka-python's schema classes, as the socket fake
(tests/kafka_fake_broker.py) does. :func:`self_check` compares the hand-encoded answers with
kafka-python's decoders before a run.

Broker behaviour modelled (single replica per partition, so high watermark = log end):

* ListOffsets: EARLIEST (-2) = log start, LATEST (-1) = high watermark (READ_UNCOMMITTED) or LSO
  (READ_COMMITTED), ``KafkaApis.handleListOffsetRequest`` -> ``Partition.fetchOffsetForTimestamp``;
  a broker that does not lead the partition answers NOT_LEADER_OR_FOLLOWER (6).
* LSO = first offset of the oldest open transaction, else the high watermark
  (``ProducerStateManager.firstUnstableOffset`` / ``UnifiedLog.updateFirstUnstableOffset``).
* Fetch (READ_UNCOMMITTED): bytes from the batch containing the fetch offset, cut at the
  partition's ``partition_max_bytes`` (a partial last batch is possible), the first partition of
  a response always gets one whole batch (KIP-74), the request's ``max_bytes`` bounds the rest;
  OFFSET_OUT_OF_RANGE above the log end (``LocalLog.read``); records up to the high watermark.
* DescribeProducers: per producer id on the partition, its epoch, the coordinator epoch of its
  last marker (-1 if none) and the first offset of its open transaction (-1 if none)
  (``UnifiedLog.activeProducers``).
* Transaction coordinator: ``__transaction_state`` partition k = abs(hash(id)) % 50 is led by
  broker (k % brokers) + 1 and holds one record per state change (Ongoing on the first
  AddPartitions, PrepareCommit, CompleteCommit), encoded as the coordinator writes them
  (``TransactionLog.valueToBytes`` v0); DescribeTransactions / ListTransactions answer from the
  coordinator's in-memory state (``TransactionCoordinator.handleDescribeTransactions``,
  ``TransactionStateManager.listTransactionStates``); FindCoordinator names that leader.
"""

from __future__ import annotations

import bisect
import random
import struct
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from kafka.net.manager import KafkaConnectionManager
from kafka.protocol.admin.groups import ListGroupsRequest, ListGroupsResponse
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)

from streaming.simulate.encode import (
    encode_batch,
    encode_marker,
    encode_txn_log_batch,
    encode_txn_value_v0,
    txn_state_partition,
)
from tests.kafka_fake_broker import _ListOffsetsAnswer
from udfs.varint import encode_uvarint, read_uvarint

TXN_TOPIC = "__transaction_state"
NONE, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = 0, 1, 3, 6
NOT_COORDINATOR, TRANSACTIONAL_ID_NOT_FOUND = 16, 105
COMMIT = 1

#: what the simulated brokers advertise (a 3.x broker's ranges, within what the client sends)
API_VERSIONS: dict[int, tuple[int, int]] = {
    FetchRequest.API_KEY: (4, 12),
    ListOffsetsRequest.API_KEY: (1, 7),
    MetadataRequest.API_KEY: (0, 12),
    FindCoordinatorRequest.API_KEY: (0, 4),
    ApiVersionsRequest.API_KEY: (0, 3),
    DescribeProducersRequest.API_KEY: (0, 0),
    DescribeTransactionsRequest.API_KEY: (0, 0),
    ListTransactionsRequest.API_KEY: (0, 1),
    ListGroupsRequest.API_KEY: (0, 4),
}
_CLASSES = {c.API_KEY: c for c in (MetadataRequest, FindCoordinatorRequest, ApiVersionsRequest,
                                   DescribeProducersRequest, DescribeTransactionsRequest, ListTransactionsRequest,
                                   ListGroupsRequest)}
API_NAMES = {FetchRequest.API_KEY: "Fetch", ListOffsetsRequest.API_KEY: "ListOffsets",
             MetadataRequest.API_KEY: "Metadata", FindCoordinatorRequest.API_KEY: "FindCoordinator",
             ApiVersionsRequest.API_KEY: "ApiVersions", DescribeProducersRequest.API_KEY: "DescribeProducers",
             DescribeTransactionsRequest.API_KEY: "DescribeTransactions",
             ListTransactionsRequest.API_KEY: "ListTransactions", ListGroupsRequest.API_KEY: "ListGroups"}


# ------------------------------------------------------------------ primitive readers/writers
class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes, pos: int = 0) -> None:
        self.buf, self.pos = buf, pos

    def int8(self) -> int:
        v = self.buf[self.pos]
        self.pos += 1
        return v - 256 if v > 127 else v

    def int16(self) -> int:
        (v,) = struct.unpack_from(">h", self.buf, self.pos)
        self.pos += 2
        return v

    def int32(self) -> int:
        (v,) = struct.unpack_from(">i", self.buf, self.pos)
        self.pos += 4
        return v

    def int64(self) -> int:
        (v,) = struct.unpack_from(">q", self.buf, self.pos)
        self.pos += 8
        return v

    def uvarint(self) -> int:
        v, self.pos = read_uvarint(self.buf, self.pos)
        return v

    def string(self, flexible: bool) -> str | None:
        n = self.uvarint() - 1 if flexible else self.int16()
        if n < 0:
            return None
        s = self.buf[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def array_len(self, flexible: bool) -> int:
        return self.uvarint() - 1 if flexible else self.int32()

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def _flexible(api_key: int, version: int) -> bool:
    return {FetchRequest.API_KEY: 12, ListOffsetsRequest.API_KEY: 6}[api_key] <= version


def _header(payload: bytes) -> tuple[int, int, int, _Reader]:
    """(api key, version, correlation id, reader after the request header): header v1
    (client id int16 string) or v2 (plus tagged fields) for flexible versions."""
    api_key, version, corr = struct.unpack_from(">hhi", payload, 0)
    r = _Reader(payload, 8)
    r.string(False)  # client id: a non-compact nullable string in every header version
    if _flexible(api_key, version):
        r.tags()
    return api_key, version, corr, r


def decode_list_offsets(payload: bytes) -> tuple[int, int, int, list[tuple[str, list[tuple[int, int]]]]]:
    """(version, correlation id, isolation level, [(topic, [(partition, timestamp)])])."""
    _, v, corr, r = _header(payload)
    flex = v >= 6
    r.int32()  # replica id
    isolation = r.int8() if v >= 2 else 0
    topics = []
    for _ in range(r.array_len(flex)):
        name = r.string(flex)
        parts = []
        for _ in range(r.array_len(flex)):
            p = r.int32()
            if v >= 4:
                r.int32()  # current leader epoch
            ts = r.int64()
            if v == 0:
                r.int32()
            if flex:
                r.tags()
            parts.append((p, ts))
        if flex:
            r.tags()
        topics.append((name, parts))
    return v, corr, isolation, topics


@dataclass
class FetchAsk:
    version: int
    corr: int
    max_bytes: int
    topics: list[tuple[str, list[tuple[int, int, int]]]]  # (partition, fetch offset, partition max bytes)


def decode_fetch(payload: bytes) -> FetchAsk:
    _, v, corr, r = _header(payload)
    flex = v >= 12
    r.int32()  # replica id
    r.int32()  # max wait
    r.int32()  # min bytes
    max_bytes = r.int32() if v >= 3 else 1 << 30
    if v >= 4:
        r.int8()  # isolation level
    if v >= 7:
        r.int32()
        r.int32()
    topics = []
    for _ in range(r.array_len(flex)):
        name = r.string(flex)
        parts = []
        for _ in range(r.array_len(flex)):
            p = r.int32()
            if v >= 9:
                r.int32()
            off = r.int64()
            if v >= 12:
                r.int32()
            if v >= 5:
                r.int64()
            pmax = r.int32()
            if flex:
                r.tags()
            parts.append((p, off, pmax))
        if flex:
            r.tags()
        topics.append((name, parts))
    return FetchAsk(v, corr, max_bytes, topics)


def encode_fetch_response(v: int, corr: int, topics: list[tuple[str, list[tuple[int, int, int, int, int, bytes]]]]
                          ) -> bytes:
    """FetchResponse v4..v12: (partition, error, high watermark, LSO, log start, records) per
    partition; aborted transactions null (READ_UNCOMMITTED), preferred read replica -1."""
    flex = v >= 12
    out = [struct.pack(">i", corr)]
    if flex:
        out.append(b"\x00")
    out.append(struct.pack(">i", 0))  # throttle
    if v >= 7:
        out.append(struct.pack(">hi", 0, 0))
    out.append(encode_uvarint(len(topics) + 1) if flex else struct.pack(">i", len(topics)))
    for name, parts in topics:
        raw = name.encode()
        out.append(encode_uvarint(len(raw) + 1) + raw if flex else struct.pack(">h", len(raw)) + raw)
        out.append(encode_uvarint(len(parts) + 1) if flex else struct.pack(">i", len(parts)))
        for p, code, hw, lso, ls, records in parts:
            out.append(struct.pack(">ihqq", p, code, hw, lso))
            if v >= 5:
                out.append(struct.pack(">q", ls))
            out.append(b"\x00" if flex else struct.pack(">i", -1))  # aborted transactions: null
            if v >= 11:
                out.append(struct.pack(">i", -1))
            if flex:
                out.append(encode_uvarint(len(records) + 1))
            else:
                out.append(struct.pack(">i", len(records)))
            out.append(records)
            if flex:
                out.append(b"\x00")
        if flex:
            out.append(b"\x00")
    if flex:
        out.append(b"\x00")
    body = b"".join(out)
    return struct.pack(">i", len(body)) + body


# ------------------------------------------------------------------ the cluster model
@dataclass
class Txn:
    pid: int
    tid: str | None  # None: the coordinator never knew it (hanging)
    part: int  # partition index
    first: int
    first_ts: int
    kind: str  # "hanging", "late", "young"


@dataclass
class PartLog:
    bases: list[int] = field(default_factory=list)
    lasts: list[int] = field(default_factory=list)
    data: list[bytes] = field(default_factory=list)


class SimCluster:
    """``brokers`` brokers (node ids 1..B), ``partitions`` data partitions in topics of
    ``per_topic`` (partition i of topic j led by broker ((j * per_topic + i) % B) + 1, so a
    topic's partitions spread over brokers as Kafka's assignment spreads them), 50
    ``__transaction_state`` partitions, and ``open_txns`` open transactions: ``hanging`` written two
    hours ago by producers no coordinator knows, ``late`` one hour ago by producers whose
    coordinator still has them Ongoing (a 60 s timeout: ``coordinator-stuck``), the rest young
    (under a minute) and moving: each :meth:`step` commits ``finish`` of them (marker on the
    partition, PrepareCommit/CompleteCommit on the coordinator), starts as many new ones, and
    appends a batch to ``progress`` of the others."""

    def __init__(self, partitions: int, brokers: int, open_txns: int, hanging: int, late: int = 200, *,
                 per_topic: int = 100, txn_partitions: int = 50, finish: float = 0.05, progress: float = 0.05,
                 seed: int = 23, now_ms: int | None = None) -> None:
        if hanging + late > open_txns:
            raise ValueError("hanging + late must not exceed the open transactions")
        if hanging > partitions:
            raise ValueError("one hanging transaction per partition: hanging must not exceed partitions")
        self.rng = random.Random(seed)
        self.lock = threading.RLock()
        self.n, self.brokers, self.per_topic, self.txn_n = partitions, brokers, per_topic, txn_partitions
        self.finish, self.progress = finish, progress
        self.topics = [f"t{j:05d}" for j in range((partitions + per_topic - 1) // per_topic)]
        self.topic_index = {t: j for j, t in enumerate(self.topics)}
        idx = np.arange(partitions)
        # a topic's partitions spread over brokers, each topic starting elsewhere (as Kafka's
        # replica assignment starts each topic at a random broker)
        self.leader = ((idx // per_topic) * 7919 + idx % per_topic) % brokers + 1
        self.hw = np.zeros(partitions, dtype=np.int64)
        self.lso = np.zeros(partitions, dtype=np.int64)
        self.log_start = np.zeros(partitions, dtype=np.int64)
        self.logs: dict[int, PartLog] = {}
        self.opens: dict[int, dict[int, int]] = {}  # partition -> {pid: first offset} (open txns)
        self.producers: dict[int, dict[int, list[int]]] = defaultdict(dict)  # partition -> pid -> [epoch, coord epoch, txn start, last ts]
        # coordinator
        self.txn_leader = [(k % brokers) + 1 for k in range(txn_partitions)]
        self.txn_hw = [0] * txn_partitions
        self.txn_logs = [PartLog() for _ in range(txn_partitions)]
        self.coord: dict[str, dict[str, Any]] = {}  # tid -> state, pid, epoch, timeout, start, partitions
        self.txns: dict[int, Txn] = {}  # pid -> open transaction
        self.young: list[int] = []
        self.next_pid = 1_000_000
        self.requests: Counter = Counter()
        self.sim_s: Counter = Counter()  # CPU seconds spent answering, per API
        self.steps = 0
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        self._build(open_txns, hanging, late, now)

    # -- topology
    def tp(self, i: int) -> tuple[str, int]:
        return self.topics[i // self.per_topic], i % self.per_topic

    def index(self, topic: str, partition: int) -> int | None:
        j = self.topic_index.get(topic)
        if j is None or not 0 <= partition < self.per_topic:
            return None
        i = j * self.per_topic + partition
        return i if i < self.n else None

    def partitions_of(self, j: int) -> range:
        return range(min(self.per_topic, self.n - j * self.per_topic))

    # -- writes (what producers and the coordinator do)
    def _append(self, i: int, batch: bytes, count: int) -> int:
        log = self.logs.get(i)
        if log is None:
            log = self.logs[i] = PartLog()
        base = int(self.hw[i])
        log.bases.append(base)
        log.lasts.append(base + count - 1)
        log.data.append(batch)
        self.hw[i] = base + count
        if not self.opens.get(i):
            self.lso[i] = self.hw[i]
        return base

    def _data(self, i: int, pid: int, ts: int, records: int = 3) -> int:
        base = int(self.hw[i])
        batch = encode_batch(base, records, producer_id=pid, producer_epoch=0, base_sequence=0,
                             is_transactional=True, base_timestamp=ts, max_timestamp=ts)
        opens = self.opens.setdefault(i, {})
        fresh = pid not in opens
        if fresh:
            opens[pid] = base
        self._append(i, batch, records)
        if fresh and len(opens) == 1:
            self.lso[i] = base
        st = self.producers[i].setdefault(pid, [0, -1, -1, ts])
        st[3] = ts
        if fresh:
            st[2] = base
        return base

    def _marker(self, i: int, pid: int, ts: int) -> None:
        base = int(self.hw[i])
        self._append(i, encode_marker(base, pid, 0, COMMIT, 0, ts), 1)
        opens = self.opens.get(i, {})
        opens.pop(pid, None)
        self.lso[i] = min(opens.values()) if opens else self.hw[i]
        st = self.producers[i].setdefault(pid, [0, -1, -1, ts])
        st[1], st[2], st[3] = 0, -1, ts

    def _coord_write(self, tid: str, state: str, pid: int, parts: list[int] | None, ts: int, start: int,
                     timeout_ms: int = 60000) -> None:
        k = txn_state_partition(tid, self.txn_n)
        by_topic: dict[str, list[int]] = defaultdict(list)
        for i in parts or []:
            t, p = self.tp(i)
            by_topic[t].append(p)
        value = encode_txn_value_v0(pid, 0, timeout_ms, state, dict(by_topic) if parts is not None else None, ts,
                                    start)
        log = self.txn_logs[k]
        base = self.txn_hw[k]
        log.bases.append(base)
        log.lasts.append(base)
        log.data.append(encode_txn_log_batch(base, tid, value, ts, 0))
        self.txn_hw[k] = base + 1
        self.coord[tid] = {"state": state, "pid": pid, "epoch": 0, "timeout": timeout_ms, "start": start,
                           "parts": list(parts or []), "coordinator": self.txn_leader[k]}

    def _open(self, kind: str, i: int, first_ts: int, now: int) -> Txn:
        pid = self.next_pid
        self.next_pid += 1
        tid = None if kind == "hanging" else f"app-{pid}"
        first = self._data(i, pid, first_ts)
        txn = self.txns[pid] = Txn(pid, tid, i, first, first_ts, kind)
        if tid is not None:
            self._coord_write(tid, "Ongoing", pid, [i], now if kind == "young" else first_ts, first_ts)
        return txn

    def _build(self, open_txns: int, hanging: int, late: int, now: int) -> None:
        rng = self.rng
        for i in rng.sample(range(self.n), hanging):
            self._open("hanging", i, now - 2 * 3600 * 1000, now)
        for _ in range(late):
            self._open("late", rng.randrange(self.n), now - 3600 * 1000, now)
        for _ in range(open_txns - hanging - late):
            self.young.append(self._open("young", rng.randrange(self.n), now - rng.randrange(60_000), now).pid)

    def step(self, now_ms: int | None = None) -> dict[str, int]:
        """One interval of traffic (between two triggers)."""
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        rng = self.rng
        with self.lock:
            n = len(self.young)
            done = set(rng.sample(range(n), int(n * self.finish)))
            keep, started = [], 0
            for j, pid in enumerate(self.young):
                txn = self.txns[pid]
                if j in done:
                    self._coord_write(txn.tid, "PrepareCommit", pid, [txn.part], now, txn.first_ts)
                    self._marker(txn.part, pid, now)
                    self._coord_write(txn.tid, "CompleteCommit", pid, [], now, txn.first_ts)
                    del self.txns[pid]
                    keep.append(self._open("young", rng.randrange(self.n), now, now).pid)
                    started += 1
                else:
                    if rng.random() < self.progress:
                        self._data(txn.part, pid, now)
                    keep.append(pid)
            self.young = keep
            self.steps += 1
        return {"committed": len(done), "started": started}

    # -- answers
    def handle(self, node: int, payload: bytes) -> bytes | None:
        # CPU time of the answering thread: wall time would also count the waits of a shared machine
        t0 = time.thread_time()
        api_key, version, corr = struct.unpack_from(">hhi", payload, 0)
        name = API_NAMES.get(api_key, f"api_{api_key}")
        with self.lock:
            self.requests[name] += 1
            if api_key == ListOffsetsRequest.API_KEY:
                out = self._list_offsets(node, payload)
            elif api_key == FetchRequest.API_KEY:
                out = self._fetch(node, payload)
            else:
                cls = _CLASSES[api_key]
                request = cls.decode(payload, version=version, header=True)
                if api_key == MetadataRequest.API_KEY and request.topics is None:
                    out = self._all_topics(request, version, corr)
                else:
                    response = getattr(self, "_on_" + name)(node, request, version)
                    response.with_header(correlation_id=corr)
                    out = response.encode(header=True, framed=True)
        self.sim_s[name] += time.thread_time() - t0
        return out

    def _on_ApiVersions(self, node, request, version):
        return ApiVersionsResponse(version=version, error_code=NONE, throttle_time_ms=0, api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(API_VERSIONS.items())])

    def _brokers(self):
        B = MetadataResponse.MetadataResponseBroker
        return [B(node_id=b, host=HOST, port=PORT0 + b, rack=None) for b in range(1, self.brokers + 1)]

    def _topic_md(self, name: str):
        T = MetadataResponse.MetadataResponseTopic
        P = T.MetadataResponsePartition
        if name == TXN_TOPIC:
            leaders = list(enumerate(self.txn_leader))
            internal = True
        else:
            j = self.topic_index.get(name)
            if j is None:
                return T(error_code=UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=_uuid(0), is_internal=False,
                         partitions=[])
            leaders = [(p, int(self.leader[j * self.per_topic + p])) for p in self.partitions_of(j)]
            internal = False
        return T(error_code=NONE, name=name, topic_id=_uuid(hash(name) & ((1 << 64) - 1) or 1), is_internal=internal,
                 partitions=[P(error_code=NONE, partition_index=p, leader_id=b, leader_epoch=0, replica_nodes=[b],
                               isr_nodes=[b], offline_replicas=[]) for p, b in leaders])

    def _on_Metadata(self, node, request, version):
        names = [TXN_TOPIC] + self.topics if request.topics is None else [t.name for t in request.topics]
        return MetadataResponse(version=version, throttle_time_ms=0, brokers=self._brokers(), cluster_id="sim",
                                controller_id=1, topics=[self._topic_md(n) for n in names], error_code=NONE)

    def _all_topics(self, request, version: int, corr: int) -> bytes:
        """An all-topics Metadata answer: the topology never changes here, so it is encoded once
        per version and only the correlation id (bytes 4..8 of the frame) differs."""
        cache = self.__dict__.setdefault("_md_cache", {})
        raw = cache.get(version)
        if raw is None:
            response = self._on_Metadata(None, request, version)
            response.with_header(correlation_id=0)
            raw = cache[version] = response.encode(header=True, framed=True)
        return raw[:4] + struct.pack(">i", corr) + raw[8:]

    def _list_offsets(self, node: int, payload: bytes) -> bytes:
        """The answer from the current offsets. A client asks the same partitions every trigger,
        so the request is parsed once per distinct request (its bytes but the correlation id)
        into index arrays and an answer template (:func:`_list_offsets_plan`); each answer is
        the template with this moment's offsets written in, as the broker would encode them."""
        key = payload[:4] + payload[8:]
        cache = self.__dict__.setdefault("_lo_plans", {})
        plan = cache.get(key)
        if plan is None:
            plan = cache[key] = self._list_offsets_plan(node, payload)
        template, corr_at, data_i, data_at, data_field, txn_p, txn_at, txn_earliest = plan
        out = template.copy()
        out[corr_at:corr_at + 4] = np.frombuffer(payload[4:8], dtype=np.uint8)
        if len(data_i):
            # one kind of offset for the whole request (an int, see _list_offsets_plan): one gather
            kinds = (self.log_start, self.hw, self.lso)
            vals = (kinds[data_field][data_i] if isinstance(data_field, int)
                    else np.choose(data_field, tuple(k[data_i] for k in kinds)))
            out[data_at] = vals.astype(">i8").view(np.uint8).reshape(-1, 8)
        if len(txn_p):
            vals = np.where(txn_earliest, 0, np.asarray(self.txn_hw, dtype=np.int64)[txn_p])
            out[txn_at] = vals.astype(">i8").view(np.uint8).reshape(-1, 8)
        return out.tobytes()

    def _list_offsets_plan(self, node: int, payload: bytes) -> tuple:
        v, corr, isolation, topics = decode_list_offsets(payload)
        flexible = v >= 6
        size = {True: 27, False: 26 if v >= 4 else 22}[flexible]
        rows_out = []
        data_i, data_at, data_field, txn_p, txn_at, txn_earliest = [], [], [], [], [], []
        pos = 4 + 4 + (1 if flexible else 0) + (4 if v >= 2 else 0)
        pos += len(encode_uvarint(len(topics) + 1)) if flexible else 4
        for name, parts in topics:
            raw = name.encode()
            pos += (len(encode_uvarint(len(raw) + 1)) if flexible else 2) + len(raw)
            pos += len(encode_uvarint(len(parts) + 1)) if flexible else 4
            rows = []
            j = self.topic_index.get(name)
            for p, ts in parts:
                at = pos + 14
                if name == TXN_TOPIC:
                    lead = self.txn_leader[p]
                    if lead == node:
                        txn_p.append(p)
                        txn_at.append(at)
                        txn_earliest.append(ts == -2)
                else:
                    i = j * self.per_topic + p
                    lead = int(self.leader[i])
                    if lead == node:
                        data_i.append(i)
                        data_at.append(at)
                        data_field.append(0 if ts == -2 else 2 if isolation == 1 else 1)
                rows.append((p, NONE, -1, 0, 0) if lead == node else (p, NOT_LEADER_OR_FOLLOWER, -1, -1, -1))
                pos += size
            pos += 1 if flexible else 0
            rows_out.append((name, rows))
        answer = _ListOffsetsAnswer(v, rows_out)
        answer.with_header(corr)
        template = np.frombuffer(answer.encode(header=True, framed=True), dtype=np.uint8).copy()
        assert len(template) == pos + (1 if flexible else 0), (len(template), pos)

        def at8(xs: list[int]) -> np.ndarray:
            return np.asarray(xs, dtype=np.int64).reshape(-1, 1) + np.arange(8)

        # the kind of offset per row (0 log start, 1 high watermark, 2 LSO), one int when all rows
        # ask the same kind (a client asks one kind per request)
        field = data_field[0] if data_field and len(set(data_field)) == 1 else np.asarray(data_field, dtype=np.int64)
        return (template, 4, np.asarray(data_i, dtype=np.int64), at8(data_at), field,
                np.asarray(txn_p, dtype=np.int64), at8(txn_at), np.asarray(txn_earliest, dtype=bool))

    def _slice(self, log: PartLog | None, offset: int, hw: int, limit: int, whole_first: bool) -> bytes:
        if log is None or offset >= hw:
            return b""
        k = bisect.bisect_right(log.bases, offset) - 1
        if k < 0:
            k = 0
        chunks, size = [], 0
        while k < len(log.data) and log.bases[k] < hw:
            b = log.data[k]
            if size + len(b) > limit:
                if not chunks and whole_first:
                    chunks.append(b)  # KIP-74: at least one whole batch
                else:
                    chunks.append(b[:limit - size])  # a partial batch, as Kafka cuts it
                break
            chunks.append(b)
            size += len(b)
            k += 1
        return b"".join(chunks)

    def _fetch(self, node: int, payload: bytes) -> bytes:
        ask = decode_fetch(payload)
        budget = ask.max_bytes
        first = True
        topics = []
        for name, parts in ask.topics:
            rows = []
            j = self.topic_index.get(name)
            for p, off, pmax in parts:
                if name == TXN_TOPIC:
                    lead, hw, lso, ls, log = self.txn_leader[p], self.txn_hw[p], self.txn_hw[p], 0, self.txn_logs[p]
                else:
                    i = j * self.per_topic + p
                    lead, hw, lso, ls = int(self.leader[i]), int(self.hw[i]), int(self.lso[i]), int(self.log_start[i])
                    log = self.logs.get(i)
                if lead != node:
                    rows.append((p, NOT_LEADER_OR_FOLLOWER, -1, -1, -1, b""))
                    continue
                if off > hw or off < ls:
                    rows.append((p, OFFSET_OUT_OF_RANGE, -1, -1, -1, b""))
                    continue
                data = self._slice(log, off, hw, max(min(pmax, budget), 0), first)
                if data:
                    first = False
                budget -= len(data)
                rows.append((p, NONE, hw, lso, ls, data))
            topics.append((name, rows))
        return encode_fetch_response(ask.version, ask.corr, topics)

    def _on_FindCoordinator(self, node, request, version):
        def coord(key: str) -> tuple[int, int]:
            if (request.key_type if version >= 1 else 0) != 1:
                return 15, -1  # COORDINATOR_NOT_AVAILABLE: no consumer groups in this cluster
            return NONE, self.txn_leader[txn_state_partition(key, self.txn_n)]

        if version >= 4:
            out = []
            for k in request.coordinator_keys:
                code, b = coord(k)
                out.append(FindCoordinatorResponse.Coordinator(key=k, node_id=b, host=HOST,
                                                               port=PORT0 + b, error_code=code, error_message=None))
            return FindCoordinatorResponse(version=version, throttle_time_ms=0, coordinators=out)
        code, b = coord(request.key)
        return FindCoordinatorResponse(version=version, throttle_time_ms=0, error_code=code, error_message=None,
                                       node_id=b, host=HOST, port=PORT0 + b)

    def _on_DescribeProducers(self, node, request, version):
        Part = DescribeProducersResponse.TopicResponse.PartitionResponse
        out = []
        for t in request.topics:
            parts = []
            for p in t.partition_indexes:
                i = self.index(t.name, p)
                if i is None:
                    parts.append(Part(partition_index=p, error_code=UNKNOWN_TOPIC_OR_PARTITION, error_message=None,
                                      active_producers=[]))
                    continue
                if int(self.leader[i]) != node:
                    parts.append(Part(partition_index=p, error_code=NOT_LEADER_OR_FOLLOWER, error_message=None,
                                      active_producers=[]))
                    continue
                producers = [Part.ProducerState(producer_id=pid, producer_epoch=e, last_sequence=0,
                                                last_timestamp=ts, coordinator_epoch=ce,
                                                current_txn_start_offset=start)
                             for pid, (e, ce, start, ts) in sorted(self.producers.get(i, {}).items())]
                parts.append(Part(partition_index=p, error_code=NONE, error_message=None, active_producers=producers))
            out.append(DescribeProducersResponse.TopicResponse(name=t.name, partitions=parts))
        return DescribeProducersResponse(version=version, throttle_time_ms=0, topics=out)

    def _on_DescribeTransactions(self, node, request, version):
        State = DescribeTransactionsResponse.TransactionState
        out = []
        for tid in request.transactional_ids:
            c = self.coord.get(tid)
            owner = self.txn_leader[txn_state_partition(tid, self.txn_n)]
            code = NOT_COORDINATOR if owner != node else TRANSACTIONAL_ID_NOT_FOUND if c is None else NONE
            if code != NONE:
                out.append(State(error_code=code, transactional_id=tid, transaction_state="", transaction_timeout_ms=0,
                                 transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1, topics=[]))
                continue
            by_topic: dict[str, list[int]] = defaultdict(list)
            for i in c["parts"]:
                t, p = self.tp(i)
                by_topic[t].append(p)
            out.append(State(error_code=NONE, transactional_id=tid, transaction_state=c["state"],
                             transaction_timeout_ms=c["timeout"], transaction_start_time_ms=c["start"],
                             producer_id=c["pid"], producer_epoch=c["epoch"],
                             topics=[State.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]))
        return DescribeTransactionsResponse(version=version, throttle_time_ms=0, transaction_states=out)

    def _on_ListTransactions(self, node, request, version):
        Item = ListTransactionsResponse.TransactionState
        wanted = set(request.state_filters or [])
        duration = request.duration_filter if version >= 1 else -1
        now = int(time.time() * 1000)
        states = []
        for tid, c in self.coord.items():
            if c["coordinator"] != node:
                continue
            if request.producer_id_filters and c["pid"] not in request.producer_id_filters:
                continue
            if wanted and c["state"] not in wanted:
                continue
            if duration >= 0 and now - c["start"] <= duration:
                continue
            states.append(Item(transactional_id=tid, producer_id=c["pid"], transaction_state=c["state"]))
        return ListTransactionsResponse(version=version, throttle_time_ms=0, error_code=NONE,
                                        unknown_state_filters=[], transaction_states=states)

    def _on_ListGroups(self, node, request, version):
        return ListGroupsResponse(version=version, throttle_time_ms=0, error_code=NONE, groups=[])

    # -- facts for the report
    def hanging_keys(self) -> set[tuple[str, int, int, int]]:
        return {(*self.tp(t.part), t.pid, t.first) for t in self.txns.values() if t.kind == "hanging"}

    def late_keys(self) -> set[tuple[str, int, int, int]]:
        return {(*self.tp(t.part), t.pid, t.first) for t in self.txns.values() if t.kind == "late"}

    def open_count(self) -> int:
        return len(self.txns)

    def stored_bytes(self) -> int:
        return sum(len(b) for log in self.logs.values() for b in log.data) + sum(
            len(b) for log in self.txn_logs for b in log.data)


def _uuid(n: int):
    import uuid

    return uuid.UUID(int=n)


# ------------------------------------------------------------------ the transport
class SimTransport:
    """Stands in for ``kafka.net.transport.KafkaTCPTransport``: the bytes the connection writes
    are whole request frames (4-byte size + request), answered by the cluster model; the answers
    are delivered to the connection's ``data_received`` on the IO thread, as a socket read is.
    Answers to requests written before the IO loop's next turn arrive together in one read (a
    TCP stream coalesces them the same way; kafka-python's ``KafkaProtocol.receive_bytes`` splits
    the frames), so the delivery costs one loop task per burst of requests, not one per answer."""

    def __init__(self, net: Any, cluster: SimCluster, node_id: int, host: str, port: int) -> None:
        self._net, self.cluster, self.node_id, self.host, self.port = net, cluster, node_id, host, port
        self._protocol = None
        self._closed = False
        self._buf = bytearray()
        self._replies: list[bytes] = []  # answered, not yet delivered (one delivery task pending)
        self.last_write = self.last_read = time.monotonic()

    @property
    def last_activity(self) -> float:
        return max(self.last_write, self.last_read)

    async def handshake(self) -> None:
        return None

    def host_port(self) -> str:
        return f"{self.host}:{self.port}"

    def getPeer(self) -> tuple[str, int]:
        return (self.host, self.port)

    def set_protocol(self, protocol: Any) -> None:
        self._protocol = protocol

    def get_protocol(self) -> Any:
        return self._protocol

    def is_closing(self) -> bool:
        return self._closed

    def is_reading(self) -> bool:
        return not self._closed

    def resume_reading(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def write(self, data: bytes) -> None:
        if self._closed:
            raise RuntimeError("Transport closed for writes")
        self.last_write = time.monotonic()
        self._buf += data
        while len(self._buf) >= 4:
            n = int.from_bytes(self._buf[:4], "big")
            if len(self._buf) < 4 + n:
                break
            frame = bytes(self._buf[4:4 + n])
            del self._buf[:4 + n]
            reply = self.cluster.handle(self.node_id, frame)
            if reply is not None:
                if not self._replies:
                    self._net.call_soon(self._deliver_all)
                self._replies.append(reply)

    def writelines(self, chunks: list[bytes]) -> None:
        for c in chunks:
            self.write(c)

    def _deliver_all(self) -> None:
        replies, self._replies = self._replies, []
        if self._protocol is not None and not self._closed and replies:
            self.last_read = time.monotonic()
            self._protocol.data_received(replies[0] if len(replies) == 1 else b"".join(replies))

    def close(self) -> None:
        self.abort(None)

    def abort(self, error: Any = None) -> None:
        if self._closed:
            return
        self._closed = True
        proto, self._protocol = self._protocol, None
        if proto is not None:
            proto.connection_lost(error)


_INSTALLED: dict[str, Any] = {}


def install(cluster: SimCluster) -> None:
    """Route every kafka-python connection of this process to ``cluster`` (broker b at
    ``HOST:PORT0+b``, the bootstrap server :data:`BOOTSTRAP`; no socket is opened)."""
    if "orig" not in _INSTALLED:
        _INSTALLED["orig"] = KafkaConnectionManager._build_transport

    async def _build_transport(self, node, timeout_at=None):
        return SimTransport(self._net, cluster, int(node.port) - PORT0, str(node.host), int(node.port))

    KafkaConnectionManager._build_transport = _build_transport


def uninstall() -> None:
    if "orig" in _INSTALLED:
        KafkaConnectionManager._build_transport = _INSTALLED.pop("orig")


HOST, PORT0 = "127.0.0.1", 40000  # broker b listens at HOST:PORT0+b (never opened: no socket is made)
BOOTSTRAP = f"{HOST}:{PORT0 + 1}"


def self_check() -> None:
    """The hand-made codecs against kafka-python's: a request kafka-python encodes is decoded
    here to the same fields, and the Fetch answer encoded here decodes with kafka-python's
    ``FetchResponse`` to the same fields."""
    from kafka.protocol.consumer import FetchResponse

    for v in (4, 11, 12):
        req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1000, isolation_level=0, session_id=0,
                           session_epoch=-1, topics=[FetchRequest.FetchTopic(topic="a", partitions=[
                               FetchRequest.FetchTopic.FetchPartition(partition=3, current_leader_epoch=0,
                                                                      fetch_offset=77, last_fetched_epoch=-1,
                                                                      log_start_offset=-1, partition_max_bytes=99)])],
                           forgotten_topics_data=[], rack_id="", version=v)
        req.with_header(correlation_id=5, client_id="x")
        ask = decode_fetch(req.encode(header=True, framed=False))
        assert ask.topics == [("a", [(3, 77, 99)])] and ask.corr == 5 and ask.max_bytes == 1000, ask
        raw = encode_fetch_response(v, 5, [("a", [(3, 0, 10, 8, 1, b"xyz")])])
        resp = FetchResponse.decode(raw[4:], version=v, header=True)
        p = resp.responses[0].partitions[0]
        assert (p.partition_index, p.high_watermark, p.last_stable_offset, bytes(p.records)) == (3, 10, 8, b"xyz"), p
    for v in (1, 4, 7):
        req = ListOffsetsRequest(replica_id=-1, isolation_level=1, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name="a", partitions=[ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=2, current_leader_epoch=0, timestamp=-1, max_num_offsets=1)])], timeout_ms=0,
            version=v)
        req.with_header(correlation_id=9, client_id="x")
        got = decode_list_offsets(req.encode(header=True, framed=False))
        assert got == (v, 9, 1 if v >= 2 else 0, [("a", [(2, -1)])]), got
