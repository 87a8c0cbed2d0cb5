"""A query's first contact with its Kafka cluster: does any broker answer, does the output topic exist.

librdkafka retries a refused or unanswered connection until the request's own timeout runs out,
then reports ``_TRANSPORT``, which names neither the address nor what to check. The first request
of a query is therefore bounded by the ``connectTimeoutMs`` option and its failure says what to
check. (``kafka.socket.connection.setup.timeout.ms`` bounds one connection attempt, not the
retries, so it cannot serve as that bound.)
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, ConfigResource

from ..errors import ConfigurationError, KafkaClientError
from . import driver_resources
from .backoff import error_code
from .handshake_refusals import HandshakeRefusals, refusal_error
from .options import files_explained, left_to_executors

log = logging.getLogger(__name__)

# How a metadata request says that no broker answered: librdkafka's rd_kafka_metadata() gives
# _TRANSPORT when no broker became usable (connected, API versions exchanged, authenticated) before
# the deadline, _TIMED_OUT when one did but its answer did not come in time, _ALL_BROKERS_DOWN when
# every connection failed. Authorization failures and unknown topics are not among them: they come
# back inside an answer, as errors of its topics.
UNREACHABLE_CODES = frozenset({KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN})


def unreachable_error(servers: str, timeout_s: float, bound_by: str = "option connectTimeoutMs") -> KafkaClientError:
    return KafkaClientError(
        f"no Kafka broker answered at {servers} within {timeout_s:g} s ({bound_by}); check the "
        "address and port, the broker's advertised listeners, and the TLS/SASL settings (kafka.security.protocol, "
        "kafka.sasl.mechanism, kafka.ssl.ca.location, ...)"
    )


def list_topics(admin: AdminClient, servers: str, timeout_s: float, topic: str | None = None) -> ClusterMetadata:
    """Metadata of ``topic`` (None: of every topic); a failure names the request and Kafka's error."""
    try:
        return admin.list_topics(topic=topic, timeout=timeout_s)
    except KafkaException as error:
        raise KafkaClientError(f"listing topics at {servers} failed: {error.args[0]}") from error


def connected(producer, servers: str, timeout_s: float, topic: str | None = None):
    """``producer`` after one metadata request (of ``topic``; None: of every topic), made before its
    first transactional or idempotent request.

    Sent before any broker connection of a new producer is up, that request (init_transactions, or
    an idempotent producer's first record, which needs a producer id) waits for librdkafka's next
    try, on a 500 ms timer. A query's start would pay it for every worker's producer
    (benchmarks/JOURNAL.md)."""
    list_topics(producer, servers, timeout_s, topic)
    return producer


# A first contact asks in slices, serving the client's error_cb in between, so that a TLS handshake
# or SASL authentication every bootstrap server refused ends it at once (handshake_refusals). Each
# slice is twice as long as the one before: a metadata answer slower than a slice still comes in
# a later one.
_FIRST_SLICE_S = 0.5


def contact_admin(kafka_params: Mapping[str, str], servers: str) -> tuple[AdminClient, HandshakeRefusals]:
    """An AdminClient for a first contact, and what it reports of refused connections."""
    refusals = HandshakeRefusals(servers)
    return AdminClient({**kafka_params, "bootstrap.servers": servers, "error_cb": refusals}), refusals


def first_contact(admin: AdminClient, servers: str, timeout_s: float, topic: str | None = None,
                  bound_by: str = "option connectTimeoutMs", refusals: HandshakeRefusals | None = None,
                  kafka_params: Mapping[str, str] | None = None) -> ClusterMetadata:
    """``list_topics`` as a query's (or a command's) first request to the cluster: when no broker
    answers within ``timeout_s``, the error says so, what set that bound, and what to check; with
    ``refusals`` (``contact_admin``), handshakes refused by every bootstrap server fail it at once,
    saying why."""
    deadline = time.monotonic() + timeout_s
    slice_s = _FIRST_SLICE_S if refusals is not None else timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            return list_topics(admin, servers, max(min(left, slice_s), 0.01), topic)
        except KafkaClientError as error:
            if error_code(error.__cause__) not in UNREACHABLE_CODES:
                raise
            if refusals is not None:
                admin.poll(0)  # serves error_cb
                refused = refusals.final()
                if refused is not None:
                    raise refusal_error(refused, servers, kafka_params or {}) from error.__cause__
            if time.monotonic() >= deadline:
                raise unreachable_error(servers, timeout_s, bound_by) from error.__cause__
            slice_s *= 2


def reachable_admin(kafka_params: Mapping[str, str], servers: str, timeout_s: float,
                    bound_by: str = "option connectTimeoutMs") -> AdminClient:
    """An AdminClient whose first request has shown that a broker answers."""
    with files_explained(kafka_params):
        admin, refusals = contact_admin(kafka_params, servers)
    first_contact(admin, servers, timeout_s, bound_by=bound_by, refusals=refusals, kafka_params=kafka_params)
    return admin


