"""The source's own commits of its group's offsets, so that lag tools see every pipeline's progress.

A narrow pipeline's sink commits the input offsets in each task's transaction. Any other shape
(a shuffle, an aggregation, foreachBatch) commits none there, and the group's offsets would never
move: kafka-consumer-groups, Burrow and lag exporters would show the pipeline stuck. So the
driver's member of the group commits, after the fact, the end of every batch Spark has completed:
Spark calls ``latestOffset(start)`` (4.2+) with the end of the last batch in its commit log, and
``commit(end)`` once a batch is in it, so such an offset is never ahead of the output that is
visible. A commit never moves an offset back (a query restarted from an older checkpoint).

It is made between batches, before Spark plans the next one, so no task of the query sends
offsets to the group meanwhile: a commit made outside transactions could otherwise move one of
theirs back. The group's offsets are read without waiting for open transactions (a zombie
attempt's, which the claims protocol keeps from committing anything but the same ends). The
member commits under its generation: a replaced instance's commits are refused like its
transactions.
"""
from __future__ import annotations

from ..protocol.commit_metadata import partition_metadata
from ..protocol.group_stamp import GroupStamp
from ..protocol.offset_range import TopicPartitionKey


def offsets_to_commit(ends: dict[TopicPartitionKey, int], committed: dict[TopicPartitionKey, int],
                      assigned: frozenset) -> dict[TopicPartitionKey, int]:
    """The completed ends to commit: those of partitions this member owns whose committed offset
    (absent: never committed) is behind; never backward."""
    return {key: end for key, end in ends.items() if key in assigned and committed.get(key, -1) < end}


def commit_metadata(stamp: GroupStamp) -> str:
    """The metadata stored with the source's commits: the generation, and no batch or query (a
    write task's transaction stores those)."""
    return partition_metadata(stamp.generation, None, None)
