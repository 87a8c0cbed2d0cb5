"""Options of Spark's Kafka connector that a pipeline brings along: the same options through
format("kafka") and format("eos-kafka") on the same topics give the same rows, batches and errors
(startingOffsetsByTimestampStrategy, minOffsetsPerTrigger with maxTriggerDelay, groupIdPrefix,
fetchOffset.*), with their parsing and decisions checked without a broker too."""
from __future__ import annotations

import json
import re
import time

import pytest

from pyspark_eos.errors import ConfigurationError
from pyspark_eos.source.offset_planning import OffsetLookups, delay_batch, resolve_offsets
from pyspark_eos.source.options import SourceOptions

from .kafka_tools import create_topic, read_committed, transactional_producer, unique_name, wait_until, write_transactions

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}
FORMATS = ("kafka", "eos-kafka")


def _options(**options) -> SourceOptions:
    return SourceOptions.parse({**BASE, **options}, streaming=True)


@pytest.mark.parametrize("available, since_ms, waits", [(9, 0, True), (10, 0, False), (9, 60_000, False)])
def test_a_batch_waits_for_min_offsets_until_max_trigger_delay(available, since_ms, waits):
    assert delay_batch(available, 10, since_ms, 60_000) is waits


@pytest.mark.parametrize("raw, ms", [("15m", 900_000), ("30s", 30_000), ("250ms", 250), ("100", 100), ("1h", 3_600_000)])
def test_max_trigger_delay_takes_spark_time_strings(raw, ms):
    assert _options(minOffsetsPerTrigger="5", maxTriggerDelay=raw).max_trigger_delay_ms == ms


def test_the_connector_defaults_hold():
    options = _options()
    assert (options.min_offsets_per_trigger, options.max_trigger_delay_ms) == (None, 900_000)
    assert _options(startingTimestamp="1000").starting.when_none == "error"
    assert _options(startingTimestamp="1000", startingOffsetsByTimestampStrategy="LATEST").starting.when_none == "latest"


@pytest.mark.parametrize("options, says", [
    ({"maxTriggerDelay": "soon"}, "option maxTriggerDelay='soon' is not a duration"),
    ({"minOffsetsPerTrigger": "0"}, "option minOffsetsPerTrigger='0' must be a positive whole number"),
    ({"startingOffsetsByTimestampStrategy": "earliest"}, "use one of: error, latest"),
    ({"fetchOffset.numRetries": "-1"}, "option fetchOffset.numRetries='-1' must be a positive whole number"),
])
def test_a_bad_value_is_refused_naming_the_option_and_the_choices(options, says):
    with pytest.raises(ConfigurationError, match=says):
        _options(**options)


@pytest.mark.parametrize("options, says", [
    ({"startingOffsets": '{"t":{"0":-1}}'}, "option startingOffsets gives t-0 latest \\(-1\\)"),
    ({"endingOffsets": '{"t":{"0":-2}}'}, "option endingOffsets gives t-0 earliest \\(-2\\)"),
    ({"startingOffsets": '{"t":{"0":5}}', "endingOffsets": '{"t":{"0":3}}'},
     "startingOffsets is past endingOffsets for t-0: 5 > 3"),
])
def test_a_batch_range_that_reads_nothing_or_runs_backwards_is_refused_as_the_connector_does(options, says):
    with pytest.raises(ConfigurationError, match=says):
        SourceOptions.parse({**BASE, **options}, streaming=False)


def test_min_offsets_above_max_offsets_per_trigger_is_refused():
    with pytest.raises(ConfigurationError, match="minOffsetsPerTrigger=20 is higher than maxOffsetsPerTrigger=15"):
        _options(minOffsetsPerTrigger="20", maxOffsetsPerTrigger="15")


def test_options_with_nothing_to_do_here_are_taken_with_a_line_saying_why(caplog):
    with caplog.at_level("INFO", logger="pyspark_eos.source.options"):
        _options(groupIdPrefix="spark-kafka-source", **{"fetchOffset.numRetries": "5", "fetchOffset.retryIntervalMs": "10"})
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "groupIdPrefix" in said and "fetchOffset.*" in said


def _lookups(found: dict) -> OffsetLookups:
    return OffsetLookups(earliest=lambda ps: {p: 0 for p in ps}, latest=lambda ps: {p: 100 for p in ps},
                         for_timestamps=lambda ts: {p: found.get(p, -1) for p in ts}, committed=lambda g, ps: {})


def test_a_timestamp_after_every_record_fails_or_starts_at_the_end_as_the_strategy_says():
    partitions = [("t", 0), ("t", 1)]
    spec = _options(startingTimestamp="5000").starting
    with pytest.raises(ConfigurationError, match=r"no record at or after the starting timestamp in t-1 \(t-1: 5000\)"):
        resolve_offsets(spec, partitions, _lookups({("t", 0): 7}))
    latest = _options(startingTimestamp="5000", startingOffsetsByTimestampStrategy="latest").starting
    assert resolve_offsets(latest, partitions, _lookups({("t", 0): 7})) == {("t", 0): 7, ("t", 1): 100}


# ---------------------------------------------------------------------- both formats, on the broker

def _topic_of_ten(kafka) -> str:
    name = create_topic(kafka.bootstrap_servers, unique_name("opts"), partitions=2)
    _write(kafka, name, range(10))
    return name


@pytest.fixture
def topic(kafka):
    return _topic_of_ten(kafka)


def _read(spark, kafka, fmt: str, topic: str, **options):
    return spark.read.format(fmt).option("kafka.bootstrap.servers", kafka.bootstrap_servers).option(
        "subscribe", topic).options(**options).load()


def test_a_starting_timestamp_after_every_record_fails_in_both_formats_and_reads_nothing_with_latest(
        spark, kafka, topic):
    future = str(int(time.time() * 1000) + 3_600_000)
    for fmt in FORMATS:
        with pytest.raises(Exception) as failed:
            _read(spark, kafka, fmt, topic, startingTimestamp=future).collect()
        assert "startingOffsetsByTimestampStrategy" in str(failed.value) or "No offset matched" in str(failed.value), \
            (fmt, str(failed.value)[:2000])
    rows = {fmt: _read(spark, kafka, fmt, topic, startingTimestamp=future,
                       startingOffsetsByTimestampStrategy="latest").count() for fmt in FORMATS}
    assert rows == {"kafka": 0, "eos-kafka": 0}


