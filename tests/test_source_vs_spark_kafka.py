"""The eos-kafka source reads what Spark's own Kafka source reads with read_committed."""
from __future__ import annotations

from chispa import assert_df_equality

from .kafka_tools import create_topic, mixed_transactions, unique_name, write_transactions


def test_same_rows_as_sparks_kafka_source_including_timestamps_and_headers(spark, kafka):
    topic = create_topic(kafka.bootstrap_servers, unique_name("versus"), partitions=4)
    write_transactions(kafka.bootstrap_servers, topic, mixed_transactions(partitions=4, rounds=6, per_partition=3),
                       headers=[("h", b"1")])

    def load(fmt: str, **extra):
        reader = (spark.read.format(fmt).option("kafka.bootstrap.servers", kafka.bootstrap_servers)
                  .option("subscribe", topic).option("includeHeaders", "true").option("startingOffsets", "earliest"))
        for key, value in extra.items():
            reader = reader.option(key, value)
        return reader.load()

    ours = load("eos-kafka")
    theirs = load("kafka", **{"kafka.isolation.level": "read_committed"})
    assert ours.schema == theirs.schema
    assert theirs.count() == 4 * 4 * 3  # rounds 1 and 4 aborted
    assert_df_equality(ours, theirs, ignore_row_order=True)
