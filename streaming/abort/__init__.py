"""The guarded abort, ``txnwatch abort KEY`` (issue 22), top to bottom:

* :mod:`streaming.abort.key` - the alert key and the alert it names;
* :mod:`streaming.abort.reread` - re-reading the partition, the producer and the coordinator from
  the broker right before acting (Metadata, ListOffsets, Fetch, DescribeProducers,
  ListTransactions/DescribeTransactions or ``__transaction_state``);
* :mod:`streaming.abort.plan` - the verdict on that re-read (``streaming.verdict.judge``, never a
  second rule), the refusals, and what the abort would send and discard;
* :mod:`streaming.abort.markers` - WriteTxnMarkers (ABORT) to the partition leader, as Kafka's
  ``AbortTransactionHandler`` sends it, and the broker's answer in words;
* :mod:`streaming.abort.audit` - one JSON line per attempt, also published on the alerts topic;
* :mod:`streaming.abort.command` - the CLI verb tying them together (exit codes 0, 1, 4).
"""
