"""What an attempt does about the other attempts of its task, from the claims it read: the fence
decision of the claims protocol (sink/attempt_fencing), a pure function of plain records.

In the model (docs/model/, step 4): scan the claims of its run from the plan's record to its own
claim; a newer claim makes it ``stale`` (refuse), each older unreleased claim under another
transactional id goes into ``fence``. In layout 2 (SPLIT_LOG, step 4a) the first attempt of a
plan reads its pipeline's control log instead, and scans the claims only if another attempt of its
task announced itself there (``needs_claims_read``). An attempt that claims after its records
sends its stable read of the group's offsets beside that read, and decides on it only as
``early_read_usable`` allows.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterable

from ..kafka.group_offsets import FetchAttempt
from ..protocol.claims_records import ANNOUNCE, CLAIM, RELEASE, Claim
from ..protocol.group_stamp import GroupStamp
from .transactional_id_factory import SlotHolder


class FenceOutcome(Enum):
    PROCEED = "proceed"  # no other attempt of this instance may commit the input
    FENCE = "fence"  # older attempts may still commit: fence their ids, then proceed
    REFUSE = "refuse"  # a newer attempt has claimed the input: this one is stale


@dataclass(frozen=True)
class FenceVerdict:
    outcome: FenceOutcome
    to_fence: tuple[Claim, ...] = ()  # one claim per transactional id to fence
    newer: Claim | None = None  # the newer claim that makes this attempt stale
    other_instances: tuple[Claim, ...] = ()  # unreleased claims of another instance: logged only
    stamps: tuple[GroupStamp, ...] = ()  # the group generations recorded since the plans


def decide_fence(own: Claim, records: Iterable["Claim | GroupStamp"]) -> FenceVerdict:
    """The verdict on ``own`` given the claims topic's records from its plans' start to its claim."""
    records = list(records)
    stamps = tuple(r for r in records if isinstance(r, GroupStamp) and r.group_id == own.group)
    overlapping = [c for c in records if isinstance(c, Claim)
                   and c.group == own.group and c.partitions & own.partitions and c.offset != own.offset]
    rivals = [c for c in overlapping if own.same_instance(c)]
    others = tuple(unreleased(c for c in overlapping if not own.same_instance(c)))
    newer = [c for c in rivals if c.kind == CLAIM and c.order > own.order]
    if newer:
        return FenceVerdict(FenceOutcome.REFUSE, newer=newer[0], other_instances=others, stamps=stamps)
    zombies = _unreleased_older(rivals, own, records)
    outcome = FenceOutcome.FENCE if zombies else FenceOutcome.PROCEED
    return FenceVerdict(outcome, tuple(zombies), other_instances=others, stamps=stamps)


def needs_claims_read(own: Claim, first_of_plan: bool, control: Iterable["Claim | GroupStamp"]) -> bool:
    """Step 4a: whether an attempt in layout 2 reads the claims log, given the control log from its
    plans' records to the end listed after its claim was acknowledged. An attempt that is not the
    first of its plan always does. The first one does only if another attempt of its task (its
    group, its input, its instance) announced itself: any announcement acknowledged before the first
    attempt's claim is in what it read, and a retry that announces later claims later too, so its
    own read of the claims log finds the first attempt's claim."""
    if not first_of_plan:
        return True
    return any(isinstance(r, Claim) and r.kind == ANNOUNCE and r.group == own.group and r.partitions & own.partitions
               and own.same_instance(r) and r.order != own.order for r in control)


def unreleased(claims: Iterable[Claim]) -> list[Claim]:
    """The claims among ``claims`` whose attempt appended no release (released ones may not commit)."""
    claims = list(claims)
    released = {(c.order, c.transactional_id) for c in claims if c.kind == RELEASE}
    return [c for c in claims if c.kind == CLAIM and (c.order, c.transactional_id) not in released]


