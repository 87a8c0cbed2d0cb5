"""What a long-lived Python process holds for each configuration it works for, in one registry
closed by one rule: Kafka clients (closed together) and facts learnt once (forgotten with them).

Spark keeps its Python processes (the executors' workers, the driver's planner and writer-building
workers) across queries and batches, and tells them nothing when a query ends. Each
configuration's clients hold librdkafka threads, buffers and connections, which add up over the
queries a process has served (benchmarks/JOURNAL.md). So all that one configuration holds is closed
together once the process has not used it for ``idle_close_s``, or beyond the ``kept`` most
recently used, checked whenever a configuration is used. librdkafka does not survive fork(), so a
registry's keys name the process: a forked child makes its own clients.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, TypeVar

from .options import ClientSettings

log = logging.getLogger(__name__)

T = TypeVar("T")

# The rule for what a long-lived process holds (the driver's, the sink's and the source's registries).
IDLE_CLOSE_S = 120.0
KEPT_CONFIGURATIONS = 4


@dataclass
class Held:
    """What a process holds for one configuration, and the settings its clients are made with."""

    settings: ClientSettings
    last_used: float | None = None  # set by Registry.use()
    clients: dict[str, object] = field(default_factory=dict)  # closed with the configuration
    facts: dict[str, object] = field(default_factory=dict)  # plain values: nothing to close

    def client(self, kind: str, make: Callable[[], T]) -> T:
        """This process's client of ``kind``, made once by ``make()``."""
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


class Registry:
    def __init__(self, what: str, idle_close_s: float, kept: int, clock: Callable[[], float] = time.monotonic):
        self.what = what  # "a sink configuration": for the log
        self.idle_close_s = idle_close_s
        self.kept = kept
        self.clock = clock
        # Insertion order is use order (a used configuration is moved to the end): least recently used first.
        self._held: dict[tuple, Held] = {}
        # The driver's checks of one configuration run in threads at once (kafka/at_once): each
        # must find the one Held, whose facts record what was checked.
        self._lock = threading.Lock()

    def use(self, settings: ClientSettings, scope: Hashable = ()) -> Held:
        """What this process holds for ``settings`` and ``scope`` (what else tells configurations
        apart), marked used now; closes what it holds for the others that are idle or too many."""
        now = self.clock()
        key = (os.getpid(), settings, scope)
        with self._lock:
            held = self._held.pop(key, None) or Held(settings)
            held.last_used = now
            self._held[key] = held
            used = list(self._held)
            stale = [key for key in used if now - self._held[key].last_used > self.idle_close_s]
            stale += [key for key in used[:-self.kept] if key not in stale]
            closed = [self._held.pop(key) for key in stale]
        for closing in closed:
            log.info("closing %d client(s) of %s last used %.0f s ago (%s)", len(closing.clients), self.what,
                     now - closing.last_used, ", ".join(closing.clients) or "none")
            closing.close()
        return held


def close_client(client, settled: bool = True) -> None:
    """Close a client without waiting for what it still holds: a failure is logged, not raised,
    since it must not fail the task of another query that triggered the closing. ``settled``:
    False for a producer whose init_transactions timed out, which librdkafka goes on with: close()
    would abort a transaction, refused during that call (a RuntimeWarning); it is only dropped."""
    try:
        # close() flushes, which waits up to message.timeout.ms for records a broker no longer
        # takes; nothing an idle configuration left queued is waited for.
        getattr(client, "purge", lambda: None)()
        # An AdminClient, and a Producer before confluent-kafka 2.13, have no close(): dropped,
        # they are destroyed.
        if settled:
            getattr(client, "close", lambda: None)()
    except Exception as error:  # noqa: BLE001 - see above
        log.warning("closing an idle Kafka client failed: %s", error)
