"""The class-data-sharing archives of the suite's JVMs (pyspark_eos.testing.jvm_options), recorded
once per machine by the prefetch beside the first tests: a one-node broker records the Kafka
archive, and a driver running the copy query through it (with Spark's Kafka connector on its
classpath, as the suite's sessions have) records the Spark home's. Usage, as a driver script:
``python -m tests.class_archives BOOTSTRAP WORK_DIR`` (run by ``record``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic, kafka_classpath_key
from pyspark_eos.testing.jvm_options import (CLASS_ARCHIVES_ENV, JVM_OPTIONS_ENV, SHORT_LIVED_JVM, class_archive,
                                            recording_class_archive)
from pyspark_eos.testing.local_spark import COMPILED_SPARK_HOME_ENV, spark_classpath_key, spark_home_with_compiled_zip
from pyspark_eos.testing.maven_jars import kafka_broker
from pyspark_eos.testing.project_files import cache_dir, cache_lock

CHECKOUT = Path(__file__).resolve().parent.parent


def archives_dir() -> Path:
    return cache_dir() / "class-archives"


def use_suite_jvms() -> None:
    """The suite's JVMs, for this process and those it starts (conftest, the prefetch): Spark from
    a compiled pyspark.zip (each of the suite's many queries starts some fifteen Python processes,
    which would each compile PySpark again), the short-lived JVMs' options, and the archives that
    exist."""
    os.environ[COMPILED_SPARK_HOME_ENV] = str(spark_home_with_compiled_zip())
    os.environ.setdefault(JVM_OPTIONS_ENV, SHORT_LIVED_JVM)
    os.environ.setdefault(CLASS_ARCHIVES_ENV, str(archives_dir()))


def record() -> str:
    """Record the archives that are missing; what it did, for the prefetch's log."""
    use_suite_jvms()
    kafka_key, spark_key = kafka_classpath_key(kafka_broker().classpath()), spark_classpath_key()
    with cache_lock("class-archives"):
        missing = [key for key in (kafka_key, spark_key) if not class_archive(key).exists()]
        if missing:
            _record(kafka_key, spark_key)
    return f"recorded {len(missing)} of 2" if missing else "both there"


def _record(kafka_key: str, spark_key: str) -> None:
    with tempfile.TemporaryDirectory(prefix="eos-kafka-class-archives-") as work:
        with recording_class_archive(kafka_key) as broker_options:
            cluster = EmbeddedKafkaCluster(directory=Path(work) / "kafka", broker_jvm_options=broker_options)
            with cluster:
                _run_driver(spark_key, cluster.bootstrap_servers, Path(work))
                cluster.stop(grace=120)  # the broker writes the archive on its way out: no SIGKILL meanwhile


def _run_driver(spark_key: str, bootstrap: str, work: Path) -> None:
    with recording_class_archive(spark_key) as driver_options:
        env = {k: v for k, v in os.environ.items() if k != CLASS_ARCHIVES_ENV}
        env[JVM_OPTIONS_ENV] = " ".join([SHORT_LIVED_JVM, *driver_options])
        done = subprocess.run([sys.executable, "-m", "tests.class_archives", bootstrap, str(work)], cwd=CHECKOUT,
                              env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"the recording driver failed: {done.stderr[-3000:]}")
        wait_for_driver_jvm(json.loads(done.stdout.strip().splitlines()[-1])["jvm"])


def wait_for_driver_jvm(pid: int, timeout: float = 120.0) -> None:
    """A PySpark driver's JVM exits after its Python process, once it sees the gateway closed: the
    archive it records, and the last of its CPU, come after that."""
    from .kafka_tools import wait_until

    wait_until(lambda: not Path(f"/proc/{pid}").exists(), timeout, f"the driver's JVM {pid} to exit")


def _drive(bootstrap: str, work: Path) -> None:
    from pyspark_eos.testing.local_spark import jars_not_in_spark, local_spark_session
    from pyspark_eos.testing.maven_jars import SPARK_KAFKA_CONNECTOR

    from .copy_query import run_copy
    from .kafka_tools import write_transactions

    jars = ",".join(str(jar) for jar in jars_not_in_spark(SPARK_KAFKA_CONNECTOR.jars()))
    spark = local_spark_session(app_name="eos-kafka class archive", conf={"spark.jars": jars})
    source, sink = create_topic(bootstrap, "source", partitions=2), create_topic(bootstrap, "sink", partitions=2)
    write_transactions(bootstrap, source, [(True, [(n % 2, b"%d" % n) for n in range(20)])])
    run_copy(spark, bootstrap, source, sink, "class-archive", str(work / "checkpoint"))
    spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", sink).load().count()
    jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    spark.stop()
    print(json.dumps({"jvm": jvm}))


if __name__ == "__main__":
    _drive(sys.argv[1], Path(sys.argv[2]))
