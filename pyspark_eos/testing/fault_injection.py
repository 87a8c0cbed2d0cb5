"""Faults on purpose, at the points where exactly-once is hardest, for the tests and the example.

A fault is armed by creating a file named for its point in ``eos-kafka-faults/`` of an executor's
local directory (``arm``). The first process that reaches the point (and matches the fault's
filters) claims the file atomically by renaming it, and then:

- a *crash* point kills with SIGKILL: no cleanup runs, no transaction is aborted, exactly like a
  worker lost to the OOM killer or a machine failure;
- a *stall* point pauses the task attempt, as a long GC pause or a network partition would. With
  ``stop_executor`` the executor JVM is stopped (SIGSTOP) so that it stops answering the driver,
  which declares it lost and retries the task elsewhere, while this Python worker still reaches
  Kafka: it ignores the SIGHUP/SIGTERM that an executor's death sends its workers, as a worker on
  a partitioned host never receives them. It resumes when ``resume_file`` appears or after
  ``seconds``, and goes on with its attempt: a zombie. With ``kill`` the worker kills itself
  (SIGKILL) there instead: a worker lost at exactly that moment of its task.

``enable(directory)`` arms faults in one directory shared by every process instead of each
executor's own (the chaos campaign fires a fault wherever a task first reaches its point).

This module is the handler of the runtime's fault points (``pyspark_eos.kafka.fault_hooks``,
which names them). ``enable()`` installs it for every process started afterwards (the Spark JVM,
executors and Python workers inherit the environment); then an unarmed point costs one failed
``open``, and without ``enable()`` the runtime never loads this module.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Iterator

from ..protocol.executor_identity import executor_id, executor_local_directory
from ..protocol.process_stat import parent_pid
from ..workers.fork_server import STAND_IN_ENV
from ..kafka.fault_hooks import (  # noqa: F401  (the points, re-exported for the tests)
    ATTEMPT_FENCING_OFF, CRASH_POINTS, DRIVER_AFTER_KAFKA_COMMIT, EXECUTOR_BEFORE_COMMIT, HOOKS_ENV, READ_STALL_POINTS,
    CLAIM_FIRST_OFF, RELEASES_OFF, STALL_AFTER_STABLE_READ, STALL_AFTER_COMMIT, STALL_BEFORE_COMMIT,
    STALL_BEFORE_PRODUCE, STALL_MID_PRODUCE, STALL_OFFSETS_PENDING, STALL_POINTS, STALL_RECORDS_PRODUCED, SWITCHES,
    WORKER_BEFORE_COMMIT)

log = logging.getLogger(__name__)


SHARED_DIRECTORY_ENV = "EOS_KAFKA_FAULT_DIR"


def enable(shared_directory: str | os.PathLike | None = None) -> None:
    """Install this module as the fault-hook handler of the Spark processes started from now on;
    with ``shared_directory``, faults are armed there (``arm(point, shared_directory)``) for all
    processes instead of in each executor's local directory."""
    os.environ[HOOKS_ENV] = __name__
    if shared_directory is not None:
        os.environ[SHARED_DIRECTORY_ENV] = str(shared_directory)


def _faults_directory() -> Path:
    shared = os.environ.get(SHARED_DIRECTORY_ENV)
    return (Path(shared) if shared else executor_local_directory()) / _DIRECTORY

POINTS = CRASH_POINTS + STALL_POINTS + READ_STALL_POINTS + SWITCHES
_DIRECTORY = "eos-kafka-faults"
_STALL_LIMIT_S = 900.0  # a stall nobody resumes ends by itself


def arm(point: str, local_directory: str | os.PathLike, **params) -> Path:
    """Arm ``point`` in one executor's local directory.

    ``per_query`` (bool): the fault is taken once by each streaming query (its first task there)
    instead of once in all; ``gather`` (int): the processes that reach the point wait until that
    many have, then each takes the fault: a crash point's last arrival crashes them all (each
    query's driver-side commit is a process of its own: several queries of one driver die between
    their Kafka commits and Spark's commit logs), and a stall's arrivals stall together, their
    executors lost at once.

    ``times`` (int): taken by that many processes one after another, each once (not with
    ``per_query`` or ``gather``).

    Stall parameters: ``kill`` (bool: SIGKILL the worker there instead of stalling it),
    ``stop_executor`` (bool), ``with_executor`` (bool: the stalled worker dies with its executor
    or driver, as a worker on a host that is not partitioned does; by default it ignores the SIGHUP
    and SIGTERM that would tell it), ``resume_file`` (path) or ``seconds``, ``report_dir`` (where
    the stall reports go; default: beside the marker, but a standalone worker deletes a lost
    executor's local directory), and the filters ``partition`` (Spark partition id), ``attempt``
    (TaskContext.attemptNumber()), ``query`` (a streaming query's id), ``batch`` (a streaming
    batch id, or that of the foreachBatch batch a write runs in) and ``from_batch`` (that batch and
    later ones). With ``per_query``, each query's stall reports apart (``stall_reports``).
    """
    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}; use one of {', '.join(POINTS)}")
    directory = Path(local_directory) / _DIRECTORY
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / point
    temporary = directory / f".{point}.tmp"
    temporary.write_text(json.dumps(params))
    os.replace(temporary, marker)
    return marker