def create_command(servers: str, topics: Iterable[str]) -> str:
    """How to create topics, for the messages about missing ones."""
    return "; ".join(f"kafka-topics.sh --bootstrap-server {servers} --create --topic {topic} --partitions <n> "
                     "--replication-factor <r>" for topic in topics)


# A topic created a moment ago may not have reached the broker that answers yet, which then calls
# it unknown: librdkafka allows for that by holding records to an unknown topic for
# topic.metadata.propagation.max.ms (30 s by default) before failing them. Seconds are enough for a
# new topic to reach every broker, so the checks ask again for this long, not 30 s.
TOPIC_PROPAGATION_GRACE_S = 5.0
_TOPIC_RECHECK_INTERVAL_S = 0.5


def unknown_topic(metadata: ClusterMetadata, topic: str) -> bool:
    found = metadata.topics.get(topic)
    return found is None or (found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART)


def settled_metadata(look_up: Callable[[], ClusterMetadata | None], topic: str) -> ClusterMetadata | None:
    """``look_up()``'s metadata of ``topic``, asked again for up to TOPIC_PROPAGATION_GRACE_S while
    the cluster calls the topic unknown; None when ``look_up`` has no answer."""
    deadline = time.monotonic() + TOPIC_PROPAGATION_GRACE_S
    metadata = look_up()
    while metadata is not None and unknown_topic(metadata, topic) and time.monotonic() < deadline:
        time.sleep(_TOPIC_RECHECK_INTERVAL_S)
        metadata = look_up()
    return metadata


def check_output(kafka_params: Mapping[str, str], servers: str, topic: str | None, timeout_s: float,
                 transaction_timeout_ms: int | None = None) -> None:
    """Fail, naming the fix, when no broker answers at ``servers``, the sink's ``topic`` option
    names a topic that does not exist (None: records name their topics; only the cluster is checked),
    or the sink's transactions (``transaction_timeout_ms``; None: none) would be refused their timeout."""
    # Once per driver process and configuration (driver_resources): Spark builds the writer for
    # every micro-batch, in Python workers it keeps between batches.
    checked = driver_resources.use(servers, kafka_params).facts
    key = ("output checked", topic, transaction_timeout_ms)
    if key in checked:
        return
    try:
        # With the sink's own settings: the request creates the topic exactly where its producers
        # would (allow.auto.create.topics, true for producers, and the broker's auto.create.topics.enable).
        admin, refusals = contact_admin(kafka_params, servers)
    except KafkaException as error:
        if not left_to_executors(error.args[0].str(), kafka_params, "the sink's cluster and topic"):
            raise
        return
    metadata = first_contact(admin, servers, timeout_s, topic, refusals=refusals, kafka_params=kafka_params)
    if topic is not None:
        if unknown_topic(metadata, topic):
            metadata = settled_metadata(lambda: list_topics(admin, servers, timeout_s, topic), topic)
        _require_topic(metadata, servers, topic)
    if transaction_timeout_ms is not None:
        _check_transaction_timeout(admin, servers, metadata, transaction_timeout_ms, timeout_s)
    checked[key] = True


def _check_transaction_timeout(admin: AdminClient, servers: str, metadata: ClusterMetadata, timeout_ms: int,
                               request_timeout_s: float) -> None:
    """A producer whose transaction.timeout.ms is above the brokers' transaction.max.timeout.ms is
    refused at init_transactions, in every task: say so here, before any task starts."""
    try:
        # The broker that answered the metadata request: it is reachable from here.
        broker = metadata.orig_broker_id if metadata.orig_broker_id >= 0 else min(metadata.brokers)
        resource = ConfigResource(ConfigResource.Type.BROKER, str(broker))
        described = admin.describe_configs([resource], request_timeout=request_timeout_s)[resource]
        limit = int(described.result(request_timeout_s)["transaction.max.timeout.ms"].value)
    except Exception as error:  # noqa: BLE001 - e.g. no DESCRIBE_CONFIGS: the tasks' producers will tell
        log.debug("the brokers' transaction.max.timeout.ms at %s could not be read: %s", servers, error)
        return
    if timeout_ms > limit:
        raise ConfigurationError(
            f"option kafka.transaction.timeout.ms={timeout_ms} is above the brokers' transaction.max.timeout.ms "
            f"({limit}) at {servers}: every transactional producer would be refused (INVALID_TRANSACTION_TIMEOUT); "
            f"set it to {limit} or less, or raise transaction.max.timeout.ms on the brokers")


def _require_topic(metadata: ClusterMetadata, servers: str, topic: str) -> None:
    if unknown_topic(metadata, topic):
        raise ConfigurationError(f"the sink's topic {topic!r} does not exist at {servers} (and the brokers do not "
                                 f"create topics on first use): create it, e.g. {create_command(servers, [topic])}, "
                                 "or correct the topic option")
    error = metadata.topics[topic].error
    if error is not None:  # no DESCRIBE, a new topic's leaders not elected yet: the tasks report what lasts
        log.warning("looking up the sink's topic %r at %s: %s", topic, servers, error)
