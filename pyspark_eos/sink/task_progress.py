"""Exactly-once from any replayable source: each write task commits its own progress.

Without an eos-kafka source there are no input offsets to commit with a task's records, but
Spark's contract for file, table and rate sources (and any deterministic plan) still holds: a
micro-batch replayed after a failure has the same batch id and the same data in the same tasks.
So each write task commits, in its transaction, a *progress record*: the consumer-group offset
``batch id + 1`` of a group the sink owns, named for (query, task partition), on partition 0 of
the claims topic (the broker takes offsets only for a partition that exists; no record is ever
written there for it). The offset's metadata holds the task's record count and checksum.

- committed offset == batch + 1: this task's batch is already in Kafka (Spark replays a batch
  whose Kafka commit happened before its own commit log): write nothing, unless the replay's
  records differ, which fails loudly (NonDeterministicReplayError) instead of writing;
- committed offset > batch + 1: a later batch was written already: this attempt is a stale one,
  and the progress never moves back;
- otherwise (never committed, or an older batch): commit.

The same stable read of the group's offsets (an open transaction of a dead attempt is waited
out) and the same claims protocol (attempt_fencing; its plan record appended by the driver for
every batch, see writer.py) apply as with input offsets: of all attempts of a task, one commits.
Without a consumer group's generations to fence an earlier run's attempts, a progress plan's
attempts also read the claims of the transaction timeout before it (attempt_fencing), back to the
plan under which the task last committed, which the progress record names.
One group per task keeps each group at one offset, so the records grow with the number of write
tasks, not with batches; an idle group's offsets expire after the broker's
``offsets.retention.minutes``.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

from confluent_kafka import Consumer

from ..kafka.group_offsets import Committed
from ..kafka.held_clients import Held
from ..protocol.claims_log import PlanRecord
from ..protocol.commit_metadata import dumps as metadata_dumps, stored_metadata
from .progress_claims import layout2_fields
from .records import RecordColumns

TopicPartitionKey = tuple[str, int]
_MASK = (1 << 64) - 1


@dataclass(frozen=True)
class ProgressKey:
    """Where one task of one write records its progress: a group of its own on the claims topic.
    ``scope`` is the streaming query's id, or an idempotent batch write's (idempotent_writes)."""

    prefix: str
    scope: str
    task_partition: int
    topic: str

    @property
    def group_id(self) -> str:
        return f"{group_prefix(self.prefix, self.scope)}{self.task_partition}"

    @property
    def claim_group(self) -> str:
        """The group the claims of all the write's tasks name (the claims protocol's key)."""
        return group_prefix(self.prefix, self.scope).rstrip(".")

    @property
    def claim_partitions(self) -> list[TopicPartitionKey]:
        return [(self.topic, self.task_partition)]

    @property
    def partition(self) -> TopicPartitionKey:
        return (self.topic, 0)

    def describe(self) -> str:
        return f"progress group {self.group_id}"


def group_prefix(prefix: str, scope: str) -> str:
    """Every progress group of one streaming query, or of one batch write's txnAppId and topic,
    starts with this (the docs' clean-up names it)."""
    return f"{prefix}.progress.{scope}."


@dataclass
class RecordDigest:
    """The count and an order-independent checksum of a task's records: a shuffle's reducer
    receives the same records in another order on a replay, which is not a different batch."""

    records: int = 0
    checksum: int = 0

    def add(self, columns: RecordColumns) -> None:
        size = len(columns.values)
        crcs = [0] * size
        for column in (columns.topics, columns.partitions, columns.keys):
            if column is not None and not isinstance(column, str):  # a constant topic is the same on replay
                crcs = list(map(zlib.crc32, map(_as_bytes, column), crcs))
        if columns.headers is not None:
            # A chunk of records without headers has no headers column (records.py), so a record
            # without headers adds nothing here either: its checksum must not depend on which
            # records share its chunk, which a replay's shuffle changes.
            crcs = [zlib.crc32(_as_bytes(headers), crc) if headers else crc
                    for headers, crc in zip(columns.headers, crcs)]
        self.checksum = (self.checksum + sum(map(zlib.crc32, map(_as_bytes, columns.values), crcs))) & _MASK
        self.records += size

    def as_json(self) -> dict:
        return {"records": self.records, "checksum": f"{self.checksum:016x}"}


def _as_bytes(value) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return b"\xff" if value is None else repr(value).encode()  # None apart from b"": a null is not empty


def progress_metadata(version: int, scope: str, digest: RecordDigest, plan: PlanRecord, run: str | None = None) -> str:
    """Layout 1: the plan record's offset in the shared topic (``plan``); layout 2: where the plan
    was and which run committed (progress_claims.layout2_fields)."""
    where = layout2_fields(plan, run) if plan.split else {"plan": plan.offset}
    return metadata_dumps({"batch": version, "query": scope, **digest.as_json(), **where})


def committed_plan(committed: Committed) -> int | None:
    """The shared topic's offset of the plan under which the task last committed on layout 1
    (None: not known, or committed on layout 2, whose offsets are another topic's)."""
    plan = stored_metadata(committed.metadata).get("plan") if committed.offset is not None else None
    return plan if isinstance(plan, int) and not isinstance(plan, bool) else None


def group_metadata(held: Held, group_id: str) -> bytes:
    """The consumer-group metadata a transactional producer sends with the group's offsets. The
    sink's progress groups have no members: an unsubscribed consumer's (generation -1) is what the
    broker takes for them. Made once per group by each worker (a consumer costs a few ms)."""
    def learn() -> bytes:
        consumer = Consumer({**held.settings.config(), "group.id": group_id, "enable.auto.commit": "false"})
        try:
            return consumer.consumer_group_metadata()
        finally:
            consumer.close()
    return held.fact(f"group metadata {group_id}", learn)
