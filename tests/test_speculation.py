"""Exactly-once with Spark's speculative execution on.

A write task stalls after it has read the group's committed offsets, with its executor JVM
stopped (SIGSTOP), as on a host cut off by a network partition: Spark's kill of that attempt
cannot reach it. Spark launches a speculative copy on the other host, which claims the task's
input (fencing the straggler's transactional id) and commits the task's output and offsets. The
straggler then resumes, a zombie that has already passed its check of the group's offsets, and
goes on to send its offsets and commit: the broker must refuse it as fenced, and the output must
still hold every input record exactly once. The straggler's own log shows that it got that far
and was fenced there; without attempt fencing it commits its batch a second time (the control).

Spark never launches a speculative copy on a host where an attempt of the task runs, so this
runs on a standalone cluster with its workers on two loopback addresses (standalone_spark.py).
The network timeout stays at Spark's default (120 s): the stopped executor is not declared lost
during the test, so what retries the task is speculation, not executor loss.
"""
from __future__ import annotations

import logging
import os
import re
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from pyspark_eos.testing.fault_injection import ATTEMPT_FENCING_OFF, STALL_AFTER_STABLE_READ, arm, stall_report
from pyspark_eos.testing.local_spark import executor_local_dirs, wait_for_executors

from .kafka_tools import wait_until
from .spark_tools import Pipeline, eos_pipeline
from .standalone_spark import (StandaloneCluster, TaskAttempt, process_alive, speculative_attempts, task_attempts,
                               ui_conf)

log = logging.getLogger(__name__)

SPECULATION = {
    "spark.speculation": "true",
    "spark.speculation.interval": "100ms",
    # With 3 write tasks per batch: speculate once one has finished and another runs 1.5 times
    # as long, and at least 3 s. A healthy first attempt of task 0 copied sooner (a new worker's
    # producer takes a second or more to start) can lose before it reaches the stall, which then
    # falls to a later batch.
    "spark.speculation.quantile": "0.5",
    "spark.speculation.multiplier": "1.5",
    "spark.speculation.minTaskRuntime": "3s",
    # Spark >= 3.4 copies by default only tasks it finds inefficient by their progress rate.
    "spark.speculation.efficiency.enabled": "false",
    # A killed task's executor waits for its Python worker's answer, not for the kill, and SIGKILLs
    # the worker this long after the kill arrives (PythonRunner's monitor thread). The straggler's
    # kill waits in its stopped executor and arrives as it resumes: with Spark's default (2 s) that
    # SIGKILL races the straggler's send-offsets and commit. Longer than the test waits, it loses.
    "spark.python.task.killTimeout": "15min",
    # A task may fetch a broadcast block from the stopped executor, which answers nothing: after 10 s,
    # not Spark's 120 s, it fetches it from another holder (the driver), and the stage goes on.
    "spark.shuffle.io.connectionTimeout": "10s",
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
    "spark.pyspark.python": sys.executable,
    "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
}

# The zombie's transaction stays open while it is stalled: the broker must not abort it by
# timeout before it resumes, or there would be nothing left for the sink to protect against.
SINK_OPTIONS = {"kafka.transaction.timeout.ms": 60000}
OFFSETS_PER_BATCH = 21  # 63 input offsets (7 transactions x 3 partitions x (2 records + marker)): 3 batches

# The straggler's outcome, as its write task logs it (python_logging's format: date, time, pid,
# level, logger, message). A producer is dropped after a fatal error: after the stable read, only
# send-offsets and commit can meet one; librdkafka's own line (without a pid) names the error.
_LOG_LINE = re.compile(r"^\S+ \S+ (?P<pid>\d+) [A-Z]+ \S+: (?P<message>.*)$")
FENCED, COMMITTED = "was fenced", "committed"
_OUTCOMES = {FENCED: re.compile(r"^dropping transactional producer \S+ after a fatal error"),
             COMMITTED: re.compile(r": committed \d+ record\(s\) with ")}
RDKAFKA_FENCED = "This instance has been fenced by a newer instance"


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory):
    # The executors' Python workers log with their pid: the straggler's lines are told from the rest.
    with StandaloneCluster(tmp_path_factory.mktemp("standalone"), python_log_level="INFO") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def speculative_spark(spark_sessions, standalone_cluster):
    """Spark with speculation on the standalone cluster: two executors of one core on two hosts."""
    began = time.monotonic()
    try:
        session = spark_sessions.get(standalone_cluster.master_url, {**SPECULATION, **ui_conf()})
        executors = wait_for_executors(session, 2, timeout=180)
        log.info("speculative session up in %.0f s: executors %s, UI %s", time.monotonic() - began, sorted(executors),
                 session.sparkContext.uiWebUrl)
        yield session
    finally:
        spark_sessions.stop()  # the cluster is stopped after this, with no application left on it


