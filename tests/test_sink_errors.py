"""What the sink says when Kafka refuses a task's records, and what a batch that failed partway
leaves visible: against the real broker and real Spark."""
from __future__ import annotations

import logging
import re
import time

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from pyspark_eos.sink.options import SinkOptions
from pyspark_eos.sink.task_info import EosKafkaCommitMessage
from pyspark_eos.sink.commit_decision import TaskOutcome
from pyspark_eos.sink.writer import EosKafkaBatchWriter, EosKafkaStreamWriter
from pyspark_eos.testing import fault_injection as faults
from pyspark_eos.testing.local_spark import executor_local_dirs

from .kafka_tools import committed_offsets, create_topic, read_committed, unique_name, wait_until
from .spark_tools import PARTITIONS, Pipeline, eos_pipeline

BIG = b"x" * 5000


def with_big_value(condition):
    """The pipeline's records, with 5000 bytes more in the value of those matching ``condition``."""
    def transform(frame):
        value = F.when(condition, F.concat(F.col("value"), F.lit(BIG))).otherwise(F.col("value"))
        return frame.select("key", value.alias("value"))
    return transform


def assert_says(failure, *parts: str) -> None:
    """The failure's message holds each of ``parts``, literally and in this order."""
    message = str(failure.value)
    errors = [line for line in message.splitlines() if "pyspark_eos.errors." in line]  # not the plan's dump
    assert re.search(".*".join(map(re.escape, parts)), message, re.DOTALL), errors[:1] or message[:3000]


def output_limited_to(pipeline: Pipeline, kafka, max_message_bytes: int) -> str:
    pipeline.output = create_topic(kafka.bootstrap_servers, unique_name("small"), partitions=2,
                                   config={"max.message.bytes": str(max_message_bytes)})
    return pipeline.output


def test_the_largest_record_of_a_refused_request_is_named_with_the_topics_limit(spark, kafka, tmp_path):
    # Both records of input partition 1 go to one output partition (same key) in one produce
    # request, which the broker refuses whole: the first refused record is the small one.
    pipeline = Pipeline(kafka, tmp_path, rounds=1)
    small = output_limited_to(pipeline, kafka, 2000)
    with pytest.raises(StreamingQueryException) as failure:
        pipeline.run(spark, with_big_value(F.col("value") == F.lit(b"r0-p1-1")))
    assert_says(failure, "TransactionFailedError: batch 0, task ", f"Kafka refused records to {small}-",
                f" as too large (MSG_SIZE_TOO_LARGE): topic {small} takes record batches of up to 2000 bytes (its "
                "max.message.bytes), and the largest of this task's records so far was 5009 bytes (value, key and "
                f"headers), to {small}", ". Make the records smaller, or raise the topic's limit (kafka-configs.sh "
                f"--bootstrap-server {kafka.bootstrap_servers} --alter --entity-type topics --entity-name {small} "
                "--add-config max.message.bytes=<bytes>")
    assert not [v for v in pipeline.output_values() if v.startswith(b"r0-p1-")]


def test_small_records_batched_above_the_topics_limit_are_told_apart_from_a_record_too_large(spark, kafka):
    bootstrap = kafka.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("small"), config={"max.message.bytes": "2000"})
    frame = spark.range(1000).selectExpr("CAST(id AS STRING) AS value").coalesce(1)

    def write(**options):
        writer = frame.write.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
        for key, value in options.items():
            writer = writer.option(key, value)
        writer.mode("append").save()

    with pytest.raises(Exception) as failure:
        write()
    assert_says(failure, f"topic {topic} takes record batches of up to 2000 bytes (its max.message.bytes), and the "
                "largest of this task's records so far was ", f" bytes (value, key and headers), to {topic}",
                ": no record is too large alone, but librdkafka batches records and the broker refuses a batch "
                "above the limit whole. Set the sink's kafka.batch.size below the limit")
    assert read_committed(bootstrap, topic) == []
    write(**{"kafka.batch.size": "1500"})  # as the message says
    assert len(read_committed(bootstrap, topic)) == 1000


def test_a_record_larger_than_the_producer_takes_is_refused_before_it_is_sent(spark, kafka, tmp_path):
    pipeline = Pipeline(kafka, tmp_path, rounds=1)
    with pytest.raises(StreamingQueryException) as failure:
        pipeline.run(spark, with_big_value(F.col("value") == F.lit(b"r0-p1-1")),
                     sink_options={"kafka.message.max.bytes": "4000"})
    assert_says(failure, "TransactionFailedError: batch 0, task ", f"a record of 5009 bytes (value, key and "
                f"headers) to {pipeline.output} is larger than the producer takes: its message.max.bytes is 4000 "
                "bytes, framing included. Raise the sink's kafka.message.max.bytes")
    assert not [v for v in pipeline.output_values() if v.startswith(b"r0-p1-")]


@pytest.fixture
def one_record_per_arrow_batch(spark):
    # The task then produces its first records before it reaches the one to the missing topic.
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, "1")
    yield
    spark.conf.set(key, before)


