"""The sink's options (``df.write`` / ``df.writeStream``), parsed once into ``SinkOptions``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..errors import ConfigurationError
from ..kafka.options import (DEFAULT_CLAIMS_TOPIC, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_TRANSACTION_TIMEOUT_MS,
                             STABLE_OFFSETS_MARGIN_MS, check_client_settings, check_group_id, check_known,
                             kafka_params, parse_bool, parse_choice, parse_positive_int, parse_topic_name)


# ------------------------------------------------------------------------------- the sink

SINK_OPTIONS = ("topic", "includeHeaders", "transactionalIdPrefix", "stableOffsetsTimeoutMs",
                "deliveryGuarantee", "connectTimeoutMs", "claimsTopic", "txnAppId", "txnVersion",
                "checkpointLocation", "path")

# As Flink's KafkaSink: exactly-once commits with each task's records either the input offsets it
# read (kafka.group.id, an eos-kafka source) or, for any other replayable source, the task's own
# progress (task_progress); at-least-once writes each task in a transaction of its own with
# neither, so a replayed batch is written again. A write says which one it is, never falls back.
EXACTLY_ONCE, AT_LEAST_ONCE = "exactly-once", "at-least-once"

# Kafka client settings the sink sets itself, with why.
_FORBIDDEN_SINK_KAFKA_PARAMS = {
    "transactional.id": "the sink derives one per worker from transactionalIdPrefix, the group, the host and the slot",
    "enable.idempotence": "transactions need the idempotent producer; it is always on",
    "acks": "transactions need acks=all; it is always set (kafka.acks=all is accepted)",
    "enable.gapless.guarantee": "a transaction that fails to deliver a record aborts as a whole, so there is no gap "
                                "to guard against; librdkafka also refuses it for the sink's clients that are not "
                                "idempotent producers",
}

# The values of those settings the sink's producers have: accepted, as Spark's connector's sink
# options often carry them.
_SET_BY_THE_SINK = {"acks": ("all", "-1"), "enable.idempotence": ("true",)}


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None
    include_headers: bool
    transactional_id_prefix: str
    group_id: str | None
    transaction_timeout_ms: int
    stable_offsets_timeout_ms: int
    kafka: dict[str, str]
    connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS
    delivery_guarantee: str = EXACTLY_ONCE
    claims_topic: str = DEFAULT_CLAIMS_TOPIC
    txn_app_id: str | None = None
    txn_version: int | None = None
    # A streaming query's, given with .option() (Spark passes no location set by
    # spark.sql.streaming.checkpointLocation to a sink): what names a pipeline without a group.
    checkpoint_location: str | None = None

    @property
    def commits_input_offsets(self) -> bool:
        """With kafka.group.id the sink commits the input offsets of each task in its transaction."""
        return self.group_id is not None

    @property
    def records_progress(self) -> bool:
        """Exactly-once without input offsets: a streaming task commits its own progress instead."""
        return self.delivery_guarantee == EXACTLY_ONCE and self.group_id is None

    @property
    def pipeline(self) -> str | None:
        """What names the pipeline's own claims topic (layout 2, protocol/claims_layout): its consumer
        group; for exactly-once without one, a batch write's txnAppId and topic, or the streaming
        query's checkpointLocation. None: the shared claims topic (layout 1)."""
        if self.group_id is not None or not self.records_progress:
            return self.group_id
        if self.txn_app_id is not None:
            return f"txnAppId {self.txn_app_id} {self.topic or ''}".rstrip()
        return f"checkpoint {self.checkpoint_location}" if self.checkpoint_location else None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SinkOptions":
        options = {str(key).lower(): value for key, value in options.items()}
        if "transactionalidper" in options:
            raise ConfigurationError(
                f"option transactionalIdPer={options['transactionalidper']!r} is no longer supported: the sink always "
                "uses one transactional id per write slot of a host (KIP-447), which was its default; drop the "
                "option")
        check_known(options, SINK_OPTIONS, "sink")
        params = kafka_params(options)
        for key, reason in _FORBIDDEN_SINK_KAFKA_PARAMS.items():
            if key in params and params[key].strip().lower() in _SET_BY_THE_SINK.get(key, ()):
                del params[key]  # what the sink sets anyway, as a connector pipeline often says
            elif key in params:
                raise ConfigurationError(f"option kafka.{key} is not supported by the eos-kafka sink: {reason}")
        bootstrap = params.pop("bootstrap.servers", "").strip()
        if not bootstrap:
            raise ConfigurationError("option kafka.bootstrap.servers is required (host:port[,host:port...])")
        group_id = params.pop("group.id", None)
        check_group_id(group_id)
        timeout = parse_positive_int(options, "kafka.transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS)
        check_client_settings(params, "sink")
        params.pop("transaction.timeout.ms", None)
        prefix = str(options.get("transactionalidprefix", "eos-kafka")).strip()
        if not prefix:
            raise ConfigurationError("option transactionalIdPrefix is empty; give a name unique to this pipeline")
        topic = parse_topic_name(options, "topic", None)
        guarantee = parse_choice(options, "deliveryGuarantee", (EXACTLY_ONCE, AT_LEAST_ONCE), EXACTLY_ONCE)
        if guarantee == AT_LEAST_ONCE and group_id is not None:
            raise ConfigurationError(
                "deliveryGuarantee=at-least-once commits no input offsets, but kafka.group.id asks the sink to "
                f"commit them to consumer group {group_id!r}: drop kafka.group.id for at-least-once, or drop "
                "deliveryGuarantee (exactly-once is the default)")
        app_id, version = _parse_idempotent_write(options, group_id, guarantee)
        return cls(
            bootstrap_servers=bootstrap,
            topic=topic,
            include_headers=parse_bool(options, "includeHeaders", False),
            transactional_id_prefix=prefix,
            group_id=group_id,
            transaction_timeout_ms=timeout,
            stable_offsets_timeout_ms=parse_positive_int(options, "stableOffsetsTimeoutMs",
                                                         timeout + STABLE_OFFSETS_MARGIN_MS),
            kafka=params,
            connect_timeout_ms=parse_positive_int(options, "connectTimeoutMs", DEFAULT_CONNECT_TIMEOUT_MS),
            delivery_guarantee=guarantee,
            claims_topic=parse_topic_name(options, "claimsTopic", DEFAULT_CLAIMS_TOPIC),
            txn_app_id=app_id,
            txn_version=version,
            checkpoint_location=str(options.get("checkpointlocation") or "").strip() or None,
        )


def _parse_idempotent_write(options: Mapping[str, str], group_id: str | None,
                            guarantee: str) -> tuple[str | None, int | None]:
    """txnAppId and txnVersion, Delta Lake's names: a batch write's key (idempotent_writes)."""
    raw_app = options.get("txnappid")
    app_id = None if raw_app is None else str(raw_app).strip()
    if app_id is not None and (not app_id or not all(32 <= ord(c) < 127 for c in app_id)):
        # It names consumer groups, whose ids librdkafka encodes as NUL-terminated C strings.
        raise ConfigurationError(f"option txnAppId={raw_app!r} must be a non-empty printable ASCII name")
    raw_version = options.get("txnversion")
    version = None
    if raw_version is not None:
        try:
            version = int(str(raw_version).strip())
        except ValueError:
            version = -1
        if version < 0:
            raise ConfigurationError(f"option txnVersion={raw_version!r} must be a whole number, 0 or more")
    if (app_id is not None or version is not None) and (group_id is not None or guarantee != EXACTLY_ONCE):
        given = "kafka.group.id" if group_id is not None else "deliveryGuarantee=at-least-once"
        raise ConfigurationError(
            f"txnAppId/txnVersion make a write exactly-once by committing each task's progress under that key, "
            f"and {given} asks for something else: drop {given}, or drop txnAppId and txnVersion")
    return app_id, version
