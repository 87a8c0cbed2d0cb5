"""The errors eos-kafka raises.

Every message says what happened and what to do about it. Callers catch ``EosKafkaError`` for
anything raised by this package; the subclasses separate a mistake in how the package is used
(fix the job and resubmit) from the state of the Kafka cluster or its surroundings.
"""


class EosKafkaError(Exception):
    """Base class of every error raised by pyspark_eos."""


class ConfigurationError(EosKafkaError, ValueError):
    """An option, schema or setting is wrong; nothing was read or written."""


class EmbeddedKafkaError(EosKafkaError):
    """The embedded development broker could not be assembled, started or stopped."""


class PendingTransactionError(EosKafkaError):
    """A consumer group's offsets stayed locked by an open transaction for longer than allowed."""


class DataLossError(EosKafkaError):
    """Records a query needs are gone from Kafka (retention, deleted topic or partition)."""


class KafkaClientError(EosKafkaError):
    """A Kafka request failed; the message names the request and Kafka's error."""


class FencedError(EosKafkaError):
    """Another instance of the same pipeline took over; this one must not commit any more."""


class ProvenanceError(EosKafkaError):
    """The sink cannot tell which input its task consumed (a shuffle between source and sink)."""


class OffsetMismatchError(EosKafkaError):
    """The group's committed offsets do not line up with the task's input: a gap or an overlap."""


class UnassignedPartitionError(EosKafkaError):
    """A task would commit an offset for a partition its plan's group membership does not own."""


class GroupRebalancedError(EosKafkaError):
    """The pipeline's consumer group rebalanced during a batch; the task's transaction was aborted
    and Spark's retry of the task commits under the new generation."""


class TransactionFailedError(EosKafkaError):
    """A task's Kafka transaction failed and was aborted; none of its records are visible."""


class MissingDependencyError(EosKafkaError):
    """A Python package eos-kafka needs is missing, or too old, where Spark runs its code."""


class StaleAttemptError(FencedError):
    """A newer attempt of the same Spark task (a retry or a speculative copy) claimed its input;
    this attempt aborted, and none of its records are visible."""


class NonDeterministicReplayError(EosKafkaError):
    """A replayed micro-batch's records differ from those its first run wrote: the query's input or
    plan is not deterministic; the replay wrote nothing."""


class MalformedRecordError(EosKafkaError):
    """A record in Kafka cannot be handed to Spark as it is (a timestamp outside Spark's range);
    the read task fails, and nothing of its task is written."""


class FormatVersionError(EosKafkaError):
    """A record eos-kafka wrote into Kafka or a checkpoint is in a format this version does not
    read: a newer version wrote it (upgrade), or an older one this version no longer reads."""


class AdoptionRefusedError(EosKafkaError):
    """``adopt-checkpoint`` will not commit a checkpoint's position as the group's offsets: the
    checkpoint or the group is in a state where that would lose, repeat or misplace records.
    Nothing was committed."""