def test_min_offsets_per_trigger_holds_a_batch_back_in_both_formats_until_enough_records(spark, kafka, tmp_path):
    sizes = {fmt: _batches_with_min_offsets(spark, kafka, fmt, _topic_of_ten(kafka), tmp_path / fmt) for fmt in FORMATS}
    # The first trigger reads the 10 records there; 4 more wait; 6 after them make a batch of 10.
    assert sizes["eos-kafka"] == sizes["kafka"] == [10, 10], sizes


def _batches_with_min_offsets(spark, kafka, fmt: str, topic: str, checkpoint) -> list[int]:
    reader = spark.readStream.format(fmt).option("kafka.bootstrap.servers", kafka.bootstrap_servers).option(
        "subscribe", topic).option("startingOffsets", "earliest").option("minOffsetsPerTrigger", "10").option(
        "maxTriggerDelay", "1h")
    reader = reader.option("kafka.group.id", unique_name("g")) if fmt == "eos-kafka" else reader
    query = reader.load().writeStream.format("noop").option("checkpointLocation", str(checkpoint)).start()
    try:
        query.processAllAvailable()
        _write(kafka, topic, range(100, 104))
        query.processAllAvailable()  # 4 new records: Spark's loop finds no batch to run
        _write(kafka, topic, range(104, 110))
        wait_until(lambda: sum(p["numInputRows"] for p in query.recentProgress) >= 20 or not query.isActive, 120,
                   f"{fmt}: the batch of the 10 records written after the first")
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()


def _write(kafka, topic: str, numbers) -> None:
    write_transactions(kafka.bootstrap_servers, topic, [(True, [(n % 2, f"v{n}".encode()) for n in numbers])])


def test_a_batch_write_without_a_mode_is_spark_s_refusal_and_append_writes_as_the_connector(spark, kafka):
    # Spark gives Python data sources append and overwrite only (docs/switching.md): the one
    # difference a connector batch write meets, which .mode("append") removes.
    frame = spark.createDataFrame([(f"k{n}", f"v{n}") for n in range(5)], "key string, value string")
    outputs = {fmt: create_topic(kafka.bootstrap_servers, unique_name(f"{fmt}-out")) for fmt in FORMATS}

    def write(fmt, mode=None):
        writer = frame.write.format(fmt).option("kafka.bootstrap.servers", kafka.bootstrap_servers).option(
            "topic", outputs[fmt])
        (writer.mode(mode) if mode else writer).save()

    write("kafka")
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        write("eos-kafka")
    write("eos-kafka", "append")
    written = {fmt: sorted(r.value for r in read_committed(kafka.bootstrap_servers, topic))
               for fmt, topic in outputs.items()}
    assert written["kafka"] == written["eos-kafka"] == sorted(f"v{n}".encode() for n in range(5))


def test_a_keyed_record_goes_to_the_partition_spark_s_connector_chooses(spark, kafka):
    # The Java producer's murmur2 of the key: a pipeline switched over keeps each key's partition.
    frame = spark.createDataFrame([(f"key-{n}", f"v{n}") for n in range(40)], "key string, value string")
    placed = _placed_by_each_format(spark, kafka, frame)
    assert placed["eos-kafka"] == placed["kafka"] and len({p for _, p in placed["kafka"]}) > 1


def _placed_by_each_format(spark, kafka, frame) -> dict[str, set]:
    """(key, partition) of each record ``frame`` writes through each format, into a topic of 4."""
    placed = {}
    for fmt in FORMATS:
        topic = create_topic(kafka.bootstrap_servers, unique_name(f"{fmt}-placed"), partitions=4)
        frame.write.format(fmt).mode("append").option("kafka.bootstrap.servers", kafka.bootstrap_servers).option(
            "topic", topic).save()
        placed[fmt] = {(r.key, r.partition) for r in read_committed(kafka.bootstrap_servers, topic, partitions=4)}
    return placed


# -------------------------------------------------- cases of Spark's connector suites, both formats

@pytest.mark.parametrize("options", [
    {}, {"subscribe": "t", "subscribePattern": "t.*"}, {"subscribe": "t", "assign": '{"t":[0]}'}, {"subscribe": ""},
    {"subscribePattern": ""}, {"assign": ""}])
def test_a_subscription_the_connector_refuses_is_refused(spark, kafka, options):
    # KafkaRelationSuite / KafkaMicroBatchSourceSuite "bad ... options"; eos-kafka names the options.
    for fmt in FORMATS:
        with pytest.raises(Exception) as refused:
            spark.read.format(fmt).option("kafka.bootstrap.servers", kafka.bootstrap_servers).options(
                **options).load().collect()
        assert fmt == "kafka" or re.search(r"subscribe|assign", str(refused.value)), str(refused.value)[:2000]


