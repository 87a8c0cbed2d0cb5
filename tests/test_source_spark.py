"""The eos-kafka source in real Spark against the real broker (batch and streaming)."""
from __future__ import annotations

import json
import time

import pytest
from chispa import assert_df_equality
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.errors import StreamingQueryException

from .kafka_tools import (
    create_topic,
    last_stable_offsets,
    mixed_transactions,
    read_committed,
    unique_name,
    write_transactions,
)
from .spark_tools import BatchRecorder, run_available_now, source


@pytest.fixture(scope="module")
def mixed_topic(kafka):
    topic = create_topic(kafka.bootstrap_servers, unique_name("mixed"), partitions=3)
    write_transactions(kafka.bootstrap_servers, topic, mixed_transactions(partitions=3, rounds=7),
                       headers=[("origin", b"test"), ("n", None)])
    return topic


def test_batch_read_equals_a_plain_read_committed_consumer(spark, kafka, mixed_topic):
    frame = (spark.read.format("eos-kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
             .option("subscribe", mixed_topic).option("includeHeaders", "true").load())
    expected_rows = [(r.key, r.value, r.topic, r.partition, r.offset)
                     for r in read_committed(kafka.bootstrap_servers, mixed_topic, partitions=3)]
    expected = spark.createDataFrame(expected_rows, "key binary, value binary, topic string, partition int, offset long")
    actual = frame.select("key", "value", "topic", "partition", "offset")
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)
    assert len(expected_rows) == 5 * 3 * 2  # 7 rounds, rounds 1 and 4 aborted, 2 records per partition
    headers = {tuple((h["key"], h["value"]) for h in row["headers"]) for row in frame.select("headers").collect()}
    assert headers == {(("origin", b"test"), ("n", None))}


def test_a_schema_naming_some_kafka_columns_reads_only_those_in_its_order(spark, kafka, mixed_topic):
    frame = (spark.read.format("eos-kafka").schema("offset bigint, value binary, headers "
                                                   "array<struct<key: string, value: binary>>")
             .option("kafka.bootstrap.servers", kafka.bootstrap_servers).option("subscribe", mixed_topic)
             .option("includeHeaders", "true").load())
    assert frame.columns == ["offset", "value", "headers"]
    rows = frame.collect()
    committed = read_committed(kafka.bootstrap_servers, mixed_topic, partitions=3)
    assert sorted((row["offset"], row["value"]) for row in rows) == sorted((r.offset, r.value) for r in committed)
    assert {tuple((h["key"], h["value"]) for h in row["headers"]) for row in rows} == {(("origin", b"test"), ("n", None))}


def test_batch_read_between_explicit_offsets(spark, kafka, mixed_topic):
    frame = (spark.read.format("eos-kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
             .option("assign", json.dumps({mixed_topic: [1]}))
             .option("startingOffsets", json.dumps({mixed_topic: {"1": 3}}))
             .option("endingOffsets", json.dumps({mixed_topic: {"1": 12}})).load())
    committed = read_committed(kafka.bootstrap_servers, mixed_topic, partitions=3)
    expected = sorted(r.offset for r in committed if r.partition == 1 and 3 <= r.offset < 12)
    assert sorted(row["offset"] for row in frame.collect()) == expected


def offset_of(progress, which: str, topic: str, partition: int = 0) -> int:
    offsets = json.loads(progress["sources"][0][which] or "null") or {}
    return offsets.get(topic, {}).get(str(partition), 0)


def test_max_offsets_per_trigger_cuts_inside_transactions_without_loss_or_duplicates(spark, kafka, tmp_path):
    bootstrap = kafka.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("limit"))
    # Log: 0-4 committed, 5 marker, 6-7 aborted, 8 marker, 9-12 committed, 13 marker.
    write_transactions(bootstrap, topic, [(True, [(0, b"a%d" % i) for i in range(5)]),
                                          (False, [(0, b"x6"), (0, b"x7")]),
                                          (True, [(0, b"b%d" % i) for i in range(4)])])
    recorder = BatchRecorder()
    query = run_available_now(source(spark, bootstrap, topic, startingOffsets="earliest", maxOffsetsPerTrigger=3),
                              str(tmp_path / "checkpoint"), recorder)
    spans = [(offset_of(p, "startOffset", topic), offset_of(p, "endOffset", topic)) for p in query.recentProgress]
    assert spans[:5] == [(0, 3), (3, 6), (6, 9), (9, 12), (12, 14)]
    offsets_per_batch = [[offset for _, offset, _ in recorder.batches[i]] for i in range(5)]
    assert offsets_per_batch == [[0, 1, 2], [3, 4], [], [9, 10, 11], [12]]
    committed = [(0, r.offset, r.value) for r in read_committed(bootstrap, topic)]
    assert recorder.all_rows() == committed


