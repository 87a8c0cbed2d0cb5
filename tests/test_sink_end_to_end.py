"""eos-kafka -> narrow transformations -> eos-kafka, checked by independent Kafka clients:
every expected record exactly once in the output, and the group's offsets at the input's end."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from .kafka_tools import committed_offsets, create_topic, group_members, read_committed, unique_name, wait_until
from .spark_tools import PARTITIONS, Pipeline
from .test_group_lag import stored_metadata

@pytest.fixture
def pipeline(kafka, tmp_path):
    return Pipeline(kafka, tmp_path)


def upper_without_rounds_2_and_3(frame):
    kept = frame.filter(~F.col("value").cast("string").rlike("^r[23]-"))
    return kept.select("key", F.upper(F.col("value").cast("string")).alias("value"))


def batches_that_moved_the_offsets(query) -> set[int]:
    """Batches that read a range, whatever became of its records (aborted, filtered out)."""
    progress = [(p["batchId"], p["sources"][0]) for p in query.recentProgress]
    return {batch for batch, read in progress if read["startOffset"] != read["endOffset"]}


def test_clean_run_over_several_batches_with_batches_filtered_empty(spark, pipeline):
    query = pipeline.run(spark, upper_without_rounds_2_and_3)
    # 9 offsets per batch = one round (2 records + a marker on each of 3 partitions) per batch, so
    # one batch per round: those of rounds 1 and 4 (aborted) and 2 and 3 (filtered) write nothing.
    assert batches_that_moved_the_offsets(query) == set(range(7))
    expected = sorted(v.upper() for v in pipeline.input_values() if not v.startswith((b"r2-", b"r3-")))
    assert sorted(pipeline.output_values()) == expected
    assert len(expected) == len(set(expected)) == 3 * PARTITIONS * 2  # rounds 0, 5, 6 of 7 (1, 4 aborted)
    pipeline.assert_offsets_at_input_end()


def test_offsets_are_committed_with_generation_batch_and_query(spark, pipeline, kafka):
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    query = pipeline.run(spark)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    request = [ConsumerGroupTopicPartitions(pipeline.group, [TopicPartition(pipeline.input, 0)])]
    stored = admin.list_consumer_group_offsets(request)[pipeline.group].result(30).topic_partitions[0]
    metadata = json.loads(stored.metadata)
    assert metadata["query"] == query.id and metadata["generation"] >= 1
    assert int(metadata["batch"]) == max(p["batchId"] for p in query.recentProgress if p["numInputRows"])


def test_at_least_once_is_chosen_by_its_option_and_commits_no_input_offsets(spark, pipeline):
    pipeline.run(spark, sink_options={"kafka.group.id": None, "deliveryGuarantee": "at-least-once"})
    assert sorted(pipeline.output_values()) == sorted(pipeline.input_values())
    # The source's member commits each completed batch's end (lag for monitoring), no write task does.
    pipeline.assert_offsets_at_input_end()
    assert {m["query"] for m in stored_metadata(pipeline.bootstrap, pipeline.group, pipeline.input)} == {None}


def test_a_batch_replayed_after_its_kafka_commit_is_skipped(spark, pipeline):
    """The driver died after the Kafka commits of its last batch, before Spark's commit log."""
    pipeline.run(spark)
    before = pipeline.output_values()
    commits = Path(pipeline.checkpoint) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (commits / name).unlink()
    pipeline.run(spark)
    assert pipeline.output_values() == before
    assert sorted(before) == sorted(pipeline.input_values())
    pipeline.assert_offsets_at_input_end()


def test_an_empty_checkpoint_resumes_from_the_groups_offsets(spark, pipeline, tmp_path):
    pipeline.run(spark)
    pipeline.add_input(7, 4)
    shutil.rmtree(pipeline.checkpoint)
    pipeline.run(spark, checkpoint=str(tmp_path / "fresh"), startingOffsets="group")
    values = pipeline.output_values()
    assert sorted(values) == sorted(pipeline.input_values())
    assert len(values) == len(set(values))
    pipeline.assert_offsets_at_input_end()


def test_a_shuffle_between_source_and_sink_fails_naming_it(spark, pipeline):
    with pytest.raises(StreamingQueryException, match="a shuffle .* sits between the source and the sink"):
        pipeline.run(spark, lambda frame: frame.repartition(2).select("key", "value"))
    assert pipeline.output_values() == []


def test_a_sink_without_the_sources_group_fails_naming_it(spark, pipeline):
    with pytest.raises(StreamingQueryException, match=f"an eos-kafka source with kafka.group.id='{pipeline.group}', "
                                                      "but the sink has no kafka.group.id"):
        pipeline.run(spark, sink_options={"kafka.group.id": None})
    assert pipeline.output_values() == []


def test_a_source_without_the_sinks_group_fails_naming_it(spark, pipeline):
    with pytest.raises(StreamingQueryException, match="read no input from an eos-kafka source with "
                                                      f"kafka.group.id='{pipeline.group}'.*or give the source the group"):
        pipeline.run(spark, **{"kafka.group.id": None})
    assert pipeline.output_values() == []


