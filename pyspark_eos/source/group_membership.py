"""Fencing layer 1: the driver-side reader is a static member of the pipeline's consumer group.

Kafka checks the consumer-group metadata that a transactional producer sends with its offsets
(KIP-447): a TxnOffsetCommit from a member id the group no longer knows, or an older generation,
is rejected with UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION / FENCED_INSTANCE_ID. Without real
membership (generation -1, empty member id) the broker accepts any commit, so two instances of a
pipeline could both commit the same input. The reader therefore joins the group as a *static*
member whose ``group.instance.id`` is derived from the group and the source's subscription: a restarted
or duplicate instance of the pipeline takes over that instance id, and the old one's metadata stops being
accepted. Its partitions are paused, so the membership never fetches records.

Spark keeps the driver-side reader process alive between its calls and a background thread
keeps running there, so the membership is kept alive from one. A streaming query's membership
ends with the query. Spark tells a batch read nothing when its job ends, so a batch read's
membership leaves the group once the group's offsets reach the end of everything it planned
(its eos-kafka write has committed) and never rejoins (leave_once_committed).
"""
from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
import uuid
from typing import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from ..errors import EosKafkaError, FencedError
from ..kafka.group_metadata import parse_group_metadata
from ..protocol.group_stamp import GroupStamp
from .group_rebalance import (held_by_other_members, leave_as_static_member, make_static_member_leave,
                              rebalance_with_a_passing_member, static_members)

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 60.0
# How long the join waits for the group's coordinator to load (a new cluster, a coordinator moved).
COORDINATOR_WAIT_S = 10.0
# How often a batch read's membership asks whether its write has committed (leave_once_committed).
COMMITTED_CHECK_S = 2.0
COMMIT_WAIT_S = 10.0
# How long the thread's poll waits: also how long a commit asked for between batches waits to start.
POLL_S = 0.1
# A running query's member notices added partitions at its next metadata refresh (2 s) and the
# rebalance follows within seconds; past this, none is coming (see group_rebalance).
REBALANCE_GRACE_S = 10.0
METADATA_REFRESH_MS = "2000"


def instance_id_for(group_id: str, subscription: str) -> str:
    """The static member id of one source of a pipeline: the group and what the source reads.

    A query with several eos-kafka sources (a union) has one member per source, each assigned
    its own topics; a second instance of the same pipeline has the same ids and fences the first.
    """
    digest = hashlib.sha256(subscription.encode()).hexdigest()[:8]
    return f"{_instance_prefix(group_id)}{digest}"


def subscription_name(topics: list[str] | None = None, pattern: str | None = None) -> str:
    """What a source reads, as its instance id names it: the pattern, or its topics."""
    return pattern or ",".join(sorted(topics or []))


def _instance_prefix(group_id: str) -> str:
    return f"{group_id}.eos-kafka-driver."


def _positions(offsets: dict[tuple[str, int], int]) -> str:
    return ", ".join(f"{topic}-{partition}={offset}" for (topic, partition), offset in sorted(offsets.items()))


class _CommitRequest:
    def __init__(self, offsets: dict[tuple[str, int], int], metadata: str):
        self.offsets, self.metadata = offsets, metadata
        self.done = threading.Event()
        self.started = False
        self.error = None