def test_a_topic_column_naming_a_missing_topic_fails_at_once_naming_it(spark, kafka, one_record_per_arrow_batch):
    bootstrap = kafka.bootstrap_servers
    existing, missing = create_topic(bootstrap, unique_name("exists")), unique_name("missing")
    frame = spark.createDataFrame([(existing, "a"), (existing, "b"), (missing, "c")], "topic string, value string")
    started = time.monotonic()
    with pytest.raises(Exception) as failure:
        frame.coalesce(1).write.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap).mode("append").save()
    elapsed = time.monotonic() - started
    assert_says(failure, "ConfigurationError: ", f"records are addressed to topic '{missing}', which does not "
                f"exist at {bootstrap} (and the brokers do not create topics on first use): create it, e.g. "
                f"kafka-topics.sh --bootstrap-server {bootstrap} --create --topic {missing} ")
    assert elapsed < 20, f"{elapsed:.1f} s: librdkafka alone waits topic.metadata.propagation.max.ms (30 s)"
    assert read_committed(bootstrap, existing) == []


def set_topic_config(bootstrap: str, topic: str, name: str, value: str) -> None:
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until its futures are done
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def test_a_batch_that_fails_partway_keeps_its_committed_tasks_and_its_replay_writes_the_rest_once(
        spark, kafka, tmp_path):
    """One task per input partition (minRecordsPerPartition=1); the task of partition 2 writes records
    too large for the output topic, and waits until the other two have committed (else Spark may
    cancel them first)."""
    pipeline = Pipeline(kafka, tmp_path, rounds=1)
    small = output_limited_to(pipeline, kafka, 3000)
    transform = with_big_value(F.col("partition") == 2)
    one_task_each = {"startingOffsets": "earliest", "minRecordsPerPartition": 1}
    resume = tmp_path / "resume"
    marker = faults.arm(faults.STALL_BEFORE_PRODUCE, sorted(executor_local_dirs(spark))[0], partition=2,
                        resume_file=str(resume))
    good = sorted(v for v in pipeline.input_values() if not v.startswith(b"r0-p2-"))
    query = (eos_pipeline(spark, pipeline.bootstrap, pipeline.input, small, pipeline.group, transform,
                          **one_task_each)
             .option("checkpointLocation", pipeline.checkpoint).trigger(availableNow=True).start())
    try:
        wait_until(lambda: sorted(pipeline.output_values()) == good, 120, "the good tasks' records")
    finally:
        resume.touch()
        marker.unlink(missing_ok=True)
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(120)
    assert_says(failure, "batch 0, task 2 ", f"input {pipeline.input}-2[0,3): Kafka refused records to {small}-",
                "The transaction was aborted: none of this task's records are visible. Other tasks of this batch "
                "may already have committed: their records stay visible, and a replay of the batch will not write "
                "them again (their input offsets are committed with them)")
    assert sorted(pipeline.output_values()) == good
    assert committed_offsets(pipeline.bootstrap, pipeline.group, pipeline.input, PARTITIONS) == {0: 3, 1: 3, 2: -1001}

    set_topic_config(pipeline.bootstrap, small, "max.message.bytes", "100000")
    pipeline.run(spark, transform, **one_task_each)
    written = pipeline.output_values()
    assert sorted(written) == sorted(v + BIG if v.startswith(b"r0-p2-") else v for v in pipeline.input_values())
    assert len(written) == len(set(written))
    pipeline.assert_offsets_at_input_end()


def commit_message(task: int, records: int) -> EosKafkaCommitMessage:
    return EosKafkaCommitMessage(f"batch 4, task {task} (attempt {task})", f"eos-kafka.g.driver.{task}", records,
                                 TaskOutcome.COMMITTED, "")


@pytest.mark.parametrize("group, writer, abort_args, expected", [
    ("g", EosKafkaStreamWriter, (4,), "batch 4 failed: 1 of 3 task(s) failed or did not finish; 2 task(s) "
     "had already committed 12 record(s) with their input offsets: those records stay visible, "
     "and a replay of this batch will not write them again"),
    (None, EosKafkaBatchWriter, (), "write failed: 1 of 3 task(s) failed or did not finish; 2 task(s) "
     "had already committed 12 record(s): those records stay visible. A rerun with the same txnAppId and "
     "txnVersion, or Spark's replay of the foreachBatch batch this write runs in, will not write them again; a "
     "rerun without either writes them again"),
])
def test_the_driver_logs_what_a_failed_batch_left_visible(caplog, group, writer, abort_args, expected):
    # Spark's driver calls abort() with the commit messages of the tasks that succeeded, None for the others.
    group_option = {"kafka.group.id": group} if group else {}
    options = SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "topic": "out", **group_option})
    caplog.set_level(logging.WARNING, logger="pyspark_eos.sink.writer")
    writer(options).abort([commit_message(0, 5), None, commit_message(2, 7)], *abort_args)
    assert len(caplog.records) == 1 and caplog.records[0].getMessage().startswith(expected), caplog.text


@pytest.mark.parametrize("partition, message", [
    (-1, "a row has partition -1; partitions are numbered from 0"),  # librdkafka would read it as "any"
    (7, "a record is addressed to partition 7 of topic '{output}', which has no such partition"),
])
def test_a_partition_column_naming_no_partition_of_the_topic_fails_the_task(spark, kafka, tmp_path, partition, message):
    pipeline = Pipeline(kafka, tmp_path, rounds=1)
    with pytest.raises(StreamingQueryException) as failure:
        pipeline.run(spark, lambda frame: frame.select("key", "value", F.lit(partition).alias("partition")))
    assert_says(failure, "ConfigurationError: ", message.format(output=pipeline.output))
    assert pipeline.output_values() == []
    assert set(committed_offsets(pipeline.bootstrap, pipeline.group, pipeline.input, PARTITIONS).values()) == {-1001}