def test_a_restarted_query_replays_its_last_batch_with_exactly_the_same_ranges(spark, kafka, mixed_topic, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    first = BatchRecorder()
    frame = source(spark, kafka.bootstrap_servers, mixed_topic, startingOffsets="earliest", maxOffsetsPerTrigger=10)
    run_available_now(frame, str(checkpoint), first)
    last = max(first.batches)
    assert last >= 2 and first.batches[last]
    # Spark re-runs a batch whose end is in the offset log but not in the commit log.
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink()
    replay = BatchRecorder()
    run_available_now(frame, str(checkpoint), replay)
    assert replay.batches[last] == first.batches[last]
    assert len(first.all_rows()) == len(set(first.all_rows())) == 30


def test_partitions_added_to_a_subscribed_topic_are_read_from_their_start(spark, kafka, tmp_path):
    bootstrap = kafka.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("grow"))
    write_transactions(bootstrap, topic, [(True, [(0, b"p0-a")])])
    recorder = BatchRecorder()
    frame = source(spark, bootstrap, topic, startingOffsets="earliest")
    run_available_now(frame, str(tmp_path / "checkpoint"), recorder)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
    write_transactions(bootstrap, topic, [(True, [(1, b"p1-a"), (1, b"p1-b"), (0, b"p0-b")])])
    run_available_now(frame, str(tmp_path / "checkpoint"), recorder)
    assert [value for _, _, value in recorder.all_rows()] == [b"p0-a", b"p0-b", b"p1-a", b"p1-b"]


def test_deleted_input_fails_the_query_naming_the_lost_offsets_unless_allowed(spark, kafka, tmp_path):
    bootstrap = kafka.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("retention"))
    write_transactions(bootstrap, topic, [(True, [(0, b"v%d" % i) for i in range(4)])])  # 0-3, marker 4
    checkpoint = str(tmp_path / "checkpoint")
    recorder = BatchRecorder()
    run_available_now(source(spark, bootstrap, topic, startingOffsets="earliest"), checkpoint, recorder)
    write_transactions(bootstrap, topic, [(True, [(0, b"w%d" % i) for i in range(6)])])  # 5-10, marker 11
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_records([TopicPartition(topic, 0, 8)])[TopicPartition(topic, 0, 8)].result(30)

    with pytest.raises(StreamingQueryException, match=r"offsets \[5, 8\) are gone from Kafka.*failOnDataLoss=false"):
        run_available_now(source(spark, bootstrap, topic), checkpoint, BatchRecorder())

    run_available_now(source(spark, bootstrap, topic, failOnDataLoss="false"), checkpoint, recorder)
    assert [value for _, _, value in recorder.all_rows()] == [b"v0", b"v1", b"v2", b"v3", b"w3", b"w4", b"w5"]


def test_progress_shows_the_backlog_behind_the_last_stable_offsets(spark, kafka, mixed_topic, tmp_path):
    query = run_available_now(source(spark, kafka.bootstrap_servers, mixed_topic, startingOffsets="earliest",
                                     maxOffsetsPerTrigger=20), str(tmp_path / "checkpoint"), BatchRecorder())
    stable = last_stable_offsets(kafka.bootstrap_servers, mixed_topic, 3)
    progress = query.recentProgress
    for batch in progress:
        assert json.loads(batch["sources"][0]["latestOffset"]) == {mixed_topic: {str(p): o for p, o in stable.items()}}
    backlogs = [sum(offset_of(batch, "latestOffset", mixed_topic, p) - offset_of(batch, "endOffset", mixed_topic, p)
                    for p in range(3)) for batch in progress]
    assert len(backlogs) >= 3 and backlogs[0] > 0, backlogs
    assert backlogs == sorted(backlogs, reverse=True) and backlogs[-1] == 0, backlogs


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "t", "assign": '{"t":[0]}'}, "set exactly one of the options subscribe, subscribePattern, assign"),
    ({"subscribe": "t", "kafka.isolation.level": "read_uncommitted"}, "kafka.isolation.level='read_uncommitted'"),
    ({"subscribe": "t", "startingOffsets": "group"}, "startingOffsets=group needs kafka.group.id"),
])
def test_bad_options_fail_at_load(spark, options, message):
    reader = spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", "127.0.0.1:1")
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match=message.replace("(", r"\(").replace("[", r"\[")):
        reader.load()


