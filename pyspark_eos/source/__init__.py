"""The ``eos-kafka`` source. On the driver: options, offset planning, the pipeline group's static
membership and the micro-batch stream; on the executors: the partition reader (read_committed
into Arrow). Each input partition carries the plan's group stamp and plan record (``protocol``) to
the sink through the read-to-write hand-over (``protocol.handover``)."""
