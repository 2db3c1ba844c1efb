"""Simulated Kafka clusters: broker-shaped log directories for tests, the demo and benchmarks.

Not part of the detection path: nothing under ``udfs/`` or the pipeline imports this package.

* :mod:`streaming.simulate.encode` - byte-exact encoders (record batches, markers, the cleaner's
  empty control batch, legacy messages, ``__transaction_state`` records, producer snapshots);
* :mod:`streaming.simulate.scenarios` - the cluster writer and the named scenarios with the
  findings a detector must report.
"""