def test_offsets_by_timestamp_select_the_same_rows(spark, kafka):
    # KafkaRelationSuite's timestamp cases: values 0-9 at ts1, 10-19 at ts2, 20-29 at ts3.
    from confluent_kafka import Producer

    topic = create_topic(kafka.bootstrap_servers, unique_name("ts"), partitions=3)
    base = int(time.time() * 1000) - 600_000
    stamps = [base, base + 100_000, base + 200_000]
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for n in range(30):
        producer.produce(topic, value=str(n).encode(), partition=n % 3, timestamp=stamps[n // 10])
    assert producer.flush(30) == 0

    def by_timestamp(stamp: int) -> str:
        return json.dumps({topic: {str(p): stamp for p in range(3)}})

    cases = [{"startingOffsetsByTimestamp": by_timestamp(stamps[1]), "endingOffsetsByTimestamp": by_timestamp(stamps[2])},
             {"startingOffsetsByTimestamp": by_timestamp(stamps[1])},
             {"endingOffsetsByTimestamp": by_timestamp(stamps[2])},
             {"startingTimestamp": str(stamps[1]), "endingTimestamp": str(stamps[2])},
             {"startingOffsets": json.dumps({topic: {"0": -2, "1": -2, "2": 3}}),
              "endingOffsetsByTimestamp": by_timestamp(stamps[2])},
             # an end no record reaches reads to the latest offsets; a start by timestamp, an end by offset
             {"startingOffsetsByTimestamp": by_timestamp(stamps[1]), "endingOffsetsByTimestamp": by_timestamp(
                 stamps[2] + 500_000)},
             {"startingOffsetsByTimestamp": by_timestamp(stamps[0]),
              "endingOffsets": json.dumps({topic: {"0": 5, "1": -1, "2": 8}})}]
    for options in cases:
        rows = {fmt: sorted(int(r.value) for r in _read(spark, kafka, fmt, topic, **options).collect())
                for fmt in FORMATS}
        assert rows["eos-kafka"] == rows["kafka"], (options, rows)


@pytest.mark.parametrize("columns, topic_option", [
    ("key string, other string", True), ("key string, value int", True), ("value string, topic int", False),
    ("value string, partition string", True), ("value string, key int", True), ("value string", False)])
def test_a_sink_input_the_connector_refuses_is_refused(spark, kafka, columns, topic_option):
    # KafkaSinkSuite "batch - write to kafka" schema errors: a missing value, a column's wrong type;
    # eos-kafka names the column.
    topic = create_topic(kafka.bootstrap_servers, unique_name("refused"))
    frame = spark.createDataFrame([_row(columns)], columns)
    wrong = {"key string, other string": "value", "value string": "topic"}.get(columns, columns.split(",")[-1].split()[0])
    for fmt in FORMATS:
        writer = frame.write.format(fmt).mode("append").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        with pytest.raises(Exception) as refused:
            (writer.option("topic", topic) if topic_option else writer).save()
        assert fmt == "kafka" or f"'{wrong}'" in str(refused.value), str(refused.value)[:2000]
    assert read_committed(kafka.bootstrap_servers, topic, timeout=5) == []


def test_the_topic_option_wins_over_a_topic_column_of_any_type(spark, kafka):
    topic = create_topic(kafka.bootstrap_servers, unique_name("option-wins"))
    frame = spark.createDataFrame([("v", 7)], "value string, topic int")
    for fmt in FORMATS:
        frame.write.format(fmt).mode("append").option("kafka.bootstrap.servers", kafka.bootstrap_servers).option(
            "topic", topic).save()
    assert [r.value for r in read_committed(kafka.bootstrap_servers, topic)] == [b"v", b"v"]


def _row(columns: str) -> tuple:
    return tuple(1 if kind.strip().endswith("int") else "x" for kind in columns.split(","))


def test_committed_and_aborted_transactions_read_the_same(spark, kafka):
    # KafkaRelationSuite "read_committed" (the connector with kafka.isolation.level=read_committed).
    topic = create_topic(kafka.bootstrap_servers, unique_name("txn"), partitions=2)
    write_transactions(kafka.bootstrap_servers, topic, [(n % 3 != 1, [(n % 2, f"t{n}".encode())]) for n in range(9)])
    rows = {fmt: sorted(r.value for r in _read(spark, kafka, fmt, topic, startingOffsets="earliest", **(
        {"kafka.isolation.level": "read_committed"} if fmt == "kafka" else {})).collect()) for fmt in FORMATS}
    assert rows["eos-kafka"] == rows["kafka"] == sorted(f"t{n}".encode() for n in range(9) if n % 3 != 1)


def test_explicit_offsets_and_headers_read_the_same(spark, kafka):
    # KafkaRelationSuite "explicit offsets" and "... with headers": -2/-1 per partition, an end
    # inside a partition, headers in order with a repeated key, a null value and none at all.
    from confluent_kafka import Producer

    topic = create_topic(kafka.bootstrap_servers, unique_name("explicit"), partitions=3)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for n in range(21):
        headers = [("a", b"1"), ("b", None), ("a", b"2")] if n % 2 else None
        producer.produce(topic, value=str(n).encode(), partition=0 if n < 10 else 1 if n < 20 else 2, headers=headers)
    assert producer.flush(30) == 0
    options = {"startingOffsets": json.dumps({topic: {"0": -2, "1": -2, "2": 0}}),
               "endingOffsets": json.dumps({topic: {"0": -1, "1": -1, "2": 1}}), "includeHeaders": "true"}
    rows = {fmt: sorted((r.value, r.partition, r.offset, tuple((h.key, h.value) for h in r.headers or ()))
                        for r in _read(spark, kafka, fmt, topic, **options).collect()) for fmt in FORMATS}
    assert rows["eos-kafka"] == rows["kafka"] and len(rows["kafka"]) == 21
    types = {fmt: _read(spark, kafka, fmt, topic, **options).schema["headers"].dataType.simpleString() for fmt in FORMATS}
    assert types["eos-kafka"] == types["kafka"], types


@pytest.mark.parametrize("mode", ["overwrite", "ignore"])
def test_a_save_mode_the_connector_refuses_is_refused_and_writes_nothing(spark, kafka, mode):
    # KafkaSinkSuite "batch - unsupported save modes": a Kafka topic is only appended to.
    topic = create_topic(kafka.bootstrap_servers, unique_name(f"mode-{mode}"))
    frame = spark.createDataFrame([("v",)], "value string")
    for fmt in FORMATS:
        with pytest.raises(Exception, match=r"(?i)overwrite|ignore|save mode"):
            frame.write.format(fmt).mode(mode).option("kafka.bootstrap.servers", kafka.bootstrap_servers).option(
                "topic", topic).save()
    assert read_committed(kafka.bootstrap_servers, topic, timeout=5) == []


def test_a_null_topic_without_the_topic_option_is_refused_and_writes_nothing(spark, kafka):
    # KafkaSinkSuite "batch - null topic field value, and no topic option".
    topic = create_topic(kafka.bootstrap_servers, unique_name("null-topic"))
    frame = spark.createDataFrame([("a", topic), ("b", None)], "value string, topic string").coalesce(1)
    for fmt in FORMATS:
        with pytest.raises(Exception, match=r"(?i)null.{0,2}topic|topic.*null|NULL_TOPIC"):
            frame.write.format(fmt).mode("append").option("kafka.bootstrap.servers", kafka.bootstrap_servers).save()
    # The connector wrote the row before the null one (at least once); eos-kafka's transaction aborted.
    assert [r.value for r in read_committed(kafka.bootstrap_servers, topic, timeout=5)] in ([], [b"a"])


def test_a_null_partition_is_ignored_and_the_key_chooses_as_in_the_connector(spark, kafka):
    # KafkaSinkSuite "batch - partition column and partitioner priorities": a null partition value.
    frame = spark.createDataFrame([(f"key-{n}", f"v{n}", None if n % 3 else 1) for n in range(30)],
                                  "key string, value string, partition int")
    placed = _placed_by_each_format(spark, kafka, frame)
    assert placed["eos-kafka"] == placed["kafka"] and len(placed["kafka"]) == 30
    assert len({p for _, p in placed["kafka"]}) > 2  # the null ones spread by their keys


def test_null_keys_and_values_are_written_and_read_as_the_connector_does(spark, kafka):
    # KafkaMicroBatchSourceSuite "SPARK-27494: read kafka record containing null key/values", and
    # the same records written through each sink.
    frame = spark.createDataFrame([(None, "v1"), ("k2", None), (None, None), ("k4", "v4")], "key string, value string")
    written = {}
    for fmt in FORMATS:
        topic = create_topic(kafka.bootstrap_servers, unique_name(f"{fmt}-nulls"))
        frame.write.format(fmt).mode("append").option("kafka.bootstrap.servers", kafka.bootstrap_servers).option(
            "topic", topic).save()
        written[fmt] = topic
    expected = sorted([(None, b"v1"), (b"k2", None), (None, None), (b"k4", b"v4")], key=repr)
    for topic in written.values():
        assert sorted(((r.key, r.value) for r in read_committed(kafka.bootstrap_servers, topic)), key=repr) == expected
        rows = {fmt: sorted(((r.key, r.value) for r in _read(spark, kafka, fmt, topic).collect()), key=repr)
                for fmt in FORMATS}
        assert rows["eos-kafka"] == rows["kafka"] == [(k and bytearray(k), v and bytearray(v)) for k, v in expected]


def test_offsets_in_any_case_of_their_option_name_and_value_read_the_same(spark, kafka, topic):
    # KafkaMicroBatchSourceSuite "get offsets from case insensitive parameters".
    for options in ({"startingOffsets": "earLiEst", "endingOffsets": "laTest"},
                    {"STARTINGOFFSETS": "EARLIEST", "EndingOffsets": json.dumps({topic: {"0": 4, "1": -1}})}):
        rows = {fmt: sorted(r.value for r in _read(spark, kafka, fmt, topic, **options).collect()) for fmt in FORMATS}
        assert rows["eos-kafka"] == rows["kafka"] and rows["kafka"], (options, rows)


@pytest.mark.parametrize("offsets", [
    {"startingOffsets": "latest"}, {"endingOffsets": "earliest"},
    {"startingOffsets": "latest", "endingOffsets": "earliest"}])
def test_batch_offsets_the_connector_refuses_are_refused_naming_the_option(spark, kafka, topic, offsets):
    # KafkaRelationSuite "bad batch query options".
    for fmt in FORMATS:
        with pytest.raises(Exception) as refused:
            _read(spark, kafka, fmt, topic, **offsets).collect()
        # The connector says "starting offset can't be latest ...", eos-kafka names startingOffsets.
        named = [re.search(rf"(?i){name[:-7]}.?offset", str(refused.value)) for name in offsets]
        assert any(named), (fmt, str(refused.value)[:2000])


# KafkaMicroBatchSourceSuite's "assign / subscribing topic by name / by pattern from latest,
# earliest, specific offsets, timestamp" cases: a stream's first start, and its restart from its
# checkpoint after more records came (one subscription kind a start, each kind used).
STREAM_STARTS = {  # the subscription, the start, the records a first run reads
    "earliest-assign": ("assign", lambda topic, stamp: {"startingOffsets": "earliest"}, 18),
    "latest-subscribe": ("subscribe", lambda topic, stamp: {"startingOffsets": "latest"}, 0),
    "specific-pattern": ("subscribePattern", lambda topic, stamp: {
        "startingOffsets": json.dumps({topic: {"0": -2, "1": 2, "2": -1}})}, 6 + 4),
    "timestamps-assign": ("assign", lambda topic, stamp: {
        "startingOffsetsByTimestamp": json.dumps({topic: {str(p): stamp for p in range(3)}})}, 9),
    "timestamp-pattern": ("subscribePattern", lambda topic, stamp: {"startingTimestamp": str(stamp)}, 9),
}


@pytest.mark.parametrize("case", list(STREAM_STARTS))
def test_a_stream_starts_where_the_connector_starts_and_goes_on_from_its_checkpoint(spark, kafka, tmp_path, case):
    from confluent_kafka import Producer

    kind, starting, first_run = STREAM_STARTS[case]
    topic = create_topic(kafka.bootstrap_servers, unique_name("starts"), partitions=3)
    earlier = int(time.time() * 1000) - 300_000
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for n in range(18):  # a0..a8 at one time, b0..b8 a hundred seconds later, three a partition each
        producer.produce(topic, value=f"{'ab'[n // 9]}{n % 9}".encode(), partition=n % 3,
                         timestamp=earlier + 100_000 * (n // 9))
    assert producer.flush(30) == 0
    subscription = {"assign": json.dumps({topic: [0, 1, 2]}), "subscribe": topic, "subscribePattern": topic}[kind]
    options = {kind: subscription, **starting(topic, earlier + 100_000)}
    def run(fmt: str) -> list[bytes]:
        batches = _batch_values(spark, kafka, fmt, lambda reader: reader.options(**options).load(), tmp_path / fmt)
        return sorted(value for batch in batches for value in batch)

    runs = {fmt: [run(fmt)] for fmt in FORMATS}
    _write(kafka, topic, range(6))  # v0..v5, after the first runs
    for fmt in FORMATS:
        runs[fmt].append(run(fmt))
    assert runs["eos-kafka"] == runs["kafka"], runs
    assert len(runs["kafka"][0]) == first_run, runs
    assert runs["kafka"][1] == sorted(f"v{n}".encode() for n in range(6)), runs  # the restart goes on


def test_max_offsets_per_trigger_splits_a_backlog_over_partitions_as_the_connector(spark, kafka, tmp_path):
    # KafkaMicroBatchSourceSuite "maxOffsetsPerTrigger": 101, 11 and 1 records in three partitions,
    # 10 a batch; each batch's records per partition.
    topic = create_topic(kafka.bootstrap_servers, unique_name("limit"), partitions=3)
    write_transactions(kafka.bootstrap_servers, topic,
                       [(True, [(p, f"{p}-{n}".encode()) for n in range(count)]) for p, count in ((0, 101), (1, 11),
                                                                                                (2, 1))])
    batches = {}
    for fmt in FORMATS:
        split: list[list[int]] = []
        query = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", kafka.bootstrap_servers)
                 .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "10")
                 .load().writeStream.foreachBatch(lambda frame, _: split.append(sorted(
                     r.partition for r in frame.select("partition").collect())))
                 .option("checkpointLocation", str(tmp_path / fmt)).trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None, (fmt, query.exception())
        batches[fmt] = [[s.count(p) for p in range(3)] for s in split if s]
    assert batches["eos-kafka"] == batches["kafka"], batches  # [8, 1, 1], then [8, 1, 0] ... on 4.2's connector
    assert sum(map(sum, batches["kafka"])) == 113 and batches["kafka"][0] == [8, 1, 1]


def test_a_stream_reads_committed_records_only_and_waits_for_an_open_transaction_as_the_connector(
        spark, kafka, tmp_path):
    # KafkaMicroBatchSourceSuite "read Kafka transactional messages: read_committed", 3 offsets a
    # batch: a committed, an aborted and a committed transaction, then one left open, read up to it;
    # once it commits, a restart reads it.
    topic = create_topic(kafka.bootstrap_servers, unique_name("stream-txn"))
    write_transactions(kafka.bootstrap_servers, topic, [(True, [(0, f"c{n}".encode()) for n in range(5)]),
                                                        (False, [(0, f"x{n}".encode()) for n in range(5)]),
                                                        (True, [(0, f"d{n}".encode()) for n in range(3)])])
    open_one = transactional_producer(kafka.bootstrap_servers, unique_name("open"))
    open_one.begin_transaction()
    for n in range(3):
        open_one.produce(topic, value=f"o{n}".encode(), partition=0)
    open_one.flush(30)
    def run(fmt: str) -> list[list[bytes]]:  # 3 offsets a batch; a batch's values sort as their offsets do
        isolation = {"kafka.isolation.level": "read_committed"} if fmt == "kafka" else {}
        options = {"subscribe": topic, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "3", **isolation}
        return _batch_values(spark, kafka, fmt, lambda reader: reader.options(**options).load(), tmp_path / fmt)

    batches = {fmt: [run(fmt)] for fmt in FORMATS}
    open_one.commit_transaction(30)
    for fmt in FORMATS:
        batches[fmt].append(run(fmt))
    assert batches["eos-kafka"] == batches["kafka"], batches
    assert [value for run in batches["kafka"] for batch in run for value in batch] == \
        [f"c{n}".encode() for n in range(5)] + [f"d{n}".encode() for n in range(3)] + [f"o{n}".encode() for n in range(3)]


@pytest.mark.parametrize("options, named", [
    ({"minPartitions": "a"}, "minPartitions"), ({"minPartitions": "1.0"}, "minPartitions"),
    ({"minPartitions": "-1"}, "minPartitions"), ({"kafka.value.deserializer": "x"}, "value.deserializer"),
    ({"kafka.key.deserializer": "x"}, "key.deserializer"), ({"kafka.auto.offset.reset": "none"}, "auto.offset.reset"),
    ({"kafka.auto.offset.reset": "latest"}, "auto.offset.reset"), ({"kafka.enable.auto.commit": "true"},
                                                                   "enable.auto.commit")])
def test_a_source_option_the_connector_refuses_is_refused_naming_it(spark, kafka, topic, options, named):
    # KafkaMicroBatchSourceSuite "unsupported kafka configs", KafkaRelationSuite "bad batch query
    # options" (minPartitions). Both refuse; eos-kafka names the option (the connector's number
    # parsing says 'For input string: "a"').
    for fmt in FORMATS:
        with pytest.raises(Exception) as refused:
            _read(spark, kafka, fmt, topic, **options).collect()
        assert fmt == "kafka" or named.lower() in str(refused.value).lower(), str(refused.value)[:2000]


@pytest.mark.parametrize("option", ["kafka.key.serializer", "kafka.value.serializer"])
def test_a_sink_serializer_is_refused_naming_it_and_writes_nothing(spark, kafka, option):
    # KafkaSinkSuite "generic - write data with unsupported kafka configs".
    topic = create_topic(kafka.bootstrap_servers, unique_name("serializer"))
    frame = spark.createDataFrame([("v",)], "value string")
    for fmt in FORMATS:
        with pytest.raises(Exception) as refused:
            frame.write.format(fmt).mode("append").option("kafka.bootstrap.servers", kafka.bootstrap_servers).option(
                "topic", topic).option(option, "x").save()
        assert option[len("kafka."):] in str(refused.value), (fmt, str(refused.value)[:2000])
    assert read_committed(kafka.bootstrap_servers, topic, timeout=5) == []


def test_a_batch_read_ends_at_the_latest_offsets_when_planned_and_never_reads_an_open_transaction(spark, kafka):
    # KafkaRelationSuite "explicit earliest to latest offsets" and "read_committed" with a
    # transaction left open. The connector's DataFrame, collected again, reads what was written
    # since; Spark plans a Python data source's partitions once per DataFrame, so eos-kafka's reads
    # to the offsets of its first run, and a DataFrame loaded again reads on (docs/switching.md).
    topic = _topic_of_ten(kafka)

    def frame(fmt: str):
        return _read(spark, kafka, fmt, topic, **({"kafka.isolation.level": "read_committed"} if fmt == "kafka" else {}))

    def counts(frames: dict) -> dict[str, int]:
        return {fmt: f.count() for fmt, f in frames.items()}

    kept = {fmt: frame(fmt) for fmt in FORMATS}
    assert counts(kept) == {"kafka": 10, "eos-kafka": 10}
    _write(kafka, topic, range(10, 13))
    assert counts(kept) == {"kafka": 13, "eos-kafka": 10}
    left_open = transactional_producer(kafka.bootstrap_servers)
    left_open.begin_transaction()
    left_open.produce(topic, value=b"open", partition=0)
    left_open.flush(30)
    assert counts({fmt: frame(fmt) for fmt in FORMATS}) == {"kafka": 13, "eos-kafka": 13}
    left_open.commit_transaction(30)
    assert counts({fmt: frame(fmt) for fmt in FORMATS}) == {"kafka": 14, "eos-kafka": 14}


def test_a_failed_batch_replayed_after_partitions_were_added_reads_each_record_once_as_the_connector(
        spark, kafka, tmp_path):
    # KafkaMicroBatchSourceSuite "SPARK-53560: no crash looping during uncommitted batch retry in
    # AvailableNow": a batch fails in a UDF, the topic gets another partition, the query restarts
    # from its checkpoint: the planned batch runs again as planned, the new partition after it.
    from confluent_kafka.admin import AdminClient, NewPartitions
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import functions as F

    failing = tmp_path / "fail"

    def checked(value: bytes) -> bytes:
        if failing.exists():
            raise RuntimeError("the batch fails in a UDF")
        return value

    check = F.udf(checked, "binary")
    read = {}
    for fmt in FORMATS:
        topic = _topic_of_ten(kafka)
        failing.touch()
        values: list[bytes] = []

        def run():
            query = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", kafka.bootstrap_servers)
                     .option("subscribe", topic).option("startingOffsets", "earliest").load()
                     .select(check("value").alias("value")).writeStream
                     .foreachBatch(lambda frame, _: values.extend(bytes(r.value) for r in frame.collect()))
                     .option("checkpointLocation", str(tmp_path / fmt)).trigger(availableNow=True).start())
            try:
                query.awaitTermination(120)
            except StreamingQueryException as failed:
                return failed
            return query.exception()

        assert run() is not None, fmt
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})  # kept until its answer
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
        write_transactions(kafka.bootstrap_servers, topic, [(True, [(2, b"new")])])
        failing.unlink()
        second = run()
        assert second is None, (fmt, str(second)[-1500:])
        read[fmt] = sorted(values)
    assert read["eos-kafka"] == read["kafka"] == sorted([f"v{n}".encode() for n in range(10)] + [b"new"]), read


