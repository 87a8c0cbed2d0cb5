"""The ``eos-kafka`` sink. The writer Spark sees, and on the executors one Kafka transaction per
write task: the producer pool and its transactional ids (slots), the input offsets each task
commits (``commit_decision``), and attempt fencing against zombie attempts (``attempt_fencing``,
its decision in ``fence_decision``).
Its fault points are named in ``kafka.fault_hooks``."""