def test_a_record_larger_than_the_topic_allows_aborts_its_batch(spark, kafka, tmp_path):
    pipeline = Pipeline(kafka, tmp_path, rounds=1)
    small = create_topic(kafka.bootstrap_servers, unique_name("small"), config={"max.message.bytes": "2000"})
    pipeline.output = small

    def blow_up(frame):
        return frame.select("key", F.concat(F.col("value"), F.lit(b"x" * 5000)).alias("value"))

    with pytest.raises(StreamingQueryException, match=rf"topic {small} takes record batches of up to 2000 bytes \(its max.message.bytes\), "
                                                      r"and the largest of this task's records so far was 5009 bytes"):
        pipeline.run(spark, blow_up)
    assert read_committed(kafka.bootstrap_servers, small) == []
    assert set(committed_offsets(kafka.bootstrap_servers, pipeline.group, pipeline.input, PARTITIONS).values()) == {-1001}


@pytest.mark.parametrize("transform, message", [
    (lambda f: f.select("key"), "has no 'value' column"),
    (lambda f: f.select(F.col("offset").alias("value")), "column 'value' has type bigint; the sink needs string or binary"),
])
def test_a_bad_schema_fails_before_any_transaction(spark, pipeline, transform, message):
    with pytest.raises(Exception, match=message):
        pipeline.run(spark, transform)
    assert pipeline.output_values() == []


def test_coalesce_commits_all_ranges_of_a_task_in_one_transaction(spark, pipeline):
    pipeline.run(spark, lambda frame: frame.coalesce(1).select("key", "value"))
    pipeline.assert_exactly_once()


def test_a_source_reading_only_key_and_value_is_exactly_once_too(spark, pipeline):
    # The sink learns each task's input ranges from the source's read, not from the columns.
    pipeline.run(spark, schema="value binary, key binary")
    pipeline.assert_exactly_once()


def test_a_union_of_two_eos_kafka_sources_commits_both_inputs(spark, kafka, pipeline):
    from .spark_tools import source

    second = create_topic(kafka.bootstrap_servers, unique_name("in2"), partitions=2)
    from .kafka_tools import write_transactions

    write_transactions(kafka.bootstrap_servers, second, [(True, [(0, b"second-a"), (1, b"second-b")])])

    def with_second(frame):
        other = source(spark, kafka.bootstrap_servers, second, startingOffsets="earliest",
                       **{"kafka.group.id": pipeline.group})
        return frame.select("key", "value").union(other.select("key", "value"))

    pipeline.run(spark, with_second)
    values = pipeline.output_values()
    assert sorted(values) == sorted(pipeline.input_values() + [b"second-a", b"second-b"])
    pipeline.assert_offsets_at_input_end()
    assert committed_offsets(kafka.bootstrap_servers, pipeline.group, second, 2) == {0: 2, 1: 2}


def test_a_batch_write_commits_the_input_offsets_once(spark, pipeline):
    def batch_write():
        frame = (spark.read.format("eos-kafka").option("kafka.bootstrap.servers", pipeline.bootstrap)
                 .option("subscribe", pipeline.input).option("kafka.group.id", pipeline.group)
                 .option("startingOffsets", "group").load())
        (frame.select("key", "value").write.format("eos-kafka").option("kafka.bootstrap.servers", pipeline.bootstrap)
         .option("topic", pipeline.output).option("kafka.group.id", pipeline.group).mode("append").save())

    def no_member_left():
        # Spark tells a batch read nothing when its job ends: its member leaves once the write committed.
        wait_until(lambda: group_members(pipeline.bootstrap, pipeline.group) == [], 30,
                   "the batch read's member to leave the group")

    batch_write()
    pipeline.assert_exactly_once()
    no_member_left()
    batch_write()  # starts from the group's offsets: nothing new to read, nothing written again
    pipeline.assert_exactly_once()
    no_member_left()


def test_overwrite_is_refused_as_spark_kafka_sink_does(spark, pipeline):
    frame = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="cannot overwrite a Kafka topic"):
        (frame.write.format("eos-kafka").option("kafka.bootstrap.servers", pipeline.bootstrap)
         .option("topic", pipeline.output).mode("overwrite").save())
    assert pipeline.output_values() == []


def test_topic_partition_key_and_headers_columns_are_written_as_given(spark, kafka):
    bootstrap = kafka.bootstrap_servers
    first, second = (create_topic(bootstrap, unique_name("cols"), partitions=3) for _ in range(2))
    rows = [(first, 2, "k1", "v1", [("h", bytearray(b"x"))]), (second, 0, None, "v2", None),
            (second, 1, "k3", "v3", [("a", None), ("b", bytearray(b"y"))])]
    frame = spark.createDataFrame(rows, "topic string, partition int, key string, value string, "
                                        "headers array<struct<key: string, value: binary>>")
    # No kafka.group.id: a plain transactional write, one transaction per task, no input offsets.
    frame.write.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap).mode("append").save()
    written = read_committed(bootstrap, first, 3) + read_committed(bootstrap, second, 3)
    assert [(r.topic, r.partition, r.key, r.value, r.headers) for r in written] == [
        (first, 2, b"k1", b"v1", (("h", b"x"),)),
        (second, 0, None, b"v2", ()),
        (second, 1, b"k3", b"v3", (("a", None), ("b", b"y"))),
    ]
