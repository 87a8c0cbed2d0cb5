"""The records of the claims topic, as bytes on the wire and as values in the code.

Five kinds, each a JSON object with a ``kind`` (docs/exactly-once.md draws who writes which):

- ``plan``: appended by the driver for each plan of a batch; its offset orders the plans
  (``PlanRecord.offset``, claims_log).
- ``stamp``: appended by the driver for each new generation of its group membership, so that
  the tasks of a plan made under an older generation commit under the new one.
- ``claim``: appended by a write task's attempt before its stable read of the group's offsets.
- ``release``: appended by an attempt whose transaction ended, so no later attempt fences its id.
- ``announce``: in layout 2 (claims_layout), a copy of a claim appended to the pipeline's control
  log before the claim itself, by an attempt that is not the first of its task under its plan.

Field names are kept as first written (``plan``, ``attempt``, ``memberships``): claims outlive a
version of the package, and a reader must understand the claims of the one before it. Each record
carries its format (protocol/formats); one in a format this version does not read fails the
attempt that meets it on its own group's claims, and is passed over on another pipeline's (the
claims topic may be shared by pipelines on different versions).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from .formats import readable, stamped, unreadable
from .group_stamp import GroupStamp
from .offset_range import TopicPartitionKey

PLAN, CLAIM, RELEASE, STAMP, ANNOUNCE = "plan", "claim", "release", "stamp", "announce"


@dataclass(frozen=True, order=True)
class AttemptOrder:
    """Which of two attempts of one task is the newer: the later plan, then Spark's later attempt."""

    plan: int  # the offset of the attempt's newest plan record
    attempt: int  # TaskContext.taskAttemptId(): grows within one run (one SparkContext)

    def __str__(self) -> str:
        return f"plan {self.plan} attempt {self.attempt}"


@dataclass(frozen=True)
class Claim:
    """A claim, a release or an announcement of one attempt on a task's input partitions."""

    kind: str
    group: str
    partitions: frozenset[TopicPartitionKey]
    order: AttemptOrder
    transactional_id: str
    task: str
    offset: int = -1
    # The run tokens of the attempt's plans' group stamps: which instance of the pipeline it
    # belongs to. Empty in a claim written without them: it counts as one of this instance's.
    run_tokens: frozenset[str] = frozenset()
    # Names the write slots of the attempt's host (transactional_id_factory; in 0.1.0's claims, of
    # its executor in one application): empty in a claim written without it.
    slots: str = ""
    # The process holding the transactional id's slot when it claimed (its token, as the slot's
    # lock file records it): empty in a claim written without it.
    holder: str = ""

    def to_json(self) -> bytes:
        return _dumps({"kind": self.kind, "group": self.group, "partitions": sorted(self.partitions),
                       "plan": self.order.plan, "attempt": self.order.attempt,
                       "transactional_id": self.transactional_id, "task": self.task,
                       "memberships": sorted(self.run_tokens), "slots": self.slots, "holder": self.holder})

    def same_instance(self, other: "Claim") -> bool:
        return not self.run_tokens or not other.run_tokens or bool(self.run_tokens & other.run_tokens)


def plan_value(group_id: str) -> bytes:
    return _dumps({"kind": PLAN, "group": group_id, "pid": os.getpid()})


def stamp_value(stamp: GroupStamp) -> bytes:
    return _dumps({"kind": STAMP, **stamp.as_json()})


def _dumps(record: dict) -> bytes:
    return json.dumps(stamped(record)).encode()


def parse_record(value: bytes, offset: int, group: str | None = None) -> "Claim | GroupStamp | None":
    """The claim, release or stamp in one record; None for a plan record or anything not ours.
    A record of ``group`` (or of no group it can tell) in a format this version does not read
    raises FormatVersionError; another group's is passed over."""
    try:
        data = json.loads(value)
        kind = data.get("kind")
        if kind in (PLAN, CLAIM, RELEASE, STAMP, ANNOUNCE) and not readable(data):
            return _unreadable(data, offset, group)
        if kind == STAMP:
            return GroupStamp.from_json(data)
        if kind not in (CLAIM, RELEASE, ANNOUNCE):
            return None
        return Claim(kind, data["group"], frozenset((t, p) for t, p in data["partitions"]),
                     AttemptOrder(data["plan"], data["attempt"]), data["transactional_id"], data.get("task", "?"),
                     offset, frozenset(data.get("memberships", ())), str(data.get("slots", "")),
                     str(data.get("holder", "")))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _unreadable(data: dict, offset: int, group: str | None) -> None:
    owner = data.get("group", data.get("group_id"))
    if isinstance(owner, str) and owner != group:
        return None
    raise unreadable(data, f"the claims topic's {data.get('kind')} record at offset {offset} (group {owner!r})")
