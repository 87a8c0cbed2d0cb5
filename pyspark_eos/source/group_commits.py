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
theirs back. The group's offsets are read first without waiting for open transactions; only ends
that read shows behind are read again stably, waiting up to STABLE_COMMIT_READ_S while a
transaction holds them: a narrow pipeline's task committed its batch's end in its transaction,
whose marker reaches the group after the task succeeded, and a plain commit sent before the marker
would be the later record, which the coordinator keeps over transactional ones, even the next
batch's should the plain one land late (docs/model/group_commit.pml). The member commits under its
generation: a replaced instance's commits are refused like its transactions.
"""
from __future__ import annotations

from ..protocol.commit_metadata import partition_metadata
from ..protocol.group_stamp import GroupStamp
from ..protocol.offset_range import TopicPartitionKey

# A narrow pipeline's markers follow its commit within moments; a zombie attempt's transaction can
# hold the ends for its timeout, and then this batch commits nothing (the next batch's ends follow).
STABLE_COMMIT_READ_S = 5.0


def offsets_to_commit(ends: dict[TopicPartitionKey, int], committed: dict[TopicPartitionKey, int] | None,
                      assigned: frozenset) -> dict[TopicPartitionKey, int]:
    """The completed ends to commit (the model's step offsets_to_commit): those of partitions this
    member owns whose committed offset (absent: never committed) is behind; never backward. None
    (the group's offsets not known now): nothing, and the next completed batch's ends follow."""
    if committed is None:
        return {}
    return {key: end for key, end in ends.items() if key in assigned and committed.get(key, -1) < end}


def commit_metadata(stamp: GroupStamp) -> str:
    """The metadata stored with the source's commits: the generation, and no batch or query (a
    write task's transaction stores those)."""
    return partition_metadata(stamp.generation, None, None)
