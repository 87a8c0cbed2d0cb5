"""Which Spark task a write task is (read once from its TaskContext), and what it tells the driver."""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import WriterCommitMessage

from .commit_decision import TaskOutcome


@dataclass(frozen=True)
class TaskInfo:
    task_attempt_id: int
    partition_id: int
    batch_id: str | None
    query_id: str | None
    attempt_number: int = -1  # TaskContext.attemptNumber(): 0 for a task's first attempt in its stage attempt
    # A streaming query's run id: Spark runs each micro-batch's jobs in a job group named by it,
    # fresh for each start of the query (progress_claims).
    run_id: str | None = None

    @classmethod
    def current(cls) -> "TaskInfo":
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            return cls(-1, -1, None, None)
        return cls(context.taskAttemptId(), context.partitionId(),
                   context.getLocalProperty("streaming.sql.batchId"),
                   context.getLocalProperty("sql.streaming.queryId"), context.attemptNumber(),
                   context.getLocalProperty("spark.jobGroup.id"))

    def describe(self) -> str:
        batch = f"batch {self.batch_id}, " if self.batch_id is not None else ""
        return f"{batch}task {self.partition_id} (attempt {self.task_attempt_id})"


@dataclass
class EosKafkaCommitMessage(WriterCommitMessage):
    """What one task did, for the driver's log."""

    task: str
    transactional_id: str
    records: int
    outcome: TaskOutcome
    committed_with: str  # beside its records: its input ranges, or its progress group ("" for neither)
