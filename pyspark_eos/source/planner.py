"""Driver-side planning shared by the batch reader and the micro-batch stream."""
from __future__ import annotations

import logging
import os

from ..kafka.worker_gc import freeze_long_lived_objects
from ..protocol.claims_log import ClaimsLog
from ..protocol.handover import Provenance, record_read
from ..protocol.group_stamp import GroupStamp
from .group_commits import STABLE_COMMIT_READ_S, commit_metadata, offsets_to_commit
from .group_membership import GroupMembership, instance_id_for, subscription_name
from .input_partition import KafkaInputPartition, input_partitions
from .offset_planning import OffsetLookups, Offsets, plan_ranges, resolve_offsets
from .offset_reader import KafkaOffsetReader
from .options import OffsetsSpec, SourceOptions
from .partition_reader import ReaderSettings, consumer_config, read_ranges
from .range_splitting import split_ranges

log = logging.getLogger(__name__)


class SourcePlanner:
    """Turns options and offsets into ranges; holds the driver's AdminClient (not pickled)."""

    def __init__(self, options: SourceOptions, columns: tuple[str, ...] | None = None, batch_read: bool = False):
        self.options = options
        self.batch_read = batch_read
        self.kafka = KafkaOffsetReader(options)
        self._membership: GroupMembership | None = None
        self._said_fewer_tasks = False
        self._claims = ClaimsLog(options.bootstrap_servers, options.kafka, options.claims_topic, options.group_id)
        self.settings = ReaderSettings(
            consumer_config=consumer_config(options.bootstrap_servers, options.kafka, options.group_id),
            include_headers=options.include_headers,
            fail_on_data_loss=options.fail_on_data_loss,
            poll_timeout_s=options.poll_timeout_ms / 1000,
            columns=columns,
        )

    @property
    def lookups(self) -> OffsetLookups:
        return OffsetLookups(self.kafka.earliest, self.kafka.latest, self.kafka.for_timestamps, self.kafka.committed)

    def resolve(self, spec: OffsetsSpec, partitions) -> Offsets:
        return resolve_offsets(spec, partitions, self.lookups, self.options.group_id, self.options.starting_fallback)

    def plan(self, start: Offsets, end: Offsets) -> list[KafkaInputPartition]:
        earliest = self.kafka.earliest(list(end))
        # Asked only for partitions the batch's end lacks: whether they still exist.
        existing = frozenset(self.kafka.topic_partitions()) if set(start) - set(end) else frozenset()
        ranges = plan_ranges(start, end, earliest, self.options.fail_on_data_loss, existing)
        group_id = self.options.group_id
        # The plan's record first, then the stamp: a generation newer than the stamp is then
        # recorded after the plan's record, where the plan's tasks look for it (sink/rebalance).
        fencing = self._claims.open_plan(group_id) if group_id and ranges else None
        group = self._membership_holding([r.key for r in ranges])
        log.info("planned %d range(s): %s%s%s", len(ranges), ", ".join(map(str, ranges)) or "none",
                 f" under {group.describe()}" if group else "",
                 f", claims from {fencing.topic}@{fencing.offset}" if fencing else "")
        options = self.options
        pieces = None if group_id else split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
        if pieces is not None:
            log.info("split into %d task(s) (minPartitions=%s, maxRecordsPerPartition=%s)", len(pieces),
                     options.min_partitions, options.max_records_per_partition)
            return input_partitions(pieces, None)  # a task each (min_records 1)
        min_tasks = self.min_tasks
        alone = self._not_at_start(ranges) if group and len(ranges) > min_tasks else frozenset()
        self._say_fewer_tasks_than_asked(len(end))
        return input_partitions(ranges, group, fencing, options.min_records_per_partition, min_tasks, alone)

    def _say_fewer_tasks_than_asked(self, partitions: int) -> None:
        """Spark's connector splits partitions to reach minPartitions; once per query, say why a
        source with a group does not (options._refuse_grouped_splitting). ``partitions``: the Kafka
        partitions the batch reads, with new records or without: a batch with records in few of
        them has few tasks for want of records, which more partitions would not change."""
        asked = self.options.min_partitions
        if asked is not None and 0 < partitions < asked and not self._said_fewer_tasks:
            self._said_fewer_tasks = True
            log.info("minPartitions=%d asks for more tasks than the batch has Kafka partitions (%d): with "
                     "kafka.group.id eos-kafka reads a partition's range in one task, whose transaction commits the "
                     "group's offset, so a batch has at most one task per partition; give the topic more partitions "
                     "for more tasks", asked, partitions)

    @property
    def min_tasks(self) -> int:
        """The fewest tasks a batch's ranges are split into: the cores to keep busy. Spark does not
        tell a Python data source its parallelism (its planner runs in a Python process of its own,
        given only the options), so without the minPartitions option this is the cores of the
        machine the driver runs on: right for local mode, and for a cluster whose executors have as
        many cores in all; set minPartitions to the cluster's cores otherwise.

        Without kafka.group.id the sink keys each task's progress by the task's index, so a batch
        replayed by a driver restarted on a machine with other cores is split into other tasks
        (docs/sink.md says to set minPartitions then). The default stays the cores: a pipeline
        stopped mid-batch replays it under the split of the version that planned it."""
        return self.options.min_partitions or os.cpu_count() or 1

    def _not_at_start(self, ranges) -> frozenset:
        """Partitions whose group offset is not at their range's start: a replay of a batch whose
        Kafka commit happened before Spark's commit log (maybe under another grouping: other
        cores, another minRecordsPerPartition). Grouped with unreplayed ranges, the sink could
        commit neither."""
        # Not waiting for open transactions: a replayed range's offsets were committed, and a
        # zombie's pending ones are aborted by the tasks' attempt fencing. Asked every batch: the
        # driver's admin client must follow the group's coordinator when it moves (each request
        # to a stale one waited its full timeout, batch after batch).
        found = self.kafka.committed_now(self.options.group_id, [r.key for r in ranges])
        return frozenset(r.key for r in ranges if found.get(r.key, r.start) != r.start)

    def _membership_holding(self, partitions: list) -> GroupStamp | None:
        if self.join_group() is None:
            return None
        return self._membership.stamp_holding(partitions)

    def join_group(self) -> GroupStamp | None:
        """Join (once) and return the current membership; None without kafka.group.id."""
        if self.options.group_id is None:
            return None
        if self._membership is None:
            self.kafka.ensure_reachable()
            self._claims.prepare()
            self._membership = self._new_membership().start()
        return self._membership.stamp()

    def _new_membership(self) -> GroupMembership:
        return GroupMembership(self.options.bootstrap_servers, self.options.kafka, self.options.group_id,
                               **self._subscribed(), on_generation=self._claims.record_stamp,
                               batch_read=self.batch_read)

    def _subscribed(self) -> dict:
        subscription = self.options.subscription
        if subscription.kind == "subscribePattern":
            return {"pattern": subscription.pattern.pattern}
        return {"topics": list(subscription.topics or sorted({topic for topic, _ in subscription.assigned}))}

    def member_key(self) -> tuple:
        """What makes this source one member of its group: a later planner with the same key takes
        its membership over."""
        return (self.options.bootstrap_servers,
                instance_id_for(self.options.group_id, subscription_name(**self._subscribed())))

    def commit_completed_batch(self, ends: Offsets) -> None:
        """The group's offsets follow a batch Spark has completed (group_commits)."""
        stamp = self._membership.current_stamp() if self._membership is not None else None
        if stamp is None:
            return
        group = self.options.group_id
        wanted = offsets_to_commit(ends, self.kafka.committed_answer(group, list(ends)), stamp.assignment)
        if wanted:
            # A narrow pipeline's tasks commit these ends in their transactions, whose markers reach
            # the group after EndTxn was answered. A plain commit sent before a marker is appended
            # after the task's pending offset, and the coordinator keeps the later record: it would
            # win over the next batch's transactional offset too if it landed late, moving the
            # group's offset back under a batch whose output is visible (docs/model/group_commit.pml).
            # The stable read waits for the marker, and finds the end committed.
            committed = self.kafka.committed_stable_answer(group, list(wanted), STABLE_COMMIT_READ_S)
            wanted = offsets_to_commit(wanted, committed, stamp.assignment)
        if wanted:
            self._membership.commit(wanted, commit_metadata(stamp))

    def leave_group_once_committed(self, partitions: list[KafkaInputPartition]) -> None:
        """A batch read's membership leaves the group once its write has committed every range."""
        if self._membership is not None:
            self._membership.leave_once_committed({r.key: r.end for p in partitions for r in p.ranges})

    def close(self) -> None:
        if self._membership is not None:
            self._membership.stop()
            self._membership = None
        if self._claims is not None:
            self._claims.close()

    def __getstate__(self):
        # Executors only read: they need the settings, not the driver's Kafka clients or membership.
        return {"options": self.options, "settings": self.settings, "kafka": None, "_membership": None,
                "_claims": None}


def read_partition(partition: KafkaInputPartition, settings: ReaderSettings):
    """Executor side of a task: hand the ranges over to this task's eos-kafka writer, then read."""
    from pyspark import TaskContext

    if not isinstance(partition, KafkaInputPartition):
        return  # Spark's placeholder task when a batch read planned no partition at all
    freeze_long_lived_objects()
    context = TaskContext.get()
    if context is not None and partition.group is not None:
        record_read(context.taskAttemptId(), Provenance(partition.ranges, partition.group, partition.fencing))
    yield from read_ranges(partition.ranges, settings)
