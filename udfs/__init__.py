"""Pure decoders for Kafka's on-disk and dump formats (no Spark import anywhere in this package)."""
