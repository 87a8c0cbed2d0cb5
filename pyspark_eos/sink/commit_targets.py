"""What a write task commits with its records: the three kinds, as strategies of the one sequence
in transactional_writer (prepare from the task's hand-over, claim, read the group's offsets,
decide, send).

- ``InputOffsets``: with kafka.group.id, the end offsets of the input ranges the task read, under
  the group membership that planned them (commit_decision);
- ``TaskProgress``: without a group, the task's progress record (task_progress), keyed by its
  streaming query's micro-batch or by an idempotent batch write (idempotent_writes);
- ``RecordsOnly``: nothing beside the records (at-least-once, or a batch write without a key).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from confluent_kafka import TopicPartition

from ..errors import ConfigurationError, KafkaClientError
from ..kafka.group_offsets import Committed, fetch_committed_once
from ..kafka.held_clients import Held
from ..protocol.claims_layout import CLAIMS_PARTITION
from ..protocol.claims_log import PlanRecord, lookback_start
from ..protocol.commit_metadata import partition_metadata
from ..protocol.group_stamp import GroupStamp
from ..protocol.handover import Provenance
from ..protocol.offset_range import TopicPartitionKey
from .attempt_fencing import (AttemptClaim, ClaimInTwoLogs, claim_attempt, claim_in_earlier_log, claims_clients_for,
                              first_attempt_of_plan)
from .commit_decision import NEVER, CommitDecision, CommitPlan, commit_plan, decide_input_commit, decide_progress_commit
from .idempotent_writes import ProgressTarget
from .producer_pool import WorkerProducer, admin_for
from .progress_claims import earlier_log_on_layout1, progress_reading
from .rebalance import under_current_generation
from .task_info import TaskInfo
from .task_progress import ProgressKey, RecordDigest, committed_plan, group_metadata, progress_metadata

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OffsetsToSend:
    offsets: list[TopicPartition]
    group_metadata: bytes
    stamp: GroupStamp | None = None  # the membership they go under: a rebalance refusal names it


class RecordsOnly:
    """A plain transactional write: a replay or rerun writes its records again."""

    digest = None
    claims_first = False

    def prepared(self, provenance: list[Provenance], count: int) -> None:
        return None


@dataclass(frozen=True)
class InputOffsets:
    """With a consumer group: the input ranges the task read, committed in the group (G1)."""

    group_id: str
    task: TaskInfo
    plan: CommitPlan | None = None  # set by prepared()
    first_of_plan: bool = False  # the first attempt of its task under its plan (attempt_fencing)
    digest = None
    # Its claim names the input ranges, known only once its read()s have handed them over: after
    # its records. Another run's attempts do not read its claims anyway (attempt_fencing).
    claims_first = False

    def prepared(self, provenance: list[Provenance], count: int) -> "InputOffsets | None":
        if not provenance and count == 0:
            return None  # an empty task: nothing read, nothing to commit
        return replace(self, plan=commit_plan(provenance, self.group_id))

    def claim(self, held: Held, worker: WorkerProducer) -> AttemptClaim | None:
        plan = self.plan
        if not plan.fencing:
            raise ConfigurationError(f"the input of {self.task.describe()} was planned without a claims position; "
                                     "the source and the sink must be the same eos-kafka version")
        return claim_attempt(claims_clients_for(held, self.group_id), plan.fencing, self.group_id, plan.partitions,
                             self.task.task_attempt_id, self.task.describe(), worker.transactional_id,
                             run_tokens=[stamp.run_token for stamp, _ in plan.by_member],
                             first_of_plan=self.first_of_plan)

    def under(self, claim: AttemptClaim | None) -> "InputOffsets":
        """This commit under the newest generation of the plan's membership (rebalance)."""
        if claim is None:
            return self
        return replace(self, plan=under_current_generation(self.plan, claim, self.task.describe()))

    @property
    def partitions(self) -> list[TopicPartitionKey]:
        return self.plan.partitions

    def decide(self, committed: dict[TopicPartitionKey, Committed]) -> CommitDecision:
        return decide_input_commit(self.plan, committed, self.task.query_id)

    def sends(self, held: Held) -> list[OffsetsToSend]:
        task = self.task
        return [OffsetsToSend([TopicPartition(r.topic, r.partition, r.end,
                                              metadata=partition_metadata(stamp.generation, task.batch_id,
                                                                          task.query_id))
                               for r in ranges], stamp.metadata, stamp)
                for stamp, ranges in self.plan.by_member]

    def describe(self) -> str:
        return f"input {self.plan.describe()}"


