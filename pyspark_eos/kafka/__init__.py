"""Kafka itself, below everything else: option parsing, Spark's Kafka record schema, clients made
the same way everywhere, librdkafka's group metadata bytes, a group's committed offsets read
stably, the back-off of retries and of pending transactions, the check for the compiled client,
and the fault points the tests reach the runtime through (``fault_hooks``)."""