def test_a_stream_writes_to_the_topic_its_rows_name_and_fails_on_a_topic_that_does_not_exist(spark, kafka, tmp_path):
    # KafkaSinkSuite "streaming - write to kafka with topic field" and "streaming - write to
    # non-existing topic" (the broker creates no topic on its own here).
    source = _topic_of_ten(kafka)
    # Java-only for eos-kafka (taken with a log line); the connector's producer waits this long for a topic.
    sink = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "kafka.max.block.ms": "5000"}

    def write(fmt: str, topic: str, checkpoint) -> Exception | None:
        from pyspark.errors import StreamingQueryException

        query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
                 .option("subscribe", source).option("startingOffsets", "earliest")
                 .option("kafka.isolation.level", "read_committed").load()
                 .selectExpr("value", f"'{topic}' AS topic").writeStream.format(fmt).options(**sink)
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        try:
            query.awaitTermination(120)
        except StreamingQueryException as failed:
            return failed
        return query.exception()

    for fmt in FORMATS:
        output = create_topic(kafka.bootstrap_servers, unique_name(f"{fmt}-column"), partitions=2)
        assert write(fmt, output, tmp_path / f"{fmt}-written") is None, fmt
        assert sorted(r.value for r in read_committed(kafka.bootstrap_servers, output, partitions=2)) == \
            sorted(f"v{n}".encode() for n in range(10)), fmt
        assert write(fmt, unique_name("missing"), tmp_path / f"{fmt}-missing") is not None, fmt


