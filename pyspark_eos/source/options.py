"""The source's options (``spark.read`` / ``spark.readStream``), parsed once into ``SourceOptions``."""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field, replace
from typing import Mapping

from ..errors import ConfigurationError
from ..kafka.options import (DEFAULT_CLAIMS_TOPIC, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_TRANSACTION_TIMEOUT_MS,
                             STABLE_OFFSETS_MARGIN_MS, check_client_settings, check_group_id, check_known,
                             kafka_params, parse_bool, parse_choice, parse_duration_ms, parse_positive_int,
                             parse_topic_name)

log = logging.getLogger(__name__)

# Kafka client settings the source sets itself, with what to use instead.
_FORBIDDEN_SOURCE_KAFKA_PARAMS = {
    "enable.auto.commit": "offsets are committed by the eos-kafka sink, inside its transactions",
    "auto.offset.reset": "use the startingOffsets option",
    "enable.auto.offset.store": "offsets are tracked by Spark's checkpoint and the sink's transactions",
    "group.instance.id": "the source derives the static member id from kafka.group.id",
}


# ------------------------------------------------------------------------------- offsets specs

EARLIEST = "earliest"
LATEST = "latest"
GROUP = "group"
# Spark's Kafka JSON offsets use -2 for earliest and -1 for latest.
EARLIEST_OFFSET = -2
LATEST_OFFSET = -1


@dataclass(frozen=True)
class OffsetsSpec:
    """Where reading starts (or, for a batch query, ends).

    ``kind`` is earliest, latest, group, offsets (``per_partition``: explicit offsets, -2/-1 for
    earliest/latest) or timestamp (``per_partition`` holds timestamps, ``timestamp`` a global one).
    """

    kind: str
    per_partition: dict[tuple[str, int], int] = field(default_factory=dict)
    timestamp: int | None = None
    # Where a timestamp finds no record at or after it (Spark's startingOffsetsByTimestampStrategy):
    # "error" fails the query, "latest" starts the partition at its end.
    when_none: str = LATEST


def _parse_partition_json(name: str, raw: str, lowest: int) -> dict[tuple[str, int], int]:
    """``{"topic": {"partition": value}}``; values are whole numbers of at least ``lowest`` (a float
    would be truncated, and Kafka reads a negative timestamp as a special offset)."""
    try:
        decoded = json.loads(raw)
        parsed = {
            (str(topic), int(partition)): value
            for topic, partitions in decoded.items()
            for partition, value in partitions.items()
        }
    except (ValueError, AttributeError, TypeError):
        parsed = None
    if parsed is None or not all(isinstance(v, int) and not isinstance(v, bool) for v in parsed.values()):
        raise ConfigurationError(
            f"option {name}={raw!r} is not valid JSON of the form "
            '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
        )
    below = sorted(f"{topic}-{partition}: {value}" for (topic, partition), value in parsed.items() if value < lowest)
    if below:
        meaning = "an offset, or -2 for earliest and -1 for latest" if lowest < 0 else "a timestamp in milliseconds"
        raise ConfigurationError(f"option {name} has {', '.join(below)}; each value must be {meaning}")
    return parsed


TIMESTAMP_STRATEGIES = ("error", LATEST)


def parse_offsets_spec(options: Mapping[str, str], prefix: str, default: str, allow_group: bool) -> OffsetsSpec:
    """Parse ``<prefix>Offsets``, ``<prefix>OffsetsByTimestamp`` and ``<prefix>Timestamp`` together
    (with ``startingOffsetsByTimestampStrategy`` for the starting ones; ending ones take latest, as
    Spark's connector does)."""
    spec = _parse_offsets_spec(options, prefix, default, allow_group)
    if prefix != "starting":
        return spec
    strategy = parse_choice(options, "startingOffsetsByTimestampStrategy", TIMESTAMP_STRATEGIES, "error")
    return replace(spec, when_none=strategy) if spec.kind == "timestamp" else spec


def _parse_offsets_spec(options: Mapping[str, str], prefix: str, default: str, allow_group: bool) -> OffsetsSpec:
    names = (f"{prefix}Offsets", f"{prefix}OffsetsByTimestamp", f"{prefix}Timestamp")
    given = [name for name in names if name.lower() in options]
    if len(given) > 1:
        raise ConfigurationError(f"options {' and '.join(given)} conflict; set only one of {', '.join(names)}")
    if not given:
        return OffsetsSpec(default)
    name = given[0]
    raw = str(options[name.lower()]).strip()
    if name.endswith("OffsetsByTimestamp"):
        return OffsetsSpec("timestamp", per_partition=_parse_partition_json(name, raw, 0))
    if name.endswith("Timestamp"):
        return OffsetsSpec("timestamp", timestamp=_parse_timestamp(name, raw))
    keywords = (EARLIEST, LATEST, GROUP) if allow_group else (EARLIEST, LATEST)
    if raw.lower() in keywords:
        return OffsetsSpec(raw.lower())
    if raw.startswith("{"):
        return OffsetsSpec("offsets", per_partition=_parse_partition_json(name, raw, EARLIEST_OFFSET))
    raise ConfigurationError(f"option {name}={raw!r} is not valid; use {', '.join(keywords)} or a JSON of offsets")