@dataclass(frozen=True)
class TaskProgress:
    """Without a group: the task's progress in a group of its own, ordered by the write's plan record."""

    key: ProgressKey
    target: ProgressTarget
    plan: PlanRecord
    task: TaskInfo
    digest: RecordDigest
    lookback_ms: int = 0  # how far back an attempt reads claims that nothing else fences
    # Claimed before the first record opens its transaction: a later run's attempt of the task then
    # finds every transaction of this one that may be open, and fences it (attempt_fencing).
    claims_first = True

    def prepared(self, provenance: list[Provenance], count: int) -> "TaskProgress | None":
        if not self.target.versioned:
            _check_ungrouped_input(provenance)
        # Nothing to make visible and nothing to record (an empty attempt never claimed).
        return self if count else None

    @property
    def run(self) -> str | None:
        """The streaming query's run (progress_claims); a batch write has none."""
        return None if self.target.versioned else self.task.run_id

    def claim(self, held: Held, worker: WorkerProducer) -> AttemptClaim | ClaimInTwoLogs | None:
        key, task, clients = self.key, self.task, claims_clients_for(held, None)
        last = _last_commit(held, key)
        if not self.plan.split:  # layout 1: the shared topic, read from the plan's look-back
            own = claim_attempt(clients, [self.plan], key.claim_group, key.claim_partitions, task.task_attempt_id,
                                task.describe(), worker.transactional_id,
                                not_before=None if last is None else committed_plan(last))
            earlier = earlier_log_on_layout1(last, self.plan)
        else:
            reading = progress_reading(last, self.run, self.plan, key.topic)
            plan = self.plan if reading.from_plan else self._from_lookback(clients)
            own = claim_attempt(clients, [plan], key.claim_group, key.claim_partitions, task.task_attempt_id,
                                task.describe(), worker.transactional_id, not_before=reading.claims_not_before,
                                first_of_plan=first_attempt_of_plan(task.attempt_number, self.target.versioned, True),
                                progress=True)
            earlier = reading.earlier
        if own is None or earlier is None:
            return own
        log.info("%s: its task's last commit is not on this pipeline's claims log (none yet, held by an open "
                 "transaction, or on another layout): claiming in %s [%d] as well", task.describe(),
                 earlier.topic, earlier.partition)
        return ClaimInTwoLogs(own, claim_in_earlier_log(own, earlier, self.lookback_ms))

    def _from_lookback(self, clients) -> PlanRecord:
        """The plan, its claims read from the look-back: claims of another run that may still commit."""
        plan = self.plan
        since = lookback_start(clients.consumer(), plan.topic, CLAIMS_PARTITION, self.lookback_ms, plan.claims_from)
        return replace(plan, since=since)

    def under(self, claim: AttemptClaim | None) -> "TaskProgress":
        return self

    @property
    def group_id(self) -> str:
        return self.key.group_id

    @property
    def partitions(self) -> list[TopicPartitionKey]:
        return [self.key.partition]

    def decide(self, committed: dict[TopicPartitionKey, Committed]) -> CommitDecision:
        return decide_progress_commit(self.target, committed.get(self.key.partition, NEVER), self.digest.as_json(),
                                      self.task.describe())

    def sends(self, held: Held) -> list[OffsetsToSend]:
        target, key = self.target, self.key
        metadata = progress_metadata(target.version, target.scope, self.digest, self.plan, self.run)
        return [OffsetsToSend([TopicPartition(key.topic, 0, target.version + 1, metadata=metadata)],
                              group_metadata(held, key.group_id))]

    def describe(self) -> str:
        return self.key.describe()


def _check_ungrouped_input(provenance: list[Provenance]) -> None:
    # Progress records would make this exactly-once too, but the group's offsets would follow only
    # once Spark completes each batch (source/group_commits): a restart from them with a new
    # checkpoint would write again a batch whose output committed just before a crash.
    groups = sorted({p.group.group_id for p in provenance if p.group is not None})
    if groups:
        raise ConfigurationError(
            f"this task read from an eos-kafka source with kafka.group.id={groups[0]!r}, but the sink has no "
            f"kafka.group.id: set the sink's kafka.group.id={groups[0]!r} too, so that each task commits the input "
            "offsets it read in that group with its records (without it the group's offsets lag a batch behind "
            "the output, and a restart from them with a new checkpoint could write a batch twice), or set "
            "deliveryGuarantee=at-least-once")


def deliver(producer, timeout_s: float, what: str = "record(s) of this task") -> None:
    """Wait until the producer's records are in the broker's log, and with them their partitions
    in the task's transaction."""
    left = producer.flush(timeout_s)
    if left:
        raise KafkaClientError(f"{left} {what} were not delivered within {timeout_s:.0f} s: check that the brokers "
                               "are reachable")


def _last_commit(held: Held, key: ProgressKey) -> Committed | None:
    """The task's last committed progress, read without waiting for an open transaction (None
    then: the attempt reads its plan's whole look-back of claims)."""
    attempt = fetch_committed_once(admin_for(held), key.group_id, [key.partition])
    return attempt.commits.get(key.partition, NEVER) if attempt.settled else None
