"""Whether a write task commits, and what: the commit decision, pure functions of plain data.

A task commits the end offset of every input range it read, with the group membership its plan
was stamped with (one membership per eos-kafka source of the query). Before that, two checks run
against what the group has committed (read stably, so an open transaction of a dead predecessor
is waited out; model step 5):

- **ownership (G4)**: every partition must be in the plan's assignment for the stamped group,
  and no committed offset may carry a newer generation than the plan's. A client-side form of
  the draft UNASSIGNED_PARTITION rule (assignmentEpoch(p) <= clientEpoch <= currentEpoch).
- **idempotent replay** (model step 6): committed == planned end everywhere -> this task's batch
  was already committed (Spark replays a batch after a crash between the Kafka commit and its
  own commit log): write nothing and succeed (SKIP). committed == planned start everywhere ->
  COMMIT. Anything else is a gap or an overlap: refuse, writing nothing.

A task that commits its own progress instead (task_progress) decides the same way on the
progress group's one offset (decide_progress_commit). A refusal raises the error that tells the
user what happened; the transactional writer runs one commit routine on the decision.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum

from ..errors import (ConfigurationError, FencedError, NonDeterministicReplayError, OffsetMismatchError, ProvenanceError,
                      StaleAttemptError, UnassignedPartitionError)
from ..kafka.group_offsets import Committed
from ..protocol.claims_log import PlanRecord
from .idempotent_writes import ProgressTarget
from ..protocol.commit_metadata import stored_metadata
from ..protocol.group_stamp import GroupStamp
from ..protocol.handover import Provenance
from ..protocol.offset_range import OffsetRange

TopicPartitionKey = tuple[str, int]
NEVER = Committed(None, "")  # a partition the group never committed


class CommitDecision(Enum):
    COMMIT = "commit"  # send the offsets with the records, then commit the transaction
    SKIP = "skip"  # the batch is in Kafka already: abort the transaction and succeed


class TaskOutcome(str, Enum):
    """What a write task did, as its commit message tells the driver."""

    COMMITTED = "committed"
    SKIPPED = "skipped (already committed)"
    NOTHING_TO_WRITE = "nothing to write"


@dataclass(frozen=True)
class CommitPlan:
    """The ranges a task read, by the group membership (one per source) they were planned under."""

    by_member: tuple[tuple[GroupStamp, tuple[OffsetRange, ...]], ...]
    fencing: tuple[PlanRecord, ...] = ()

    @property
    def ranges(self) -> tuple[OffsetRange, ...]:
        return tuple(r for _, ranges in self.by_member for r in ranges)

    @property
    def partitions(self) -> list[TopicPartitionKey]:
        return [r.key for r in self.ranges]

    def describe(self) -> str:
        return ", ".join(map(str, self.ranges))

    def restamped(self, stamps) -> "CommitPlan":
        """This plan under the newest of ``stamps`` that belongs to the same run as a member's
        stamp and carries a newer generation: the group rebalanced during the batch (input
        partitions added, a session timeout) and the broker takes offsets only with the current
        generation. Another instance's run is never taken: it is the one fencing this."""
        by_member = []
        for stamp, ranges in self.by_member:
            # A stamp without a run token (an older writer's) belongs to no known run.
            newer = [s for s in stamps if stamp.run_token and s.run_token == stamp.run_token
                     and s.group_id == stamp.group_id and s.generation > stamp.generation]
            by_member.append((max(newer, key=lambda s: s.generation, default=stamp), ranges))
        return dataclasses.replace(self, by_member=tuple(by_member))


def commit_plan(provenance: list[Provenance], sink_group: str) -> CommitPlan:
    """The ranges this task read, grouped by the membership of the source that planned them."""
    if not provenance:
        # A read without a group hands nothing over: its hand-over files would pile up under any
        # other sink (only an eos-kafka write with a group collects them).
        raise ProvenanceError(
            f"this task writes records but read no input from an eos-kafka source with kafka.group.id={sink_group!r}: "
            "a shuffle (repartition, join, groupBy, distinct, orderBy, ...) sits between the source and the sink, so "
            "the records cannot be tied to the input offsets they came from, or the source is not eos-kafka with "
            "that group. Exactly-once needs narrow transformations only (select, filter, withColumn, coalesce, union) "
            "from an eos-kafka source with the sink's kafka.group.id; remove the shuffle or give the source the group, "
            "or drop kafka.group.id from the sink: each task then commits its own progress instead of input offsets, "
            "exactly-once when the input is replayable and the result deterministic (see the sink's docs)"
        )
    other_groups = sorted({p.group.group_id for p in provenance} - {sink_group})
    if other_groups:
        raise ConfigurationError(
            f"the source reads with kafka.group.id={other_groups[0]!r} but the sink commits to "
            f"kafka.group.id={sink_group!r}; give both the same group"
        )
    by_member: dict[GroupStamp, list[OffsetRange]] = {}
    for record in provenance:
        by_member.setdefault(record.group, []).extend(record.ranges)
    plan = CommitPlan(tuple((stamp, tuple(sorted(ranges, key=lambda r: r.key))) for stamp, ranges in by_member.items()),
                      tuple(sorted({p.fencing for p in provenance if p.fencing is not None}, key=lambda f: f.offset)))
    keys = [r.key for r in plan.ranges]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ConfigurationError(
            f"one task read partitions {repeated} more than once (the same source in a union twice?); "
            "each input partition can be committed once per batch"
        )
    return plan