def _parse_timestamp(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigurationError(f"option {name}={raw!r} must be a timestamp in milliseconds since the epoch")
    return value


# ------------------------------------------------------------------------------- subscription

@dataclass(frozen=True)
class Subscription:
    """Which topic partitions to read: exactly one of subscribe, subscribePattern, assign."""

    kind: str
    topics: tuple[str, ...] = ()
    pattern: re.Pattern | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            return self.pattern.fullmatch(topic) is not None
        return any(t == topic for t, _ in self.assigned)


_SUBSCRIPTION_OPTIONS = ("subscribe", "subscribePattern", "assign")


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    given = [name for name in _SUBSCRIPTION_OPTIONS if name.lower() in options]
    if len(given) != 1:
        found = f"got {', '.join(given)}" if given else "got none"
        raise ConfigurationError(f"set exactly one of the options {', '.join(_SUBSCRIPTION_OPTIONS)} ({found})")
    name = given[0]
    raw = str(options[name.lower()]).strip()
    if name == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise ConfigurationError("option subscribe is empty; give a comma-separated list of topics")
        return Subscription(name, topics=topics)
    if name == "subscribePattern":
        if not raw:
            raise ConfigurationError("option subscribePattern is empty; give a regular expression of topic names")
        try:
            return Subscription(name, pattern=re.compile(raw))
        except re.error as error:
            raise ConfigurationError(f"option subscribePattern={raw!r} is not a valid regular expression: {error}") from None
    assigned = tuple(sorted(_parse_partition_list(raw)))
    if not assigned:
        raise ConfigurationError('option assign is empty; give a JSON like {"topicA":[0,1],"topicB":[2,4]}')
    return Subscription(name, assigned=assigned)


def _parse_partition_list(raw: str) -> list[tuple[str, int]]:
    try:
        listed = [(str(topic), p) for topic, partitions in json.loads(raw).items() for p in partitions]
    except (ValueError, AttributeError, TypeError):
        listed = None
    if listed is None or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for _, p in listed):
        raise ConfigurationError(
            f'option assign={raw!r} is not valid JSON of the form {{"topicA":[0,1],"topicB":[2,4]}}'
        )
    twice = sorted({f"{topic}-{p}" for topic, p in listed if listed.count((topic, p)) > 1})
    if twice:
        raise ConfigurationError(f"option assign names {', '.join(twice)} more than once; list each partition once")
    return listed


def check_source_kafka_params(params: Mapping[str, str]) -> None:
    for key, reason in _FORBIDDEN_SOURCE_KAFKA_PARAMS.items():
        if key in params:
            raise ConfigurationError(f"option kafka.{key} is not supported by the eos-kafka source: {reason}")
    _check_group_protocol(params)
    isolation = params.get("isolation.level", "read_committed").lower()
    if isolation != "read_committed":
        raise ConfigurationError(
            f"option kafka.isolation.level={params['isolation.level']!r} would expose aborted and "
            "uncommitted records and break exactly-once; remove it (the source always reads read_committed)"
        )


def _check_group_protocol(params: Mapping[str, str]) -> None:
    # The group membership fences by generation (KIP-447) and hands each generation's whole
    # assignment to the sink's stamps: an eager rebalance of the classic protocol. A cooperative
    # one revokes and assigns partitions in steps, and KIP-848's protocol has member epochs that
    # the membership does not follow.
    strategies = params.get("partition.assignment.strategy", "")
    if "cooperative" in strategies.lower():
        raise ConfigurationError(
            f"option kafka.partition.assignment.strategy={strategies!r} is not supported by the eos-kafka source: "
            "its group membership follows eager rebalances; use range or roundrobin, or remove the option")
    protocol = params.get("group.protocol", "classic")
    if protocol.lower() != "classic":
        raise ConfigurationError(
            f"option kafka.group.protocol={protocol!r} is not supported by the eos-kafka source: it joins the group "
            "with the classic protocol (static membership and generations, KIP-345 and KIP-447); remove the option "
            "or set it to classic")


# ------------------------------------------------------------------------------- the source

