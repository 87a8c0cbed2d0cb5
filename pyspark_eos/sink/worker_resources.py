"""Everything a Python worker holds for the sink, in one registry closed by one rule.

librdkafka does not survive fork(), so every client is made lazily inside the worker that uses
it (never at import time, never in ``__main__``) and kept here, by process and sink configuration
(a query's options), from task to task and batch to batch: the transactional producer of the
worker's slot (producer_pool), its AdminClient, its claims clients (attempt_fencing), and facts
learnt once (topics known to exist, a progress group's metadata).

A worker outlives the queries it writes for, and each configuration's clients hold librdkafka
threads, buffers and connections, which add up over the queries a worker has written for
(benchmarks/JOURNAL.md). So all that one configuration holds is closed together once no task of this worker used
it for IDLE_CLOSE_S, or beyond the KEPT_CONFIGURATIONS most recently used. A query whose batches
come further apart pays a producer's start (init_transactions) per batch.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from ..kafka.clients import close_client
from .options import SinkOptions

log = logging.getLogger(__name__)

IDLE_CLOSE_S = 120.0
KEPT_CONFIGURATIONS = 4

T = TypeVar("T")


@dataclass
class Held:
    """What this worker holds for one sink configuration."""

    options: SinkOptions
    last_used: float | None = None  # set by use(), at each write task's start
    clients: dict[str, object] = field(default_factory=dict)  # closed with the configuration
    facts: dict[str, object] = field(default_factory=dict)  # plain values: nothing to close

    def client(self, kind: str, make: Callable[[], T]) -> T:
        """This worker's client of ``kind``, made once by ``make()``."""
        if kind not in self.clients:
            self.clients[kind] = make()
        return self.clients[kind]

    def drop(self, kind: str):
        """Forget a client without closing it, so that the next ``client()`` makes a new one (a
        producer after a fatal error or a slot or coordinator move, an AdminClient renewed);
        returns it."""
        return self.clients.pop(kind, None)

    def fact(self, kind: str, learn: Callable[[], T]) -> T:
        if kind not in self.facts:
            self.facts[kind] = learn()
        return self.facts[kind]

    def close(self) -> None:
        for client in self.clients.values():
            close_client(client)
        self.clients.clear()
        self.facts.clear()


# Insertion order is use order (a used configuration is moved to the end): least recently used first.
_held: dict[tuple, Held] = {}
_clock = time.monotonic


def _key(options: SinkOptions) -> tuple:
    return (os.getpid(), options.bootstrap_servers, options.transactional_id_prefix, options.group_id,
            options.transaction_timeout_ms, tuple(sorted(options.kafka.items())))


def held_for(options: SinkOptions) -> Held:
    """What this worker holds for ``options``' configuration (empty the first time)."""
    key = _key(options)
    if key not in _held:
        _held[key] = Held(options)
    return _held[key]


def use(options: SinkOptions) -> Held:
    """Mark ``options``' configuration used now, and close what this worker holds for the others
    that are idle or too many. Called at a write task's start: no other task runs in this worker
    then, so none of them has a transaction open."""
    now = _clock()
    held = _held.pop(_key(options), None) or Held(options)
    held.last_used = now
    _held[_key(options)] = held
    used = [key for key, h in _held.items() if h.last_used is not None]
    stale = [key for key in used if now - _held[key].last_used > IDLE_CLOSE_S]
    stale += [key for key in used[:-KEPT_CONFIGURATIONS] if key not in stale]
    for key in stale:
        closing = _held.pop(key)
        log.info("closing %d client(s) of a sink configuration last used %.0f s ago (%s)", len(closing.clients),
                 now - closing.last_used, ", ".join(closing.clients) or "none")
        closing.close()
    return held