def _unreleased_older(rivals: list[Claim], own: Claim, records: list) -> list[Claim]:
    """One claim per transactional id to fence: its newest. Whatever fences that one (this
    attempt's init, or one the id's holder made after it: initialized_since) came after every
    earlier claim under the id too."""
    older: dict[str, Claim] = {}
    for c in unreleased(rivals):
        if c.order < own.order and c.transactional_id != own.transactional_id and not _taken_over(c, records):
            older[c.transactional_id] = c  # records come in offset order
    return list(older.values())


def _taken_over(claim: Claim, records: list) -> bool:
    """A later claim under the same transactional id by another attempt of any task or group, made
    from the same host's slots. There an id is held by one process at a time (an flock in the
    host's slots directory, transactional_id_factory): its next holder claims only after the
    earlier attempt's transaction ended, or after its own init_transactions aborted it (a dead
    worker's slot taken over). Fencing the id again would abort the new holder's transaction,
    another task's. A claim from other slots (another host's, or an executor's in 0.1.0, whose ids
    named executors) is no proof, so its claim takes nothing over."""
    return bool(claim.slots) and any(
        isinstance(r, Claim) and r.kind == CLAIM and r.transactional_id == claim.transactional_id
        and r.slots == claim.slots and r.offset > claim.offset and r.order != claim.order for r in records)


def holder_fenced(zombie: Claim, own: Claim, topic: str, holder: SlotHolder | None) -> bool:
    """The step holder_fenced of docs/model/progress_records.pml: whether the process that holds
    ``zombie``'s transactional id on this host now (``holder``: its slot's lock file, None for an id
    of other slots) has fenced ``zombie`` already, so that fencing it again would only abort that
    holder's transaction (another task's). Only a holder whose producer was made proves it: one
    whose producer is still being made (or never was: it died first, or its init failed) has not
    run the init_transactions that ends what the zombie left open, and skipping the fence then
    would leave a dead attempt's transaction open to the broker's timeout."""
    if holder is None or not holder.made:
        return False
    return taken_over_since(zombie, own, holder.token) or initialized_since(zombie, topic, holder.initialized_after)


def initialized_since(zombie: Claim, topic: str, initialized_after: tuple[str, int] | None) -> bool:
    """Whether the producer that holds ``zombie``'s transactional id on this host now was
    initialized after ``zombie`` claimed (in claims topic ``topic``): after a record appended later
    than the claim (``initialized_after``, its task's plan record: (topic, offset)). The zombie's
    own init_transactions came before its claim, so that later init fenced it already, and fencing
    again would only abort the holder's transaction. That holder can be a task of another
    application than the zombie's: a host's slots serve every application, and with them the
    transactional ids of a query without a group."""
    return initialized_after is not None and initialized_after[0] == topic and initialized_after[1] > zombie.offset


def taken_over_since(zombie: Claim, own: Claim, holder: str | None) -> bool:
    """Whether the slot of ``zombie``'s transactional id, one of this attempt's host, names
    another process than the one that claimed (``holder``: its lock file's holder now). A process
    takes a slot over only from a dead holder (transactional_id_factory), and its own
    init_transactions aborted what the dead attempt left open: a fence now would abort the new
    holder's transaction, another task's, which the claims it read may not show yet (a task with
    input offsets claims after producing). An empty holder (a slot being taken) proves nothing."""
    return bool(zombie.holder and zombie.slots and zombie.slots == own.slots and holder
                and holder != zombie.holder)


def early_read_usable(verdict: FenceVerdict, early: FetchAttempt | None) -> bool:
    """The step EARLY_STABLE_READ of docs/model/attempt_fencing.pml: whether the stable read this
    attempt sent as soon as its claim was acknowledged, beside its claims read, may decide its
    commit (step 6). Not once the claims named an older attempt to fence, even one its id's holder
    fenced already: that attempt may have sent its offsets and committed after the read was answered
    and before the fence (mutant:early-read-kept-after-fence, both commit); the attempt reads again
    then. Nor an answer an open transaction or a coordinator not ready left unsettled: the full
    read backs off on those."""
    return not verdict.to_fence and early is not None and early.settled
