"""Exactly-once with Spark's speculative execution on.

A write task stalls after it has read the group's committed offsets, with its executor JVM
stopped (SIGSTOP), as on a host cut off by a network partition: Spark's kill of that attempt
cannot reach it. Spark launches a speculative copy on the other host, which commits the task's
output and offsets. The straggler then resumes, a zombie that has already passed its check of
the group's offsets, and goes on towards its own commit. The output must still hold every input
record exactly once.

Spark never launches a speculative copy on a host where an attempt of the task runs, so this
runs on a standalone cluster with its workers on two loopback addresses (standalone_spark.py).
The network timeout stays at Spark's default (120 s): the stopped executor is not declared lost
during the test, so what retries the task is speculation, not executor loss.
"""
from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import pytest

from pyspark_eos.testing.fault_injection import STALL_AFTER_STABLE_READ, arm, stall_report
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
    # as long (at least 1 s, so that healthy tasks are rarely copied).
    "spark.speculation.quantile": "0.5",
    "spark.speculation.multiplier": "1.5",
    "spark.speculation.minTaskRuntime": "1s",
    # Spark >= 3.4 copies by default only tasks it finds inefficient by their progress rate.
    "spark.speculation.efficiency.enabled": "false",
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


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory):
    with StandaloneCluster(tmp_path_factory.mktemp("standalone")) as cluster:
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


def _claimed(markers: list[Path]) -> list[Path]:
    """The armed markers some write attempt has claimed (renamed to ``<point>.taken.<pid>``)."""
    return [marker for marker in markers if any(marker.parent.glob(f"{marker.name}.taken.*"))]


def _disarm(markers: list[Path]) -> None:
    for marker in markers:
        marker.unlink(missing_ok=True)


def _copies_of(stalled: TaskAttempt, attempts: list[TaskAttempt]) -> list[TaskAttempt]:
    return [t for t in attempts if (t.stage_id, t.stage_attempt, t.index) == (stalled.stage_id, stalled.stage_attempt,
                                                                            stalled.index) and t.speculative]


def _straggler_log(cluster: StandaloneCluster, spark, attempt: TaskAttempt, pid: int) -> list[str]:
    """What the straggler's executor logged from the stall on (stack traces left out)."""
    stderr = cluster.work_dir(attempt.host) / spark.sparkContext.applicationId / attempt.executor_id / "stderr"
    if not stderr.exists():
        return [f"(no {stderr})"]
    lines = stderr.read_text(errors="replace").splitlines()
    first = next((i for i, line in enumerate(lines) if f"attempt stalled in pid {pid}" in line), len(lines))
    stack_trace = ("\tat ", "\t... ", "Caused by")
    return [line for line in lines[first:] if line.strip() and not line.startswith(stack_trace)][:12]


@pytest.mark.spark_standalone
def test_a_stalled_write_tasks_speculative_copy_commits_and_the_resumed_straggler_duplicates_nothing(
        speculative_spark, standalone_cluster, kafka, tmp_path):
    spark = speculative_spark
    started = time.monotonic()
    pipeline = Pipeline(kafka, tmp_path)
    local_dirs = sorted(executor_local_dirs(spark))
    assert len(local_dirs) == 2, f"expected one local directory per executor, got {local_dirs}"
    resume = tmp_path / "resume"
    # Task 0's first attempt stalls on whichever executor runs it; the other marker is removed
    # as soon as one is claimed, so that no later batch stalls the other executor too.
    markers = [arm(STALL_AFTER_STABLE_READ, local_dir, partition=0, attempt=0, stop_executor=True,
                   resume_file=str(resume)) for local_dir in local_dirs]
    log.info("phase 0 (%.0f s): armed %s in %s", time.monotonic() - started, STALL_AFTER_STABLE_READ,
             ", ".join(local_dirs))

    # Pipeline.run's query, started here so that this thread can watch it run (a query started
    # from another thread does not find the eos-kafka format: the JVM's active session is per thread).
    writer = eos_pipeline(spark, pipeline.bootstrap, pipeline.input, pipeline.output, pipeline.group,
                          sink_options=SINK_OPTIONS, startingOffsets="earliest", maxOffsetsPerTrigger=OFFSETS_PER_BATCH)
    query = writer.option("checkpointLocation", pipeline.checkpoint).trigger(availableNow=True).start()
    try:
        try:
            marker, stalled = _straggler_stalls_and_its_copy_runs(spark, query, markers, started)
        finally:
            # Phase 3: the straggler resumes (its executor too) and goes on with its attempt: a zombie.
            resume.touch()
            _disarm(markers)
        zombie = stall_report(marker, "stalled")["pid"]
        wait_until(lambda: not process_alive(zombie), 120, f"the resumed straggler (pid {zombie}) to exit")
        resumed = stall_report(marker, "resumed")
        log.info("phase 3 (%.0f s): the straggler (pid %d) resumed (%s) and exited; its executor logged:\n  %s",
                 time.monotonic() - started, zombie, resumed,
                 "\n  ".join(_straggler_log(standalone_cluster, spark, stalled, zombie)))
        assert resumed is not None, f"the straggler (pid {zombie}) ended without resuming its attempt"
        assert query.awaitTermination(300), "the query did not finish in 300 s"  # raises if it failed
    finally:
        if query.isActive:  # only after a failure above
            query.stop()

    speculative = speculative_attempts(spark)
    log.info("phase 4 (%.0f s): the query finished; speculative attempts: %s", time.monotonic() - started, speculative)
    assert speculative, "Spark launched no speculative task attempt"
    copies = _copies_of(stalled, speculative)
    assert any(c.status == "SUCCESS" and c.host != stalled.host for c in copies), \
        f"no speculative copy of the stalled {stalled} succeeded on the other host: {copies}"
    pipeline.assert_exactly_once()


def _straggler_stalls_and_its_copy_runs(spark, query, markers: list[Path],
                                        started: float) -> tuple[Path, TaskAttempt]:
    """Phases 1 and 2: the armed marker the straggler claimed, and the straggler's attempt."""
    # Phase 1: the first attempt of task 0 claims the stall and stops its executor.
    wait_until(lambda: _claimed(markers) or not query.isActive, 240, "a write attempt of task 0 to reach the stall")
    _disarm(markers)
    taken = _claimed(markers)
    assert taken, f"the query ended without any attempt reaching the stall; its error: {query.exception()}"
    assert len(taken) == 1, f"both executors stalled (a later batch's task 0 claimed the other marker): {taken}"
    (marker,) = taken
    report = wait_until(lambda: stall_report(marker, "stalled"), 60, "the stalled attempt's report")
    log.info("phase 1 (%.0f s): task 0 stalled: %s", time.monotonic() - started, report)

    # Phase 2: Spark copies it to the other host, where the copy commits the task.
    stalled = wait_until(lambda: next((t for t in task_attempts(spark) if t.task_id == report["task_attempt_id"]),
                                      None), 60, "the stalled attempt in the driver's REST API")
    wait_until(lambda: any(c.status == "SUCCESS" for c in _copies_of(stalled, task_attempts(spark)))
               or not query.isActive, 240, "a speculative copy of the stalled task to succeed, or the query to end")
    log.info("phase 2 (%.0f s): stalled %s; its speculative copies: %s; the query %s", time.monotonic() - started,
             stalled, _copies_of(stalled, task_attempts(spark)), "runs on" if query.isActive else "has ended")
    return marker, stalled