@pytest.mark.parametrize("option", ["endingOffsets", "endingOffsetsByTimestamp"])
def test_an_end_given_to_a_stream_is_refused_naming_it(spark, kafka, topic, tmp_path, option):
    # KafkaMicroBatchSourceSuite "bad source options": a stream has no end (the connector refuses
    # at load(), eos-kafka when the query plans: docs/switching.md).
    value = "latest" if option == "endingOffsets" else json.dumps({topic: {"0": 0, "1": 0}})
    for fmt in FORMATS:
        with pytest.raises(Exception) as refused:
            query = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", kafka.bootstrap_servers)
                     .option("subscribe", topic).option(option, value).load().writeStream.format("noop")
                     .option("checkpointLocation", str(tmp_path / fmt)).trigger(availableNow=True).start())
            query.awaitTermination(120)
        # The connector: "ending offset (timestamp) not valid in streaming queries".
        assert re.search(r"(?i)ending.?(offset|timestamp)", str(refused.value)), (fmt, str(refused.value)[:2000])


def test_a_record_timestamp_in_nanoseconds_fails_both_formats_naming_the_record(spark, kafka):
    # KafkaMicroBatchSourceSuite "SPARK-56243: malformed record timestamp throws detailed error": a
    # producer's nanoseconds where Kafka keeps milliseconds overflow Spark's microseconds.
    from confluent_kafka import Producer

    nanos = 1712345678123456789
    topic = create_topic(kafka.bootstrap_servers, unique_name("nanos"),
                         config={"message.timestamp.after.max.ms": str(2 ** 63 - 1)})
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    producer.produce(topic, value=b"then", timestamp=int(time.time() * 1000))
    producer.produce(topic, value=b"nanos", timestamp=nanos)
    assert producer.flush(30) == 0
    for fmt in FORMATS:
        with pytest.raises(Exception) as failed:
            _read(spark, kafka, fmt, topic, startingOffsets="earliest").collect()
        assert fmt == "kafka" or re.search(rf"MalformedRecordError: {topic}-0 offset 1: timestamp {nanos} ",
                                           str(failed.value)), str(failed.value)[:3000]
    # What the message offers instead: the columns without the timestamp read the record.
    rows = (spark.read.format("eos-kafka").schema("key binary, value binary")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers).option("subscribe", topic).load().collect())
    assert sorted(bytes(r.value) for r in rows) == [b"nanos", b"then"]


