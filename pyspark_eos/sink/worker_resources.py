"""Everything a Python worker holds for the sink, in one registry closed by one rule (held_clients).

librdkafka does not survive fork(), so every client is made lazily inside the worker that uses
it (never at import time, never in ``__main__``) and kept here, by process and sink configuration
(a query's client settings, transactional id prefix and group), from task to task and batch to
batch: the transactional producer of the worker's slot (producer_pool), its AdminClient, its claims
clients (attempt_fencing), and facts learnt once (topics known to exist, a progress group's metadata).

A worker outlives the queries it writes for: all that one configuration holds is closed together
once no task of this worker used it for IDLE_CLOSE_S, or beyond the KEPT_CONFIGURATIONS most
recently used. A query whose batches come further apart pays a producer's start
(init_transactions) per batch. The registry is consulted at a write task's start: no other task
runs in the worker then, so none of the configurations it closes has a transaction open.
"""
from __future__ import annotations

from ..kafka.options import ClientSettings
from ..kafka.held_clients import IDLE_CLOSE_S, KEPT_CONFIGURATIONS, Held, Registry

WORKER = Registry("a sink configuration", IDLE_CLOSE_S, KEPT_CONFIGURATIONS)


def use(settings: ClientSettings, scope: tuple) -> Held:
    """What this worker holds for a configuration: ``settings``, and the ``scope`` of its
    transactional ids (prefix and group)."""
    return WORKER.use(settings, scope)
