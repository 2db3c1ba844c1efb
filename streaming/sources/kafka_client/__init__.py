"""The raw-protocol Kafka client under :class:`streaming.sources.kafka_wire.KafkaWire`, in layers.

From the bottom up (each module imports only modules listed before it; tests/test_layers.py
checks it):

* ``errors``, ``results`` - what callers get (exceptions, ``PartitionOffsets``, ``FetchResult``);
* ``transport`` - the seam: a typed :class:`~streaming.sources.kafka_client.transport.Transport`
  carries encoded requests to a broker node and brings the response body back;
  ``socket_transport`` is the real one (kafka-python's network layer). Nothing above it opens a
  socket, so a benchmark or test can run the whole client over an in-process transport;
* ``metadata_cache`` - leaders, leader epochs, topic ids, the discovery cache (no IO);
* ``core`` - configuration, lifecycle, version negotiation, request codecs, KIP-219 throttling;
* ``retry`` - bounded retries with exponential backoff per public operation;
* ``list_offsets_codec`` - the hand-written ListOffsets codec;
* one module per Kafka API: ``metadata`` (Metadata, key 3), ``list_offsets`` (ListOffsets, key 2),
  ``fetch`` (Fetch, key 1).

The package imports nothing on purpose: import the module you need.
"""