def check_ownership(plan: CommitPlan, committed: dict[TopicPartitionKey, Committed]) -> None:
    for stamp, ranges in plan.by_member:
        unowned = [r for r in ranges if r.key not in stamp.assignment]
        if unowned:
            raise UnassignedPartitionError(
                f"refusing to commit offsets for {', '.join(map(str, unowned))}: they are not assigned to "
                f"{stamp.describe()}, which owns {sorted(stamp.assignment)} (UNASSIGNED_PARTITION). Another "
                "member of the group owns them; is a second pipeline, or another consumer, using this group?"
            )
        newer = [r.key for r in ranges if _stored_generation(committed.get(r.key, NEVER).metadata) > stamp.generation]
        if newer:
            raise UnassignedPartitionError(
                f"refusing to commit offsets for {sorted(newer)}: the group's committed offsets there carry a "
                f"newer generation than this plan's ({stamp.describe()}); a newer instance of the pipeline owns them"
            )


def decide_input_commit(plan: CommitPlan, committed: dict[TopicPartitionKey, Committed],
                        query_id: str | None = None) -> CommitDecision:
    """The decision on a task's input offsets given what the group has committed (stably)."""
    check_ownership(plan, committed)
    offsets = {r.key: committed.get(r.key, NEVER).offset for r in plan.ranges}
    if all(offsets[r.key] == r.end for r in plan.ranges):
        return CommitDecision.SKIP
    if all(_at_start(r, offsets[r.key]) for r in plan.ranges):
        return CommitDecision.COMMIT
    found = ", ".join(f"{topic}-{partition}@{offset}" for (topic, partition), offset in offsets.items())
    others = sorted({q for r in plan.ranges if (q := _stored_query(committed.get(r.key, NEVER).metadata))
                     and query_id and q != query_id})
    if others:
        # A static member replaced by another instance keeps its generation (no rebalance), so the
        # ownership check cannot tell; the query id stored with the offsets can.
        raise FencedError(
            f"the group has committed {found} but this task read {plan.describe()}, and those offsets were "
            f"committed by another streaming query (id {others[0]}), not by this one (id {query_id}): another "
            "instance of the same pipeline, with another checkpoint, runs or ran on this consumer group. If it "
            "runs, keep one of the two; if it was stopped for good and this query should go on, restart this one "
            "with an empty checkpoint and startingOffsets=group"
        )
    raise OffsetMismatchError(
        f"the group has committed {found} but this task read {plan.describe()}: "
        "committing would leave a gap or process records twice. The checkpoint and the group's offsets "
        "disagree: was the checkpoint deleted or copied, or the group's offsets reset while the query was "
        "stopped? Restart with an empty checkpoint and startingOffsets=group to resume from the group's offsets"
    )


def _at_start(offset_range: OffsetRange, committed_offset: int | None) -> bool:
    # A partition the group never committed can start anywhere its first plan says (earliest,
    # latest, timestamp): only its first commit lacks a committed offset to compare with.
    return committed_offset is None or committed_offset == offset_range.start


def _stored_generation(metadata: str) -> int:
    generation = stored_metadata(metadata).get("generation", -1)
    return generation if isinstance(generation, int) else -1  # a plain consumer's commit carries none


def _stored_query(metadata: str) -> str | None:
    query = stored_metadata(metadata).get("query")
    return query if isinstance(query, str) else None


def decide_progress_commit(target: ProgressTarget, committed: Committed, replay: dict, where: str) -> CommitDecision:
    """The decision on a task's progress record: ``committed`` is its progress group's offset
    (version + 1 of the batch or version it last wrote), ``replay`` the count and checksum of this
    attempt's records (task_progress.RecordDigest.as_json)."""
    done = target.version + 1
    if committed.offset is None or committed.offset < done:
        return CommitDecision.COMMIT
    if committed.offset > done:
        if target.versioned:
            return CommitDecision.SKIP  # as Delta skips a txnVersion below the app's last one
        raise StaleAttemptError(
            f"{where}: this task has already written batch {committed.offset - 1} of the query, after batch "
            f"{target.version} that this attempt writes: it is a stale attempt (its executor stalled and was "
            "declared lost, or a speculative copy) and refuses to commit, so the progress never moves back. "
            "Nothing to do: Spark keeps the newer attempt's output")
    stored = stored_metadata(committed.metadata)
    if (stored.get("records"), stored.get("checksum")) != (replay["records"], replay["checksum"]):
        raise NonDeterministicReplayError(
            f"{where}: {target.describe()} was written before with {stored.get('records')} record(s) (checksum "
            f"{stored.get('checksum')}), and {'this write of it' if target.versioned else 'its replay'} has "
            f"{replay['records']} (checksum "
            f"{replay['checksum']}). None of this task's records were written. " + _different_replay_fix(target))
    return CommitDecision.SKIP


def _different_replay_fix(target: ProgressTarget) -> str:
    if target.versioned:
        return ("If the data changed on purpose, write it under a new txnVersion. Otherwise two writes of one "
                "foreachBatch batch into one topic share a key (give each its own txnAppId), or the write's "
                + _NON_DETERMINISTIC)
    return "The query's " + _NON_DETERMINISTIC


_NON_DETERMINISTIC = ("input or plan is not deterministic (rand(), uuid(), current_timestamp(), a shuffle "
                      "partitioned by such a value, or a source that does not replay the same data), so writing it "
                      "could duplicate or lose records. Make the plan deterministic (seeded functions, partition "
                      "by a column), or set deliveryGuarantee=at-least-once")
