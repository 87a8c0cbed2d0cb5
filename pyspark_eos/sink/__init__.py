"""The ``eos-kafka`` sink. The writer Spark sees, and on the executors one Kafka transaction per
write task (``transactional_writer``): the producer pool and its transactional ids (slots), what
a worker holds from task to task (``worker_resources``), whether and what each task commits
(``commit_decision``), attempt fencing against zombie attempts (``attempt_fencing``, its decision
in ``fence_decision``), a rebalance during a batch (``rebalance``), and progress records for
inputs that are not an eos-kafka source (``task_progress``).
Its fault points are named in ``kafka.fault_hooks``."""
