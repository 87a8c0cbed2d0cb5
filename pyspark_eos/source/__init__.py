"""The ``eos-kafka`` source. On the driver: options, offset planning, the pipeline group's static
membership and the micro-batch stream; on the executors: the partition reader (read_committed
into Arrow). Each input partition carries the plan's stamps (group generation, fencing epoch) to
the sink through the provenance hand-over (``sink.provenance``)."""
