"""Option parsing shared by the source and the sink: typed values and the ``kafka.*`` client settings.

Spark hands a data source its options as a case-insensitive mapping of strings (the keys arrive
lower-cased). Every value is parsed once, into the typed dataclasses of ``source.options`` and
``sink.options``, with errors that name the option and the values it accepts. Names and meanings
follow Spark's own Kafka connector wherever one applies, so a query can move between
``format("kafka")`` and ``format("eos-kafka")``.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import socket
from dataclasses import dataclass
from typing import Iterator, Mapping

from ..errors import ConfigurationError, KafkaClientError
from .callbacks import with_callbacks
from .java_settings import translated

log = logging.getLogger(__name__)

KAFKA_PREFIX = "kafka."
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")

# Defaults of librdkafka's transaction.timeout.ms plus a margin: a transaction left open by a dead
# writer is aborted by the broker after its timeout, so waiting longer than that is pointless.
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
STABLE_OFFSETS_MARGIN_MS = 30_000

# How long a query's first request waits for a broker to answer (option connectTimeoutMs, see
# kafka.cluster): as long as its later requests may take, so that a slow cluster is not called unreachable.
DEFAULT_CONNECT_TIMEOUT_MS = 30_000

# Where the sink's write-task attempts claim their input (see sink/attempt_fencing), and where its
# progress groups commit when the input has no offsets (sink/task_progress): one topic per Kafka
# cluster serves every pipeline, its records keyed by group.
DEFAULT_CLAIMS_TOPIC = "eos-kafka-claims"


def parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value == "true":
        return True
    if value == "false":
        return False
    raise ConfigurationError(f"option {name}={raw!r} is not a boolean; use true or false")


def parse_positive_int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigurationError(f"option {name}={raw!r} must be a positive whole number")
    return value


# Spark's time strings (JavaUtils.timeStringAsMs): a number and a unit, milliseconds without one.
_DURATION = re.compile(r"(\d+)\s*(us|ms|s|m|min|h|d)?")
_UNIT_MS = {"us": 0.001, "ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(options: Mapping[str, str], name: str, default: str) -> int:
    raw = str(options.get(name.lower(), default)).strip().lower()
    match = _DURATION.fullmatch(raw)
    if match is None:
        raise ConfigurationError(f"option {name}={raw!r} is not a duration; give a number with a unit: us, ms, s, m, "
                                 "min, h or d (e.g. 15m)")
    return int(int(match.group(1)) * _UNIT_MS[match.group(2)])


def parse_choice(options: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    raw = options.get(name.lower())
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value not in choices:
        raise ConfigurationError(f"option {name}={raw!r} is not valid; use one of: {', '.join(choices)}")
    return value


# ------------------------------------------------------------------------------- kafka.* params

# librdkafka backs a broker's reconnects off up to 10 s: after a connection refused or reset for a
# few seconds, a task's client waited that long to try again, where the Java client (Spark's
# connector's) waits at most 1 s. A kafka.* option of the same name wins.
RECONNECT_BACKOFF_MAX_MS = 1000


def kafka_params(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.``-prefixed options with the prefix removed, for the Kafka clients, the Java
    client's settings made librdkafka's (java_settings), with the Java client's
    ``reconnect.backoff.max.ms`` unless given; a callback setting
    (``kafka.oauth_cb``) names a Python callable as module:function (kafka.callbacks)."""
    params = translated({key[len(KAFKA_PREFIX):]: str(value) for key, value in options.items()
                         if key.startswith(KAFKA_PREFIX)})
    return with_callbacks({"reconnect.backoff.max.ms": str(_reconnect_backoff_max_ms(params)), **params})


def _reconnect_backoff_max_ms(params: Mapping[str, str]) -> int:
    # librdkafka refuses a maximum below reconnect.backoff.ms; a malformed one is left to its check
    try:
        return max(RECONNECT_BACKOFF_MAX_MS, int(params.get("reconnect.backoff.ms", 0)))
    except ValueError:
        return RECONNECT_BACKOFF_MAX_MS


def check_known(options: Mapping[str, str], known: tuple[str, ...], role: str) -> None:
    lowered = {name.lower(): name for name in known}
    unknown = sorted(key for key in options if key not in lowered and not key.startswith(KAFKA_PREFIX))
    if unknown:
        raise ConfigurationError(
            f"unknown option(s) for the eos-kafka {role}: {', '.join(unknown)}; valid options are "
            f"{', '.join(sorted(known))} and kafka.* settings for the Kafka client"
        )


def check_client_settings(params: Mapping[str, str], role: str) -> None:
    """librdkafka checks its settings' names and values only when a client is made, which would be
    when a batch is planned or in a task: make one now, offline (without bootstrap.servers it
    connects nowhere), and discard it. Spark parses the sink's options twice per micro-batch, in
    workers that live on: each set of settings is checked once per process."""
    _check_client_settings(tuple(sorted(params.items())), role)


