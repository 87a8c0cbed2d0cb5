"""The key a write task commits its progress under (task_progress): which writes are one write.

- The streaming sink: the query and its micro-batch. A replay of a batch has the same batch id.
- A batch write (``df.write``), as Delta Lake's idempotent writes: ``txnAppId`` and ``txnVersion``.
  Inside ``foreachBatch`` the version defaults to the batch id Spark gives the batch's jobs (the
  local property ``streaming.sql.batchId``), so a replayed batch's writes are the same writes
  again with no option at all; the key then names the query too (``sql.streaming.queryId``): a
  new checkpoint's batch ids start again at 0, and must not look older than the last run's. The
  topic is part of the key: two writes of one batch into two topics are two writes.
- A batch write with neither: no key, a plain transactional write (a rerun writes it again).

A versioned write whose key committed at a later version is skipped, as Delta skips a txnVersion
at or below the app's last one: the progress never moves back.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigurationError


@dataclass(frozen=True)
class ProgressTarget:
    """What a task's progress record names: ``scope`` names its progress groups, and the offset it
    commits there is ``version + 1``."""

    scope: str
    version: int
    versioned: bool  # a batch write's version (a later one committed: skip), not a micro-batch
    what: str = ""  # the write, for messages
    topic: str | None = None

    def describe(self) -> str:
        if not self.versioned:
            return f"batch {self.version}"
        return f"{self.what} version {self.version}" + (f" into {self.topic}" if self.topic else "")


def stream_target(query_id: str | None, batch_id: str | None, where: str) -> ProgressTarget:
    if batch_id is None or query_id is None:
        raise ConfigurationError(f"{where} runs outside a streaming query's micro-batch, but the streaming sink "
                                 "commits each task's progress under its batch id; report this as a bug")
    return ProgressTarget(query_id, int(batch_id), versioned=False)


def batch_write_target(txn_app_id: str | None, txn_version: int | None, topic: str | None, query_id: str | None,
                       batch_id: str | None) -> ProgressTarget | None:
    """The key of a batch write's task: its txnAppId and txnVersion, or the foreachBatch batch it runs in."""
    if txn_version is None and batch_id is not None and query_id is not None:
        return _target(f"{query_id}/{txn_app_id or ''}", int(batch_id), topic,
                       f"foreachBatch of query {query_id}" + (f" txnAppId {txn_app_id!r}" if txn_app_id else ""))
    app_id = txn_app_id or query_id
    version = txn_version
    if app_id is None and version is None:
        return None
    if app_id is None or version is None:
        given, missing = ("txnAppId", "txnVersion") if version is None else ("txnVersion", "txnAppId")
        raise ConfigurationError(
            f"this write gives {given} without {missing}, and runs outside "
            f"a foreachBatch function (which would supply it): give both txnAppId (a name for the job) and "
            "txnVersion (a number that grows with each run of new data), or neither")
    return _target(app_id, version, topic, f"txnAppId {app_id!r}")


def _target(app: str, version: int, topic: str | None, what: str) -> ProgressTarget:
    return ProgressTarget(f"{app}/{topic or ''}", version, True, what, topic)


def refuse_group_in_foreach_batch(group_id: str | None, batch_id: str | None) -> None:
    # Every write of a batch would commit the same input offsets: the first one's commit makes the
    # others look like replays that already committed, and they would write nothing.
    if batch_id is not None and group_id is not None:
        raise ConfigurationError(
            f"a batch write with kafka.group.id={group_id!r} runs inside foreachBatch (micro-batch "
            f"{batch_id}): drop kafka.group.id from this write. Each write then commits its progress under the "
            "query and batch id, exactly-once on a replay of the batch, and the eos-kafka source's group follows "
            "the output once Spark completes the batch")
