"""Spark finds the eos-kafka format by itself, and the local and local-cluster grounds are real."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pyspark_eos.kafka.schema import kafka_schema
from pyspark_eos.testing.embedded_kafka import kafka_tool_command
from pyspark_eos.testing.jvm_options import JVM_OPTIONS_ENV, extra_jvm_options
from pyspark_eos.testing.local_spark import executor_ids, launched_spark_home, spark_java_options

from . import class_archives

DISCOVERY_SCRIPT = textwrap.dedent(
    """
    import json
    from pyspark_eos.testing.local_spark import local_spark_session
    spark = local_spark_session("local[1]", app_name="eos-kafka discovery")
    reader = spark.read.format("eos-kafka").option("kafka.bootstrap.servers", "127.0.0.1:1").option("subscribe", "t")
    plain = reader.load().schema
    with_headers = reader.option("includeHeaders", "true").load().schema
    print(json.dumps([plain.json(), with_headers.json()]))
    spark.stop()
    """
)


def test_format_is_found_without_registration_in_a_fresh_session():
    # A new interpreter and JVM: nothing in it has called spark.dataSource.register.
    result = subprocess.run([sys.executable, "-c", DISCOVERY_SCRIPT], capture_output=True, text=True,
                            timeout=300, env={**os.environ, "PYTHONPATH": ""})
    assert result.returncode == 0, result.stderr[-4000:]
    plain, with_headers = json.loads(result.stdout.strip().splitlines()[-1])
    assert plain == kafka_schema(include_headers=False).json()
    assert with_headers == kafka_schema(include_headers=True).json()


def worker_facts(_):
    import os
    import sys

    from pyspark_eos.protocol.executor_identity import executor_id

    return [(executor_id(), sys.executable, os.getpid())]


def test_local_mode_workers_run_this_python_on_the_driver_executor(spark):
    facts = spark.sparkContext.parallelize(range(4), 4).mapPartitions(worker_facts).collect()
    assert {executor for executor, _, _ in facts} == {"driver"}
    assert {python for _, python, _ in facts} == {sys.executable}


def test_a_task_cancelled_while_it_waits_for_a_python_worker_makes_spark_kill_every_running_worker(tmp_path):
    # Spark takes the interrupted wait for the daemon's answer for a lost daemon and restarts it;
    # the daemon's shutdown hangs up on all its workers (daemon_restart_job.py). In local mode,
    # where a task has one attempt, the running job fails. A test whose driver runs a query that
    # fails on purpose beside others (test_driver_kills) lost another query's task so.
    job = Path(__file__).resolve().parent / "daemon_restart_job.py"
    done = subprocess.run([sys.executable, str(job), str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    outcomes = json.loads(done.stdout.split("outcomes ", 1)[1])
    assert outcomes["let through"] == {"running": None, "waiting": None}  # the control: nothing cancelled
    assert "SPARK_JOB_CANCELLED" in outcomes["cancelled"]["waiting"]
    assert "Python worker exited unexpectedly" in (outcomes["cancelled"]["running"] or ""), outcomes
    assert "Lost connection to Python daemon, attempting to restart" in done.stderr


@pytest.mark.spark_local_cluster
def test_local_cluster_tasks_run_on_two_executors(spark_cluster):
    facts = spark_cluster.sparkContext.parallelize(range(16), 16).mapPartitions(worker_facts).collect()
    reported = {executor for executor, _, _ in facts}
    assert reported == executor_ids(spark_cluster)
    assert len(reported) == 2
    assert len({pid for _, _, pid in facts}) >= 2


def test_the_suites_jvms_run_with_its_jvm_options(spark, kafka):
    # The suite's CPU budget counts on them (conftest): a launch path that dropped them would
    # only show as a slower suite.
    wanted = extra_jvm_options()
    assert wanted, f"{JVM_OPTIONS_ENV} is not set"
    spark_jvm = list(spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                     .getInputArguments())
    assert set(wanted) <= set(spark_jvm), spark_jvm
    if kafka.cluster is not None:  # an external broker is not ours to start
        broker_jvm = Path(f"/proc/{next(iter(kafka.cluster.pids.values()))}/cmdline").read_bytes().split(b"\0")
        assert {option.encode() for option in wanted} <= set(broker_jvm), broker_jvm


def test_the_suites_spark_and_kafka_jvms_start_from_their_class_archives():
    # -Xshare:on makes a JVM that cannot map its archive (none given, another classpath's, another
    # JDK's) fail to start, where the suite's JVMs would start without it, only slower.
    class_archives.record()  # made by the prefetch; waits for it if it is recording them now
    home = launched_spark_home()
    spark = subprocess.run([str(home / "bin" / "spark-submit"), "--driver-java-options",
                            f"-Xshare:on {spark_java_options()}", "--version"],
                           env={**os.environ, "SPARK_HOME": str(home)}, capture_output=True, text=True, timeout=120)
    assert spark.returncode == 0 and "SharedArchiveFile" in spark_java_options(), spark.stderr[-2000:]
    java, *options = kafka_tool_command("org.apache.kafka.tools.TopicCommand")
    kafka = subprocess.run([java, "-Xshare:on", *options, "--version"], capture_output=True, text=True, timeout=120)
    assert kafka.returncode == 0 and any("SharedArchiveFile" in option for option in options), kafka.stderr[-2000:]


class _OptionsProbe:
    """A Python data source sink that writes, when Spark builds its stream writer on the driver,
    the options it was given to the file named by its ``probe`` option, and for each write task
    the job group it runs in to ``<probe>.<taskAttemptId>.task``."""

    @staticmethod
    def register(spark) -> None:
        from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage

        class Writer(DataSourceStreamWriter):
            def __init__(self, probe: str):
                self.probe = probe

            def write(self, iterator):
                from pyspark import TaskContext

                for _ in iterator:
                    pass
                context = TaskContext.get()
                Path(f"{self.probe}.{context.taskAttemptId()}.task").write_text(
                    context.getLocalProperty("spark.jobGroup.id") or "")
                return WriterCommitMessage()

            def commit(self, messages, batchId):
                pass

        class Probe(DataSource):
            @classmethod
            def name(cls):
                return "options-probe"

            def streamWriter(self, schema, overwrite):
                Path(self.options["probe"]).write_text(json.dumps({k.lower(): v for k, v in self.options.items()}))
                return Writer(self.options["probe"])

        spark.dataSource.register(Probe)


def test_a_streaming_sink_is_given_the_query_checkpoint_location_only_when_set_as_an_option(spark, tmp_path):
    # What a sink's writer, built on the driver, can tell its pipeline by: Spark passes it the
    # writeStream options, so checkpointLocation when the query sets it with .option(), and nothing
    # that names the query when it comes from spark.sql.streaming.checkpointLocation.
    _OptionsProbe.register(spark)
    source = tmp_path / "input"
    source.mkdir()
    (source / "part-0.json").write_text('{"value": "a"}\n')

    def options_seen(name: str, checkpoint_option: bool) -> dict:
        probe = tmp_path / f"{name}.json"
        writer = (spark.readStream.schema("value string").json(str(source)).writeStream.format("options-probe")
                  .option("probe", str(probe)).trigger(availableNow=True))
        if checkpoint_option:
            writer = writer.option("checkpointLocation", str(tmp_path / name))
        query = writer.start()
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()
        return json.loads(probe.read_text())

    assert options_seen("given", True)["checkpointlocation"] == str(tmp_path / "given")
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "root"))
    try:
        seen = options_seen("from-conf", False)
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
    assert "checkpointlocation" not in seen and set(seen) == {"probe"}, seen


def test_a_streaming_write_task_runs_in_a_job_group_named_by_its_query_run_fresh_at_each_start(spark, tmp_path):
    # What a progress attempt tells its run by (sink/progress_claims): the job group Spark's stream
    # execution sets for a run's micro-batches is the run's id, new at each start of the query.
    _OptionsProbe.register(spark)
    source = tmp_path / "input"
    source.mkdir()
    groups = []
    for run in range(2):
        (source / f"part-{run}.json").write_text('{"value": "a"}\n')
        probe = tmp_path / f"run-{run}"
        query = (spark.readStream.schema("value string").json(str(source)).writeStream.format("options-probe")
                 .option("probe", str(probe)).option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()
        seen = {path.read_text() for path in tmp_path.glob(f"run-{run}.*.task")}
        assert seen == {str(query.runId)}, seen
        groups.append(seen)
    assert groups[0] != groups[1]
