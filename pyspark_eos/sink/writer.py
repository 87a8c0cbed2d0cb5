"""``df.writeStream.format("eos-kafka")`` and ``df.write.format("eos-kafka")``.

Spark rebuilds the writer on the driver for every micro-batch and runs commit/abort in a fresh
driver process, so nothing here holds state between batches: each task's Kafka transaction is
complete when its write() returns, and the driver side only reports. Where PySpark offers the
Arrow writers (4.1+ for streaming) the tasks receive Arrow record batches, several times faster
than Rows.
"""
from __future__ import annotations

import logging
from collections import Counter

from pyspark.sql import datasource

from ..errors import EosKafkaError
from ..kafka import driver_resources, fault_hooks as faults
from ..protocol.claims_log import ClaimsLog, PlanRecord, ensure_claims_topic
from .attempt_fencing import lookback_ms
from .commit_decision import TaskOutcome
from .options import SinkOptions
from .records import columns_from_arrow, columns_from_rows
from .transactional_writer import write_task

log = logging.getLogger(__name__)

_StreamBase = getattr(datasource, "DataSourceStreamArrowWriter", datasource.DataSourceStreamWriter)
_BatchBase = getattr(datasource, "DataSourceArrowWriter", datasource.DataSourceWriter)


REPLAY = "a replay of this batch"
RERUN = "a rerun of this write"


def _records(writer_base, iterator, options: SinkOptions):
    arrow = writer_base.__name__.endswith("ArrowWriter")
    return (columns_from_arrow if arrow else columns_from_rows)(iterator, options.topic)


def _summary(messages) -> str:
    done = [m for m in messages if m is not None]
    outcomes = Counter(m.outcome.value for m in done)
    records = sum(m.records for m in done if m.outcome is TaskOutcome.COMMITTED)
    return f"{len(done)} task(s): {dict(outcomes)}; {records} record(s) committed"


def _failure_summary(messages, options: SinkOptions, rerun: str) -> str:
    """What a failed batch leaves visible. Each task commits its own transaction, so the tasks that
    finished before another one failed stay committed; Spark gives a failed task no message."""
    committed = [m for m in messages if m is not None and m.outcome is TaskOutcome.COMMITTED]
    records = sum(m.records for m in committed)
    failed = sum(m is None for m in messages)
    text = (f"{failed} of {len(messages)} task(s) failed or did not finish; "
            f"{len(committed)} task(s) had already committed {records} record(s)")
    if options.commits_input_offsets:
        text += f" with their input offsets: those records stay visible, and {rerun} will not write them again"
    elif options.records_progress and rerun == REPLAY:
        text += f" with their progress: those records stay visible, and {rerun} will not write them again"
    elif options.records_progress:
        text += (": those records stay visible. A rerun with the same txnAppId and txnVersion, or Spark's replay "
                 "of the foreachBatch batch this write runs in, will not write them again; a rerun without either "
                 "writes them again")
    else:
        text += (f": those records stay visible, and {rerun} writes them again (without kafka.group.id the "
                 "sink commits no input offsets)")
    return f"{text} ({_summary(messages)})"


def open_progress_plan(options: SinkOptions) -> PlanRecord:
    """The driver's plan record for one micro-batch's write (task_progress): Spark builds the writer
    again for every batch, a replayed one too, so a later run's attempts of a task carry a newer
    plan than any zombie of an earlier run (attempt_fencing). One claims log per driver process
    and configuration (driver_resources). A named pipeline's goes to its own control log (layout 2:
    its tasks find their look-back themselves, progress_claims); any other's to the shared topic,
    with the look-back its attempts read."""
    held = driver_resources.use(options.bootstrap_servers, options.kafka)
    pipeline = options.pipeline
    claims = held.client(f"claims log {options.claims_topic} {pipeline}", lambda: ClaimsLog(
        options.bootstrap_servers, options.kafka, options.claims_topic, pipeline))
    group = f"{options.transactional_id_prefix}.progress"
    if pipeline is None:
        return claims.open_plan(group, lookback_ms=lookback_ms(options.transaction_timeout_ms))
    # The tasks' progress offsets are the shared topic's (task_progress), and an attempt whose task
    # last committed on it claims there too: it must exist.
    held.fact(f"claims topic {options.claims_topic}",
              lambda: ensure_claims_topic(options.bootstrap_servers, options.kafka, options.claims_topic) or True)
    return claims.open_plan(group)


class _PlannedWriter:
    """Spark builds a writer on the driver for every micro-batch or batch write and pickles it for
    the write's tasks. Without input offsets to commit, they commit their own progress, ordered by
    the write's plan record (task_progress), appended here. Spark also builds a writer to call
    commit() or abort(), which is never pickled and needs no plan record."""

    options: SinkOptions
    progress_plan = None

    def __getstate__(self) -> dict:
        if self.options.records_progress and self.progress_plan is None:
            self.progress_plan = open_progress_plan(self.options)
        return self.__dict__

    def _write(self, records, batch_write: bool):
        if self.options.records_progress and self.progress_plan is None:
            # Never write without it: the task would commit no progress, and a replay would write again.
            raise EosKafkaError("this write task got no plan record for its batch from the driver (the sink's writer "
                                "reached it without being pickled); nothing was written. Report this as a bug")
        return write_task(records, self.options, self.progress_plan, batch_write)


class EosKafkaStreamWriter(_PlannedWriter, _StreamBase):
    def __init__(self, options: SinkOptions):
        self.options = options

    def write(self, iterator):
        return self._write(_records(_StreamBase, iterator, self.options), batch_write=False)

    def commit(self, messages, batchId) -> None:
        log.info("batch %s written: %s", batchId, _summary(messages))
        if any(m is not None and m.outcome is TaskOutcome.COMMITTED for m in messages):
            # A batch that committed nothing in Kafka has no such moment (an aggregation's first batch).
            faults.crash_point(faults.DRIVER_AFTER_KAFKA_COMMIT)

    def abort(self, messages, batchId) -> None:
        log.warning("batch %s failed: %s", batchId, _failure_summary(messages, self.options, REPLAY))


class EosKafkaBatchWriter(_PlannedWriter, _BatchBase):
    """``df.write``: idempotent under txnAppId/txnVersion or inside foreachBatch (idempotent_writes)."""

    def __init__(self, options: SinkOptions):
        self.options = options

    def write(self, iterator):
        return self._write(_records(_BatchBase, iterator, self.options), batch_write=True)

    def commit(self, messages) -> None:
        log.info("write finished: %s", _summary(messages))

    def abort(self, messages) -> None:
        log.warning("write failed: %s", _failure_summary(messages, self.options, RERUN))
