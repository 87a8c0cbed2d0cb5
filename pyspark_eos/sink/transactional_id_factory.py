"""Deterministic transactional ids: one per (prefix, group, executor, slot).

A slot is one concurrently running write task of an executor. Spark's Python workers come from
a pool shared by the source's read() and the sink's write(), so over time more workers than task
slots may write; the ids must not grow with them. A write task therefore leases the
lowest-numbered free slot for its duration, with an ``flock`` on a lock file in the executor's
local directory: at most (task slots) ids exist, and the kernel frees the lease when a worker
dies, so the next task in that slot uses the dead worker's id. Its ``init_transactions`` then
aborts the transaction the dead worker left open, at once instead of after the broker's
transaction timeout, and fences the dead worker's producer should it come back.

Each lease records who held the slot last. A worker whose cached producer was made for a slot
that another worker has used since knows that producer was fenced by the other's
``init_transactions`` and builds a new one.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import uuid
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Iterator

from .executor_identity import executor_id, executor_local_directory

# Identifies this process as a slot holder (pids are recycled; this is not).
PROCESS_TOKEN = f"{os.getpid()}-{uuid.uuid4().hex}"


@dataclass(frozen=True)
class SlotLease:
    transactional_id: str
    slot: int
    previous_holder: str


def transactional_id(prefix: str, group_id: str | None, executor: str, slot: int) -> str:
    return f"{prefix}.{group_id or 'no-group'}.{executor}.{slot}"


def slot_directory(prefix: str, group_id: str | None) -> Path:
    key = hashlib.sha256(f"{prefix}\0{group_id}".encode()).hexdigest()[:16]
    directory = executor_local_directory() / "eos-kafka-slots" / key
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@contextlib.contextmanager
def lease_slot(prefix: str, group_id: str | None) -> Iterator[SlotLease]:
    """Hold the lowest free slot of this executor for the duration of one write task."""
    directory = slot_directory(prefix, group_id)
    for slot in count():
        with _lease(directory / f"slot-{slot}.lock", wait=False) as previous:
            if previous is None:
                continue
            yield SlotLease(transactional_id(prefix, group_id, executor_id(), slot), slot, previous)
            return


@contextlib.contextmanager
def lease_input_partition(prefix: str, group_id: str, topic: str, partition: int) -> Iterator[SlotLease]:
    """The per-input-partition transactional id (transactionalIdPer=partition, benchmarks only).

    Spark runs a partition's task on any worker of any executor, so the id moves between
    workers: each move fences the previous holder's producer and costs an init_transactions.
    """
    directory = slot_directory(prefix, group_id)
    with _lease(directory / f"partition-{topic}-{partition}.lock", wait=True) as previous:
        yield SlotLease(f"{prefix}.{group_id}.{topic}-{partition}", -1, previous or "")


@contextlib.contextmanager
def _lease(path: Path, wait: bool) -> Iterator[str | None]:
    """Lock ``path`` (or yield None if it is taken and ``wait`` is false); yields its last holder."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        previous = os.pread(fd, 200, 0).decode(errors="replace").strip()
        os.ftruncate(fd, 0)
        os.pwrite(fd, PROCESS_TOKEN.encode(), 0)
        yield previous
    finally:
        os.close(fd)  # releases the lock
