"""Partitions of the subscription that the query's member of its group is not assigned: held by
another member of the group, or by nobody because no rebalance has assigned them yet.

Another member (a consumer that is not this pipeline's) keeps what it holds: waiting for a
rebalance does not help, and the write tasks refuse those partitions naming them
(UnassignedPartitionError). Nobody holds a partition added to a topic while the query was stopped:
a static member (KIP-345) that rejoins gets its cached assignment back without a rebalance, and
librdkafka's group leader starts one only when a metadata refresh shows a partition count other
than the one its own client saw before, which a freshly started client never does. A dynamic
member that joins the group and leaves it again makes the leader assign the partitions afresh.
A static member of an earlier run of the query with another subscription is taken over and made
to leave (make_static_member_leave).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Iterable

from confluent_kafka import Consumer, KafkaError

from ..kafka.backoff import Backoff, with_retries
from ..kafka.group_offsets import describe_group

log = logging.getLogger(__name__)

_DESCRIBE_TIMEOUT_S = 15.0
# A group's coordinator answers so while its __consumer_offsets partition is being created or
# loaded (a new cluster, a coordinator that moved); librdkafka's admin client does not retry them.
_COORDINATOR_LOADING = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                  KafkaError.COORDINATOR_NOT_AVAILABLE})
_LOADING_BACKOFF = Backoff(initial_s=0.05, maximum_s=0.5)
# How long an unsubscribe()'s revocation is waited for before the client closes anyway.
_LEAVE_WAIT_S = 5.0


def held_by_other_members(admin, group_id: str, member_id: str,
                          partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], str] | None:
    """Which of ``partitions`` a member of the group other than ``member_id`` holds: its client id
    and host. None when the group cannot be described (the caller then waits as before)."""
    wanted = set(partitions)
    description = _describe(admin, group_id)
    if description is None:
        return None
    held = {}
    for member in description.members:
        if member.member_id == member_id or member.assignment is None:
            continue
        for tp in member.assignment.topic_partitions:
            if (tp.topic, tp.partition) in wanted:
                held[(tp.topic, tp.partition)] = f"{member.client_id or member.member_id} on {member.host}"
    return held


def static_members(admin, group_id: str, coordinator_wait_s: float = 0.0) -> dict[str, set[str]]:
    """The group's static members: instance id -> the topics of its assignment (empty when the
    group cannot be described). ``coordinator_wait_s``: how long to wait for a coordinator that is
    loading (see described_once_loaded)."""
    description = _describe(admin, group_id, coordinator_wait_s)
    if description is None:
        return {}
    return {member.group_instance_id: {tp.topic for tp in (member.assignment.topic_partitions
                                                           if member.assignment else [])}
            for member in description.members if member.group_instance_id}


def _describe(admin, group_id: str, coordinator_wait_s: float = 0.0):
    """The group's description, or None when it cannot be had (both uses are shortcuts: without
    them planning or the join waits, as it would anyway)."""
    try:
        return described_once_loaded(admin, group_id, coordinator_wait_s)
    except Exception as error:  # noqa: BLE001 - see above
        log.info("describing consumer group %r failed (%s)", group_id, error)
        return None


def described_once_loaded(admin, group_id: str, wait_s: float):
    """The group's description, asked again for up to ``wait_s`` while its coordinator is loading.

    A member's JoinGroup answered NOT_COORDINATOR costs it about 2 s: librdkafka backs its next
    join off by 1 s and starts one at most once a second. A join made once the coordinator answers
    a DescribeGroups is not answered so."""
    return with_retries(lambda: describe_group(admin, group_id, _DESCRIBE_TIMEOUT_S),
                        f"consumer group {group_id!r}: its coordinator is not ready", wait_s, _LOADING_BACKOFF,
                        retriable=_COORDINATOR_LOADING)


def make_static_member_leave(config: dict, subscription: list[str], instance_id: str, timeout_s: float) -> None:
    """Take over static member ``instance_id`` and leave the group with it.

    A static member (KIP-345) does not leave the group when its client closes: the broker keeps its
    assignment until session.timeout.ms passes, so a query restarted with another subscription (so
    another instance id) would find the old run's member holding its partitions. Joining with the old
    instance id replaces that member; librdkafka sends a static member's LeaveGroup on unsubscribe()
    (not on close()), and the rebalance that follows hands its partitions to the remaining members.
    """
    settings = {key: value for key, value in config.items() if key != "error_cb"}
    consumer = Consumer({**settings, "group.instance.id": instance_id, "enable.auto.commit": "false",
                         "log_level": 0})
    joined, left = threading.Event(), threading.Event()
    consumer.subscribe(subscription, on_assign=lambda _consumer, _partitions: joined.set(),
                       on_revoke=lambda _consumer, _partitions: left.set())
    deadline = time.monotonic() + timeout_s
    try:
        _poll_until(consumer, joined, deadline)
        leave_as_static_member(consumer, left, deadline)
    finally:
        consumer.close()


def leave_as_static_member(consumer: Consumer, revoked: threading.Event, deadline: float) -> None:
    """Leave the group with a static member's consumer, whose on_revoke sets ``revoked``: librdkafka
    sends a static member's LeaveGroup on unsubscribe() (not on close()), once the revocation is served."""
    consumer.unsubscribe()
    _poll_until(consumer, revoked, min(deadline, time.monotonic() + _LEAVE_WAIT_S))
    # The LeaveGroup goes out once the revocation is served: give it a moment on the wire.
    _poll_until(consumer, threading.Event(), min(deadline, time.monotonic() + 1.0))


def _poll_until(consumer: Consumer, event: threading.Event, deadline: float) -> None:
    while not event.is_set() and time.monotonic() < deadline:
        consumer.poll(0.2)


def rebalance_with_a_passing_member(config: dict, subscription: list[str], timeout_s: float) -> None:
    """Join the group with a dynamic member and leave it (two rebalances): the group's leader then
    assigns every partition of the subscription."""
    passing = {key: value for key, value in config.items() if key not in ("group.instance.id", "error_cb")}
    consumer = Consumer({**passing, "enable.auto.commit": "false", "log_level": 0})
    joined = threading.Event()
    consumer.subscribe(subscription, on_assign=lambda _consumer, _partitions: joined.set())
    try:
        _poll_until(consumer, joined, time.monotonic() + timeout_s)
    finally:
        consumer.close()  # a dynamic member leaves the group on close: the second rebalance