def stall_report(marker: Path, stage: str, report_dir: str | os.PathLike | None = None) -> dict | None:
    """What a stall armed at ``marker`` reported at ``stage`` ("stalled" or "resumed"), if it has."""
    path = _report_path(marker, stage, report_dir)
    return json.loads(path.read_text()) if path.exists() else None


def stall_reports(point: str, stage: str, report_dir: str | os.PathLike) -> list[dict]:
    """What the stalls of a ``per_query`` stall at ``point`` reported at ``stage``: one per query."""
    return [json.loads(path.read_text()) for path in sorted(Path(report_dir).glob(f"{point}.query-*.{stage}"))]


@dataclass(frozen=True)
class Stall:
    """A stall armed by ``stalled_until_exit``: what the stalled process reported, and its resume."""

    marker: Path
    report_dir: Path
    resume_file: Path

    def report(self, stage: str = "stalled") -> dict | None:
        """What the stalled process reported at ``stage`` ("stalled" or "resumed"); None until then."""
        return stall_report(self.marker, stage, self.report_dir)

    def resume(self) -> None:
        self.resume_file.touch()


@contextlib.contextmanager
def stalled_until_exit(point: str, local_directory: str | os.PathLike, report_dir: str | os.PathLike,
                       **filters) -> Iterator[Stall]:
    """Arm a stall at ``point`` that lasts until ``resume()`` or the end of the block. On exit an
    unclaimed marker is removed (it would stall a later test's task) and the stalled process, if
    any, resumes."""
    resume = Path(report_dir) / f"{point}.resume"
    resume.unlink(missing_ok=True)  # left by an earlier use: the stall would end at once
    marker = arm(point, local_directory, resume_file=str(resume), report_dir=str(report_dir), **filters)
    stall = Stall(marker, Path(report_dir), resume)
    try:
        yield stall
    finally:
        marker.unlink(missing_ok=True)
        stall.resume()


def _report_path(marker: Path, stage: str, report_dir: str | os.PathLike | None) -> Path:
    return Path(report_dir or marker.parent) / f"{marker.name}.{stage}"


# Switches a stalled process saw when it stalled: a standalone worker deletes a lost executor's
# local directory, switch files included, while the stalled attempt waits to resume.
_latched: set[str] = set()


def is_switched_off(switch: str) -> bool:
    return switch in _latched or (_faults_directory() / switch).exists()


def crash_if_armed(point: str) -> None:
    params = _claim(point)
    if params is None:
        return
    if params.get("gather", 1) > 1:
        _gather(point, params["gather"])  # then each of them kills: the victim is theirs to share
    with contextlib.suppress(ProcessLookupError, RuntimeError):  # a gathered one's JVM may be gone already
        victim = _victim(point)
        log.warning("fault injection: %s, killing pid %d with SIGKILL", point, victim)
        os.kill(victim, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)  # when the victim was an ancestor, go down with it


def stall_if_armed(point: str) -> None:
    params = _claim(point)
    if params is None:
        return
    if params.get("kill"):
        log.warning("fault injection: %s, killing worker pid %d with SIGKILL", point, os.getpid())
        os.kill(os.getpid(), signal.SIGKILL)
    if params.get("gather", 1) > 1:
        _gather(point, params["gather"])
    marker = _faults_directory() / point
    _latched.update(switch for switch in SWITCHES if is_switched_off(switch))
    if not params.get("with_executor"):
        for shutdown in (signal.SIGHUP, signal.SIGTERM):  # a partitioned host never hears of its executor's death
            signal.signal(shutdown, signal.SIG_IGN)
    jvm = _jvm_ancestor(os.getppid()) if params.get("stop_executor") else None
    if jvm is not None:
        os.kill(jvm, signal.SIGSTOP)
    log.warning("fault injection: %s, attempt stalled in pid %d%s", point, os.getpid(),
                f", executor JVM {jvm} stopped" if jvm else "")
    task = _task()
    report_dir = params.get("report_dir")
    if params.get("per_query"):
        marker = marker.with_name(f"{point}.query-{task.get('query')}")
    _report(_report_path(marker, "stalled", report_dir),
            {"pid": os.getpid(), "jvm": jvm, "executor_jvm": _jvm_or_none(), **task})
    _wait_for_resume(params)
    if jvm is not None:
        try:
            os.kill(jvm, signal.SIGCONT)
        except ProcessLookupError:
            pass  # the cluster manager killed the lost executor meanwhile
    log.warning("fault injection: %s, attempt in pid %d resumes", point, os.getpid())
    _report(_report_path(marker, "resumed", report_dir), {"pid": os.getpid(), **task})