def _deleted(kafka, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.delete_topics([topic])[topic].result(30)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, 60, f"{topic} to be gone")


def _recreated(kafka, topic: str, values: list[bytes]) -> None:
    """``topic`` deleted, created again with one partition, and ``values`` written to it."""
    _deleted(kafka, topic)
    create_topic(kafka.bootstrap_servers, topic)
    write_transactions(kafka.bootstrap_servers, topic, [(True, [(0, value) for value in values])])


def _pattern_runs(spark, kafka, fmt: str, prefix: str, checkpoint, between, **options) -> list:
    """Two Trigger.AvailableNow runs of a stream over ``prefix-.*`` with ``between`` done between
    them: each run's values, or the second run's error."""
    values: list = [[], []]
    for run in range(2):
        query = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", kafka.bootstrap_servers)
                 .option("subscribePattern", f"{prefix}-.*").option("startingOffsets", "earliest").options(**options)
                 .load().writeStream.foreachBatch(lambda frame, _, run=run: values[run].extend(
                     bytes(r.value) for r in frame.select("value").collect()))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        try:
            query.awaitTermination(180)
        except Exception:  # the query's exception, returned below
            pass
        finally:
            active = query.isActive
            query.stop()
        assert not active, fmt
        if query.exception() is not None:
            return [sorted(values[0]), query.exception()]
        if run == 0:
            between()
    return [sorted(run) for run in values]


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_topic_recreated_between_runs_of_a_pattern_stream_fails_or_is_read_again_as_the_connector(
        spark, kafka, tmp_path, fail_on_data_loss):
    # KafkaMicroBatchSourceSuite "subscribe topic by pattern with topic recreation between
    # batches": the recreated topic's offsets went back; failOnDataLoss decides.
    runs = {}
    for fmt in FORMATS:
        prefix = unique_name("recreated")
        good, bad = (create_topic(kafka.bootstrap_servers, f"{prefix}-{name}") for name in ("good", "bad"))
        write_transactions(kafka.bootstrap_servers, good, [(True, [(0, b"1"), (0, b"3")])])
        write_transactions(kafka.bootstrap_servers, bad, [(True, [(0, b"2"), (0, b"4")])])
        runs[fmt] = _pattern_runs(spark, kafka, fmt, prefix, tmp_path / fmt, lambda: _recreated(kafka, bad, [b"6"]),
                                  failOnDataLoss=fail_on_data_loss)
    assert runs["kafka"][0] == runs["eos-kafka"][0] == [b"1", b"2", b"3", b"4"], runs
    if fail_on_data_loss == "true":
        # 2 and 1 there, 3 and 2 here: a transaction's marker takes an offset.
        assert re.search(r"bad-0 offset was changed from 3 to 2", str(runs["kafka"][1])), runs
        assert re.search(r"DataLossError: .*-bad-0: the batch ends at offset 2 before it starts at 3",
                         str(runs["eos-kafka"][1])), str(runs["eos-kafka"][1])[:3000]
    else:
        # The recreated topic's record is below the offset the checkpoint holds: both go on past it.
        assert runs["eos-kafka"][1] == runs["kafka"][1] == [], runs


