"""The query rides through a rebalance of its consumer group: input partitions added while a batch
is written make the group's generation move on, and Kafka then refuses the batch's offsets under
the generation it was planned with. The batch commits under the new one, exactly once.

No switch turns off the re-stamping (sink/rebalance.py): without it the task stalled after its
stable read fails at every retry (its offsets are refused under the old generation) and the query
stops, which this test's awaitTermination reports; the executor-log assertion tells which of the
two paths, the claims' newer stamp or Kafka's refusal and a retry, each stall point took.
"""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from pyspark_eos.protocol.claims_layout import CONTROL_PARTITION, pipeline_topic
from pyspark_eos.protocol.claims_records import parse_record
from pyspark_eos.protocol.group_stamp import GroupStamp
from pyspark_eos.kafka.options import DEFAULT_CLAIMS_TOPIC
from pyspark_eos.testing import fault_injection as faults
from pyspark_eos.testing.local_spark import executor_local_dirs, executor_logs

from .copy_query import await_end, to_the_end
from .kafka_tools import committed_offsets, last_stable_offsets, read_committed, wait_until, write_transactions
from .spark_tools import PARTITIONS, Pipeline, eos_pipeline


def recorded_generations(bootstrap: str, group: str) -> list[int]:
    """The generations of ``group`` the query's driver recorded in its pipeline's control log."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rebalance-test-reader",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(pipeline_topic(DEFAULT_CLAIMS_TOPIC, group), CONTROL_PARTITION, 0)])
    generations = []
    try:
        while (message := consumer.poll(5)) is not None and message.error() is None:
            stamp = parse_record(message.value(), message.offset())
            if isinstance(stamp, GroupStamp) and stamp.group_id == group:
                generations.append(stamp.generation)
    finally:
        consumer.close()
    return generations


def add_partition(bootstrap: str, topic: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer arrives
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(30)


@pytest.mark.compat
@pytest.mark.spark_local_cluster
@pytest.mark.parametrize("point", [faults.STALL_BEFORE_PRODUCE, faults.STALL_AFTER_STABLE_READ])
def test_a_rebalance_during_a_batch_commits_it_under_the_new_generation(spark_cluster, kafka, tmp_path, point):
    # Stalled before its claim, the task finds the new generation with its claims; stalled after
    # them, Kafka refuses its offsets, and Spark's retry of the task finds it.
    pipeline = Pipeline(kafka, tmp_path)
    resume = tmp_path / "resume"
    marker = faults.arm(point, sorted(executor_local_dirs(spark_cluster))[0], resume_file=str(resume),
                        report_dir=str(tmp_path))
    writer = eos_pipeline(spark_cluster, pipeline.bootstrap, pipeline.input, pipeline.output, pipeline.group,
                          startingOffsets="earliest", maxOffsetsPerTrigger=9)
    query = to_the_end(writer.option("checkpointLocation", pipeline.checkpoint)).start()
    try:
        wait_until(lambda: not query.isActive or faults.stall_report(marker, "stalled", tmp_path), 120,
                   "the write task to stall")
        assert query.isActive, f"the query ended before the stall: {query.exception()}"
        first = max(wait_until(lambda: recorded_generations(pipeline.bootstrap, pipeline.group), 30,
                               "the query's first generation to be recorded"))
        add_partition(pipeline.bootstrap, pipeline.input, PARTITIONS + 1)
        wait_until(lambda: max(recorded_generations(pipeline.bootstrap, pipeline.group)) > first, 60,
                   "the rebalance that follows the added partition")
        resume.write_text("go")
        assert await_end(query, 300), "the query did not finish in 300 s"  # raises if it failed
    finally:
        resume.write_text("go")
        if query.isActive:
            query.stop()
    pipeline.assert_exactly_once()
    refused = f"consumer group '{pipeline.group}' rebalanced during this batch" in executor_logs(spark_cluster)
    assert refused == (point == faults.STALL_AFTER_STABLE_READ), \
        "the task stalled after its stable read must be refused (GroupRebalancedError) and retried; the one " \
        f"stalled before producing must find the new generation with its claims (refused: {refused})"


@pytest.mark.spark_local_cluster
def test_partitions_added_while_the_query_runs_are_read_from_their_start(spark_cluster, kafka, tmp_path):
    pipeline = Pipeline(kafka, tmp_path, rounds=3)
    writer = eos_pipeline(spark_cluster, pipeline.bootstrap, pipeline.input, pipeline.output, pipeline.group,
                          startingOffsets="earliest", maxOffsetsPerTrigger=9)
    query = writer.option("checkpointLocation", pipeline.checkpoint).trigger(processingTime="500 milliseconds").start()
    try:
        wait_until(lambda: not query.isActive or sorted(pipeline.output_values()) == sorted(pipeline.input_values()),
                   120, "the first records to be copied")
        add_partition(pipeline.bootstrap, pipeline.input, PARTITIONS + 1)
        write_transactions(pipeline.bootstrap, pipeline.input, [(True, [(PARTITIONS, b"new-%d" % i) for i in range(4)])])
        pipeline.add_input(3, 2)
        expected = sorted(r.value for r in read_committed(pipeline.bootstrap, pipeline.input, partitions=PARTITIONS + 1))
        wait_until(lambda: not query.isActive or sorted(pipeline.output_values()) == expected, 120,
                   "the records of the added partition and the later ones to be copied")
        assert query.isActive, f"the query stopped: {query.exception()}"
        wait_until(lambda: committed_offsets(pipeline.bootstrap, pipeline.group, pipeline.input, PARTITIONS + 1)
                   == last_stable_offsets(pipeline.bootstrap, pipeline.input, PARTITIONS + 1), 60,
                   "the group's offsets to reach the input's end")
    finally:
        query.stop()
    values = pipeline.output_values()
    assert len(values) == len(set(values)) and {b"new-%d" % i for i in range(4)} <= set(values)


@pytest.mark.spark_local_cluster
def test_partitions_added_while_the_query_was_stopped_are_read_when_it_restarts(spark_cluster, kafka, tmp_path):
    # The restarted query's static member gets its old assignment back without a rebalance, and
    # its client never saw the old partition count: planning starts the rebalance itself.
    pipeline = Pipeline(kafka, tmp_path, rounds=3)
    pipeline.run(spark_cluster)
    add_partition(pipeline.bootstrap, pipeline.input, PARTITIONS + 1)
    write_transactions(pipeline.bootstrap, pipeline.input, [(True, [(PARTITIONS, b"new-%d" % i) for i in range(4)])])
    pipeline.add_input(3, 2)
    pipeline.run(spark_cluster)
    values = pipeline.output_values()
    expected = sorted(r.value for r in read_committed(pipeline.bootstrap, pipeline.input, partitions=PARTITIONS + 1))
    assert sorted(values) == expected and len(values) == len(set(values))
    assert committed_offsets(pipeline.bootstrap, pipeline.group, pipeline.input, PARTITIONS + 1) == \
        last_stable_offsets(pipeline.bootstrap, pipeline.input, PARTITIONS + 1)