@dataclass
class StragglerRun:
    pipeline: Pipeline
    query: object  # the StreamingQuery, still running or finished
    stalled: TaskAttempt  # the straggler's attempt
    pid: int  # its Python worker
    outcome: str | None  # FENCED, COMMITTED, or None: it ended without logging either
    log: list[str]  # its executor's log from the stall to the outcome (the straggler held its one slot)

    def shown(self) -> str:
        stack_trace = ("\tat ", "\t... ", "Caused by")
        lines = [line for line in self.log if line.strip() and not line.startswith(stack_trace)]
        shown = "\n  ".join(lines[:30])
        return f"the straggler (pid {self.pid}) {self.outcome or 'ended without an outcome'}; its executor logged:\n  {shown}"


@pytest.mark.spark_standalone
def test_a_stalled_write_tasks_speculative_copy_commits_and_the_resumed_straggler_is_fenced_at_its_commit(
        speculative_spark, standalone_cluster, kafka, tmp_path):
    with _straggling_query(speculative_spark, standalone_cluster, kafka, tmp_path) as run:
        assert run.outcome == FENCED, run.shown()
        assert any(RDKAFKA_FENCED in line for line in run.log), run.shown()
        assert run.query.awaitTermination(300), "the query did not finish in 300 s"  # raises if it failed

    speculative = speculative_attempts(speculative_spark)
    log.info("the query finished; speculative attempts: %s", speculative)
    copies = _copies_of(run.stalled, speculative)
    assert any(c.status == "SUCCESS" and c.host != run.stalled.host for c in copies), \
        f"no speculative copy of the stalled {run.stalled} succeeded on the other host: {copies}"
    run.pipeline.assert_exactly_once()


@pytest.mark.spark_standalone
def test_without_attempt_fencing_the_resumed_straggler_commits_its_batch_a_second_time(
        speculative_spark, standalone_cluster, kafka, tmp_path):
    with _straggling_query(speculative_spark, standalone_cluster, kafka, tmp_path, fencing=False) as run:
        assert run.outcome == COMMITTED, run.shown()
    values = run.pipeline.output_values()
    assert len(values) > len(set(values)), "the straggler's records should appear twice without attempt fencing"


@contextmanager
def _straggling_query(spark, cluster: StandaloneCluster, kafka, tmp_path: Path, fencing: bool = True):
    """The pipeline's query, once its straggler has resumed and committed or failed; stopped on the
    way out if it still runs."""
    started = time.monotonic()
    pipeline = Pipeline(kafka, tmp_path)
    local_dirs = sorted(executor_local_dirs(spark))
    assert len(local_dirs) == 2, f"expected one local directory per executor, got {local_dirs}"
    resume = tmp_path / "resume"
    # Task 0's first attempt stalls on whichever executor runs it; the other marker is removed
    # as soon as one is claimed, so that no later batch stalls the other executor too.
    markers = [arm(STALL_AFTER_STABLE_READ, local_dir, partition=0, attempt=0, stop_executor=True,
                   resume_file=str(resume), report_dir=str(tmp_path)) for local_dir in local_dirs]
    switches = [] if fencing else [arm(ATTEMPT_FENCING_OFF, local_dir) for local_dir in local_dirs]
    log.info("phase 0 (%.0f s): armed %s%s in %s", time.monotonic() - started, STALL_AFTER_STABLE_READ,
             "" if fencing else f" and {ATTEMPT_FENCING_OFF}", ", ".join(local_dirs))

    # Pipeline.run's query, started here so that this thread can watch it run (a query started
    # from another thread does not find the eos-kafka format: the JVM's active session is per thread).
    writer = eos_pipeline(spark, pipeline.bootstrap, pipeline.input, pipeline.output, pipeline.group,
                          sink_options=SINK_OPTIONS, startingOffsets="earliest", maxOffsetsPerTrigger=OFFSETS_PER_BATCH)
    query = writer.option("checkpointLocation", pipeline.checkpoint).trigger(availableNow=True).start()
    pid = None
    try:
        try:
            marker, stalled = _straggler_stalls_and_its_copy_runs(spark, query, markers, tmp_path, started)
        finally:
            # Phase 3: the straggler resumes (its executor too) and goes on with its attempt: a zombie.
            resume.touch()
            _remove(markers)
        pid = stall_report(marker, "stalled", tmp_path)["pid"]
        wait_until(lambda: stall_report(marker, "resumed", tmp_path), 60, "the straggler to resume")
        outcome, lines = _straggler_ends(cluster, spark, stalled, pid)
        log.info("phase 3 (%.0f s): the straggler (pid %d) resumed and %s", time.monotonic() - started, pid,
                 outcome or "ended without an outcome")
        yield StragglerRun(pipeline, query, stalled, pid, outcome, lines)
    finally:
        # The executors' local directories outlive the test: the next one's markers start unclaimed.
        _remove(switches + [taken for marker in markers for taken in _taken(marker)])
        if query.isActive:
            query.stop()
        if switches and pid is not None and process_alive(pid):
            # It latched the switch when it stalled and, having committed, waits in Spark's pool of
            # idle workers: it must not write for a later test.
            os.kill(pid, signal.SIGKILL)


