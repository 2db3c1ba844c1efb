"""txnwatch Spark application: sources, events, state machine, verdicts, sinks, CLI."""
