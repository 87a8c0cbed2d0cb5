"""Reading [start, end) by position: markers and aborted records take offsets but are not data."""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer

from pyspark_eos.errors import DataLossError
from pyspark_eos.kafka.held_clients import Registry
from pyspark_eos.protocol.offset_range import OffsetRange
from pyspark_eos.source.partition_reader import (PREFETCH_RECORDS, ReaderSettings, _with_prefetch, consumer_config,
                                                 read_range, read_ranges)

from .kafka_tools import create_topic, mixed_transactions, read_committed, unique_name, write_transactions


@pytest.fixture(scope="module")
def marker_topic(kafka):
    """Partition 0's log: 0-1 committed, 2 commit marker, 3-4 aborted, 5 abort marker,
    6-7 committed, 8 commit marker, 9 aborted, 10 abort marker, 11 committed, 12 commit marker."""
    topic = create_topic(kafka.bootstrap_servers, unique_name("markers"))
    write_transactions(kafka.bootstrap_servers, topic, [
        (True, [(0, b"a0"), (0, b"a1")]),
        (False, [(0, b"x3"), (0, b"x4")]),
        (True, [(0, b"b6"), (0, b"b7")]),
        (False, [(0, b"x9")]),
        (True, [(0, b"c11")]),
    ])
    return topic


def settings(kafka, **overrides) -> ReaderSettings:
    values = {"include_headers": False, "fail_on_data_loss": True, **overrides}
    return ReaderSettings(consumer_config(kafka.bootstrap_servers, {}, None), **values)


def read_values(kafka, topic, start, end, **overrides):
    batches = list(read_range(OffsetRange(topic, 0, start, end), settings(kafka, **overrides)))
    return [(row["offset"], row["value"]) for batch in batches for row in batch.to_pylist()]


def test_the_log_has_the_layout_the_ranges_are_chosen_for(kafka, marker_topic):
    committed = read_committed(kafka.bootstrap_servers, marker_topic)
    assert [(r.offset, r.value) for r in committed] == [
        (0, b"a0"), (1, b"a1"), (6, b"b6"), (7, b"b7"), (11, b"c11")]


def test_every_range_completes_with_exactly_its_committed_records(kafka, marker_topic):
    committed = [(r.offset, r.value) for r in read_committed(kafka.bootstrap_servers, marker_topic)]
    end_of_log = 13
    for start in range(end_of_log + 1):
        for end in range(start, end_of_log + 1):
            expected = [(o, v) for o, v in committed if start <= o < end]
            assert read_values(kafka, marker_topic, start, end) == expected, f"range [{start}, {end})"


def test_small_arrow_batches_split_a_range_without_losing_records(kafka, marker_topic):
    batches = list(read_range(OffsetRange(marker_topic, 0, 0, 13), settings(kafka, batch_records=2)))
    assert [batch.num_rows for batch in batches] == [2, 2, 1]


def test_a_range_whose_records_were_deleted_is_data_loss(kafka):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = create_topic(kafka.bootstrap_servers, unique_name("deleted"))
    write_transactions(kafka.bootstrap_servers, topic, [(True, [(0, b"v%d" % i) for i in range(6)])])
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.delete_records([TopicPartition(topic, 0, 4)])[TopicPartition(topic, 0, 4)].result(30)

    with pytest.raises(DataLossError, match=r"offsets \[1, 4\) were removed.*failOnDataLoss=false"):
        read_values(kafka, topic, 1, 7)
    kept = read_values(kafka, topic, 1, 7, fail_on_data_loss=False)
    assert kept == [(4, b"v4"), (5, b"v5")]


def test_one_consumer_reads_a_tasks_ranges_of_several_partitions_exactly(kafka):
    topic = create_topic(kafka.bootstrap_servers, unique_name("shared-task"), partitions=3)
    write_transactions(kafka.bootstrap_servers, topic, mixed_transactions(partitions=3, rounds=6))
    committed = [(r.partition, r.offset, r.value) for r in read_committed(kafka.bootstrap_servers, topic, partitions=3)]
    end = {p: max(o for q, o, _ in committed if q == p) + 2 for p in range(3)}  # past the last commit marker
    ranges = (OffsetRange(topic, 0, 0, end[0]), OffsetRange(topic, 1, 3, end[1]), OffsetRange(topic, 2, 0, 4))
    batches = list(read_ranges(ranges, settings(kafka, batch_records=3)))
    read = sorted((row["partition"], row["offset"], row["value"]) for batch in batches for row in batch.to_pylist())
    assert read == sorted((p, o, v) for p, o, v in committed
                          if any(r.partition == p and r.start <= o < r.end for r in ranges))
    assert {p for p, _, _ in read} == {0, 1, 2}


def test_a_tasks_range_removed_by_retention_is_skipped_without_data_loss_checks_and_the_others_read(kafka):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = create_topic(kafka.bootstrap_servers, unique_name("gone-in-task"), partitions=2)
    write_transactions(kafka.bootstrap_servers, topic, [(True, [(p, b"p%d-%d" % (p, i)) for p in (0, 1) for i in range(3)])])
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.delete_records([TopicPartition(topic, 0, 4)])[TopicPartition(topic, 0, 4)].result(30)  # all of partition 0
    ranges = (OffsetRange(topic, 0, 0, 3), OffsetRange(topic, 1, 0, 4))
    batches = list(read_ranges(ranges, settings(kafka, fail_on_data_loss=False)))
    assert [row["value"] for batch in batches for row in batch.to_pylist()] == [b"p1-0", b"p1-1", b"p1-2"]


