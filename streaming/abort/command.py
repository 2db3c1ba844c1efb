"""``txnwatch abort KEY [--execute [--yes]]``: the guarded abort (docs/runbook.md §3).

Exit codes (README "Commands"):

* **0** done: dry run - the state is confirmed and the abort would be sent; ``--execute`` - the
  broker accepted the marker and the LSO moved past the first offset (or, when an earlier open
  transaction still holds the LSO, the producer's transaction is closed);
* **4** refused: something the command rests on changed or is not proven; nothing was sent;
* **1** error: connection, authorization, usage, a broker refusal of the marker, the LSO not
  moving in time, or the operator declining the confirmation.

A dry run sends no WriteTxnMarkers and nothing else that writes; every attempt is audited.
``--execute`` re-reads once more after the confirmation (a person may take minutes to answer)
and sends only when that second re-read gives the same marker.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

import kafka.errors as Errors

from streaming.abort import plan as plans
from streaming.abort.audit import AuditLog, audit_record
from streaming.abort.key import AlertKey, latest_alert, parse_key
from streaming.abort.markers import send_abort
from streaming.abort.reread import read_producer, reread
from streaming.config import Config
from streaming.sources.kafka_wire import KafkaWireError

EXIT_DONE = 0
EXIT_ERROR = 1
EXIT_REFUSED = 4


class AbortUsageError(Exception):
    """Bad input named precisely (exit code 1)."""


@dataclass
class Clients:
    """The connections an abort uses (tests pass their own)."""

    wire: Any
    confirm: Any
    lookback: Any
    principal: str | None = None

    def close(self) -> None:
        for c in (self.confirm, self.wire):
            try:
                c.close()
            except Exception:  # closing must not hide the outcome
                pass


def connect(cfg: Config, bootstrap: str) -> Clients:
    """KafkaWire + KIP-664 admin + look-back with the job's client and security settings."""
    from streaming.broker_confirm import KafkaBrokerConfirm
    from streaming.broker_evidence import KafkaLookback
    from streaming.sources.kafka_security import kafka_python_kwargs, principal_of
    from streaming.sources.kafka_wire import KafkaWire

    k = cfg.kafka
    security = kafka_python_kwargs(k.security())
    wire = KafkaWire(bootstrap, client_id=f"{k.client_id}-abort", request_timeout_ms=k.request_timeout_ms,
                     retries=2, **security)
    confirm = KafkaBrokerConfirm(bootstrap, client_id=f"{k.client_id}-abort", security=security,
                                 request_timeout_ms=k.request_timeout_ms, groups_refresh_ms=k.groups_refresh_ms)
    lookback = KafkaLookback(wire, max_bytes=k.lookback_max_bytes, span_max_bytes=k.span_max_bytes)
    return Clients(wire, confirm, lookback, principal_of(security))


def _publisher(cfg: Config, bootstrap: str) -> Callable[[list[dict[str, Any]]], None] | None:
    if not cfg.abort.publish or "kafka" not in cfg.sinks.enabled:
        return None
    import dataclasses

    from streaming.sinks.kafka_topic import KafkaAlertSink

    return KafkaAlertSink.from_config(dataclasses.replace(cfg.kafka, bootstrap_servers=bootstrap), cfg.sinks)


def _watch_lso(clients: Clients, key: AlertKey, wait_ms: int, span_max_bytes: int,
               clock: Callable[[], float] = time.monotonic) -> tuple[bool, int | None, str]:
    """Poll the partition's LSO until it passes the first offset (or the producer's transaction is
    seen closed while an earlier open transaction holds the LSO), at most ``wait_ms``."""
    deadline = clock() + wait_ms / 1000
    lso = None
    while True:
        off = clients.wire.offsets([(key.topic, key.partition)])[(key.topic, key.partition)]
        lso = off.lso
        if lso > key.first_offset:
            return True, lso, f"the LSO of {key.tp} moved to {lso}, past the first offset {key.first_offset}"
        if lso < key.first_offset:
            lg = read_producer(clients.wire, key.topic, key.partition, key.producer_id, key.first_offset, lso,
                               off.high_watermark, max_bytes=span_max_bytes)
            if lg.complete and lg.closing_marker is not None:
                return True, lso, (f"producer {key.producer_id}'s transaction is closed by the ABORT marker at "
                                   f"offset {lg.closing_marker.offset}; the LSO stays at {lso}, held by an "
                                   f"earlier open transaction starting there")
        if clock() >= deadline:
            return False, lso, (f"the broker accepted the marker but the LSO of {key.tp} is still {lso} after "
                                f"{wait_ms} ms; check with kafka-transactions.sh describe-producers --topic "
                                f"{key.topic} --partition {key.partition}")
        time.sleep(0.2)


