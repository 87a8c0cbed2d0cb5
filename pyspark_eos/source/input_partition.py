"""What one Spark task of the source reads: offset ranges, planned on the driver."""
from __future__ import annotations

import heapq

from pyspark.sql.datasource import InputPartition

from ..protocol.claims_log import PlanRecord
from ..protocol.group_stamp import GroupStamp
from ..protocol.offset_range import OffsetRange


class KafkaInputPartition(InputPartition):
    """``group`` is the membership the plan was made under (None when no kafka.group.id is set):
    the sink commits the ranges' end offsets with it, so a fenced plan cannot commit. ``fencing``
    is where the plan's attempts claim their input (attempt_fencing)."""

    def __init__(self, index: int, ranges: tuple[OffsetRange, ...], group: GroupStamp | None = None,
                 fencing: PlanRecord | None = None):
        super().__init__(index)
        self.index = index
        self.ranges = ranges
        self.group = group
        self.fencing = fencing

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.index}, {', '.join(map(str, self.ranges))})"


def input_partitions(ranges: list[OffsetRange], group: GroupStamp | None, fencing: PlanRecord | None = None,
                     min_records: int = 1, min_tasks: int = 1, alone: frozenset = frozenset()) -> list[KafkaInputPartition]:
    """The batch's Spark tasks: one per range, as Spark's Kafka source, unless the ranges are small.

    A task's fixed cost (its transaction, the offsets it sends, its commit; a Python worker's
    round trips) does not depend on how many records it writes, so ranges share a task until it
    has about ``min_records`` records, with at least ``min_tasks`` tasks (the cores to keep busy)
    in a multiple of it, and the records balanced over them. The sink commits every range of a
    task in its one transaction, or none: ranges in ``alone`` (partitions whose group offset is not
    at the range's start, as in a batch replayed after its Kafka commit under another grouping)
    get a task each, so that the sink decides for each of them on its own.
    """
    shared = [r for r in ranges if r.key not in alone]
    tasks = task_count([r.end - r.start for r in shared], min_records, min_tasks)
    groups = _balanced(shared, tasks) + [(r,) for r in ranges if r.key in alone]
    return [KafkaInputPartition(index, group_ranges, group, fencing) for index, group_ranges in enumerate(groups)]


def task_count(sizes: list[int], min_records: int, min_tasks: int) -> int:
    by_records = sum(sizes) // min_records
    if by_records >= len(sizes):
        return len(sizes)  # ranges big enough for a task each (always, with min_records 1)
    if by_records > min_tasks:
        by_records -= by_records % min_tasks  # full waves of tasks
    return max(1, min(len(sizes), max(min_tasks, by_records)))


def _balanced(ranges: list[OffsetRange], tasks: int) -> list[tuple[OffsetRange, ...]]:
    """The ranges in ``tasks`` groups of nearly equal records: the largest first, each to the
    least loaded group; a group's ranges in topic-partition order."""
    if tasks >= len(ranges):
        return [(r,) for r in ranges]
    loads = [(0, index) for index in range(tasks)]
    groups: list[list[OffsetRange]] = [[] for _ in range(tasks)]
    for offset_range in sorted(ranges, key=lambda r: (-(r.end - r.start), r.key)):
        load, index = heapq.heappop(loads)
        groups[index].append(offset_range)
        heapq.heappush(loads, (load + offset_range.end - offset_range.start, index))
    return sorted((tuple(sorted(group, key=lambda r: r.key)) for group in groups), key=lambda g: g[0].key)
