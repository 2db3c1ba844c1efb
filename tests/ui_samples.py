"""Synthetic alerts for the status page's screenshots and benchmark (schema version 1 plus the
optional fields of the newer alert contract: confirmed_by, blocked_groups, missing partitions)."""

from __future__ import annotations

MIN = 60_000
TOPICS = ("orders", "payments", "inventory", "ledger", "clickstream")


def synthetic(i: int, now: int, *, status: str, verified: bool = True, **kw) -> dict:
    """The i-th synthetic finding at clock ``now`` (distinct partition per i)."""
    topic, part, pid = TOPICS[i % len(TOPICS)], i // len(TOPICS), 4000 + i
    first = 1_000 + 37 * i
    opened = now - (21 + (i * 7) % 300) * MIN
    cause = ({"hanging": ("coordinator-unaware", "write-after-marker", "coordinator-finished-without-partition"),
              "late": ("markers-pending", "coordinator-stuck", "long-transaction")}[status])[i % 3]
    if not verified:
        cause = "exceeds-max-timeout"
    a = {"schema_version": 1, "key": f"prod/{topic}/{part}/{pid}/{first}", "status": status, "cause": cause,
         "verified": verified, "cluster": "prod", "topic": topic, "partition": part, "producer_id": pid,
         "producer_epoch": i % 5, "first_offset": first, "last_offset": first + 3 + i % 9, "first_ts": opened,
         "last_ts": opened + 800, "open_ms": now - opened, "idle_ms": now - opened - 800,
         "records": 5 + i % 40, "bytes": 900 + 97 * i, "batches": 1 + i % 4, "transactional_id": f"app-{i % 17}-tx",
         "coordinator_state": "Empty" if status == "hanging" else "PrepareCommit", "coordinator_epoch": 3,
         "coordinator_epoch_source": "last-marker" if i % 4 else "producer-last-marker", "lso": first,
         "high_watermark": first + 50 + i, "pins_lso": True, "data_deleted": False, "detected_at": now,
         "abort_command_new": None, "abort_command_legacy": None, "required_permission": None, "resolution": None,
         "threshold_ms": 1_200_000, "clock_skew": False, "input": f"fetch {topic}-{part}@{first}", "verify_hint": None}
    if status == "hanging":
        a["abort_command_new"] = (f"kafka-transactions.sh --bootstrap-server 'k1:9092' abort --topic '{topic}' "
                                  f"--partition {part} --start-offset {first}")
        a["required_permission"] = "CLUSTER_ACTION on the cluster (brokers 3.0-3.7) or ALTER on the cluster (3.8+)"
    if i % 3 == 0 and verified:
        a["confirmed_by"] = ["DescribeProducers", "DescribeTransactions"]
    if i % 4 == 0:
        a["blocked_groups"] = [f"{topic}-consumers", "audit-sink"][: 1 + i % 2]
    a.update(kw)
    return a


def busy_findings(n: int, now: int) -> list[dict]:
    """``n`` open findings: 60 % hanging, 25 % late, 15 % unverified (missing coordinator partitions)."""
    n_hang, n_late = n * 60 // 100, n * 25 // 100
    out = [synthetic(i, now, status="hanging") for i in range(n_hang)]
    out += [synthetic(i, now, status="late") for i in range(n_hang, n_hang + n_late)]
    out += [synthetic(i, now, status="hanging", verified=False, missing_txn_partitions=[7, 31],
                      verify_hint="confirm before aborting: dump __transaction_state-7")
            for i in range(n_hang + n_late, n)]
    return out


def positions(n: int) -> dict[str, dict]:
    """Read positions of ``n`` __transaction_state partitions and a heartbeat topic."""
    out = {f"__transaction_state-{p}": {"log_start_offset": 0, "lso": 500 + p, "high_watermark": 500 + p}
           for p in range(n)}
    out.update({f"heartbeat-{p}": {"log_start_offset": 0, "lso": 90_000 + p, "high_watermark": 90_000 + p}
                for p in range(3)})
    return out


def with_facts(parts: dict[str, dict], findings: list[dict]) -> dict[str, dict]:
    """Partition facts (LSO pinned by each finding) as the job's progress rows report them."""
    for a in findings:
        parts[f"{a['topic']}-{a['partition']}"] = {"log_start_offset": 0, "lso": a["lso"],
                                                   "high_watermark": a["high_watermark"]}
    return parts


def batch_stats(now: int, findings: list[dict], parts: dict[str, dict]) -> dict:
    """``on_batch`` stats of one micro-batch that published ``findings``
    (streaming.microbatch.BatchWriter)."""
    return {"alerts": findings, "open_alerts": {a["key"]: {"status": a["status"], "alert": a} for a in findings},
            "partitions": parts, "rows": 18_432, "progress": 153, "gaps": [], "now_ms": now, "duration_s": 1.84}