def _straggler_stalls_and_its_copy_runs(spark, query, markers: list[Path], reports: Path,
                                        started: float) -> tuple[Path, TaskAttempt]:
    """Phases 1 and 2: the armed marker the straggler claimed, and the straggler's attempt."""
    # Phase 1: the first attempt of task 0 claims the stall and stops its executor.
    wait_until(lambda: _claimed(markers) or not query.isActive, 240, "a write attempt of task 0 to reach the stall")
    _remove(markers)
    taken = _claimed(markers)
    assert taken, f"the query ended without any attempt reaching the stall; its error: {query.exception()}"
    assert len(taken) == 1, f"both executors stalled (a later batch's task 0 claimed the other marker): {taken}"
    (marker,) = taken
    report = wait_until(lambda: stall_report(marker, "stalled", reports), 60, "the stalled attempt's report")
    log.info("phase 1 (%.0f s): task 0 stalled: %s", time.monotonic() - started, report)

    # Phase 2: Spark copies it to the other host, where the copy commits the task.
    stalled = wait_until(lambda: next((t for t in task_attempts(spark) if t.task_id == report["task_attempt_id"]),
                                      None), 60, "the stalled attempt in the driver's REST API")
    wait_until(lambda: any(c.status == "SUCCESS" for c in _copies_of(stalled, task_attempts(spark)))
               or not query.isActive, 240, "a speculative copy of the stalled task to succeed, or the query to end")
    log.info("phase 2 (%.0f s): stalled %s; its speculative copies: %s; the query %s", time.monotonic() - started,
             stalled, _copies_of(stalled, task_attempts(spark)), "runs on" if query.isActive else "has ended")
    return marker, stalled


def _straggler_ends(cluster: StandaloneCluster, spark, stalled: TaskAttempt, pid: int) -> tuple[str | None, list[str]]:
    """The straggler's outcome and its executor's log up to it, once it logged one or its process
    ended (a worker that committed stays in Spark's pool of idle workers)."""
    def ended():
        gone = not process_alive(pid)  # before reading: a line logged just before it exits is read
        outcome, lines = _outcome(_log_from_stall(cluster, spark, stalled, pid), pid)
        return (outcome, lines) if outcome or gone else None

    return wait_until(ended, 120, f"the resumed straggler (pid {pid}) to commit, fail or exit", interval=0.5)


def _log_from_stall(cluster: StandaloneCluster, spark, attempt: TaskAttempt, pid: int) -> list[str]:
    stderr = cluster.work_dir(attempt.host) / spark.sparkContext.applicationId / attempt.executor_id / "stderr"
    lines = stderr.read_text(errors="replace").splitlines() if stderr.exists() else []
    first = next((i for i, line in enumerate(lines) if f"attempt stalled in pid {pid}" in line), len(lines))
    return lines[first:]


def _outcome(lines: list[str], pid: int) -> tuple[str | None, list[str]]:
    """The outcome ``pid`` logged first, and ``lines`` up to it (all of them without one)."""
    for i, line in enumerate(lines):
        outcome = _told(line, pid)
        if outcome is not None:
            return outcome, lines[:i + 1]
    return None, lines


def _told(line: str, pid: int) -> str | None:
    match = _LOG_LINE.match(line)
    if match is None or match["pid"] != str(pid):
        return None
    return next((outcome for outcome, said in _OUTCOMES.items() if said.search(match["message"])), None)


def _claimed(markers: list[Path]) -> list[Path]:
    """The armed markers some write attempt has claimed."""
    return [marker for marker in markers if _taken(marker)]


def _taken(marker: Path) -> list[Path]:
    """``marker`` as a write attempt that claimed it renamed it (``<point>.taken.<pid>``)."""
    return list(marker.parent.glob(f"{marker.name}.taken.*"))


def _remove(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def _copies_of(stalled: TaskAttempt, attempts: list[TaskAttempt]) -> list[TaskAttempt]:
    return [t for t in attempts if (t.stage_id, t.stage_attempt, t.index) == (stalled.stage_id, stalled.stage_attempt,
                                                                            stalled.index) and t.speculative]
