"""Deterministic transactional ids: one per (prefix, group, host, slot).

A slot is held by one running write task of a host, with an ``flock`` on a lock file in the host's
slots directory (executor_identity.host_slots_directory) for the task's duration; the kernel frees
it when a worker dies. The directory is the host's, not an executor's: Spark never reuses an
executor id within an application, so ids named for executors would grow with every executor
dynamic allocation brings, and the broker keeps each id for ``transactional.id.expiration.ms``
(7 days). A host's slots are taken again by the executors that replace removed ones, and by a
restarted application's, whose tasks so also end at once what a dead run left open. Each lease
records who held the slot last, and a task chooses, in order:

1. the lowest slot whose last holder has died: its ``init_transactions`` aborts the transaction a
   dead worker may have left open at once, instead of after the broker's transaction timeout
   (until then read_committed consumers of the output see nothing past it), and fences that
   worker's producer should it come back;
2. the slot its worker's producer was made for, when nobody has used it since: the producer is
   reused as it is, with no ``init_transactions`` round trip (PySpark hands tasks to whichever
   pooled worker is idle, so without this a slot would move between workers and each move would
   cost a new producer);
3. the lowest slot this worker held last or that was never used.

A free slot whose last holder is a live (idle) worker is left to it. So the ids grow to the
number of Python workers of a host that write at the same time or keep a producer, bounded by
PySpark's worker pools, not by the number of tasks or of executors the host ever ran, and a dead
worker's id is taken over by the next task.

A slot's lock file names its holder's token, whether its producer is being made or was made, and
the claims log's offset that producer was initialized after (a plan record its task began under),
if known: an attempt about to fence an id reads there whether a task of this host holds that id
now, and whether its ``init_transactions`` already fenced the claim in question (attempt_fencing;
docs/model/progress_records.pml, the step holder_fenced).
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import itertools
import os
import socket
import time
import uuid
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Iterator

from ..protocol.executor_identity import host_slots_directory
from ..protocol.process_stat import START_TICKS, stat_fields



def _start_time(pid: int) -> str:
    """A process's start time in clock ticks since boot (/proc/<pid>/stat field 22): with the pid it
    names a process even after the pid is recycled."""
    try:
        return stat_fields(pid)[START_TICKS]
    except (OSError, IndexError):
        return "0"


_token: tuple[int, str] | None = None  # (pid, token) of the process that made it


def process_token() -> str:
    """Identifies this process as a slot holder: pid, start time, and a random part. Made in the
    process that asks: a worker forked after this module was imported (by a fork server's daemon,
    pyspark_eos.daemon) is a holder of its own, and two holders sharing a token would share a
    transactional id, each fencing the other."""
    global _token
    pid = os.getpid()
    if _token is None or _token[0] != pid:
        _token = (pid, f"{pid}-{_start_time(pid)}-{uuid.uuid4().hex}")
    return _token[1]


@dataclass(frozen=True)
class SlotLease:
    transactional_id: str
    slot: int
    previous_holder: str
    path: Path | None = None  # the slot's lock file

    def record_producer(self, initialized_after: tuple[str, int] | None) -> None:
        """Record in the slot's lock file, held by this lease, that its producer was made (its
        init_transactions returned), after a record of a claims topic was appended: (topic,
        offset); None: after what is not known."""
        self._write(MADE if initialized_after is None else (str(initialized_after[1]), initialized_after[0]))

    def record_failure(self) -> None:
        """Record that no producer was made and none is being made: nobody waits for one, and the
        lease proves nothing about the slot's transactional id (fence_decision.holder_fenced)."""
        self._write(())

    def _write(self, fields) -> None:
        if self.path is None:
            return
        fd = os.open(self.path, os.O_WRONLY)
        try:
            _write_holder(fd, fields)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class SlotHolder:
    """What a slot's lock file says of its holder now."""

    token: str  # "" while nobody ever held it
    # The claims topic's record (topic, offset) its producer was initialized after, if recorded.
    initialized_after: tuple[str, int] | None = None
    busy: bool = False  # a running task holds the slot
    pending: bool = False  # its producer is being made, and will be recorded
    # Its producer was made: its init_transactions on the slot's id returned. A token alone (a
    # lease whose producer failed, or one of a version that recorded no more) says nothing of it.
    made: bool = False

    @staticmethod
    def parse(text: str, busy: bool = False) -> "SlotHolder":
        token, *rest = text.split() or [""]
        after = (rest[1], int(rest[0])) if len(rest) == 2 and rest[0].isdigit() else None
        return SlotHolder(token, after, busy, rest == [PENDING], after is not None or rest == list(MADE))


# Written after the holder's token: by its lease (its producer is being made), and by
# record_producer when the producer is made after no known record.
PENDING = "?"
MADE = (".",)
# A lock file's most: a token, an offset and a topic name (at most 249 characters).
_HOLDER_BYTES = 1024


def transactional_id(prefix: str, group_id: str | None, host: str, slot: int) -> str:
    """``host``: the name of the host's slots (slots_name)."""
    return f"{prefix}.{group_id or 'no-group'}.{host}.{slot}"


def id_scope(group_id: str | None, txn_app_id: str | None, query_id: str | None) -> str | None:
    """What a transactional id names besides its prefix: the group, or else the write's app id or
    streaming query, so that two pipelines without a group (a host's slots serve every
    application) never share ids and fence each other; None: ``no-group``. ``query_id`` "" gives
    what the ids of every streaming query share (the driver's checks know no query id)."""
    if group_id:
        return group_id
    if txn_app_id:
        return f"app-{txn_app_id}"
    return None if query_id is None else f"query-{query_id}"


# The slot directory of each id stem (all but the slot's number) this process leased under: where
# an attempt finds which process holds an id of its host now (current_holder).
_directories: dict[str, Path] = {}


