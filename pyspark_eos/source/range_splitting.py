"""A Kafka partition's range split over several Spark tasks, as Spark's Kafka connector splits
it (its KafkaOffsetRangeCalculator): ``maxRecordsPerPartition`` caps a task's offsets, and
``minPartitions`` above the batch's ranges divides the larger ones in proportion to their size.

Only a source without kafka.group.id splits (options._refuse_grouped_splitting): each piece is
then a task of its own whose write commits its own progress (sink/task_progress) in its
transaction, so the pieces of one partition commit independently. With a group, a task commits
its partitions' end offsets, one offset per partition: pieces would each commit it, in any order.

The split is a function of the batch's offsets and the options only, so a batch Spark replays
is split into the same pieces, task for task, as long as it reads the same offsets: its end is in
Spark's offset log, and its start too but for a first batch (its start is looked up again) or a
range whose records retention deleted meanwhile under failOnDataLoss=false.
"""
from __future__ import annotations

import math

from ..protocol.offset_range import OffsetRange


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None,
                 max_records: int | None) -> list[OffsetRange] | None:
    """The pieces, in the connector's order (its input's, then by offset), empty ranges dropped;
    None where the connector keeps a task per range: neither option asks for a split."""
    pieces = [r for r in ranges if _size(r) > 0]
    if max_records is None and (min_partitions is None or min_partitions <= len(pieces)):
        return None
    if max_records is not None:
        pieces = [p for r in pieces for p in _divided(r, math.ceil(_size(r) / max_records))]
    if min_partitions is None or min_partitions <= len(pieces):
        return pieces
    total = sum(map(_size, pieces))
    whole = [r for r in pieces if _parts(_size(r), total, min_partitions) == 1]
    # The connector keeps every piece of a partition whole once one of them is small: it tells
    # them apart by topic-partition.
    whole_keys = {r.key for r in whole}
    split_total = total - sum(map(_size, whole))
    split_parts = max(min_partitions - len(whole), 1)
    return [p for r in pieces
            for p in _divided(r, 1 if r.key in whole_keys else _parts(_size(r), split_total, split_parts))]


def _divided(offset_range: OffsetRange, parts: int) -> list[OffsetRange]:
    """``parts`` pieces of nearly equal offsets, the last taking the remainder; empty ones dropped."""
    pieces, start, remaining = [], offset_range.start, _size(offset_range)
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        end = min(start + this, offset_range.end)
        if end > start:
            pieces.append(OffsetRange(offset_range.topic, offset_range.partition, start, end))
        start = end
    return pieces


def _parts(size: int, total: int, min_partitions: int) -> int:
    # Java's Math.round: half up, where Python's round() goes to the even neighbour.
    return max(math.floor(size / total * min_partitions + 0.5), 1)


def _size(offset_range: OffsetRange) -> int:
    return offset_range.end - offset_range.start
