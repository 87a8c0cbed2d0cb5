"""Where a progress attempt of a named pipeline claims and reads (layout 2, protocol/claims_layout),
decided from its task's last committed progress record: the model's step 0, ``LAST_COMMIT``
(docs/model/attempt_fencing.pml, SPLIT_LOG with PROGRESS and UPGRADE).

Progress groups have no members, so nothing fences an earlier run's attempts of a task but the
claims they left, and the driver's plan records cannot say which run a plan is (Spark builds the
sink's writer on the driver for each micro-batch, and tells it nothing of the run). The task
knows its run (Spark's run id, ``spark.jobGroup.id``) and reads its last committed progress
record anyway, which names the run that committed it and the log its plan's claims were in:

- ``SAME``: its own run committed the task last, on this pipeline's log. The attempt of this run
  that committed the task first was not SAME, so it fenced or outlived every earlier run's
  attempt: the claims log is read from where its plan's claims start, as with a group. (Not the
  control log's fast path: no progress attempt counts as its task's first,
  attempt_fencing.first_attempt_of_plan.)
- ``OTHER``: another run did, on this pipeline's log: read the claims log from the look-back,
  back no further than the plan of that commit (an earlier batch's attempts were fenced by it).
- ``UNKNOWN``: nothing committed, an open transaction in the way, or a commit on another log (an
  earlier version's, on the shared claims topic; or a pipeline whose checkpoint moved): as
  OTHER, and claim in that earlier log too, reading it from its look-back to that claim, as the
  earlier layout's attempts do (step 3d).

Only a streaming query's tasks have a run: a batch write can run again in the same job group (a
rerun, a retry inside ``foreachBatch``), so its attempts are never SAME. The other way round, an
attempt of a pipeline without a name (layout 1) whose task last committed on a pipeline's own
topic claims there too (``earlier_log_on_layout1``).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ..kafka.group_offsets import Committed
from ..protocol.claims_layout import CLAIMS_PARTITION
from ..protocol.claims_log import PlanRecord
from ..protocol.commit_metadata import stored_metadata

# What a progress record on layout 2 stores beside its batch and digest (task_progress). Layout 1's
# stores ``plan`` (the plan record's offset in the shared topic) and none of these, which an
# earlier version reading a later one's record then finds nothing to misread in.
TOPIC_FIELD, CLAIMS_FIELD, RUN_FIELD, CONTROL_FIELD = "topic", "claims", "run", "control"


class LastCommit(Enum):
    SAME = "same run"
    OTHER = "another run"
    UNKNOWN = "not known here"


@dataclass(frozen=True)
class EarlierLog:
    """A log where an earlier layout's attempts of the task claim: its claims are read from the
    look-back, never before ``not_before`` (the plan of the task's last commit there)."""

    topic: str
    partition: int
    not_before: int | None = None


@dataclass(frozen=True)
class ProgressReading:
    last: LastCommit
    claims_not_before: int | None = None  # in the pipeline's claims log
    earlier: EarlierLog | None = None  # UNKNOWN only

    @property
    def from_plan(self) -> bool:
        """Whether the claims log is read from the plan's claims on, not from the look-back."""
        return self.last is LastCommit.SAME


def layout2_fields(plan: PlanRecord, run: str | None) -> dict:
    """What a progress record committed under ``plan`` (layout 2) stores of where and by whom."""
    return {TOPIC_FIELD: plan.topic, CONTROL_FIELD: plan.offset, CLAIMS_FIELD: plan.claims_from, RUN_FIELD: run}


def progress_reading(committed: Committed | None, run: str | None, plan: PlanRecord,
                     shared_topic: str) -> ProgressReading:
    """The decision, from the task's last committed progress (None: an open transaction held it)."""
    stored = _stored(committed)
    if stored is None:
        return ProgressReading(LastCommit.UNKNOWN, earlier=EarlierLog(shared_topic, 0))
    if stored.get(TOPIC_FIELD) is None:  # layout 1: the shared topic, where its plan record was
        return ProgressReading(LastCommit.UNKNOWN, earlier=EarlierLog(shared_topic, 0, _offset(stored, "plan")))
    other = _another_pipelines_log(stored, plan)
    if other is not None:
        return ProgressReading(LastCommit.UNKNOWN, earlier=other)
    last = LastCommit.SAME if run is not None and stored.get(RUN_FIELD) == run else LastCommit.OTHER
    return ProgressReading(last, claims_not_before=_offset(stored, CLAIMS_FIELD))


def earlier_log_on_layout1(committed: Committed | None, plan: PlanRecord) -> EarlierLog | None:
    """For an attempt of a pipeline without a name (layout 1, the shared topic): the pipeline's own
    topic, when its task last committed there (it had a name then: its checkpoint came from an
    option), whose attempts of that run claim there and not in the shared topic."""
    stored = _stored(committed)
    return None if stored is None else _another_pipelines_log(stored, plan)


def _stored(committed: Committed | None) -> dict | None:
    """What the task's last progress record stored; None: nothing committed, or not known."""
    return None if committed is None or committed.offset is None else stored_metadata(committed.metadata)


def _another_pipelines_log(stored: dict, plan: PlanRecord) -> EarlierLog | None:
    """The claims log of the pipeline's own topic the last commit names, when not ``plan``'s."""
    topic = stored.get(TOPIC_FIELD)
    if topic is None or topic == plan.topic:
        return None
    return EarlierLog(str(topic), CLAIMS_PARTITION, _offset(stored, CLAIMS_FIELD))


def _offset(stored: dict, field: str) -> int | None:
    value = stored.get(field)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
