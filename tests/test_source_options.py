"""Source options: Spark's names, one parse, errors that name the option and the fix."""
from __future__ import annotations

import pytest

from pyspark_eos.errors import ConfigurationError
from pyspark_eos.source.options import SourceOptions

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "in"}


def parse(streaming=True, **options):
    return SourceOptions.parse({**BASE, **options}, streaming=streaming)


def test_defaults_follow_sparks_kafka_source():
    streaming, batch = parse(), parse(streaming=False)
    assert streaming.starting.kind == "latest" and batch.starting.kind == "earliest"
    assert batch.ending.kind == "latest"
    assert streaming.fail_on_data_loss is True and streaming.include_headers is False
    assert streaming.max_offsets_per_trigger is None
    assert streaming.stable_offsets_timeout_ms == 90_000  # librdkafka's 60 s transaction timeout + margin
    assert streaming.claims_topic == "eos-kafka-claims" and parse(claimsTopic="c.1").claims_topic == "c.1"


def test_keys_are_case_insensitive_and_kafka_params_pass_through():
    options = SourceOptions.parse({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "Subscribe": "a, b",
                                   "kafka.client.id": "me", "MaxOffsetsPerTrigger": "7"}, streaming=True)
    assert options.bootstrap_servers == "h:1"
    assert options.subscription.topics == ("a", "b")
    assert options.kafka == {"client.id": "me", "reconnect.backoff.max.ms": "1000"}  # the Java client's default
    assert options.max_offsets_per_trigger == 7
    for given, expected in (({"reconnect.backoff.max.ms": "5000"}, "5000"), ({"reconnect.backoff.ms": "3000"}, "3000")):
        kafka = {f"kafka.{key}": value for key, value in given.items()}
        parsed = SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "a", **kafka}, streaming=True)
        assert parsed.kafka["reconnect.backoff.max.ms"] == expected  # never below librdkafka's minimum


def test_the_poll_timeout_takes_spark_connectors_option_and_reaches_the_read_tasks():
    from pyspark_eos.source.planner import SourcePlanner

    assert parse().poll_timeout_ms == 120_000  # as spark.network.timeout's default in Spark's connector
    options = parse(**{"kafkaConsumer.pollTimeoutMs": "2500"})
    assert options.poll_timeout_ms == 2500
    assert SourcePlanner(options).settings.poll_timeout_s == 2.5
    with pytest.raises(ConfigurationError, match=r"option kafkaConsumer.pollTimeoutMs='0' must be a positive"):
        parse(**{"kafkaConsumer.pollTimeoutMs": "0"})


def test_offsets_json_and_group_start():
    options = parse(startingOffsets='{"in":{"0":5,"1":-2}}')
    assert options.starting.kind == "offsets"
    assert options.starting.per_partition == {("in", 0): 5, ("in", 1): -2}
    group = parse(startingOffsets="group", **{"kafka.group.id": "g"})
    assert group.starting.kind == "group" and group.group_id == "g"


def test_stable_timeout_follows_the_transaction_timeout():
    assert parse(**{"kafka.transaction.timeout.ms": "10000"}).stable_offsets_timeout_ms == 40_000
    assert parse(stableOffsetsTimeoutMs="1500").stable_offsets_timeout_ms == 1500