@pytest.mark.parametrize("streaming, option, named", [
    (False, "startingOffsets", {"0": -2, "1": -2, "2": -2, "37": -2}),
    (True, "startingOffsets", {"0": -2, "1": -2, "2": -2, "37": -2}),
    (True, "startingOffsetsByTimestamp", {"0": 0, "1": 0, "2": 0, "5": 0}),
    (False, "endingOffsets", {"0": -1, "1": -1, "2": -1, "9": -1}),
], ids=["read-starting", "readStream-starting", "readStream-by-timestamp", "read-ending"])
def test_offsets_json_naming_a_partition_the_topic_does_not_have_fails_at_load(spark, kafka, mixed_topic,
                                                                            streaming, option, named):
    extra = [p for p in named if int(p) > 2][0]
    reader = (spark.readStream if streaming else spark.read).format("eos-kafka")
    reader = (reader.option("kafka.bootstrap.servers", kafka.bootstrap_servers).option("subscribe", mixed_topic)
              .option(option, json.dumps({mixed_topic: named})))
    with pytest.raises(Exception, match=f"the {option} JSON names {mixed_topic}-{extra}, which this query does not read"):
        reader.load()


def test_a_subscribed_topic_that_does_not_exist_is_named(spark, kafka):
    frame = (spark.read.format("eos-kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
             .option("subscribe", "no-such-topic").load())
    with pytest.raises(Exception, match="subscribed topic\\(s\\) no-such-topic do not exist"):
        frame.collect()


def test_starting_by_timestamp_uses_the_first_offset_at_or_after_it(spark, kafka):
    from .kafka_tools import transactional_producer

    bootstrap = kafka.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("by-time"), partitions=2)
    # Recent timestamps: records from 1970 would roll their segment at the next append (the commit
    # marker) and fall to the 7-day retention within the broker's retention check.
    base = int(time.time() * 1000) - 60_000
    producer = transactional_producer(bootstrap)
    producer.begin_transaction()
    for partition in (0, 1):
        for index, offset_ms in enumerate((1_000, 2_000, 3_000, 4_000)):
            producer.produce(topic, value=b"p%d-%d" % (partition, index), partition=partition, timestamp=base + offset_ms)
    producer.commit_transaction(30)

    def values(**options):
        reader = spark.read.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
        for key, value in options.items():
            reader = reader.option(key, value)
        return sorted(bytes(row["value"]) for row in reader.load().collect())

    assert values(startingTimestamp=str(base + 2500)) == [b"p0-2", b"p0-3", b"p1-2", b"p1-3"]
    per_partition = json.dumps({topic: {"0": base + 1500, "1": base + 9_999}})
    assert values(startingOffsetsByTimestamp=per_partition) == [b"p0-1", b"p0-2", b"p0-3"]


def test_a_kafka_setting_the_client_refuses_fails_at_load_naming_it(spark, kafka, mixed_topic):
    # librdkafka itself judges kafka.* settings (that they reach every client is shown by the SASL
    # pipeline of docs/security.md); its verdict comes at load(), not in the first task.
    reader = (spark.read.format("eos-kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
              .option("subscribe", mixed_topic).option("kafka.fetch.wait.max.ms", "not-a-number"))
    with pytest.raises(Exception, match='refused by the Kafka client .*"fetch.wait.max.ms"'):
        reader.load()


def test_subscribe_pattern_reads_every_matching_topic_and_joins_the_group(spark, kafka, tmp_path):
    bootstrap = kafka.bootstrap_servers
    prefix = unique_name("pat")
    topics = [create_topic(bootstrap, f"{prefix}-{suffix}") for suffix in ("a", "b")]
    create_topic(bootstrap, f"other-{prefix}")
    for topic in topics + [f"other-{prefix}"]:
        write_transactions(bootstrap, topic, [(True, [(0, topic.encode())])])
    recorder = BatchRecorder()
    frame = (spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribePattern", f"{prefix}-.*").option("startingOffsets", "earliest")
             .option("kafka.group.id", unique_name("g")).load())
    run_available_now(frame, str(tmp_path / "checkpoint"), recorder)
    assert sorted(value for _, _, value in recorder.all_rows()) == sorted(t.encode() for t in topics)
