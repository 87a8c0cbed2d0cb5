"""The fault kinds of the chaos campaign, and the seeded schedule that picks them.

Each kind is a function ``(rig, rng) -> details`` that fires one fault and returns once it has
been applied (a killed broker is back, a killed driver restarted from its checkpoint and its query
started, an armed point reached). Where the fault's own time is not the function's, the kind says
it in ``details[OWN_S]``, seconds from the fault's start: a stall goes on after the function
returned, and a second instance's own part ends when it has started (the first one's stop, which
the function waits for, is recovery). Recovery is reported from the end of that own time.

Where a fault hits is drawn from ``rng``, which the schedule seeds per fault, so a seed replays the
same choices; when a task reaches an armed point depends on timing.
"""
from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import time
from typing import Callable, Iterator, Protocol

from confluent_kafka.admin import NewPartitions

from pyspark_eos.testing import fault_injection as points
from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster
from pyspark_eos.testing.tcp_proxy import ClientProcesses, TcpProxy

from ..processes import executor_jvms
from .query import EXECUTOR_LOSS_TIMEOUT_S, QueryInstance
from .verifiers import transactions

log = logging.getLogger(__name__)

# Where a worker is killed: every moment of a write task's transaction.
KILL_POINTS = (points.STALL_BEFORE_PRODUCE, points.STALL_MID_PRODUCE, points.STALL_AFTER_STABLE_READ,
               points.STALL_BEFORE_COMMIT, points.STALL_AFTER_COMMIT)
# Where an attempt stalls: while its transaction is open.
STALL_POINTS = KILL_POINTS[:-1]
_POINT_TIMEOUT_S = 90.0  # a task reaches any point within a few batches
MAX_PARTITIONS_PER_TOPIC = 8
OWN_S = "own_s"


class Rig(Protocol):
    """What a fault acts on (campaign.Rig)."""

    cluster: EmbeddedKafkaCluster  # proxied when network kinds are fired
    fault_dir: str
    query: QueryInstance
    topics: list[str]
    group: str
    transactional_id_prefix: str
    transaction_timeout_ms: int

    def restart_query(self, fresh_checkpoint: bool = False) -> QueryInstance: ...

    def start_second_instance(self) -> QueryInstance: ...


def _at_point(rig: Rig, point: str, lasting_s: float | None = None, **params) -> dict:
    """Arm ``point`` for whichever task reaches it first; wait until one has. ``lasting_s``: how long
    the fault goes on once reached (its own time, see the module's docs)."""
    started = time.monotonic()
    marker = points.arm(point, rig.fault_dir, **params)
    deadline = started + _POINT_TIMEOUT_S
    while marker.exists() and time.monotonic() < deadline and rig.query.alive():
        time.sleep(0.1)
    try:
        marker.unlink()
    except FileNotFoundError:  # taken: the rename is the claim
        reached = {"point": point, "reached": True}
        return reached if lasting_s is None else {**reached, OWN_S: time.monotonic() - started + lasting_s}
    return {"point": point, "reached": False}


def worker_kill(rig: Rig, rng: random.Random) -> dict:
    """A Python worker SIGKILLed at one moment of its write task."""
    return _at_point(rig, rng.choice(KILL_POINTS), kill=True)


def executor_kill(rig: Rig, rng: random.Random) -> dict:
    """An executor JVM SIGKILLed: at a random moment, or with its task's offsets sent, not committed."""
    if rng.random() < 0.5:
        return _at_point(rig, points.EXECUTOR_BEFORE_COMMIT)
    executors = sorted(executor_jvms(rig.query.pid))
    if not executors:
        return {"executors": 0}
    victim = rng.choice(executors)
    os.kill(victim, signal.SIGKILL)
    return {"pid": victim, "of": len(executors)}


def executor_stall(rig: Rig, rng: random.Random) -> dict:
    """The zombie: an executor JVM stopped past the driver's loss timeout while one of its tasks is
    mid-transaction; its retry runs elsewhere, then the stalled attempt resumes."""
    seconds = round(rng.uniform(10.0, 16.0), 1)
    # Its own time: until Spark declares the stopped executor lost and may retry its task elsewhere.
    return {**_at_point(rig, rng.choice(STALL_POINTS), EXECUTOR_LOSS_TIMEOUT_S, stop_executor=True, seconds=seconds),
            "seconds": seconds}


def driver_kill(rig: Rig, rng: random.Random) -> dict:
    """The driver SIGKILLed (with everything it started), at a random moment or after a batch's
    Kafka commit and before Spark's commit log; restarted from its checkpoint."""
    if rng.random() < 0.5:
        details = _at_point(rig, points.DRIVER_AFTER_KAFKA_COMMIT)
        rig.query.wait_exit(60)
    else:
        details = {"point": "random"}
    rig.query.kill()
    rig.restart_query().wait_started()
    return details


def checkpoint_lost(rig: Rig, rng: random.Random) -> dict:
    """The driver killed and its checkpoint deleted; restarted with startingOffsets=group."""
    rig.query.kill()
    rig.restart_query(fresh_checkpoint=True).wait_started()
    return {}


