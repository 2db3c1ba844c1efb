"""Simulated Kafka clusters: broker-shaped log directories for tests, the demo and benchmarks.

Not part of the detection path: ``udfs/`` and the pipeline never import this package.

* :mod:`~streaming.simulate.encode` - byte-exact encoders (record batches, markers, the cleaner's
  empty control batch, legacy messages, ``__transaction_state`` records, producer snapshots);
* :mod:`~streaming.simulate.broker_state` - what the simulated brokers and coordinator remember
  (batch facts, producer state entries, transaction metadata) and the errors they raise;
* :mod:`~streaming.simulate.cluster_log` - :class:`ClusterLog`, the partition leaders and the
  transaction coordinator writing segment, snapshot and ``__transaction_state`` files;
* :mod:`~streaming.simulate.producers` - idempotent and transactional clients;
* :mod:`~streaming.simulate.scenarios` - named scenarios with the findings a detector must report.
"""
