"""Alert sinks: each is a callable taking the list of alert dicts of one micro-batch."""