SOURCE_OPTIONS = (
    "subscribe", "subscribePattern", "assign",
    "startingOffsets", "startingOffsetsByTimestamp", "startingTimestamp", "startingOffsetsFallback",
    "endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp",
    "maxOffsetsPerTrigger", "minPartitions", "maxRecordsPerPartition", "minRecordsPerPartition", "failOnDataLoss", "includeHeaders", "stableOffsetsTimeoutMs",
    "claimsTopic", "connectTimeoutMs", "kafkaConsumer.pollTimeoutMs",
    "startingOffsetsByTimestampStrategy", "minOffsetsPerTrigger", "maxTriggerDelay", "groupIdPrefix",
    "fetchOffset.numRetries", "fetchOffset.retryIntervalMs",
)

# Spark's connector's default for maxTriggerDelay: a batch waits at most this long for
# minOffsetsPerTrigger records.
DEFAULT_MAX_TRIGGER_DELAY = "15m"

# Kafka partitions with fewer records in a batch share a Spark task until it has about this many:
# each task pays a transaction, its offsets and its commit once, whatever its size; the value is
# the fastest of those measured (benchmarks/JOURNAL.md).
DEFAULT_MIN_RECORDS_PER_PARTITION = 50_000

# How long a read task waits for its ranges' records before it fails (Spark's Kafka connector's
# kafkaConsumer.pollTimeoutMs, whose default is spark.network.timeout's): an executor cut off from
# the partitions' leaders fails its tasks after this, and Spark retries them.
DEFAULT_POLL_TIMEOUT_MS = 120_000



@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetsSpec
    ending: OffsetsSpec
    starting_fallback: str
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    group_id: str | None
    stable_offsets_timeout_ms: int
    kafka: dict[str, str]
    claims_topic: str = DEFAULT_CLAIMS_TOPIC
    min_records_per_partition: int = DEFAULT_MIN_RECORDS_PER_PARTITION
    connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    # At least this many tasks per batch (Spark's minPartitions); None: the planner's machine's cores.
    min_partitions: int | None = None
    # Spark's maxRecordsPerPartition: a partition's range split in tasks of at most this many offsets.
    max_records_per_partition: int | None = None
    # A micro-batch waits for this many new records, or maxTriggerDelay since the last one.
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool | None) -> "SourceOptions":
        """``streaming`` None checks what holds for both spark.read and spark.readStream."""
        options = {str(key).lower(): value for key, value in options.items()}
        check_known(options, SOURCE_OPTIONS, "source")
        params = kafka_params(options)
        check_source_kafka_params(params)
        bootstrap = params.pop("bootstrap.servers", "").strip()
        if not bootstrap:
            raise ConfigurationError("option kafka.bootstrap.servers is required (host:port[,host:port...])")
        starting = parse_offsets_spec(options, "starting", EARLIEST if streaming is False else LATEST, allow_group=True)
        ending = parse_offsets_spec(options, "ending", LATEST, allow_group=False)
        _check_mode(streaming, starting, ending, ending_given=any(k.startswith("ending") for k in options))
        group_id = params.pop("group.id", None)
        if starting.kind == GROUP and not group_id:
            raise ConfigurationError("startingOffsets=group needs kafka.group.id: the group whose committed offsets to start from")
        check_group_id(group_id)
        parsed = cls(
            bootstrap_servers=bootstrap,
            subscription=parse_subscription(options),
            starting=starting,
            ending=ending,
            starting_fallback=parse_choice(options, "startingOffsetsFallback", (EARLIEST, LATEST, "fail"), EARLIEST),
            max_offsets_per_trigger=parse_positive_int(options, "maxOffsetsPerTrigger", None),
            fail_on_data_loss=parse_bool(options, "failOnDataLoss", True),
            include_headers=parse_bool(options, "includeHeaders", False),
            group_id=group_id,
            stable_offsets_timeout_ms=parse_positive_int(
                options, "stableOffsetsTimeoutMs", _default_stable_timeout(options)),
            kafka=params,
            claims_topic=parse_topic_name(options, "claimsTopic", DEFAULT_CLAIMS_TOPIC),
            min_records_per_partition=parse_positive_int(options, "minRecordsPerPartition",
                                                         DEFAULT_MIN_RECORDS_PER_PARTITION),
            connect_timeout_ms=parse_positive_int(options, "connectTimeoutMs", DEFAULT_CONNECT_TIMEOUT_MS),
            poll_timeout_ms=parse_positive_int(options, "kafkaConsumer.pollTimeoutMs", DEFAULT_POLL_TIMEOUT_MS),
            min_partitions=parse_positive_int(options, "minPartitions", None),
            max_records_per_partition=parse_positive_int(options, "maxRecordsPerPartition", None),
            min_offsets_per_trigger=parse_positive_int(options, "minOffsetsPerTrigger", None),
            max_trigger_delay_ms=parse_duration_ms(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY),
        )
        _check_trigger_limits(parsed)
        _refuse_grouped_splitting(parsed)
        _say_what_does_nothing(options, group_id)
        check_client_settings(params, "source")  # after the options of our own, whose messages are clearer
        return parsed