@pytest.mark.parametrize("options, message", [
    ({"subscribe": None}, r"set exactly one of the options subscribe, subscribePattern, assign \(got none\)"),
    ({"assign": '{"in":[0]}'}, r"set exactly one of .*\(got subscribe, assign\)"),
    ({"subscribe": None, "subscribePattern": "("}, "subscribePattern='\\(' is not a valid regular expression"),
    ({"startingOffsets": "newest"}, "startingOffsets='newest' is not valid; use earliest, latest, group"),
    ({"startingOffsets": '{"in":[1]}'}, 'startingOffsets=.* is not valid JSON of the form'),
    ({"startingOffsets": "latest", "startingTimestamp": "1"}, "startingOffsets and startingTimestamp conflict"),
    ({"startingOffsets": "group"}, "startingOffsets=group needs kafka.group.id"),
    ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger='0' must be a positive whole number"),
    ({"failOnDataLoss": "maybe"}, "failOnDataLoss='maybe' is not a boolean"),
    ({"startingOffsetsFallback": "none"}, "startingOffsetsFallback='none' is not valid; use one of: earliest, latest, fail"),
    ({"kafka.bootstrap.servers": None}, "kafka.bootstrap.servers is required"),
    ({"kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit is not supported.*inside its transactions"),
    ({"kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset is not supported.*startingOffsets"),
    ({"kafka.isolation.level": "read_uncommitted"}, "read_uncommitted.*break exactly-once"),
    ({"kafka.partition.assignment.strategy": "cooperative-sticky"},
     "kafka.partition.assignment.strategy='cooperative-sticky' is not supported.*use range or roundrobin"),
    ({"kafka.group.protocol": "consumer"}, "kafka.group.protocol='consumer' is not supported.*set it to classic"),
    ({"kafka.group.id": "gr\u00fcppe"}, "must be printable ASCII"),
    ({"endingOffsets": "latest"}, "endingOffsets options apply to batch queries only"),
    ({"claimsTopic": "claims/of mine"}, "claimsTopic='claims/of mine' is not a valid Kafka topic name"),
    ({"claimsTopic": " "}, "claimsTopic='' is not a valid Kafka topic name"),
    ({"maxOfsetsPerTrigger": "5"}, "unknown option\\(s\\) for the eos-kafka source: maxofsetspertrigger; valid options"),
    ({"startingOffsets": '{"in":{"0":-3}}'}, "startingOffsets has in-0: -3; each value must be an offset, or -2"),
    ({"startingOffsets": '{"in":{"0":1.7}}'}, "startingOffsets=.* is not valid JSON of the form"),
    ({"startingOffsetsByTimestamp": '{"in":{"0":-1}}'}, "startingOffsetsByTimestamp has in-0: -1; each value must be a "
                                                         "timestamp"),
    ({"startingTimestamp": "-2"}, "startingTimestamp='-2' must be a timestamp in milliseconds"),
    ({"subscribe": None, "assign": '{"in":[-1]}'}, "option assign=.* is not valid JSON"),
    ({"subscribe": None, "assign": '{"in":[0,1,0]}'}, "option assign names in-0 more than once"),
    ({"subscribe": None, "subscribePattern": " "}, "option subscribePattern is empty"),
    ({"kafka.group.id": ""}, "option kafka.group.id is empty"),
    ({"kafka.transaction.timeout.ms": "1m"}, "option kafka.transaction.timeout.ms='1m' must be a positive whole number"),
    ({"kafka.fetch.max.wait": "5"}, 'refused by the Kafka client \\(librdkafka\\): No such configuration property: "fetch.max.wait"'),
    ({"kafka.fetch.wait.max.ms": "soon"}, "refused by the Kafka client.*Invalid value for configuration property"),
])
def test_bad_options_are_named_with_the_fix(options, message):
    merged = {key: value for key, value in {**BASE, **options}.items() if value is not None}
    with pytest.raises(ConfigurationError, match=message):
        SourceOptions.parse(merged, streaming=True)


@pytest.mark.parametrize("options, message", [
    ({"startingOffsets": "latest"}, "startingOffsets=latest would read nothing in a batch query"),
    ({"endingOffsets": "earliest"}, "endingOffsets=earliest would read nothing in a batch query"),
    ({"endingOffsets": "group"}, "endingOffsets='group' is not valid; use earliest, latest"),
])
def test_batch_only_rules(options, message):
    with pytest.raises(ConfigurationError, match=message):
        parse(streaming=False, **options)


def test_a_schema_may_name_some_kafka_columns_in_any_order():
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    from pyspark_eos.data_source import read_columns
    from pyspark_eos.kafka.schema import HEADERS_TYPE, kafka_schema

    def schema(*fields):
        return StructType([StructField(name, data_type) for name, data_type in fields])

    assert read_columns(kafka_schema(), include_headers=False) == tuple(kafka_schema().names)
    assert read_columns(schema(("value", BinaryType()), ("key", BinaryType())), include_headers=False) == ("value", "key")
    with pytest.raises(ConfigurationError, match="it has no column value string"):
        read_columns(schema(("value", StringType())), include_headers=False)
    with pytest.raises(ConfigurationError, match="it has no column headers"):
        read_columns(schema(("headers", HEADERS_TYPE)), include_headers=False)


def test_min_partitions_is_the_fewest_tasks_and_the_planners_cores_without_it(monkeypatch):
    import os

    from pyspark_eos.source.planner import SourcePlanner

    assert parse().min_partitions is None and parse(minPartitions="6").min_partitions == 6
    with pytest.raises(ConfigurationError, match="minPartitions='0' must be a positive whole number"):
        parse(minPartitions="0")
    planner = SourcePlanner.__new__(SourcePlanner)  # the property reads the options only: no clients
    planner.options = parse(minPartitions="6")
    assert planner.min_tasks == 6
    planner.options = parse()
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert planner.min_tasks == 3


def test_min_partitions_above_a_batchs_partitions_is_said_once_per_query(caplog):
    from pyspark_eos.source.planner import SourcePlanner

    planner = SourcePlanner.__new__(SourcePlanner)  # reads the options only: no clients
    planner.options, planner._said_fewer_tasks = parse(minPartitions="8"), False
    with caplog.at_level("INFO", logger="pyspark_eos.source.planner"):
        planner._say_fewer_tasks_than_asked(8)  # as many partitions as asked: nothing to say
        assert not caplog.records
        planner._say_fewer_tasks_than_asked(2)
        planner._say_fewer_tasks_than_asked(2)
    assert [r.getMessage()[:60] for r in caplog.records] == [
        "minPartitions=8 asks for more tasks than the batch has Kafka"]
    assert "(2)" in caplog.records[0].getMessage() and "more partitions" in caplog.records[0].getMessage()


def test_max_records_per_partition_splits_without_a_group_and_is_refused_with_one_saying_what_to_use_instead():
    # Spark's connector splits a partition's range over tasks; with a group one task commits its
    # offset (options._refuse_grouped_splitting).
    assert parse(maxRecordsPerPartition="5").max_records_per_partition == 5
    assert SourceOptions.parse({**BASE, "MAXRECORDSPERPARTITION": "7"}, streaming=False).max_records_per_partition == 7
    with pytest.raises(ConfigurationError, match="maxRecordsPerPartition=5 cannot be used with kafka.group.id='g'") \
            as refused:
        parse(maxRecordsPerPartition="5", **{"kafka.group.id": "g"})
    assert all(instead in str(refused.value) for instead in (
        "maxOffsetsPerTrigger", "endingOffsets", "more partitions", "without kafka.group.id"))
    with pytest.raises(ConfigurationError, match="maxRecordsPerPartition='0' must be a positive whole number"):
        parse(maxRecordsPerPartition="0")
