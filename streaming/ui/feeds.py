"""Alert feeds for ``txnwatch ui`` when the job runs elsewhere.

* :class:`JsonlTail`: follows the JSONL sink's file (``sinks.jsonl_path``) from its first line,
  like ``tail -F``: partial last lines wait for their newline, a truncated or replaced file is
  read again from the start (re-reading is harmless: the store dedupes on key and status).
* :class:`TopicFeed`: reads the alerts topic (``sinks.kafka_topic``) from the beginning with
  kafka-python, no consumer group, nothing committed. The topic is keyed by alert key (partition
  records by ``cluster/topic/partition``) and may be compacted: the store keeps the latest record
  per key, and a tombstone (null value) forgets the key.

Bad input is never silent: a line or record that is not an alert object is reported on the page
(file and line, or topic-partition and offset) and skipped.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from streaming.sources.kafka_security import kafka_python_kwargs
from streaming.ui.store import FindingStore

if TYPE_CHECKING:
    from streaming.config import KafkaConfig, SinksConfig

log = logging.getLogger("txnwatch")



class JsonlTail:
    """Tail ``path`` into ``store`` until :meth:`stop` (run :meth:`run` in a thread, or
    :meth:`poll_once` from tests)."""

    def __init__(self, path: str, store: FindingStore, *, interval_s: float = 1.0) -> None:
        self.path = os.path.abspath(path)
        self.store = store
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._pos = 0
        self._line_no = 0
        self._ident: tuple[int, int] | None = None
        self._partial = b""

    def poll_once(self) -> int:
        """Read what was appended since the last call; returns the number of records taken."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.store.note_feed_error(f"{self.path}: no such file (waiting for the job to write it)")
            return 0
        except OSError as exc:
            self.store.note_feed_error(f"{self.path}: {exc.strerror or exc}")
            return 0
        ident = (st.st_dev, st.st_ino)
        if ident != self._ident or st.st_size < self._pos:
            # first open, rotated or truncated: from the start
            self._ident, self._pos, self._line_no, self._partial = ident, 0, 0, b""
        taken = 0
        try:
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                chunk = f.read()
        except OSError as exc:
            self.store.note_feed_error(f"{self.path}: {exc.strerror or exc}")
            return 0
        self._pos += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()  # the text after the last newline: not complete yet
        for raw in lines:
            self._line_no += 1
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                self.store.note_bad_input(f"{self.path}:{self._line_no}: not JSON ({exc}); line skipped")
                continue
            if self.store.ingest(rec):
                taken += 1
        self.store.note_feed_ok(f"{self.path} line {self._line_no}")
        return taken

    def run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()


class AuditTail(JsonlTail):
    """Tail the abort audit file (``[abort] audit_path``, written by ``txnwatch abort``) into the
    store's per-finding audit trail. A missing file is normal (nobody ran an abort yet) and never
    turns the page stale; lines that are not abort records are skipped."""

    def poll_once(self) -> int:
        try:
            st = os.stat(self.path)
        except OSError:
            return 0
        ident = (st.st_dev, st.st_ino)
        if ident != self._ident or st.st_size < self._pos:
            self._ident, self._pos, self._partial = ident, 0, b""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                chunk = f.read()
        except OSError:
            return 0
        self._pos += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        taken = 0
        for raw in lines:
            try:
                rec = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(rec, dict) and rec.get("record_type") == "abort" and self.store.ingest(rec):
                taken += 1
        return taken


class TopicFeed:
    """Consume the alerts topic from its beginning into ``store`` until :meth:`stop`."""

    def __init__(self, kafka: KafkaConfig, sinks: SinksConfig, store: FindingStore, *, poll_ms: int = 1000,
                 check_every_s: float = 10.0) -> None:
        if not kafka.bootstrap_servers:
            raise ValueError("kafka.bootstrap_servers is required to read the alerts topic")
        self.topic = sinks.kafka_topic
        self.bootstrap = kafka.bootstrap_servers
        # Credentials stay in this object (the consumer): never in the store or a page.
        self._security = kafka_python_kwargs(kafka.security())
        self._client_id = f"{kafka.client_id}-ui"
        self._timeout_ms = kafka.request_timeout_ms
        self.store = store
        self.poll_ms = poll_ms
        self.check_every_s = check_every_s
        self._stop = threading.Event()
        self._consumer = None

    def _connect(self):
        from kafka import KafkaConsumer

        c = KafkaConsumer(bootstrap_servers=self.bootstrap, client_id=self._client_id, group_id=None,
                          enable_auto_commit=False, auto_offset_reset="earliest",
                          request_timeout_ms=max(self._timeout_ms, 1000), **self._security)
        parts = c.partitions_for_topic(self.topic)
        if not parts:
            c.close()
            raise RuntimeError(f"alerts topic {self.topic!r} not found on {self.bootstrap}")
        from kafka import TopicPartition

        tps = [TopicPartition(self.topic, p) for p in sorted(parts)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        return c

    def _take(self, msg) -> None:
        where = f"{msg.topic}-{msg.partition}@{msg.offset}"
        key = msg.key.decode("utf-8", "replace") if msg.key is not None else None
        if msg.value is None:
            if key:
                self.store.remove(key)
            return
        try:
            rec = json.loads(msg.value)
        except (ValueError, UnicodeDecodeError) as exc:
            self.store.note_bad_input(f"{where}: not JSON ({exc}); record skipped")
            return
        if isinstance(rec, dict) and key and rec.get("key") not in (None, key):
            self.store.note_bad_input(f"{where}: record key {key!r} differs from the alert's {rec.get('key')!r}")
        self.store.ingest(rec)

    def poll_once(self) -> int:
        if self._consumer is None:
            self._consumer = self._connect()
        batches = self._consumer.poll(timeout_ms=self.poll_ms)
        n = 0
        for msgs in batches.values():
            for m in msgs:
                self._take(m)
                n += 1
        return n

    def _check(self) -> None:
        """Ask the broker for the end offsets: a failure means the feed is not live."""
        c = self._consumer
        tps = list(c.assignment())
        ends = c.end_offsets(tps)
        pos = ", ".join(f"{tp.partition}: {c.position(tp)}/{ends.get(tp)}" for tp in sorted(tps))
        self.store.note_feed_ok(f"{self.topic} partition position/end {pos}")

    def run(self) -> None:
        last_check = 0.0
        while not self._stop.is_set():
            try:
                self.poll_once()
                if time.monotonic() - last_check >= self.check_every_s:
                    self._check()
                    last_check = time.monotonic()
            except Exception as exc:  # shown on the page, retried
                self.store.note_feed_error(f"alerts topic {self.topic!r} on {self.bootstrap}: {exc}")
                self._close_consumer()
                self._stop.wait(min(self.check_every_s, 5.0))
        self._close_consumer()

    def _close_consumer(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:
                pass
            self._consumer = None

    def stop(self) -> None:
        """Ask :meth:`run` to end; it closes the consumer in its own thread (kafka-python's
        consumer is not thread-safe)."""
        self._stop.set()
