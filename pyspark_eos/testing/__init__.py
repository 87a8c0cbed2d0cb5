"""The project's own tooling, in the spirit of ``pyspark.testing``: the embedded Kafka cluster and
its Maven-resolved jars, local Spark sessions, fault injection, the example pipeline, the output
checks and the distribution builder. The runtime (``source``, ``sink``, ``kafka``) never imports
it; the fault handler gets in only through ``kafka.fault_hooks``."""
