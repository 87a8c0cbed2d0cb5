"""Hand-over of a task's input ranges from the source's read() to the sink's write().

The sink must commit, in its transaction, the end offsets of exactly the input its task read.
Spark runs read() and write() of one task in two Python worker processes on the same executor,
with the same ``TaskContext.taskAttemptId()``. read() writes what it is about to read to a file
named for that attempt in the executor's local directory (``SPARK_LOCAL_DIRS``: removed with the
executor), atomically (write, then rename), before yielding any record. write() collects the
files once its input is exhausted: by then every read() of the task (several after a coalesce or
union) has run. A shuffle between source and sink puts reading and writing in different tasks,
so write() finds nothing, which is how the shuffle is detected.
"""
from __future__ import annotations

import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from .claims_log import PlanRecord
from .executor_identity import executor_local_directory
from .group_stamp import GroupStamp
from .offset_range import OffsetRange

log = logging.getLogger(__name__)

_DIRECTORY = "eos-kafka-provenance"
# Hand-over files of tasks that never reached an eos-kafka write() (another sink, a failed task)
# are removed after this long; a live task's files are never this old.
_STALE_AFTER_S = 24 * 3600
_PRUNE_EVERY_S = 3600
_last_prune = 0.0


@dataclass(frozen=True)
class Provenance:
    """What one read() of a task read: its ranges and the group membership it was planned under."""

    ranges: tuple[OffsetRange, ...]
    group: GroupStamp | None
    fencing: PlanRecord | None = None


def handover_directory() -> Path:
    directory = executor_local_directory() / _DIRECTORY
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def record_read(task_attempt_id: int, provenance: Provenance) -> Path:
    directory = handover_directory()
    _prune(directory)
    name = f"{task_attempt_id}.{os.getpid()}.{uuid.uuid4().hex}.json"
    temporary = directory / f".{name}.tmp"
    temporary.write_text(json.dumps(_to_json(provenance)))
    final = directory / name
    os.replace(temporary, final)
    return final


def collect(task_attempt_id: int) -> tuple[list[Provenance], list[Path]]:
    """Everything the reads of this task attempt recorded, and the files to release afterwards."""
    files = sorted(handover_directory().glob(f"{task_attempt_id}.*.json"))
    return [_from_json(json.loads(path.read_text())) for path in files], files


def release(files: list[Path]) -> None:
    for path in files:
        path.unlink(missing_ok=True)


def _prune(directory: Path) -> None:
    global _last_prune
    now = time.time()
    if now - _last_prune < _PRUNE_EVERY_S:
        return
    _last_prune = now
    for path in directory.glob("*.json"):
        try:
            if now - path.stat().st_mtime > _STALE_AFTER_S:
                path.unlink()
        except FileNotFoundError:
            pass


def _to_json(provenance: Provenance) -> dict:
    group, fencing = provenance.group, provenance.fencing
    return {
        "ranges": [[r.topic, r.partition, r.start, r.end] for r in provenance.ranges],
        "fencing": None if fencing is None else [fencing.topic, fencing.offset, fencing.since, fencing.claims_from],
        "group": None if group is None else group.as_json(),
    }


def _from_json(data: dict) -> Provenance:
    ranges = tuple(OffsetRange(t, p, s, e) for t, p, s, e in data["ranges"])
    fencing = PlanRecord(*data["fencing"]) if data.get("fencing") else None
    group = data["group"]
    if group is None:
        return Provenance(ranges, None, fencing)
    stamp = GroupStamp.from_json(group)
    return Provenance(ranges, stamp, fencing)