def broker_bounce(rig: Rig, rng: random.Random) -> dict:
    """A broker stopped, hard (SIGKILL) or clean (SIGTERM), and restarted after a few seconds: the
    leader of an input partition, the group's coordinator or a transaction coordinator of the
    query's ids."""
    role = rng.choice(("partition leader", "group coordinator", "transaction coordinator"))
    how = rng.choice(("hard", "clean"))
    node = _node_in_role(rig, role, rng)
    down = round(rng.uniform(2.0, 6.0), 1)
    (rig.cluster.kill_node if how == "hard" else rig.cluster.stop_node)(node)
    time.sleep(down)  # the fault's duration, drawn by the schedule
    rig.cluster.restart_node(node)
    return {"role": role, "node": node, "stop": how, "down_s": down}


def _node_in_role(rig: Rig, role: str, rng: random.Random) -> int:
    admin = rig.cluster.admin()
    if role == "group coordinator":
        return admin.describe_consumer_groups([rig.group])[rig.group].result(30).coordinator.id
    if role == "transaction coordinator":
        coordinators = {t["Coordinator"] for t in transactions(rig.cluster.bootstrap_servers,
                                                                rig.transactional_id_prefix)}
        if coordinators:
            return int(rng.choice(sorted(coordinators)))
    metadata = admin.list_topics(timeout=30)
    leaders = sorted({p.leader for topic in rig.topics for p in metadata.topics[topic].partitions.values()
                      if p.leader >= 0})
    return rng.choice(leaders)


def transaction_timeout(rig: Rig, rng: random.Random) -> dict:
    """A task's transaction stalled past transaction.timeout.ms: the broker aborts it, the attempt
    then fails and its retry writes the records."""
    seconds = round(rig.transaction_timeout_ms / 1000 + rng.uniform(5.0, 10.0), 1)
    return {**_at_point(rig, rng.choice(STALL_POINTS), seconds, seconds=seconds), "seconds": seconds}


def partitions_added(rig: Rig, rng: random.Random) -> dict:
    """A partition added to an input topic while the query runs: its group rebalances."""
    admin = rig.cluster.admin()
    metadata = admin.list_topics(timeout=30)
    growable = [t for t in rig.topics if len(metadata.topics[t].partitions) < MAX_PARTITIONS_PER_TOPIC]
    if not growable:
        return {"at_cap": True}
    topic = rng.choice(growable)
    count = len(metadata.topics[topic].partitions) + 1
    admin.create_partitions([NewPartitions(topic, count)])[topic].result(60)
    return {"topic": topic, "partitions": count}


def second_instance(rig: Rig, rng: random.Random) -> dict:
    """A second instance of the query started with the same group (a fresh checkpoint,
    startingOffsets=group): it fences the first, which must stop, and goes on in its place."""
    first, started = rig.query, time.monotonic()
    rig.start_second_instance().wait_started()
    own_s = round(time.monotonic() - started, 1)
    fenced = first.wait_exit(180)
    if not fenced:
        first.kill()
    return {"first_stopped": fenced, "first_stopped_after_s": round(time.monotonic() - started - own_s, 1),
            OWN_S: own_s}


# Where a network fault applies: the query's clients go through a proxy per broker (the campaign's
# cluster is proxied when a network kind is fired), the verifiers and the input writer do not.
NETWORK_SCOPES = ("all clients", "the driver", "one executor", "one broker")


@contextlib.contextmanager
def _network_fault(rig: Rig, rng: random.Random, details: dict) -> Iterator[list[TcpProxy]]:
    """The proxies a network fault acts on, narrowed to its drawn scope (into ``details``); every
    fault is cleared on the way out."""
    proxies, clients = rig.cluster.proxies, None
    chosen = sorted(proxies)
    details["scope"] = rng.choice(NETWORK_SCOPES)
    if details["scope"] == "one broker":
        chosen = [rng.choice(chosen)]
        details["node"] = chosen[0]
    elif details["scope"] == "the driver":  # its planning and the sink's commits, not the tasks
        clients = ClientProcesses.working_in(rig.query.working_directory)
    elif details["scope"] == "one executor":
        clients = _one_executors_clients(rig, rng, details)
        if clients is None:
            details["scope"] = "all clients"
    try:
        for node in chosen:
            proxies[node].only(clients)
        details["connections"] = sum(proxies[node].affected() for node in chosen)
        yield [proxies[node] for node in chosen]
    finally:
        for proxy in proxies.values():
            proxy.clear()


def _one_executors_clients(rig: Rig, rng: random.Random, details: dict) -> ClientProcesses | None:
    """An executor's clients: those working in its directory, which holds its Python workers too
    (a fork server may have started them); None when no executor is there (one just killed)."""
    executors = sorted(executor_jvms(rig.query.pid))
    if not executors:
        return None
    victim = rng.choice(executors)
    try:
        directory = os.readlink(f"/proc/{victim}/cwd")
    except OSError:  # it died since it was listed
        return None
    details["executor_pid"] = victim
    return ClientProcesses.working_in(directory)