def test_a_pattern_stream_goes_on_when_its_topic_is_deleted_and_reads_a_new_matching_topic_as_the_connector(
        spark, kafka, tmp_path):
    # KafkaMicroBatchSourceSuite "subscribing topic by pattern with topic deletions" and
    # "SPARK-41375: empty partitions should not record to latest offset" (failOnDataLoss=false).
    runs = {}
    for fmt in FORMATS:
        prefix = unique_name("deleted")
        seems = create_topic(kafka.bootstrap_servers, f"{prefix}-seems", partitions=5)
        write_transactions(kafka.bootstrap_servers, seems, [(True, [(n % 5, f"{n}".encode()) for n in (1, 2, 3)])])

        def replaced(seems=seems, prefix=prefix):
            _deleted(kafka, seems)
            bad = create_topic(kafka.bootstrap_servers, f"{prefix}-bad", partitions=5)
            write_transactions(kafka.bootstrap_servers, bad, [(True, [(n % 5, f"{n}".encode()) for n in (4, 5, 6)])])

        runs[fmt] = _pattern_runs(spark, kafka, fmt, prefix, tmp_path / fmt, replaced, failOnDataLoss="false")
        offsets = [path for path in (tmp_path / fmt / "offsets").iterdir() if path.name.isdigit()]
        assert all("{}" not in path.read_text().splitlines() for path in offsets), (fmt, offsets)
    assert runs["eos-kafka"] == runs["kafka"] == [[b"1", b"2", b"3"], [b"4", b"5", b"6"]], runs


def _batch_values(spark, kafka, fmt: str, frame_of, checkpoint, trigger: dict | None = None) -> list[list[bytes]]:
    """The values of each non-empty batch (sorted) of one run of ``frame_of(reader)`` to its end, under
    ``trigger`` (Trigger.AvailableNow by default), from ``checkpoint``."""
    batches: list[list[bytes]] = []
    reader = spark.readStream.format(fmt).option("kafka.bootstrap.servers", kafka.bootstrap_servers)
    query = (frame_of(reader).writeStream.foreachBatch(lambda frame, _: batches.append(
        sorted(bytes(r.value) for r in frame.select("value").collect())))
             .option("checkpointLocation", str(checkpoint)).trigger(**(trigger or {"availableNow": True})).start())
    try:
        query.awaitTermination(180)
        assert not query.isActive and query.exception() is None, (fmt, query.exception())
    finally:
        query.stop()
    return [batch for batch in batches if batch]


def test_a_union_of_rate_limited_streams_limits_each_and_goes_on_from_its_checkpoint_as_the_connector(
        spark, kafka, tmp_path):
    # KafkaMicroBatchSourceSuite "SPARK-22956: currentPartitionOffsets should be set when no new
    # data comes in": each source of a union takes its own maxOffsetsPerTrigger, and one that has
    # run dry keeps its offsets for the restart.
    small, big = (create_topic(kafka.bootstrap_servers, unique_name(name)) for name in ("small", "big"))
    write_transactions(kafka.bootstrap_servers, small, [(True, [(0, b"%d" % n) for n in range(10)])])
    write_transactions(kafka.bootstrap_servers, big, [(True, [(0, b"%d" % n) for n in range(100, 120)])])

    def union(reader):
        limited = [reader.option("subscribe", topic).option("startingOffsets", "earliest")
                   .option("maxOffsetsPerTrigger", "5").load().select("value") for topic in (small, big)]
        return limited[0].union(limited[1])

    runs = {fmt: [_batch_values(spark, kafka, fmt, union, tmp_path / fmt, {"availableNow": True})] for fmt in FORMATS}
    write_transactions(kafka.bootstrap_servers, big, [(True, [(0, b"%d" % n) for n in range(120, 125)])])
    for fmt in FORMATS:
        runs[fmt].append(_batch_values(spark, kafka, fmt, union, tmp_path / fmt, {"availableNow": True}))
    assert runs["eos-kafka"] == runs["kafka"], runs
    first = runs["kafka"][0]
    assert first[:2] == [sorted(b"%d" % n for n in [*range(0, 5), *range(100, 105)]),
                         sorted(b"%d" % n for n in [*range(5, 10), *range(105, 110)])], runs
    assert runs["kafka"][1] == [[b"%d" % n for n in range(120, 125)]], runs  # nothing twice after the restart


def test_trigger_once_reads_everything_whatever_the_read_limits_as_the_connector(spark, kafka, tmp_path):
    # KafkaMicroBatchSourceSuite "maxOffsetsPerTrigger", "minOffsetsPerTrigger" and
    # "compositeReadLimit": a Trigger.Once run is one batch of all there is (PySpark 4.2 and later
    # give Python sources read limits; docs/switching.md names 4.0/4.1's difference).
    topic = create_topic(kafka.bootstrap_servers, unique_name("once"), partitions=3)
    write_transactions(kafka.bootstrap_servers, topic,
                       [(True, [(p, f"{p}-{n}".encode()) for n in range(count)]) for p, count in ((0, 101), (1, 11),
                                                                                                (2, 1))])

    def limited(reader):
        return (reader.option("subscribe", topic).option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", "10").option("minOffsetsPerTrigger", "5")
                .option("maxTriggerDelay", "1h").load())

    batches = {fmt: _batch_values(spark, kafka, fmt, limited, tmp_path / fmt, {"once": True}) for fmt in FORMATS}
    assert batches["eos-kafka"] == batches["kafka"], batches
    assert [len(batch) for batch in batches["kafka"]] == [113], batches


