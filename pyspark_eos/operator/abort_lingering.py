"""Aborting the transactions a pipeline's dead workers left open.

A worker killed mid-transaction leaves it open until the broker's transaction timeout passes;
meanwhile its pending offsets hold the next batch's stable read of the group's offsets, and its
records hold back read_committed consumers of the output (the last stable offset stops there).
``init_transactions`` under the same transactional id ends it at once: the coordinator aborts
the open transaction and bumps the id's epoch. Were the id's worker still alive, it would be
fenced (its commit fails, Spark retries the task under the protocol the sink follows anyway), so
only transactions open longer than ``older_than_s`` are touched.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from ..kafka.clients import init_transactional_producer
from .status import ClusterAccess, TransactionStatus

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AbortOutcome:
    transactional_id: str
    open_for_s: float
    aborted: bool  # False in a dry run


def lingering(transactions: list[TransactionStatus], older_than_s: float) -> list[TransactionStatus]:
    return [t for t in transactions if t.state == "Ongoing" and t.open_for_s is not None and t.open_for_s >= older_than_s]


def abort_lingering(access: ClusterAccess, transactions: list[TransactionStatus], older_than_s: float,
                    dry_run: bool) -> list[AbortOutcome]:
    outcomes = []
    for transaction in lingering(transactions, older_than_s):
        if not dry_run:
            log.info("aborting the transaction of %s, open for %.1f s", transaction.transactional_id,
                     transaction.open_for_s)
            producer = init_transactional_producer(access.bootstrap_servers, access.config,
                                                   transaction.transactional_id, transaction.timeout_ms)
            producer.flush(0)
        outcomes.append(AbortOutcome(transaction.transactional_id, transaction.open_for_s, not dry_run))
    return outcomes