def slots_name() -> str:
    """Names this host's slots directory in transactional ids and claims: the same transactional id
    under the same name was held by one process at a time."""
    return _slots_name(host_slots_directory())


@functools.lru_cache(maxsize=None)
def _slots_name(root: Path) -> str:
    """A token made once per directory, with the host's name and boot: a directory copied to
    another host (a cloned machine image) or kept over a reboot (pids start over) names other
    slots, whose lock files a process here cannot see held."""
    root.mkdir(parents=True, exist_ok=True)
    name = root / "name"
    if not name.exists():
        draft = root / f".name.{process_token()}"
        draft.write_text(uuid.uuid4().hex)
        try:
            os.link(draft, name)  # the first to link wins; every other process reads its token
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    seed = "\0".join((socket.gethostname(), _boot_id(), name.read_text().strip()))
    return hashlib.sha256(seed.encode()).hexdigest()[:12]


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def slot_directory(prefix: str, group_id: str | None) -> Path:
    key = hashlib.sha256(f"{prefix}\0{group_id}".encode()).hexdigest()[:16]
    directory = host_slots_directory() / key
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@contextlib.contextmanager
def lease_slot(prefix: str, group_id: str | None, preferred: int | None = None) -> Iterator[SlotLease]:
    """Hold a slot of this host for the duration of one write task (see the module's docs).

    ``preferred``: the slot this worker's producer was made for. The lease says its producer is
    being made until the task records it (SlotLease.record_producer, record_failure).
    """
    directory = slot_directory(prefix, group_id)
    candidates = itertools.chain(_orphaned(directory), [] if preferred is None else [preferred], count())
    for slot in candidates:
        with _lease(directory / f"slot-{slot}.lock", _may_take, PENDING) as previous:
            if previous is None:
                continue
            lease = SlotLease(transactional_id(prefix, group_id, slots_name(), slot), slot, previous,
                              directory / f"slot-{slot}.lock")
            _directories[lease.transactional_id.rpartition(".")[0]] = directory
            yield lease
            return


# How long an attempt waits for a running task's producer to be ready before it reads the slot's
# holder: a producer is made in well under a second, and the wait only spans that.
PRODUCER_READY_WAIT_S = 10.0


@contextlib.contextmanager
def current_holder(transactional_id: str, wait_s: float = PRODUCER_READY_WAIT_S) -> Iterator[SlotHolder | None]:
    """The holder the slot of ``transactional_id`` names now, the slot kept locked meanwhile when
    no task holds it, so that no task takes it over while the caller acts on the answer; None for
    an id of slots this process never leased under (another host, another sink). A running
    task whose producer is being made is waited for, up to ``wait_s``."""
    stem, _, slot = transactional_id.rpartition(".")
    directory = _directories.get(stem)
    try:
        fd = os.open(directory / f"slot-{int(slot)}.lock", os.O_CREAT | os.O_RDWR, 0o644)
    except (TypeError, ValueError, OSError):
        yield None
        return
    try:
        holder = _read_holder(fd)
        deadline = time.monotonic() + wait_s
        while holder.busy and _being_made(holder) and time.monotonic() < deadline:
            time.sleep(0.01)
            holder = _read_holder(fd)
        yield holder
    finally:
        os.close(fd)


def _being_made(holder: SlotHolder) -> bool:
    """A live holder whose producer is being made. (A slot with no holder named may be a lease
    writing its token, or another attempt fencing a free slot for as long as that takes: not
    waited for.)"""
    return holder.pending and _alive(holder.token)


def _write_holder(fd: int, fields: tuple[str, ...]) -> None:
    """This process as the slot's holder, with ``fields`` after its token (SlotHolder.parse): written
    over what was there, then cut, so that a reader never sees the file empty."""
    text = " ".join((process_token(), *fields)).encode()
    os.pwrite(fd, text, 0)
    os.ftruncate(fd, len(text))


def _read_holder(fd: int) -> SlotHolder:
    """The slot's holder, locking it first when no task holds it (a lock this fd then keeps)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        busy = False
    except BlockingIOError:  # held by a running task: it keeps it
        busy = True
    return SlotHolder.parse(os.pread(fd, _HOLDER_BYTES, 0).decode(errors="replace"), busy)


def _orphaned(directory: Path) -> list[int]:
    """Slots whose last holder has died (read without locking: ``_lease`` checks again)."""
    slots = []
    for path in directory.glob("slot-*.lock"):
        holder = SlotHolder.parse(path.read_text(errors="replace")).token
        if holder and holder != process_token() and not _alive(holder):
            slots.append(int(path.stem.removeprefix("slot-")))
    return sorted(slots)


def _may_take(previous: str) -> bool:
    """A free slot is ours to take if we held it last, nobody ever did, or its last holder is dead."""
    return previous == process_token() or not previous or not _alive(previous)


def _alive(token: str) -> bool:
    pid, started, _ = (token.split("-", 2) + ["", ""])[:3]
    if not pid.isdigit():
        return False
    if started != "0":
        return _start_time(int(pid)) == started
    try:  # no start time where there is no /proc: the pid alone
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


@contextlib.contextmanager
def _lease(path: Path, take, mark: str) -> Iterator[str | None]:
    """Lock ``path`` and yield its last holder, recording this process as the new one (and
    ``mark``); yield None if it is locked or ``take(last holder)`` declines it."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        previous = SlotHolder.parse(os.pread(fd, _HOLDER_BYTES, 0).decode(errors="replace")).token
        if not take(previous):
            yield None  # left as it was: its holder's producer stays valid
            return
        _write_holder(fd, (mark,) if mark else ())
        yield previous
    finally:
        os.close(fd)  # releases the lock