def test_a_tasks_consumer_prefetches_what_its_ranges_hold_at_most_ten_thousand_records_a_partition():
    config = consumer_config("127.0.0.1:9092", {}, None)
    ranges = [OffsetRange("t", 0, 100, 350), OffsetRange("t", 1, 0, 40)]
    assert _with_prefetch(config, ranges)["queued.min.messages"] == "256"  # 250, rounded up
    assert _with_prefetch(config, [OffsetRange("t", 0, 0, 10**6)])["queued.min.messages"] == str(PREFETCH_RECORDS)
    assert _with_prefetch(config, [])["queued.min.messages"] == "1"
    chosen = consumer_config("127.0.0.1:9092", {"queued.min.messages": "500000"}, None)
    assert _with_prefetch(chosen, ranges)["queued.min.messages"] == "500000"


def offsets_read(batches) -> list[tuple[int, int]]:
    return [(row["partition"], row["offset"]) for batch in batches for row in batch.to_pylist()]


def test_a_workers_reads_share_one_consumer_which_reads_each_later_range_exactly(kafka, monkeypatch):
    """consumer_pool: a read takes the consumer the last one gave back, already connected; what it
    fetched or paused for the last read never leaks into the next, even a range behind it."""
    from pyspark_eos.source import consumer_pool, partition_reader

    topic = create_topic(kafka.bootstrap_servers, unique_name("pooled"), partitions=2)
    write_transactions(kafka.bootstrap_servers, topic, [(True, [(0, b"short-%d" % i) for i in range(10)]),
                                                       (True, [(1, b"long-%d" % i) for i in range(1000)])])
    paused = []
    pause = partition_reader._pause_finished
    monkeypatch.setattr(partition_reader, "_pause_finished",
                        lambda consumer, ranges, positions, unfinished: paused.append(
                            [key for key in unfinished if positions[key] >= ranges[key].end]) or pause(
                            consumer, ranges, positions, unfinished))
    monkeypatch.setattr(consumer_pool, "READERS", Registry("a test's source configuration", 600.0, 4))
    made = []
    monkeypatch.setattr(consumer_pool, "Consumer", lambda config: made.append(config) or Consumer(config))
    reading = settings(kafka, batch_records=50, poll_timeout_s=5.0)

    # Partition 0 ends first and is paused while partition 1 is read on (both ranges: 1,024 prefetched).
    first = offsets_read(read_ranges((OffsetRange(topic, 0, 0, 10), OffsetRange(topic, 1, 0, 1000)), reading))
    assert sorted(first) == [(0, o) for o in range(10)] + [(1, o) for o in range(1000)]
    assert [(topic, 0)] in paused
    # The paused partition again, and a range of partition 1 behind where the consumer has fetched to.
    again = offsets_read(read_ranges((OffsetRange(topic, 0, 0, 10), OffsetRange(topic, 1, 100, 700)), reading))
    assert sorted(again) == [(0, o) for o in range(10)] + [(1, o) for o in range(100, 700)]
    behind = offsets_read(read_ranges((OffsetRange(topic, 1, 5, 600),), reading))
    assert behind == [(1, o) for o in range(5, 600)]
    assert len(made) == 1, "each read made a consumer of its own"


def test_a_read_given_up_midway_closes_its_consumer_and_the_next_read_makes_a_new_one(kafka, monkeypatch):
    from pyspark_eos.source import consumer_pool

    topic = create_topic(kafka.bootstrap_servers, unique_name("given-up"))
    write_transactions(kafka.bootstrap_servers, topic, [(True, [(0, b"v%d" % i) for i in range(100)])])
    monkeypatch.setattr(consumer_pool, "READERS", Registry("a test's source configuration", 600.0, 4))
    made = []
    monkeypatch.setattr(consumer_pool, "Consumer", lambda config: made.append(Consumer(config)) or made[-1])
    reading = settings(kafka, batch_records=10)
    batches = read_range(OffsetRange(topic, 0, 0, 100), reading)
    assert next(batches).num_rows == 10
    batches.close()  # as Spark stops reading a partition once a limit is reached
    assert offsets_read(read_range(OffsetRange(topic, 0, 90, 100), reading)) == [(0, o) for o in range(90, 100)]
    assert len(made) == 2
    with pytest.raises(RuntimeError, match="closed"):
        made[0].assignment()


def test_after_a_read_that_skipped_removed_records_the_workers_next_read_of_them_is_exact(kafka, monkeypatch):
    """A read that met removed records (an out-of-range answer, its partition assigned again from the
    earliest offset) leaves its kept consumer fit for the worker's next reads."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from pyspark_eos.source import consumer_pool

    monkeypatch.setattr(consumer_pool, "READERS", Registry("a test's source configuration", 600.0, 4))
    topic = create_topic(kafka.bootstrap_servers, unique_name("removed-then-read"))
    write_transactions(kafka.bootstrap_servers, topic, [(True, [(0, b"v%d" % i) for i in range(8)])])
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.delete_records([TopicPartition(topic, 0, 3)])[TopicPartition(topic, 0, 3)].result(30)
    lenient = settings(kafka, fail_on_data_loss=False, poll_timeout_s=10.0)
    assert offsets_read(read_range(OffsetRange(topic, 0, 0, 8), lenient)) == [(0, o) for o in range(3, 8)]
    for start in (3, 5):
        assert offsets_read(read_range(OffsetRange(topic, 0, start, 8), lenient)) == [(0, o) for o in range(start, 8)]
