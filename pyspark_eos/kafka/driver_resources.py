"""What the driver's Python processes hold between batches, by cluster configuration, closed by
the rule of every held client (held_clients).

Spark runs a Python data source's driver side in Python workers it keeps across batches and
queries: it builds the sink's writer there for every micro-batch (twice: to plan and to run it) and
plans the source there. Each such process holds, for the brokers and kafka.* settings it works
with, the facts of checks made once (the cluster answered and the output topic exists,
kafka.cluster.check_output; the sink may run its transactions and claims, sink.driver_checks) and
the claims log the sink's writers append their plan records to (sink.writer). A configuration
unused for IDLE_CLOSE_S has its claims log closed and is checked again at its next use: a query
whose batches come further apart pays a check and a claims producer per batch.

The source's planner holds its own clients, group membership and claims log for the query's life
(source/planner, closed by Spark's stop()); a batch read's membership lives until the read's write
commits or the next read of its group (source/batch_reader).
"""
from __future__ import annotations

from typing import Mapping

from .held_clients import IDLE_CLOSE_S, KEPT_CONFIGURATIONS, Held, Registry
from .options import ClientSettings

DRIVER = Registry("a driver-side cluster configuration", IDLE_CLOSE_S, KEPT_CONFIGURATIONS)


def use(bootstrap_servers: str, kafka_params: Mapping[str, str]) -> Held:
    return DRIVER.use(ClientSettings.of(bootstrap_servers, kafka_params))
