"""The admin APIs :class:`~streaming.broker_confirm.KafkaBrokerConfirm` asks the live cluster,
one module per Kafka API, on kafka-python 3.0's ``KafkaAdminClient`` (issue 21 item 2):

* :mod:`~streaming.kafka_admin.session` - the admin client, ApiVersions gating and the one way a
  failure becomes an unknown answer (below every API module);
* :mod:`~streaming.kafka_admin.describe_producers` - DescribeProducers (key 61);
* :mod:`~streaming.kafka_admin.describe_transactions` - DescribeTransactions (key 65);
* :mod:`~streaming.kafka_admin.list_transactions` - ListTransactions (key 66, v0-v2);
* :mod:`~streaming.kafka_admin.groups` - ListGroups (key 16) and OffsetFetch (key 9);
* :mod:`~streaming.kafka_admin.features` - ApiVersions v3+ finalized features (key 18).

WriteTxnMarkers (key 27) goes to a partition leader over the txnwatch Kafka client instead
(:mod:`streaming.sources.kafka_client.write_txn_markers`). The rules comparing these answers with
the log are not IO and live in :mod:`streaming.broker_rules`.
"""
