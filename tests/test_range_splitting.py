"""A Kafka partition's range split over tasks (source/range_splitting), checked against the cases
of Spark's KafkaOffsetRangeCalculatorSuite: the same pieces for the same minPartitions and
maxRecordsPerPartition, and none without either. Through Spark, on a broker, in
test_connector_options.py and test_any_source.py."""
from __future__ import annotations

import pytest

from pyspark_eos.protocol.offset_range import OffsetRange
from pyspark_eos.source.range_splitting import split_ranges


def _ranges(*spans: tuple[str, int, int]) -> list[OffsetRange]:
    return [OffsetRange(topic, 1, start, end) for topic, start, end in spans]


@pytest.mark.parametrize("min_partitions, given, pieces", [
    (3, [("t1", 1, 2), ("t2", 1, 2), ("t3", 1, 2)], [("t1", 1, 2), ("t2", 1, 2), ("t3", 1, 2)]),
    (4, [("t1", 1, 5)], [("t1", 1, 2), ("t1", 2, 3), ("t1", 3, 4), ("t1", 4, 5)]),
    (4, [("t1", 1, 5), ("t2", 1, 21)], [("t1", 1, 5), ("t2", 1, 7), ("t2", 7, 14), ("t2", 14, 21)]),
    (4, [("t1", 1, 1), ("t2", 1, 21)], [("t2", 1, 6), ("t2", 6, 11), ("t2", 11, 16), ("t2", 16, 21)]),
    (4, [("t1", 1, 2), ("t2", 1, 1001)], [("t1", 1, 2), ("t2", 1, 334), ("t2", 334, 667), ("t2", 667, 1001)]),
    (3, [("t1", 1, 11)], [("t1", 1, 4), ("t1", 4, 7), ("t1", 7, 11)]),
    (4, [("t1", 1, 5), ("t2", 1, 21), ("t3", 1, 1)], [("t1", 1, 5), ("t2", 1, 7), ("t2", 7, 14), ("t2", 14, 21)]),
    (6, [("t1", 0, 10), ("t2", 0, 10), ("t3", 0, 1)],
     [("t1", 0, 3), ("t1", 3, 6), ("t1", 6, 10), ("t2", 0, 3), ("t2", 3, 6), ("t2", 6, 10), ("t3", 0, 1)]),
    (9, [("t1", 0, 10000), ("t2", 0, 15000), ("t3", 0, 20000)],
     [("t1", 0, 5000), ("t1", 5000, 10000), ("t2", 0, 5000), ("t2", 5000, 10000), ("t2", 10000, 15000),
      ("t3", 0, 5000), ("t3", 5000, 10000), ("t3", 10000, 15000), ("t3", 15000, 20000)]),
    (6, [("t1", 0, 500), ("t2", 0, 12000), ("t3", 0, 15001)],
     [("t1", 0, 500), ("t2", 0, 6000), ("t2", 6000, 12000), ("t3", 0, 5000), ("t3", 5000, 10000),
      ("t3", 10000, 15001)]),
    (6, [("t1", 0, 1), ("t2", 0, 1), ("t3", 0, 10000)],
     [("t1", 0, 1), ("t2", 0, 1), ("t3", 0, 2500), ("t3", 2500, 5000), ("t3", 5000, 7500), ("t3", 7500, 10000)]),
    (4, [("t1", 0, 1), ("t2", 0, 1), ("t3", 0, 2)], [("t1", 0, 1), ("t2", 0, 1), ("t3", 0, 1), ("t3", 1, 2)]),
])
def test_min_partitions_splits_as_the_connector(min_partitions, given, pieces):
    ranges = _ranges(*given)
    # None: the ranges as they are, a task each, as the connector keeps them (empty ones aside).
    split = split_ranges(ranges, min_partitions, None)
    assert (split if split is not None else [r for r in ranges if r.end > r.start]) == _ranges(*pieces)


def test_max_records_caps_every_piece_and_min_partitions_splits_the_pieces_further():
    assert split_ranges(_ranges(("t1", 0, 10), ("t2", 0, 3)), None, 3) == _ranges(
        ("t1", 0, 2), ("t1", 2, 4), ("t1", 4, 7), ("t1", 7, 10), ("t2", 0, 3))
    # Four pieces of 5 against minPartitions=8: each piece in two, the second taking the remainder.
    assert split_ranges(_ranges(("t1", 0, 20)), 8, 5) == _ranges(*[
        ("t1", start, start + size) for piece in range(0, 20, 5) for start, size in ((piece, 2), (piece + 2, 3))])


def test_a_partition_with_one_small_piece_keeps_every_piece_whole_and_empty_pieces_are_dropped():
    # The connector tells small pieces apart by topic-partition: t1's second piece (16 offsets)
    # would be split in two, but its first (15) is small, so neither is; t3 shares what is left.
    assert split_ranges(_ranges(("t1", 0, 31), ("t2", 0, 23), ("t3", 0, 17)), 7, 18) == _ranges(
        ("t1", 0, 15), ("t1", 15, 31), ("t2", 0, 11), ("t2", 11, 23), ("t3", 0, 8), ("t3", 8, 17))
    # Twenty tasks asked of four offsets: ranges of one offset cannot be split.
    assert split_ranges(_ranges(("t1", 0, 1), ("t2", 0, 1), ("t3", 0, 2)), 20, None) == _ranges(
        ("t1", 0, 1), ("t2", 0, 1), ("t3", 0, 1), ("t3", 1, 2))


@pytest.mark.parametrize("min_partitions, max_records, split", [
    (None, None, False), (2, None, False), (3, None, True), (None, 100, True), (1, 100, True)])
def test_the_connector_splits_only_when_asked_for_more_tasks_than_ranges_or_a_cap(min_partitions, max_records, split):
    # Two ranges with records and an empty one, which counts for nothing.
    pieces = split_ranges(_ranges(("t1", 0, 10), ("t2", 0, 10), ("t3", 4, 4)), min_partitions, max_records)
    assert (pieces is not None) is split


def test_pieces_cover_each_range_once_in_order():
    ranges = _ranges(("t1", 17, 1017), ("t2", 5, 6), ("t3", 0, 333))
    pieces = split_ranges(ranges, 7, 90)
    for whole in ranges:
        own = [p for p in pieces if p.key == whole.key]
        assert own[0].start == whole.start and own[-1].end == whole.end
        assert all(a.end == b.start for a, b in zip(own, own[1:])) and all(p.end - p.start <= 90 for p in own)