# The settings a client is made with besides the user's: the sink's producers are transactional,
# which changes what librdkafka accepts (e.g. queuing.strategy, enable.gapless.guarantee).
_CHECKED_AS = {"sink": {"transactional.id": "eos-kafka-settings-check"},
               "source": {"group.id": "eos-kafka-settings-check"}}


@functools.lru_cache(maxsize=64)
def _check_client_settings(params: tuple[tuple[str, str], ...], role: str) -> None:
    from confluent_kafka import Consumer, KafkaException, Producer

    try:
        client = (Producer if role == "sink" else Consumer)({**dict(params), **_CHECKED_AS[role], "log_level": 0})
    except KafkaException as error:
        text = error.args[0].str().strip()
        if left_to_executors(text, dict(params), f"the eos-kafka {role}'s Kafka settings"):
            return
        raise ConfigurationError(f"a kafka.* option of the eos-kafka {role} is refused by the Kafka client "
                                 f"(librdkafka): {text}; fix or remove it (kafka.* options are librdkafka settings, "
                                 "see its CONFIGURATION.md)") from None
    if role != "sink":
        client.close()


def local_files_refused(error_text: str, params: Mapping[str, str]) -> bool:
    """Whether librdkafka refused a client because of a file or plugin named by a setting."""
    return any(name in error_text for name in params if name.endswith(".location") or name == "plugin.library.paths")


def left_to_executors(error_text: str, params: Mapping[str, str], what: str) -> bool:
    """Whether a driver-side check must leave ``what`` to the executors' clients, saying so: a
    client refused for a file or plugin a setting names, which may exist only where the tasks run
    (shipped with --files), so that the driver cannot judge it."""
    if not local_files_refused(error_text, params):
        return False
    log.warning("%s could not be checked on the driver (%s); the executors' clients will check them", what,
                error_text)
    return True


@contextlib.contextmanager
def files_explained(params: Mapping[str, str]) -> Iterator[None]:
    """Around building a Kafka client: librdkafka's refusal of a file a setting names (OpenSSL's
    "system lib" for a missing key) becomes an error naming the file, this host, and what to do."""
    from confluent_kafka import KafkaException

    try:
        yield
    except KafkaException as error:
        text = error.args[0].str() if hasattr(error.args[0], "str") else str(error)
        named = [(name, value) for name, value in params.items() if name.endswith(".location") and name in text]
        if not named:
            raise
        name, value = named[0]
        state = ("does not exist" if not os.path.exists(value) else "cannot be read" if not os.access(value, os.R_OK)
                 else "is not a certificate or key librdkafka can use")
        raise KafkaClientError(
            f"the file of kafka.{name} ({value}) {state} on host {socket.gethostname()} ({text}): every process "
            "that builds a Kafka client reads it there, the driver and each executor: put it at that path on every "
            "host, the driver's included") from None


def check_group_id(group_id: str | None) -> None:
    if group_id is not None and not group_id.strip():
        # Kafka accepts an empty group id for fetching but not for committing offsets.
        raise ConfigurationError("option kafka.group.id is empty; name the pipeline's consumer group, or leave "
                                 "the option out")
    # librdkafka's consumer group metadata encodes the group id as a NUL-terminated C string.
    if group_id is not None and not all(32 <= ord(c) < 127 for c in group_id):
        raise ConfigurationError(f"option kafka.group.id={group_id!r} must be printable ASCII")


def parse_topic_name(options: Mapping[str, str], name: str, default: str | None) -> str | None:
    raw = options.get(name.lower(), default)
    if raw is None:
        return None
    value = str(raw).strip()
    if not _TOPIC_NAME.fullmatch(value) or value in (".", ".."):
        raise ConfigurationError(f"option {name}={value!r} is not a valid Kafka topic name: use 1 to 249 of "
                                 "a-z, A-Z, 0-9, '.', '_' and '-'")
    return value


@dataclass(frozen=True)
class ClientSettings:
    """What every client of one configuration connects with: the brokers, the user's kafka.*
    settings (sorted pairs, so that a configuration can key a registry), the transaction timeout."""

    bootstrap_servers: str
    kafka_items: tuple[tuple[str, str], ...]
    transaction_timeout_ms: int | None = None  # None: no transactional producer is made with them

    @classmethod
    def of(cls, bootstrap_servers: str, kafka_params: Mapping[str, str],
           transaction_timeout_ms: int | None = None) -> "ClientSettings":
        return cls(bootstrap_servers, tuple(sorted(kafka_params.items())), transaction_timeout_ms)

    @property
    def kafka_params(self) -> dict[str, str]:
        return dict(self.kafka_items)

    def config(self) -> dict[str, str]:
        """A client's configuration: the user's settings and the brokers."""
        return {**self.kafka_params, "bootstrap.servers": self.bootstrap_servers}