def test_a_batch_short_of_min_offsets_runs_once_max_trigger_delay_has_passed_as_the_connector(
        spark, kafka, tmp_path):
    # KafkaMicroBatchSourceSuite "minOffsetsPerTrigger" (its real-clock part): 16 records make the
    # first batch, 10 more (fewer than 15) wait until maxTriggerDelay has passed since it.
    timings = {}
    for fmt in FORMATS:
        topic = create_topic(kafka.bootstrap_servers, unique_name("delay"), partitions=2)
        _write(kafka, topic, range(16))
        reader = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", kafka.bootstrap_servers)
                  .option("subscribe", topic).option("startingOffsets", "earliest")
                  .option("minOffsetsPerTrigger", "15").option("maxTriggerDelay", "10s"))
        query = (reader.load().writeStream.format("noop").option("checkpointLocation", str(tmp_path / fmt))
                 .trigger(processingTime="100 milliseconds").start())
        try:
            wait_until(lambda: any(p["numInputRows"] for p in query.recentProgress) or not query.isActive, 120,
                       f"{fmt}: the first batch")
            _write(kafka, topic, range(100, 110))
            written = time.time()
            wait_until(lambda: sum(p["numInputRows"] for p in query.recentProgress) >= 26 or not query.isActive, 120,
                       f"{fmt}: the batch of 10 records after maxTriggerDelay")
            ran = [p for p in query.recentProgress if p["numInputRows"]]
        finally:
            query.stop()
        assert [p["numInputRows"] for p in ran] == [16, 10], (fmt, ran)
        first, second = (_seconds(p["timestamp"]) for p in ran)
        timings[fmt] = {"written after the first": written - first, "second after the first": second - first}
    # The 10 records were there seconds before the delay ran out, and their batch waited for it.
    assert all(t["written after the first"] < 7 and t["second after the first"] >= 9.5 for t in timings.values()), \
        timings


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_a_topic_stamped_at_log_append_time_reads_the_brokers_time_and_type_as_the_connector(spark, kafka):
    # KafkaSourceSuiteBase "Kafka column types" checks CreateTime (0); the other type, 1, is the
    # broker's append time, whatever time the producer set.
    from confluent_kafka import Producer

    topic = create_topic(kafka.bootstrap_servers, unique_name("appended"),
                         config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    producer.produce(topic, value=b"old", timestamp=before - 86_400_000)
    assert producer.flush(30) == 0
    read = {fmt: _read(spark, kafka, fmt, topic).selectExpr("CAST(timestamp AS DOUBLE) * 1000 AS ms", "timestampType")
            .collect() for fmt in FORMATS}
    assert read["eos-kafka"] == read["kafka"], read
    [(ms, kind)] = read["kafka"]
    assert kind == 1 and ms >= before - 1000, read  # the broker's clock, not the producer's day-old time


@pytest.mark.parametrize("options, tasks", [({"minPartitions": "6"}, 6), ({"maxRecordsPerPartition": "3"}, 9),
                                            ({"minPartitions": "12", "maxRecordsPerPartition": "5"}, 12)])
def test_a_partition_split_over_tasks_reads_the_same_rows_in_as_many_tasks_as_the_connector(
        spark, kafka, options, tasks):
    # KafkaRelationSuite and KafkaMicroBatchSourceSuite "SPARK-30656: minPartitions": 21 records in
    # 3 partitions (offsets 0-7 each, with the commit marker), read without kafka.group.id: each
    # piece's write commits its own progress (source/range_splitting). The offsets are given as
    # numbers: the connector's spark.read does not apply maxRecordsPerPartition to earliest and
    # latest, which it has not looked up when it decides (docs/switching.md).
    topic = _twenty_one_records(kafka, "min-partitions")
    span = {side: json.dumps({topic: {str(p): offset for p in range(3)}}) for side, offset in (("start", 0), ("end", 8))}
    frames = {fmt: _read(spark, kafka, fmt, topic, startingOffsets=span["start"], endingOffsets=span["end"], **options)
              for fmt in FORMATS}
    rows = {fmt: sorted(bytes(r.value) for r in frame.select("value").collect()) for fmt, frame in frames.items()}
    assert rows["eos-kafka"] == rows["kafka"] == TWENTY_ONE, rows
    counts = {fmt: frame.rdd.getNumPartitions() for fmt, frame in frames.items()}
    assert counts == {"kafka": tasks, "eos-kafka": tasks}, counts


def test_a_stream_splits_each_batch_into_as_many_tasks_with_the_same_rows_as_the_connector(spark, kafka, tmp_path):
    # KafkaMicroBatchSourceSuite "minPartitions is supported" and maxRecordsPerPartition: a stream's
    # batches of 60 offsets over two partitions in pieces of at most 10, each batch's Spark
    # partitions and records compared.
    topic = create_topic(kafka.bootstrap_servers, unique_name("split-stream"), partitions=2)
    write_transactions(kafka.bootstrap_servers, topic, [(True, [(n % 2, b"%d" % n) for n in range(90)])])
    batches = {}
    for fmt in FORMATS:
        seen: list[tuple[int, list[bytes]]] = []
        query = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", kafka.bootstrap_servers)
                 .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "60")
                 .option("maxRecordsPerPartition", "10").load().writeStream
                 .foreachBatch(lambda frame, _: seen.append((frame.rdd.getNumPartitions(), sorted(
                     bytes(r.value) for r in frame.select("value").collect()))))
                 .option("checkpointLocation", str(tmp_path / fmt)).trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None, (fmt, query.exception())
        batches[fmt] = [batch for batch in seen if batch[1]]
    assert batches["eos-kafka"] == batches["kafka"], batches
    assert [tasks for tasks, _ in batches["kafka"]] == [6, 4], batches  # 30 offsets of each, then 16


def test_min_partitions_with_a_group_reads_the_same_rows_in_a_task_per_partition(spark, kafka):
    # With kafka.group.id a task commits its partitions' offsets: eos-kafka does not split.
    topic = _twenty_one_records(kafka, "min-partitions-group")
    frame = _read(spark, kafka, "eos-kafka", topic, minPartitions="6", **{"kafka.group.id": unique_name("g")})
    assert sorted(bytes(r.value) for r in frame.select("value").collect()) == TWENTY_ONE
    assert frame.rdd.getNumPartitions() == 3


TWENTY_ONE = sorted(b"%d" % n for n in range(21))


def _twenty_one_records(kafka, name: str) -> str:
    """A topic of 3 partitions holding 0..20 as values, in one transaction: offsets 0-7 each."""
    topic = create_topic(kafka.bootstrap_servers, unique_name(name), partitions=3)
    write_transactions(kafka.bootstrap_servers, topic, [(True, [(n % 3, b"%d" % n) for n in range(21)])])
    return topic