def _refuse_grouped_splitting(options: "SourceOptions") -> None:
    # With a group each task commits its Kafka partitions' end offsets in its one transaction, and
    # a group has one offset per partition: pieces of a partition in several tasks would each
    # commit it, in any order, and a later commit of an earlier piece would move it back. Without
    # one, each piece's write commits a progress record of its own (source/range_splitting).
    if options.max_records_per_partition is not None and options.group_id is not None:
        raise ConfigurationError(
            f"option maxRecordsPerPartition={options.max_records_per_partition} cannot be used with "
            f"kafka.group.id={options.group_id!r}: the group's offset of a Kafka partition is committed by the one "
            "task that reads the partition's range of a batch, in its transaction. Bound a batch's size with "
            "maxOffsetsPerTrigger (a stream) or endingOffsets (spark.read), or give the topic more partitions for "
            "more tasks; or read without kafka.group.id (on the source and the sink), where each piece of a split "
            "partition commits its own progress")


def _check_trigger_limits(options: "SourceOptions") -> None:
    low, high = options.min_offsets_per_trigger, options.max_offsets_per_trigger
    if low is not None and high is not None and low > high:
        raise ConfigurationError(f"option minOffsetsPerTrigger={low} is higher than maxOffsetsPerTrigger={high}: no "
                                 "batch could hold both; lower the first or raise the second")


def _say_what_does_nothing(options: Mapping[str, str], group_id: str | None) -> None:
    """Options of Spark's connector that have no work here, accepted so that a connector
    pipeline's options run unchanged, with a line saying why."""
    for name in ("fetchOffset.numRetries", "fetchOffset.retryIntervalMs"):
        parse_positive_int(options, name, None)
    said = []
    if "groupidprefix" in options:
        said.append("groupIdPrefix: the source reads without a consumer group of its own"
                    + ("; kafka.group.id names the pipeline's" if group_id else " (kafka.group.id names a pipeline's)"))
    if "fetchoffset.numretries" in options or "fetchoffset.retryintervalms" in options:
        said.append("fetchOffset.*: offset lookups retry with back-off until connectTimeoutMs")
    if said:
        log.info("source option(s) of Spark's connector taken as they are: %s", "; ".join(said))


def _check_mode(streaming: bool | None, starting: OffsetsSpec, ending: OffsetsSpec, ending_given: bool) -> None:
    if streaming and ending_given:
        raise ConfigurationError("endingOffsets options apply to batch queries only (spark.read); remove them")
    if streaming is False:
        _check_batch_range(starting, ending)


def _check_batch_range(starting: OffsetsSpec, ending: OffsetsSpec) -> None:
    """What would read nothing or run backwards in a batch query, refused as Spark's connector does."""
    if starting.kind == LATEST:
        raise ConfigurationError("startingOffsets=latest would read nothing in a batch query; use earliest, group or offsets")
    if ending.kind == EARLIEST:
        raise ConfigurationError("endingOffsets=earliest would read nothing in a batch query; use latest or offsets")
    start = starting.per_partition if starting.kind == "offsets" else {}
    end = ending.per_partition if ending.kind == "offsets" else {}
    for name, offsets, refused, meaning in (("startingOffsets", start, LATEST_OFFSET, "latest (-1)"),
                                            ("endingOffsets", end, EARLIEST_OFFSET, "earliest (-2)")):
        named = sorted(f"{topic}-{partition}" for (topic, partition), offset in offsets.items() if offset == refused)
        if named:
            raise ConfigurationError(f"option {name} gives {', '.join(named)} {meaning}, which would read nothing in a "
                                     "batch query; give an offset")
    backwards = sorted(f"{t}-{p}: {start[(t, p)]} > {end[(t, p)]}" for (t, p) in start.keys() & end.keys()
                       if start[(t, p)] >= 0 and end[(t, p)] >= 0 and start[(t, p)] > end[(t, p)])
    if backwards:
        raise ConfigurationError(f"startingOffsets is past endingOffsets for {', '.join(backwards)}; give a start at "
                                 "or before the end")


def _default_stable_timeout(options: Mapping[str, str]) -> int:
    timeout = parse_positive_int(options, "kafka.transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS)
    return timeout + STABLE_OFFSETS_MARGIN_MS
