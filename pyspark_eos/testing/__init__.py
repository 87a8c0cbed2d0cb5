"""A small kit for testing pipelines built on eos-kafka, in the spirit of ``pyspark.testing``: an
embedded Kafka cluster (``embedded_kafka``, its broker jars resolved with Maven by ``maven_jars``
from the poms and settings of ``project_files.conf_dir()``), local and local-cluster Spark
sessions (``local_spark``), checks of a pipeline's output with a plain read_committed consumer
(``output_check``) and fault injection at the runtime's fault points (``fault_injection``).

The runtime (``source``, ``sink``, ``kafka``) never imports it; the fault handler gets in only
through ``kafka.fault_hooks``. The project's own tooling (the chaos campaign, the distribution
builder) lives in the checkout's ``devtools/``, the example pipeline in ``examples/``."""
