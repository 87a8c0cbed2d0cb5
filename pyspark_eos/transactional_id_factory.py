"""Deterministic transactional ids: one per (prefix, group, executor, slot).

A Python worker is one task slot of an executor. Its transactional id must be the one its
predecessor in that slot used, so that when a worker dies mid-transaction (kill -9, OOM) its
replacement's ``init_transactions`` aborts the open transaction at once instead of leaving it to
the broker's transaction timeout, and fences the dead worker's producer should it come back.
The slot is the lowest-numbered lock file in the executor's local directory that no live worker
holds: ``flock`` locks die with their process, so a replacement re-acquires exactly the freed slot.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
from itertools import count
from pathlib import Path

from .executor_identity import executor_id
from .provenance import handover_directory

_held: dict[str, tuple[int, int]] = {}  # lock directory -> (pid, slot) held by this process
_fds: list[int] = []  # keeps the slot locks open for the life of the process


def transactional_id(prefix: str, group_id: str | None, executor: str, slot: int) -> str:
    return f"{prefix}.{group_id or 'no-group'}.{executor}.{slot}"


def slot_directory(prefix: str, group_id: str | None) -> Path:
    key = hashlib.sha256(f"{prefix}\0{group_id}".encode()).hexdigest()[:16]
    directory = handover_directory().parent / "eos-kafka-slots" / key
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def acquire_slot(directory: Path) -> int:
    """This process's slot in ``directory``: the same one for as long as the process lives."""
    held = _held.get(str(directory))
    if held is not None and held[0] == os.getpid():
        return held[1]
    for slot in count():
        fd = os.open(directory / f"slot-{slot}.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _fds.append(fd)
        _held[str(directory)] = (os.getpid(), slot)
        return slot
    raise AssertionError("unreachable")


def worker_transactional_id(prefix: str, group_id: str | None) -> str:
    slot = acquire_slot(slot_directory(prefix, group_id))
    return transactional_id(prefix, group_id, executor_id(), slot)