def _held(rng: random.Random, low_s: float, high_s: float, details: dict) -> None:
    details["for_s"] = round(rng.uniform(low_s, high_s), 1)
    time.sleep(details["for_s"])  # the schedule draws how long the fault lasts, for the seed to replay it


def network_latency(rig: Rig, rng: random.Random) -> dict:
    """Latency added to every chunk each way (100-1000 ms) for 3-10 s."""
    details = {"latency_ms": round(rng.uniform(100, 1000))}
    with _network_fault(rig, rng, details) as proxies:
        for proxy in proxies:
            proxy.latency(details["latency_ms"], details["latency_ms"])
        _held(rng, 3.0, 10.0, details)
    return details


def network_slow(rig: Rig, rng: random.Random) -> dict:
    """Each direction limited to 20-200 KB/s for 3-10 s."""
    details = {"bytes_per_s": round(rng.uniform(20_000, 200_000))}
    with _network_fault(rig, rng, details) as proxies:
        for proxy in proxies:
            proxy.bandwidth(details["bytes_per_s"])
        _held(rng, 3.0, 10.0, details)
    return details


def network_partition(rig: Rig, rng: random.Random) -> dict:
    """Nothing forwarded, connections kept, for 3-10 s (below the transaction timeout); then
    healed, delivering what was held, or resetting the connections."""
    details = {"heal": rng.choice(("deliver", "reset"))}
    with _network_fault(rig, rng, details) as proxies:
        for proxy in proxies:
            proxy.partition()
        _held(rng, 3.0, 10.0, details)
        for proxy in proxies:
            proxy.heal(reset=details["heal"] == "reset")
    return details


def connection_resets(rig: Rig, rng: random.Random) -> dict:
    """The open connections reset every second for 1-6 s, as a flapping firewall does."""
    details = {"resets": 0}
    with _network_fault(rig, rng, details) as proxies:
        started = time.monotonic()
        until = started + rng.uniform(1.0, 6.0)
        while time.monotonic() < until:
            details["resets"] += sum(proxy.reset() for proxy in proxies)
            time.sleep(1.0)
        details["for_s"] = round(time.monotonic() - started, 1)
    return details


def connections_refused(rig: Rig, rng: random.Random) -> dict:
    """New connections refused and the open ones reset, for 2-6 s: a broker's host unreachable."""
    details = {}
    with _network_fault(rig, rng, details) as proxies:
        for proxy in proxies:
            proxy.refuse()
            proxy.reset()
        _held(rng, 2.0, 6.0, details)
    return details


KINDS: dict[str, Callable[[Rig, random.Random], dict]] = {
    "worker-kill": worker_kill,
    "executor-kill": executor_kill,
    "executor-stall": executor_stall,
    "driver-kill": driver_kill,
    "checkpoint-lost": checkpoint_lost,
    "broker-bounce": broker_bounce,
    "transaction-timeout": transaction_timeout,
    "partitions-added": partitions_added,
    "second-instance": second_instance,
    "network-latency": network_latency,
    "network-slow": network_slow,
    "network-partition": network_partition,
    "connection-resets": connection_resets,
    "connections-refused": connections_refused,
}
NETWORK_KINDS = frozenset(kind for kind in KINDS if kind.startswith(("network-", "connection")))
# The mix of a campaign of a thousand faults in about two hours on 2 cores (docs/chaos.md): most often
# the kills that cut a write task's transaction at one of its points (seconds each); the kinds that
# start a new Spark application (20-40 s each) and the stall past the transaction timeout least.
WEIGHTS = {"worker-kill": 18, "executor-kill": 6, "executor-stall": 1.5, "driver-kill": 0.6, "checkpoint-lost": 0.4,
           "broker-bounce": 1.5, "transaction-timeout": 0.5, "partitions-added": 0.5, "second-instance": 0.4,
           "network-latency": 1.5, "network-slow": 1, "network-partition": 1.5, "connection-resets": 1.5,
           "connections-refused": 1.5}


class Schedule:
    """A seeded sequence of (kind, gap before it, the fault's own random source): every kind once
    in a random order first, then kinds drawn by weight."""

    def __init__(self, seed: int, kinds: list[str], max_gap_s: float = 0.5):
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown fault kinds {unknown}; the kinds are {', '.join(KINDS)}")
        self.seed, self.kinds, self.max_gap_s = seed, kinds, max_gap_s
        self._random = random.Random(seed)
        self._first_round = self._random.sample(kinds, len(kinds))
        self.fired = 0

    def next(self) -> tuple[str, float, random.Random]:
        if self.fired < len(self._first_round):
            kind = self._first_round[self.fired]
        else:
            kind = self._random.choices(self.kinds, [WEIGHTS[k] for k in self.kinds])[0]
        gap = round(self._random.uniform(0.0, self.max_gap_s), 1)
        self.fired += 1
        return kind, gap, random.Random(self.seed * 100003 + self.fired)