def _gather(point: str, count: int) -> None:
    """Wait until ``count`` processes have reached ``point`` (this one included)."""
    arrivals = _faults_directory() / f"{point}.arrived"
    arrivals.mkdir(exist_ok=True)
    (arrivals / str(os.getpid())).touch()
    deadline = time.monotonic() + _STALL_LIMIT_S
    while len(list(arrivals.iterdir())) < count and time.monotonic() < deadline:
        time.sleep(0.1)


def _claim(point: str) -> dict | None:
    marker = _faults_directory() / point
    try:
        params = json.loads(marker.read_text() or "{}")
    except FileNotFoundError:
        return None
    task = _task()
    if any(key in params and params[key] != task.get(key) for key in ("partition", "attempt", "query")):
        return None
    if "batch" in params and str(task.get("batch")) != str(params["batch"]):
        return None
    if "from_batch" in params and int(task.get("batch") or -1) < params["from_batch"]:
        return None
    if params.get("per_query"):
        return params if _first(marker, task.get("query")) else None
    if params.get("gather", 1) > 1:
        return params  # every process that reaches it waits for the others (crash_if_armed)
    try:  # the rename is the claim: exactly one process takes the fault
        os.rename(marker, marker.with_name(f"{point}.taken.{os.getpid()}"))
    except FileNotFoundError:
        return None
    if params.get("times", 1) > 1:  # armed again for the next process to reach it
        arm(point, marker.parent.parent, **{**params, "times": params["times"] - 1})
    return params


def _first(marker: Path, key) -> bool:
    """True for the first process to ask with ``key``: the exclusive creation is the claim."""
    try:
        os.close(os.open(marker.with_name(f"{marker.name}.taken.{key}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def _task() -> dict:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return {}
    return {"partition": context.partitionId(), "attempt": context.attemptNumber(), "executor": executor_id(),
            "task_attempt_id": context.taskAttemptId(), "batch": context.getLocalProperty("streaming.sql.batchId"),
            "query": context.getLocalProperty("sql.streaming.queryId")}


def _wait_for_resume(params: dict) -> None:
    resume_file = params.get("resume_file")
    deadline = time.monotonic() + float(params.get("seconds", _STALL_LIMIT_S))
    while time.monotonic() < deadline and not (resume_file and os.path.exists(resume_file)):
        time.sleep(0.1)


def _report(path: Path, content: dict) -> None:
    # Gathered processes report the same stage at once: each renames a file of its own, or the
    # second rename would find the first's already gone.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(content))
    os.replace(temporary, path)


def _victim(point: str) -> int:
    if point == WORKER_BEFORE_COMMIT:
        return os.getpid()
    # A Python worker is forked by PySpark's daemon, which the JVM (executor, or driver for the
    # driver-side writer) started: the JVM is the grandparent, or the parent without a daemon
    # (or the stand-in's parent, for a daemon forked by pyspark-eos-python's fork server).
    return _jvm_ancestor(os.getppid())


def _jvm_or_none() -> int | None:
    """The JVM this worker runs for (a test decommissions that executor), None outside Spark."""
    try:
        return _jvm_ancestor(os.getppid())
    except (RuntimeError, OSError):
        return None


def _jvm_ancestor(pid: int) -> int:
    # A process forked by pyspark-eos-python's fork server descends from the server; the process
    # Spark started, the JVM's child, stands in for it.
    stand_in = os.environ.get(STAND_IN_ENV)
    for start in (pid, int(stand_in) if stand_in else 1):
        pid = start
        while pid > 1:
            if b"java" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]:
                return pid
            pid = parent_pid(pid)
    raise RuntimeError("fault injection: no JVM among this process's ancestors")