class GroupMembership:
    """Joins ``group_id`` as a static member subscribed to the input topics, from a daemon thread."""

    def __init__(self, bootstrap_servers: str, kafka_params: dict[str, str], group_id: str,
                 topics: list[str] | None = None, pattern: str | None = None,
                 on_generation: Callable[[GroupStamp], None] | None = None, batch_read: bool = False):
        self.group_id = group_id
        self.batch_read = batch_read
        self.run_token = uuid.uuid4().hex[:16]
        # Called with each new generation's stamp before stamp() returns it (see _on_assign).
        self._on_generation = on_generation
        self.instance_id = instance_id_for(group_id, subscription_name(topics, pattern))
        self._client_config = {**kafka_params, "bootstrap.servers": bootstrap_servers}
        self._admin_client: AdminClient | None = None
        self._config = {
            **kafka_params,
            "bootstrap.servers": bootstrap_servers,
            "group.id": group_id,
            "group.instance.id": self.instance_id,
            # Static membership and the generation fencing are the classic protocol's (KIP-345,
            # KIP-447): said here, not left to a librdkafka default that may change (KIP-848).
            "group.protocol": "classic",
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            # The group's leader (a query's driver member) rejoins when a metadata refresh shows
            # partitions added to the subscription, which starts the rebalance that assigns them;
            # librdkafka refreshes every 5 minutes by default, and a plan that reads the new
            # partitions waits for that assignment (stamp_holding).
            "topic.metadata.refresh.interval.ms": kafka_params.get("topic.metadata.refresh.interval.ms",
                                                                   METADATA_REFRESH_MS),
            # Fencing (FENCED_INSTANCE_ID on a heartbeat) is a client-level fatal error: librdkafka
            # reports it through error_cb, not as a message from poll().
            "error_cb": self._on_error,
        }
        self._pattern = pattern
        self._subscription = [f"^{pattern}"] if pattern else list(topics or [])
        self._state = threading.Condition()
        self._stamp: GroupStamp | None = None
        self._fenced: str | None = None  # the error's text, kept once the membership is fenced
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._leave_at: dict[tuple[str, int], int] | None = None  # see leave_once_committed
        self._next_check = 0.0
        self._leaving: threading.Event | None = None
        self._consumer: Consumer | None = None  # the member, while the thread runs
        self._commit_request: _CommitRequest | None = None  # see commit

    def start(self) -> "GroupMembership":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"eos-kafka-group-{self.group_id}", daemon=True)
            self._thread.start()
            log.info("joining consumer group %r as static member %r", self.group_id, self.instance_id)
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(30)

    def leave_once_committed(self, ends: dict[tuple[str, int], int]) -> None:
        """Leave the group, for good, once its committed offsets reach ``ends`` (a batch read's
        planned ranges): its write tasks have then committed under this membership and nothing
        needs it. A static member stays in its group after its client closes, until its session
        times out, and only a later member with its instance id takes it over: a batch read's member
        held the group (and its partitions) for as long as Spark kept its planner process, and the
        next read of the group fenced it."""
        self._leave_at = dict(ends)

    def commit(self, offsets: dict[tuple[str, int], int], metadata: str) -> bool:
        """Commit ``offsets`` as this member (group_commits decides which), waiting up to
        COMMIT_WAIT_S; False when it was not taken. The membership's thread commits them: a
        confluent-kafka consumer serves one call at a time, and its poll holds it."""
        if self._consumer is None or self._fenced is not None:
            return False
        request = self._commit_request = _CommitRequest(offsets, metadata)
        if not request.done.wait(COMMIT_WAIT_S):
            with self._state:
                started = request.started
                if not started:  # never sent later, when the next batch's tasks may commit newer offsets
                    self._commit_request = None
            # One already sent is waited for as long again, for the same reason.
            if not (started and request.done.wait(COMMIT_WAIT_S)):
                log.info("consumer group %r: %s not committed within %.0f s", self.group_id, _positions(offsets),
                         COMMIT_WAIT_S)
                return False
        return request.error is None

    def current_stamp(self) -> GroupStamp | None:
        """The membership now, not waiting for a join or rebalance to finish."""
        return None if self._fenced is not None else self._stamp

    def _serve_commit(self, consumer: Consumer) -> None:
        with self._state:
            request, self._commit_request = self._commit_request, None
            if request is None:
                return
            request.started = True
        offsets = [TopicPartition(t, p, o, metadata=request.metadata) for (t, p), o in request.offsets.items()]
        try:
            answered = consumer.commit(offsets=offsets, asynchronous=False)
            request.error = next((tp.error for tp in answered or () if tp.error is not None), None)
        except KafkaException as error:
            request.error = error
        if request.error is not None:
            log.info("consumer group %r: committing %s failed (%s)", self.group_id, _positions(request.offsets),
                     request.error)
        request.done.set()

    def stamp_holding(self, partitions, timeout: float = JOIN_TIMEOUT_S) -> GroupStamp:
        """The current membership once it is assigned every one of ``partitions`` (input partitions
        added to a subscribed topic are assigned by the rebalance that follows), or as it is when
        another member holds some or after ``timeout``: the tasks' ownership check then names what
        another member holds (see group_rebalance)."""
        wanted = set(partitions)
        stamp = self.stamp(timeout)
        if wanted <= stamp.assignment:
            return stamp
        missing = sorted(wanted - stamp.assignment)
        held = held_by_other_members(self._admin(), self.group_id, stamp.member_id, missing)
        if held is None:
            # Maybe asked a coordinator that moved: librdkafka's admin client can keep asking it.
            self._admin_client = None
        elif held:
            log.warning("partitions %s are held by other members of consumer group %r (%s), which this pipeline "
                        "does not own: not waiting for a rebalance", sorted(held), self.group_id,
                        ", ".join(sorted(set(held.values()))))
            return stamp
        log.info("partitions %s are not assigned to this query's member of consumer group %r yet (added to the "
                 "topic?): waiting up to %.0f s for the group's rebalance", missing, self.group_id, timeout)
        if not self._wait_holding(wanted, min(timeout, REBALANCE_GRACE_S)):
            log.info("no rebalance of consumer group %r has assigned %s (partitions added while the query was "
                     "stopped: a static member's rejoin keeps its old assignment); starting one", self.group_id,
                     missing)
            rebalance_with_a_passing_member(self._config, self._subscription, timeout)
            self._wait_holding(wanted, timeout)
        return self.stamp(timeout)

    def _wait_holding(self, wanted: set, timeout: float) -> bool:
        with self._state:
            return self._state.wait_for(lambda: self._fenced is not None or (
                self._stamp is not None and wanted <= self._stamp.assignment), timeout)

    def _admin(self) -> AdminClient:
        if self._admin_client is None:
            self._admin_client = AdminClient(self._client_config)
        return self._admin_client

    def stamp(self, timeout: float = JOIN_TIMEOUT_S) -> GroupStamp:
        """The current membership, waiting for the join (or a rebalance) to finish."""
        with self._state:
            ready = self._state.wait_for(lambda: self._stamp is not None or self._fenced is not None, timeout)
            if self._fenced is not None:
                raise self._fenced_error()
            if not ready:
                raise EosKafkaError(
                    f"could not join consumer group {self.group_id!r} in {timeout:.0f} s; check that the brokers "
                    "are reachable and that the principal may READ the group"
                )
            return self._stamp

    # ----------------------------------------------------------------------------- the thread

    def _run(self) -> None:
        self._evict_earlier_runs()
        consumer = self._consumer = Consumer(self._config)
        consumer.subscribe(self._subscription, on_assign=self._on_assign, on_revoke=self._on_revoke,
                           on_lost=self._on_revoke)
        try:
            while not self._stopping.is_set() and self._fenced is None:
                message = consumer.poll(POLL_S)
                if message is not None and message.error() is not None:
                    self._on_error(message.error())
                self._serve_commit(consumer)
                if self._committed_through(consumer):
                    self._leave(consumer)
                    break
        finally:
            self._consumer = None
            if self._fenced is None:
                consumer.close()

    def _committed_through(self, consumer: Consumer) -> bool:
        if self._leave_at is None or self._stamp is None or time.monotonic() < self._next_check:
            return False
        self._next_check = time.monotonic() + COMMITTED_CHECK_S
        if not self._leave_at:
            return True  # nothing was planned: no write commits under this membership
        try:
            # The member's own consumer asks the group's coordinator, which it follows when it moves;
            # an offset an open transaction holds is not committed yet (the request times out).
            found = consumer.committed([TopicPartition(t, p) for t, p in self._leave_at], timeout=COMMITTED_CHECK_S)
        except KafkaException:
            return False
        # Past the planned end too: the read's write tasks then find their ranges committed (or
        # moved by someone else) and send no offsets under this membership (commit_decision.decide_input_commit).
        through = all(tp.error is None and tp.offset >= self._leave_at[(tp.topic, tp.partition)] for tp in found)
        if not through:
            log.debug("consumer group %r: committed %s, the batch read planned up to %s; its member stays",
                      self.group_id, _positions({(tp.topic, tp.partition): tp.offset for tp in found}),
                      _positions(self._leave_at))
        return through

    def _leave(self, consumer: Consumer) -> None:
        with self._state:
            stamp, self._stamp = self._stamp, None
        self._leaving = threading.Event()
        leave_as_static_member(consumer, self._leaving, time.monotonic() + JOIN_TIMEOUT_S)
        log.info("the batch read planned under %s is committed: its member left the group", stamp.describe())

    def _evict_earlier_runs(self) -> None:
        """Make the static member of an earlier run of this query leave the group when that run read
        some of these topics under another subscription (so another instance id).

        A static member (KIP-345) does not leave when its client closes, and the broker keeps it
        for session.timeout.ms: this member's join would wait for it (a rebalance waits for every
        known member) and then share the topics with it. A member of another source of the same
        query (a union) reads other topics and is left alone."""
        # Asked until the group's coordinator answers: the join that follows is not refused NOT_COORDINATOR.
        members = static_members(AdminClient(self._client_config), self.group_id, COORDINATOR_WAIT_S)
        for instance, topics in sorted(members.items()):
            if instance == self.instance_id or not instance.startswith(_instance_prefix(self.group_id)):
                continue
            if any(self._subscribes(topic) for topic in topics):
                log.info("static member %r of an earlier run of this query, with another subscription, holds "
                         "%s in consumer group %r until its session times out; making it leave the group",
                         instance, sorted(topics), self.group_id)
                make_static_member_leave(self._config, sorted(topics), instance, JOIN_TIMEOUT_S)

    def _subscribes(self, topic: str) -> bool:
        if self._pattern is not None:
            return re.match(self._pattern, topic) is not None
        return topic in self._subscription

    def _on_assign(self, consumer: Consumer, partitions) -> None:
        consumer.assign(partitions)
        consumer.pause(partitions)
        metadata = consumer.consumer_group_metadata()
        generation, group, member, instance = parse_group_metadata(metadata)
        assignment = frozenset((tp.topic, tp.partition) for tp in partitions)
        stamp = GroupStamp(metadata, group, generation, member, instance, assignment, self.run_token)
        if self._on_generation is not None:
            # Before the stamp is handed out: a plan stamped with the previous generation then has
            # its claims-topic record before this stamp's record (planning appends the plan's
            # record, then takes the stamp, and on_revoke hid the previous one meanwhile), so its
            # tasks, which read the claims from their plan's record on, find the new generation.
            try:
                self._on_generation(stamp)
            except Exception as error:  # noqa: BLE001 - the membership itself is fine
                log.warning("recording generation %d of consumer group %r failed (%s): a batch that spans "
                            "this rebalance cannot commit under it and fails", generation, group, error)
        with self._state:
            self._stamp = stamp
            self._state.notify_all()
        log.info("joined %s with %d partition(s)", stamp.describe(), len(assignment))

    def _on_revoke(self, consumer: Consumer, partitions) -> None:
        if self._leaving is not None:
            self._leaving.set()  # the revocation that leaving starts
            return
        with self._state:
            self._stamp = None
        log.info("consumer group %r is rebalancing; waiting for the new assignment", self.group_id)

    def _on_error(self, error: KafkaError) -> None:
        # error_cb hands librdkafka's fatal errors over as code _FATAL (fatal() is False on that copy).
        if error.code() in (KafkaError.FENCED_INSTANCE_ID, KafkaError._FATAL) or error.fatal():
            with self._state:
                self._fenced = str(error)
                self._stamp = None
                self._state.notify_all()
            if self.batch_read:
                log.warning("the membership of consumer group %r that a batch read holds (static member %r) was "
                            "taken over by a later reader of the group (%s): a write of that read that has not "
                            "committed yet cannot commit its offsets", self.group_id, self.instance_id, self._fenced)
            else:
                log.error("%s", self._fenced_error())
        else:
            log.warning("consumer group %r membership: %s", self.group_id, error)

    def _fenced_error(self) -> FencedError:
        return FencedError(
            f"this query's membership of consumer group {self.group_id!r} (static member {self.instance_id!r}) "
            f"was taken over by another instance of the same pipeline ({self._fenced}). This instance "
            "can no longer commit; stop the other instance or this one, then restart the one you keep"
        )
