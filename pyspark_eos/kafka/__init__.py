"""What the source and the sink share: option parsing, Spark's Kafka record schema, a group's
committed offsets read stably, retries with back-off, the check for the compiled client, and the
fault points the tests reach both through (``fault_hooks``)."""