def run_abort(key_text: str, cfg: Config, *, bootstrap: str | None, alerts_path: str | None, execute: bool,
              yes: bool, stdin: TextIO | None = None, out: TextIO | None = None,
              clients: Clients | None = None) -> int:
    """The whole verb; returns the exit code. ``clients`` is for tests (else :func:`connect`)."""
    stdin = stdin or sys.stdin
    out = out or sys.stdout
    try:
        key = parse_key(key_text)
    except ValueError as exc:
        raise AbortUsageError(str(exc)) from None
    if key.cluster != cfg.cluster:
        raise AbortUsageError(f"the key names cluster {key.cluster!r} but the configuration is for cluster "
                              f"{cfg.cluster!r} (set cluster in the config or --cluster): refusing to act on "
                              f"a cluster the key does not name")
    bootstrap = bootstrap or cfg.kafka.bootstrap_servers
    if not bootstrap:
        raise AbortUsageError("give --bootstrap-server, or --config with [kafka] bootstrap_servers")
    if yes and not execute:
        raise AbortUsageError("--yes only applies with --execute (a dry run asks nothing and sends nothing)")
    mode = "execute" if execute else "dry-run"
    alert = latest_alert(alerts_path or cfg.sinks.jsonl_path, key)
    audit = AuditLog(cfg.abort.audit_path, _publisher(cfg, bootstrap))
    own = clients is None
    clients = clients or connect(cfg, bootstrap)
    thresholds = cfg_thresholds(cfg, key.topic)

    def say(line: str = "") -> None:
        out.write(line + "\n")
        out.flush()

    def check() -> plans.Plan:
        r = reread(key, wire=clients.wire, confirm=clients.confirm, lookback=clients.lookback,
                   span_max_bytes=cfg.kafka.span_max_bytes, txn_state_max_bytes=cfg.kafka.lookback_max_bytes,
                   transactional_id=(alert or {}).get("transactional_id"))
        return plans.make_plan(r, alert=alert, thresholds=thresholds, bootstrap_servers=bootstrap)

    def record(p: plans.Plan | None, outcome: str, code: int | None, message: str, **kw: Any) -> None:
        at = p.reread.at_ms if p is not None else int(time.time() * 1000)
        audit.write(audit_record(key=str(key), at_ms=at, mode=mode, outcome=outcome, exit_code=code,
                                 message=message, reread=p.reread.to_json() if p is not None else None,
                                 plan=p.to_json() if p is not None else None, **kw))

    def refused(p: plans.Plan) -> int:
        say("REFUSED: nothing was sent.")
        for r in p.refusals:
            say(f"  - {r.code}: {r.sentence}")
        record(p, "refused", EXIT_REFUSED, "; ".join(f"{r.code}: {r.sentence}" for r in p.refusals))
        return EXIT_REFUSED

    p = None
    try:
        say(f"txnwatch abort {key} ({'EXECUTE' if execute else 'dry run: nothing will be sent'})")
        if alert is None:
            say(f"  (no alert for this key in {alerts_path or cfg.sinks.jsonl_path}: the numbers below come from "
                f"the re-read alone, nothing to compare them with)")
        p = check()
        for line in plans.describe(p):
            say(line)
        if p.refused:
            return refused(p)
        if not execute:
            say("the state is confirmed; run again with --execute to send this marker")
            record(p, "would-abort", EXIT_DONE, "state confirmed; dry run, nothing sent")
            return EXIT_DONE
        if not yes:
            out.write(f"Send this ABORT marker to {key.tp}? It discards the transaction's records. Type 'yes': ")
            out.flush()
            answer = stdin.readline().strip().lower()
            if answer != "yes":
                say("not confirmed: nothing was sent.")
                record(p, "not-confirmed", EXIT_ERROR, f"confirmation answered {answer!r}; nothing sent")
                return EXIT_ERROR
            first = p.spec
            p = check()  # the answer may have taken minutes: re-read again right before sending
            if not p.refused and p.spec != first:
                p = plans.Plan(p.key, p.reread, p.verdict, p.spec, (plans.Refusal(plans.NOT_PROVEN, (
                    f"the state changed while waiting for the confirmation: the marker would now be {p.spec}, "
                    f"it was {first}")),), p.commands)
            if p.refused:
                return refused(p)
        spec = p.spec
        sent = {"api": "WriteTxnMarkers", "result": "ABORT", "leader": p.reread.leader, "topic": spec.topic,
                "partition": spec.partition, "producer_id": spec.producer_id, "producer_epoch": spec.producer_epoch,
                "coordinator_epoch": spec.coordinator_epoch, "transaction_version": 0}
        record(p, "sending", None, "sending WriteTxnMarkers (ABORT)", sent=sent)
        answer = send_abort(clients.wire, p.reread.leader, spec, principal=clients.principal)
        sent["version"] = answer.version
        if not answer.ok:
            say(f"the broker refused the marker: {answer.explanation}")
            record(p, "rejected", EXIT_ERROR, answer.explanation or answer.error, sent=sent, answer=answer.to_json())
            return EXIT_ERROR
        say(f"the leader accepted the ABORT marker (WriteTxnMarkers v{answer.version})")
        try:
            moved, lso, detail = _watch_lso(clients, key, cfg.abort.lso_wait_ms, cfg.kafka.span_max_bytes)
        except (KafkaWireError, Errors.KafkaError, OSError) as exc:
            detail = f"the broker accepted the marker, but watching the LSO of {key.tp} failed: {exc}"
            say(detail)
            record(p, "lso-unknown", EXIT_ERROR, detail, sent=sent, answer=answer.to_json())
            return EXIT_ERROR
        say(detail)
        code = EXIT_DONE if moved else EXIT_ERROR
        record(p, "aborted" if moved else "lso-not-moved", code, detail, sent=sent, answer=answer.to_json(),
               lso_after=lso)
        return code
    except (KafkaWireError, Errors.KafkaError, OSError) as exc:
        say(f"error: {type(exc).__name__}: {exc}" if not isinstance(exc, KafkaWireError) else f"error: {exc}")
        record(p, "error", EXIT_ERROR, str(exc))
        return EXIT_ERROR
    finally:
        audit.close()
        for msg in audit.publish_errors:
            say(f"warning: {msg}")
        if own:
            clients.close()


def cfg_thresholds(cfg: Config, topic: str):
    """The job's thresholds for the topic (``[thresholds]`` and ``[thresholds.topics.<topic>]``)."""
    from streaming.config import engine_config

    return engine_config(cfg, coordinator_available=True).thresholds_for(topic)
