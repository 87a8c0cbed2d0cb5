"""What the sink checks on the driver before its first task: that the cluster runs transactions
for the sink's transactional ids, and, for exactly-once, that the principal may use the claims topic.

Without these checks every write task fails alike, after its worker made a producer, with Kafka's
error code and no fix: a Kafka-compatible service without transactions refuses InitProducerId; a
cluster with fewer brokers than ``transaction.state.log.replication.factor`` (3 by default) cannot
create its transaction state topic, so no transaction coordinator ever answers and each task waits
out its timeout; a missing ACL on the transactional ids or the claims topic refuses every attempt.

The driver makes one transactional producer under the sink's id prefix (InitProducerId: the ACL on
the ids and a coordinator, as a task's producer needs them) and reads the principal's operations on
the claims topic. ``transactions_refusal`` and ``claims_refusal`` decide from the answers alone.
"""
from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException, Producer, TopicCollection

from ..errors import ConfigurationError, KafkaClientError
from ..kafka import driver_resources
from ..kafka.at_once import all_at_once
from ..kafka.cluster import connected, contact_admin
from ..kafka.held_clients import close_client
from ..kafka.options import files_explained, left_to_executors
from ..protocol.claims_layout import claims_topic_of
from .options import EXACTLY_ONCE, SinkOptions
from .transactional_id_factory import id_scope, transactional_id

log = logging.getLogger(__name__)

