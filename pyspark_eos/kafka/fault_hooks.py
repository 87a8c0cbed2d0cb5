"""The points where tests inject faults, and the one way they get in.

Exactly-once is hardest at a few moments of a write task: mid-produce, after the stable read of
the group's offsets, between sending the offsets and committing, and on the driver after every
task committed but before Spark's commit log; and a stable start (G5) hinges on the moment the
group's offsets are held by an open transaction. The tests crash or stall a process at exactly
those moments. The sink reaches them all and the source the last one, so they are named here, in
the layer both import. The runtime never imports test tooling: a handler module is named by the
environment variable ``EOS_KAFKA_FAULT_HOOKS`` (the project's test harness sets it before Spark
starts, so the driver, the executors and their Python workers inherit it). Without it every point
below is one comparison with None.

A handler module provides ``crash_if_armed(point)``, ``stall_if_armed(point)`` and
``is_switched_off(switch) -> bool``.
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType

HOOKS_ENV = "EOS_KAFKA_FAULT_HOOKS"

# Crash points: the process dies there, as under the OOM killer or a machine failure.
WORKER_BEFORE_COMMIT = "worker-before-commit"  # records produced, offsets sent, commit not asked for
EXECUTOR_BEFORE_COMMIT = "executor-before-commit"  # the same moment, the whole executor JVM
DRIVER_AFTER_KAFKA_COMMIT = "driver-after-kafka-commit"  # every task committed, Spark's commit log not written
CRASH_POINTS = (WORKER_BEFORE_COMMIT, EXECUTOR_BEFORE_COMMIT, DRIVER_AFTER_KAFKA_COMMIT)

# Stall points of a write task: the attempt pauses there, as in a long GC pause or a partition.
STALL_BEFORE_PRODUCE = "stall-before-produce"  # transaction begun
STALL_MID_PRODUCE = "stall-mid-produce"  # after its first record
STALL_AFTER_STABLE_READ = "stall-after-stable-read"  # the group's offsets read, nothing sent
STALL_BEFORE_COMMIT = "stall-before-commit"  # offsets sent, commit not yet asked for
STALL_AFTER_COMMIT = "stall-after-commit"  # committed, Spark not yet told
# A progress attempt's records all produced into its open transaction (delivered, in the order
# before claims came first), its group not read yet.
STALL_RECORDS_PRODUCED = "stall-records-produced"
STALL_POINTS = (STALL_BEFORE_PRODUCE, STALL_MID_PRODUCE, STALL_AFTER_STABLE_READ, STALL_BEFORE_COMMIT,
                STALL_AFTER_COMMIT, STALL_RECORDS_PRODUCED)

# A stall point of the stable read of the group's offsets (kafka.group_offsets), which a query
# starting from the group and a write task's replay check both make: an open transaction holds the
# offsets and the reader is about to back off. Kept out of STALL_POINTS, the moments of a write
# task's transaction that the zombie tests stall one by one.
STALL_OFFSETS_PENDING = "stall-offsets-pending"
READ_STALL_POINTS = (STALL_OFFSETS_PENDING,)

# Switches, not faults. While on, write tasks skip attempt fencing, so a test can show the
# duplicates it prevents; or they send no release of their claims, as when a driver dies right
# after its tasks committed and takes their workers with it before their producers delivered the
# releases (sent without waiting); or progress attempts claim only once their records are
# delivered (the order before claims came first), so a test can show the transaction a dead one
# leaves open with no claim to find it by; or retries claim in layout 2 without announcing
# themselves, so that a first attempt claiming after one of them misses it.
ATTEMPT_FENCING_OFF = "attempt-fencing-off"
RELEASES_OFF = "releases-off"
CLAIM_FIRST_OFF = "claim-first-off"
ANNOUNCEMENTS_OFF = "announcements-off"
SWITCHES = (ATTEMPT_FENCING_OFF, RELEASES_OFF, CLAIM_FIRST_OFF, ANNOUNCEMENTS_OFF)


def _load_handler() -> ModuleType | None:
    name = os.environ.get(HOOKS_ENV)
    return importlib.import_module(name) if name else None


_handler = _load_handler()


def crash_point(point: str) -> None:
    if _handler is not None:
        _handler.crash_if_armed(point)


def stall_point(point: str) -> None:
    if _handler is not None:
        _handler.stall_if_armed(point)


def switched_off(switch: str) -> bool:
    return _handler is not None and _handler.is_switched_off(switch)
