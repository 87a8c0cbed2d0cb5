"""A rebalance of the pipeline's consumer group during a micro-batch.

Kafka takes a transaction's input offsets only with the group's current generation (KIP-447). A
rebalance between a batch's planning and a task's send_offsets (input partitions added, the
driver's static member timed out and rejoined) makes the broker refuse the plan's stamp with
ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID, and Spark's retries of the task carry the same stamp.

So the driver records every generation of its membership in the claims topic
(``GroupMembership(on_generation=ClaimsLog.record_stamp)``). A task reads the records after its
plan's together with its claims and commits under the newest generation of the *same*
membership (``CommitPlan.restamped``), whose assignment must still hold its partitions. A task
whose send_offsets raced the rebalance aborts, waits until the new generation is recorded, and
fails, so that Spark's retry of it commits under that generation. A generation of another
instance's membership is never taken: that instance is the one fencing this query.
"""
from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException

from ..errors import GroupRebalancedError
from ..protocol.group_stamp import GroupStamp
from .attempt_fencing import AttemptClaim
from .commit_decision import CommitPlan

log = logging.getLogger(__name__)

# What the broker answers a TxnOffsetCommit whose generation or member a rebalance replaced.
REBALANCE_CODES = frozenset({KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
                             KafkaError.REBALANCE_IN_PROGRESS})
# How long a refused task waits for the driver to record the new generation: a rebalance takes
# the members' next heartbeats (3 s by default) and a join round.
GENERATION_WAIT_S = 60.0


def under_current_generation(plan: CommitPlan, claim: AttemptClaim, task: str) -> CommitPlan:
    """``plan`` under the newest generation of its membership recorded since it was made."""
    current = plan.restamped(claim.stamps)
    for (planned, _), (now, _) in zip(plan.by_member, current.by_member):
        if now is not planned:
            log.info("%s: consumer group %r rebalanced since this batch was planned (generation %d -> %d, now "
                     "assigned %d partition(s)); committing under generation %d", task, now.group_id,
                     planned.generation, now.generation, len(now.assignment), now.generation)
    return current


def raise_if_rebalanced(error: KafkaException, stamp: GroupStamp, claim: AttemptClaim | None, task: str) -> None:
    """Raise GroupRebalancedError when the broker refused ``stamp``'s generation, once the
    generation that replaced it is recorded (so that the task's retry finds it)."""
    code = error.args[0].code() if error.args and isinstance(error.args[0], KafkaError) else None
    if code not in REBALANCE_CODES or claim is None:
        return
    refused = (f"consumer group {stamp.group_id!r} rebalanced during this batch: Kafka refused its offsets under "
               f"generation {stamp.generation} ({error.args[0].name()})")
    newer = claim.newer_generation(stamp, GENERATION_WAIT_S)
    if newer is None:
        raise GroupRebalancedError(
            f"{refused}, and no newer generation of this query's membership was recorded within "
            f"{GENERATION_WAIT_S:.0f} s: another instance of the pipeline may have taken the group, or the driver "
            "could not record it. Look in the driver's log for FencedError and for 'recording generation ... "
            "failed': if another instance runs, keep only one of them; otherwise restart the query") from error
    raise GroupRebalancedError(
        f"{refused}. Generation {newer.generation} is recorded ({len(newer.assignment)} partition(s) assigned): "
        "Spark's retry of this task commits under it. Retries need spark.task.maxFailures >= 2 (in local "
        "mode, a master of local[N,F])") from error