# The probe's id sits under the prefix of the ids the tasks take (the ACL that lets them lets it),
# beside theirs: transactional_id(prefix, scope, host, slot) with a host name no host's slots have.
PROBE_HOST = "driver-check"
_UNSUPPORTED = {"_UNSUPPORTED_FEATURE", "UNSUPPORTED_VERSION", "UNSUPPORTED_FOR_MESSAGE_FORMAT"}
_UNAVAILABLE = {"_TIMED_OUT", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS"}


def transactions_refusal(code: str, id_prefix: str, servers: str, timeout_s: float, timeout_ms: int) -> str | None:
    """What to tell the user when the probe's InitProducerId failed with ``code``; None: not a
    refusal (the tasks try again, and report what lasts)."""
    if code == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED":
        return (f"the principal may not use the sink's transactional ids {id_prefix}* at {servers} "
                f"(TRANSACTIONAL_ID_AUTHORIZATION_FAILED): grant WRITE on them, e.g. kafka-acls.sh --bootstrap-server "
                f"{servers} --add --allow-principal <principal> --operation Write --transactional-id {id_prefix} "
                "--resource-pattern-type prefixed (docs/security.md)")
    if code in _UNSUPPORTED:
        return (f"the cluster at {servers} does not support Kafka transactions ({code}): the sink writes every task "
                "in a transaction, with either delivery guarantee; use a cluster that supports them")
    if code in _UNAVAILABLE:
        return (f"no transaction coordinator answered at {servers} within {timeout_s:.0f} s ({code}): the cluster "
                "cannot run transactions now. A cluster with fewer brokers than its transaction.state.log."
                "replication.factor (default 3) cannot create its transaction state topic: set it and "
                "transaction.state.log.min.isr to at most the number of brokers; otherwise see the brokers' logs")
    if code == "INVALID_TRANSACTION_TIMEOUT":
        return (f"option kafka.transaction.timeout.ms={timeout_ms} is above the brokers' transaction.max.timeout.ms "
                f"at {servers} (INVALID_TRANSACTION_TIMEOUT): lower it, or raise transaction.max.timeout.ms on the "
                "brokers")
    return None


def claims_operations_needed(options: SinkOptions, streaming: bool) -> set[str]:
    """The claims topic: every exactly-once write appends its plan record there; its tasks also
    read the claims, except a plain batch write without a group or txnAppId (docs/security.md)."""
    reads = streaming or options.group_id is not None or options.txn_app_id is not None
    return {"WRITE", "READ"} if reads else {"WRITE"}


def claims_refusal(topic: str, servers: str, authorized: set[str] | None, needed: set[str],
                   prefix: str | None = None) -> str | None:
    """``authorized``: the principal's operations on the claims topic, None when Kafka refused to
    describe it (no ACL on it at all); ``prefix``: the topics' prefix, for a pipeline's own topic."""
    missing = needed if authorized is None else needed - authorized - ({"READ", "WRITE"} if "ALL" in authorized
                                                                       else set())
    if not missing:
        return None
    operations = " ".join(f"--operation {operation.capitalize()}" for operation in sorted(missing))
    resource = f"--topic {topic}" if prefix is None else f"--resource-pattern-type prefixed --topic {prefix}"
    return (f"the principal may not {' and '.join(sorted(missing))} the claims topic {topic!r} at {servers}: grant "
            f"it, e.g. kafka-acls.sh --bootstrap-server {servers} --add --allow-principal <principal> {operations} "
            f"{resource} (docs/security.md), or name a topic it may use with the option claimsTopic")


def check_sink_can_commit(options: SinkOptions, streaming: bool, timeout_s: float) -> None:
    """Fail, naming the fix, when the tasks' transactions or claims would be refused; once per
    process and write configuration while it is in use (driver_resources: Spark builds a writer
    every micro-batch). What cannot be decided here (a client file present only on the executors,
    an answer that is no refusal) is logged and left to the tasks."""
    checked = driver_resources.use(options.bootstrap_servers, options.kafka).facts
    key = ("sink can commit", options.transactional_id_prefix, options.group_id, options.txn_app_id,
           options.claims_topic, options.pipeline, options.transaction_timeout_ms, options.delivery_guarantee,
           streaming)
    if key in checked:
        return
    scope = id_scope(options.group_id, options.txn_app_id, "" if streaming else None)
    checks = [lambda: options.delivery_guarantee != EXACTLY_ONCE or _check_claims(options, streaming, timeout_s)]
    if scope is not None:
        checks.append(lambda: _probe_transactions(options, scope, timeout_s))
    try:
        decided = all_at_once(checks)[0]
    except (KafkaException, KafkaClientError) as error:
        text = error.args[0].str() if isinstance(error, KafkaException) else str(error)
        if not left_to_executors(text, options.kafka, "the sink's transactions and claims"):
            raise
        return
    if decided:  # a claims topic made later is checked then
        checked[key] = True


def _probe_transactions(options: SinkOptions, scope: str, timeout_s: float) -> None:
    probe_id = transactional_id(options.transactional_id_prefix, scope, PROBE_HOST, 0)
    # What the ACL names: the ids of a group or app (<prefix>.<scope>.), or of any query (<prefix>.query-).
    id_prefix = f"{options.transactional_id_prefix}.{scope}" + ("" if scope.endswith("-") else ".")
    with files_explained(options.kafka):
        producer = Producer({**options.kafka, "bootstrap.servers": options.bootstrap_servers,
                             "transactional.id": probe_id, "transaction.timeout.ms": options.transaction_timeout_ms})
    settled = False
    try:
        # A metadata request first, as for the tasks' producers (kafka.cluster.connected): sent
        # before any connection is up, init_transactions waits for librdkafka's 500 ms retry timer.
        connected(producer, options.bootstrap_servers, timeout_s).init_transactions(timeout_s)
        settled = True
    except KafkaClientError as error:  # the metadata request: nothing refused, the tasks will tell
        log.warning("the sink's check of its transactions at %s could not ask for metadata: %s",
                    options.bootstrap_servers, error)
    except KafkaException as error:
        code = error.args[0].name()
        message = transactions_refusal(code, id_prefix, options.bootstrap_servers, timeout_s,
                                       options.transaction_timeout_ms)
        if message is None:  # no refusal: the tasks' producers try again, for longer
            log.warning("the sink's check of its transactions at %s got %s; the tasks will tell",
                        options.bootstrap_servers, error.args[0])
            return
        raise (KafkaClientError if code in _UNAVAILABLE else ConfigurationError)(message) from error
    finally:
        close_client(producer, settled)
        del producer  # destroyed now, not with a raised error's traceback that holds this frame


def _check_claims(options: SinkOptions, streaming: bool, timeout_s: float) -> bool:
    """Whether the principal's operations on the claims topic were decided (and fine)."""
    authorized = _claims_operations(options, timeout_s)
    if authorized == "unknown":
        return False
    topic = claims_topic_of(options.claims_topic, options.pipeline)
    message = claims_refusal(topic, options.bootstrap_servers, authorized, claims_operations_needed(options, streaming),
                             None if topic == options.claims_topic else f"{options.claims_topic}.")
    if message is not None:
        raise ConfigurationError(message)
    return True


def _claims_operations(options: SinkOptions, timeout_s: float):
    """The principal's operations on the claims topic; None: none at all (Kafka refuses to
    describe it); "unknown": the topic is not there yet, the broker does not report them, or
    did not answer."""
    with files_explained(options.kafka):
        admin, _ = contact_admin(options.kafka, options.bootstrap_servers)
    topic = claims_topic_of(options.claims_topic, options.pipeline)
    described = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s,
                                      include_authorized_operations=True)
    try:
        operations = described[topic].result(timeout_s + 5).authorized_operations
    except KafkaException as error:
        if error.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            return None
        # UNKNOWN_TOPIC_OR_PART: made on first use, and a principal without CREATE is told so there.
        log.debug("the claims topic %r could not be described: %s", topic, error.args[0])
        return "unknown"
    except TimeoutError:
        return "unknown"
    names = {operation.name for operation in operations or ()}
    # DESCRIBE comes with any operation on a topic the principal may describe: a set without it
    # (None, or a broker's empty bit field) reports nothing.
    return names if "DESCRIBE" in names else "unknown"
