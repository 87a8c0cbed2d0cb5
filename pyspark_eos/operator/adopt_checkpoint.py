"""``python -m pyspark_eos adopt-checkpoint``: a stopped query's position, taken from its Structured
Streaming checkpoint, committed as a consumer group's offsets.

Spark refuses to run a query on a checkpoint whose sources changed, so a pipeline that moves from
Spark's own Kafka connector (``format("kafka")``) to eos-kafka needs a new checkpoint. Its position
moves through the consumer group instead: the end offsets of the old query's last committed batch
become the group's committed offsets, and the eos-kafka query starts there with
``startingOffsets=group``.

The decisions (which batch is the position, which source, what refuses and what only warns) are
pure functions over plain data; reading the checkpoint, asking Kafka and committing surround them.
A checkpoint on another file system than the local one is read through Hadoop's FileSystem API,
as Spark reads it, so that ``s3a://``, ``abfss://`` and ``hdfs://`` checkpoints are read with the
settings Spark would use; a local one is read directly, without starting Spark.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Protocol
from urllib.parse import unquote, urlsplit

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from ..errors import AdoptionRefusedError, ConfigurationError, KafkaClientError
from ..kafka.cluster import list_topics, unknown_topic
from ..kafka.group_offsets import fetch_committed_once
from ..protocol.checkpoint_offsets import Offsets, from_json, is_kafka_offsets
from ..protocol.commit_metadata import adoption_metadata
from ..protocol.offset_range import TopicPartitionKey
from .status import REQUEST_TIMEOUT_S, ClusterAccess, cell, describe_group, listed_offsets, text_table

log = logging.getLogger(__name__)

OFFSETS, COMMITS, METADATA = "offsets", "commits", "metadata"
# Spark's OffsetSeqLog: a source without an offset in the batch.
VOID_OFFSET = "-"
HADOOP_PREFIX = "spark.hadoop."
# How much of a source's offsets a message quotes.
QUOTED_CHARS = 80


# ------------------------------------------------------------------------------- the checkpoint

@dataclass(frozen=True)
class SourceLine:
    """One source's line of a batch in Spark's offset log."""

    source: str  # its id: the position in the query (offset log v1), or the id Spark gave it (v2)
    offsets: Offsets | None  # None: not a Kafka source's offsets
    text: str

    def describe(self) -> str:
        if self.offsets is None:
            return f"{self.source}: not a Kafka source ({_quoted(self.text)})"
        return f"{self.source}: Kafka, topics {', '.join(sorted({topic for topic, _ in self.offsets}))}"


@dataclass(frozen=True)
class CheckpointPosition:
    checkpoint: str  # the location, fully qualified
    query_id: str | None
    batch: int  # the last committed batch, whose end offsets are the position
    source: str
    offsets: Offsets
    warnings: tuple[str, ...] = ()


class CheckpointFiles(Protocol):
    """A checkpoint's files, by their path under the checkpoint location."""

    location: str

    def names(self, directory: str) -> list[str] | None:
        """The names in ``directory``; None when it does not exist."""

    def text(self, name: str) -> str | None:
        """The file's text; None when it does not exist."""


def batch_ids(names: Iterable[str] | None) -> list[int]:
    """The batch ids among a log directory's names; Spark also leaves checksums (``.0.crc``) and
    temporary files there."""
    return sorted(int(name) for name in names or () if name.isdigit())


def position_batch(location: str, planned: list[int], committed: list[int], accept_planned: bool
                   ) -> tuple[int, list[str]]:
    """The batch whose end offsets are the query's position, and the warnings about it."""
    if not committed:
        raise AdoptionRefusedError(
            f"no batch of the checkpoint {location} was ever committed (commits/ is empty): there is no position "
            "to adopt; start the eos-kafka query with its own startingOffsets")
    batch = committed[-1]
    unfinished = [b for b in planned if b > batch]
    if not unfinished:
        return batch, []
    if not accept_planned:
        raise AdoptionRefusedError(
            f"the checkpoint {location} has batch {unfinished[0]} planned (offsets/{unfinished[0]}) but not "
            f"committed (no commits/{unfinished[0]}): its output may be partly written already. Let the old query "
            "stop at a batch boundary (run it once more to the end with Trigger.AvailableNow) and adopt again, or "
            f"pass --planned to start after batch {batch} and accept that batch {unfinished[0]}'s records may "
            "reach the output twice")
    return batch, [f"batch {unfinished[0]} was planned but not committed (--planned): the eos-kafka query reads its "
                   f"records again from the end of batch {batch}, so whatever the old query wrote of them reaches "
                   "the output a second time; nothing is lost"]


def offset_log_sources(text: str, where: str) -> list[SourceLine]:
    """The sources' lines of one ``offsets/<batch>`` file, in the query's source order.

    Line 1 is the log's version, line 2 the batch's metadata. In version 1 each further line is one
    source's offsets, in the query's source order; in version 2 (Spark 4.3's
    ``spark.sql.streaming.offsetLog.formatVersion=2``) each is ``<source id>:<offsets>``."""
    lines = text.splitlines()
    version = lines[0].strip() if lines else ""
    rest = [line for line in lines[2:] if line.strip()]
    if version == "v1":
        entries = [(str(position), line) for position, line in enumerate(rest)]
    elif version == "v2":
        entries = [(source, offsets) for source, _, offsets in (line.partition(":") for line in rest)]
    else:
        raise AdoptionRefusedError(
            f"the offset log file {where} is not in a format of Spark's that adopt-checkpoint reads (its first line is "
            f"{version!r}; v1 and v2 are read): is this a Structured Streaming checkpoint?")
    return sorted((SourceLine(source, _kafka_offsets(line), line.strip()) for source, line in entries),
                  key=lambda line: _source_order(line.source))


def _kafka_offsets(line: str) -> Offsets | None:
    if line.strip() == VOID_OFFSET:
        return None
    try:
        parsed = json.loads(line)
    except ValueError:
        return None
    return from_json(parsed) if is_kafka_offsets(parsed) else None


def _source_order(source: str) -> tuple:
    return (0, int(source), "") if source.isdigit() else (1, 0, source)


def chosen_source(lines: list[SourceLine], wanted: str | None, where: str) -> SourceLine:
    """The Kafka source whose position is adopted: the one named by ``--source``, else the only one."""
    listing = "; ".join(line.describe() for line in lines) or "none"
    if wanted is not None:
        named = [line for line in lines if line.source == wanted]
        if not named:
            raise AdoptionRefusedError(f"the checkpoint's query has no source {wanted} in {where}; its sources: "
                                       f"{listing}")
        if named[0].offsets is None:
            raise AdoptionRefusedError(f"source {wanted} of the checkpoint's query is not a Kafka source (its "
                                       f"offsets in {where}: {_quoted(named[0].text)}); its sources: {listing}")
        return named[0]
    kafka = [line for line in lines if line.offsets is not None]
    if not kafka:
        raise AdoptionRefusedError(f"the checkpoint's query has no Kafka source in {where}; its sources: {listing}")
    if len(kafka) > 1:
        raise AdoptionRefusedError(
            f"the checkpoint's query has {len(kafka)} Kafka sources: {listing}. Name the one to adopt with "
            "--source N, N as in the query's lastProgress.sources[N]")
    return kafka[0]


def checkpoint_position(files: CheckpointFiles, source: str | None = None, accept_planned: bool = False
                        ) -> CheckpointPosition:
    """The stopped query's position: its last committed batch's end offsets, of its Kafka source."""
    metadata = files.text(METADATA)
    if metadata is None:
        raise AdoptionRefusedError(
            f"no Structured Streaming checkpoint at {files.location}: it has no metadata file (Spark writes the "
            "query's id there when the query starts); give the stopped query's checkpointLocation")
    batch, warnings = position_batch(files.location, batch_ids(files.names(OFFSETS)),
                                     batch_ids(files.names(COMMITS)), accept_planned)
    where = f"offsets/{batch} of {files.location}"
    text = files.text(f"{OFFSETS}/{batch}")
    if text is None:
        raise AdoptionRefusedError(f"the checkpoint {files.location} has commits/{batch} but no offsets/{batch}: "
                                   "it is incomplete; give the stopped query's checkpointLocation")
    chosen = chosen_source(offset_log_sources(text, where), source, where)
    log.info("the checkpoint's last committed batch is %d; source %s ends at %s", batch, chosen.source,
             _quoted(chosen.text))
    return CheckpointPosition(files.location, _query_id(metadata), batch, chosen.source, chosen.offsets,
                              tuple(warnings))


def _query_id(metadata: str) -> str | None:
    try:
        return json.loads(metadata).get("id")
    except (ValueError, AttributeError):
        return None


def _quoted(text: str) -> str:
    return text if len(text) <= QUOTED_CHARS else text[:QUOTED_CHARS] + "..."


# ------------------------------------------------------------------------ reading the files

class LocalCheckpointFiles:
    """A checkpoint on this host's file system, named as Hadoop qualifies it (``file:/...``), so
    that what is committed and printed does not depend on how it was read."""

    def __init__(self, path: Path):
        self._root = path
        self.location = f"file:{path}"

    def names(self, directory: str) -> list[str] | None:
        try:
            return os.listdir(self._root / directory)
        except FileNotFoundError:
            return None

    def text(self, name: str) -> str | None:
        try:
            return (self._root / name).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None


def local_path(location: str) -> Path | None:
    """The absolute local path ``location`` names (a path, or a ``file:`` URI), None for any other
    file system's URI."""
    parts = urlsplit(location)
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return Path(os.path.abspath(unquote(parts.path)))
    # A one-letter scheme is a Windows drive, a path all the same.
    return Path(os.path.abspath(location)) if len(parts.scheme) <= 1 else None


class HadoopCheckpointFiles:
    """A checkpoint read through Spark's Hadoop FileSystem API, with the session's Hadoop
    configuration and the ``spark.hadoop.*`` entries of ``settings`` on top (an active session took
    its configuration when it started)."""

    def __init__(self, spark, location: str, settings: Mapping[str, str]):
        self._jvm = spark._jvm
        configuration = self._jvm.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())
        for key, value in settings.items():
            if key.startswith(HADOOP_PREFIX):
                configuration.set(key[len(HADOOP_PREFIX):], value)
        path = self._jvm.org.apache.hadoop.fs.Path(location)
        self._fs = path.getFileSystem(configuration)
        self._root = self._fs.makeQualified(path)
        self.location = self._root.toString()

    def names(self, directory: str) -> list[str] | None:
        path = self._jvm.org.apache.hadoop.fs.Path(self._root, directory)
        if not self._fs.exists(path):
            return None
        return [status.getPath().getName() for status in self._fs.listStatus(path)]

    def text(self, name: str) -> str | None:
        path = self._jvm.org.apache.hadoop.fs.Path(self._root, name)
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            return self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()


def read_checkpoint(location: str, settings: Mapping[str, str], source: str | None,
                    accept_planned: bool) -> CheckpointPosition:
    """The position in the checkpoint at ``location``: a local one read directly, any other through
    Spark's Hadoop file systems with ``settings`` (the ``--spark-conf`` entries)."""
    log.info("reading the checkpoint %s", location)
    path = local_path(location)
    if path is not None:
        try:
            return checkpoint_position(LocalCheckpointFiles(path), source, accept_planned)
        except OSError as error:  # not a directory, not readable by this user
            raise ConfigurationError(f"reading the checkpoint {location} failed: {error}; check the path and that "
                                     "this host may read it") from None
    with spark_session(settings) as spark:
        return _read_through_hadoop(spark, location, settings, source, accept_planned)


def _read_through_hadoop(spark, location: str, settings: Mapping[str, str], source: str | None,
                         accept_planned: bool) -> CheckpointPosition:
    from py4j.protocol import Py4JJavaError

    try:
        return checkpoint_position(HadoopCheckpointFiles(spark, location, settings), source, accept_planned)
    except Py4JJavaError as error:
        raise ConfigurationError(
            f"reading the checkpoint {location} failed: {error.java_exception}; check the path, that this host may "
            "read it, and the file system's settings (--spark-conf spark.hadoop.KEY=VALUE)") from None


@contextlib.contextmanager
def spark_session(settings: Mapping[str, str]) -> Iterator:
    """The active SparkSession, or a small local one for reading the checkpoint (stopped after)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and hasattr(active, "_jsc"):
        yield active
        return
    log.info("starting a local Spark session to read the checkpoint through Hadoop's file systems "
             "(takes a few seconds)")
    with _classic_spark():
        builder = (SparkSession.builder.master("local[1]").appName("eos-kafka adopt-checkpoint")
                   .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false"))
        for key, value in settings.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    try:
        yield spark
    finally:
        spark.stop()


# What makes PySpark build a Spark Connect session (a Connect shop sets them in its environment).
_CONNECT_ENVIRONMENT = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")


@contextlib.contextmanager
def _classic_spark() -> Iterator[None]:
    """A Spark Connect session reaches no JVM of this process, and Hadoop's file systems live in
    one: the checkpoint is read through a local session of this process, with the Connect server
    (SPARK_REMOTE) left aside while it is built."""

    set_aside = {name: os.environ.pop(name) for name in _CONNECT_ENVIRONMENT if name in os.environ}
    if set_aside:
        log.info("%s set: the checkpoint is read through a local Spark session of this process, not the Spark "
                 "Connect server", " and ".join(set_aside))
    try:
        yield
    finally:
        os.environ.update(set_aside)


# ------------------------------------------------------------------------------- the decision

@dataclass(frozen=True)
class GroupView:
    """What the cluster says about the group and the checkpoint's topics."""

    bootstrap_servers: str
    members: tuple[str, ...]  # the group's active members
    committed: dict[TopicPartitionKey, int]  # the group's committed offsets
    pending: tuple[TopicPartitionKey, ...]  # partitions whose offsets an open transaction holds
    partitions: dict[str, tuple[int, ...] | None]  # each checkpoint topic's partitions; None: no such topic
    earliest: dict[TopicPartitionKey, int]
    last_stable: dict[TopicPartitionKey, int]


@dataclass(frozen=True)
class PartitionAdoption:
    topic: str
    partition: int
    checkpoint: int  # the checkpoint's offset: what is committed
    before: int | None  # the group's offset before (None: never committed)
    after: int | None  # the group's offset read back after committing (None: nothing committed)
    last_stable: int | None
    lag: int | None  # from the checkpoint's offset to the last stable offset


@dataclass
class Adoption:
    checkpoint: str
    query_id: str | None
    batch: int
    source: str
    group: str
    partitions: list[PartitionAdoption]
    unchanged: bool  # the group is at the checkpoint's position already
    warnings: list[str] = field(default_factory=list)
    dry_run: bool = False
    committed: bool = False

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)

    def offsets(self) -> Offsets:
        return {(p.topic, p.partition): p.checkpoint for p in self.partitions}

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "total_lag": self.total_lag}, indent=2)


def adoption_plan(position: CheckpointPosition, group: str, view: GroupView) -> Adoption:
    """What committing ``position`` as ``group``'s offsets does, or the refusal that says why not."""
    _refuse_active_group(group, view)
    _refuse_gone(position.offsets, view)
    _refuse_past_end(position.offsets, view)
    _refuse_moving_back(group, position.offsets, view)
    warnings = [*position.warnings, *_below_earliest(position.offsets, view),
                *_unknown_partitions(position.offsets, view)]
    partitions = [_partition(key, offset, view) for key, offset in sorted(position.offsets.items())]
    unchanged = all(view.committed.get(key) == offset for key, offset in position.offsets.items())
    return Adoption(position.checkpoint, position.query_id, position.batch, position.source, group, partitions,
                    unchanged, warnings)


def _partition(key: TopicPartitionKey, offset: int, view: GroupView) -> PartitionAdoption:
    last_stable = view.last_stable.get(key)
    return PartitionAdoption(key[0], key[1], offset, view.committed.get(key), None, last_stable,
                             None if last_stable is None else last_stable - offset)


def _refuse_active_group(group: str, view: GroupView) -> None:
    if view.members:
        raise AdoptionRefusedError(
            f"consumer group {group!r} has {len(view.members)} active member(s) ({', '.join(view.members)}): a "
            "query of this group may be running, the old one or the new one. Stop it and run adopt-checkpoint once "
            "the group has no members (a stopped query's static member stays until its session.timeout.ms "
            "passes)")
    if view.pending:
        raise AdoptionRefusedError(
            f"an open transaction holds consumer group {group!r}'s offsets for {_names(view.pending)}: a writer of "
            "this group is running, or died mid-transaction. Stop it, or let the broker abort the transaction "
            "(transaction.timeout.ms; python -m pyspark_eos abort-lingering ends it at once), then adopt again")


def _refuse_gone(offsets: Offsets, view: GroupView) -> None:
    topics = sorted(topic for topic in {t for t, _ in offsets} if view.partitions.get(topic) is None)
    partitions = sorted(key for key in offsets if view.partitions.get(key[0]) is not None
                        and key[1] not in view.partitions[key[0]])
    if topics or partitions:
        gone = ", ".join([*(f"topic {topic}" for topic in topics), *(f"{t}-{p}" for t, p in partitions)])
        raise AdoptionRefusedError(
            f"the checkpoint reads {gone}, which the cluster at {view.bootstrap_servers} no longer has (deleted since "
            "the old query ran): its position there means nothing now. Start the eos-kafka query with its own "
            "startingOffsets instead, or check --bootstrap-servers")


def _refuse_past_end(offsets: Offsets, view: GroupView) -> None:
    past = {key: offset for key, offset in offsets.items()
            if view.last_stable.get(key) is not None and offset > view.last_stable[key]}
    if past:
        details = ", ".join(f"{t}-{p} (checkpoint {offset}, partition's end {view.last_stable[(t, p)]})"
                            for (t, p), offset in sorted(past.items()))
        raise AdoptionRefusedError(
            f"the checkpoint's offsets are past the end of {details}: the topic was deleted and created again since "
            "the old query ran, so its position there means nothing now. Start the eos-kafka query with its own "
            "startingOffsets instead, or check --bootstrap-servers")


def _refuse_moving_back(group: str, offsets: Offsets, view: GroupView) -> None:
    ahead = {key: view.committed[key] for key, offset in offsets.items()
             if view.committed.get(key) is not None and view.committed[key] > offset}
    if ahead:
        details = ", ".join(f"{t}-{p} (group {ahead[(t, p)]}, checkpoint {offsets[(t, p)]})" for t, p in sorted(ahead))
        raise AdoptionRefusedError(
            f"consumer group {group!r} has committed offsets past the checkpoint's for {details}: moving the group "
            "back would read those records again. If the group is another pipeline's, adopt into a group of its "
            "own (--group); if it must start from the checkpoint anyway, delete its offsets first "
            "(kafka-consumer-groups.sh --delete-offsets)")


def _below_earliest(offsets: Offsets, view: GroupView) -> list[str]:
    return [f"{topic}-{partition}: the checkpoint's offset {offset} is below the partition's earliest offset "
            f"{view.earliest[(topic, partition)]}: retention deleted records the old query never read; the eos-kafka "
            "query reports them lost (DataLossError), or skips them with failOnDataLoss=false"
            for (topic, partition), offset in sorted(offsets.items())
            if view.earliest.get((topic, partition), offset) > offset]


def _unknown_partitions(offsets: Offsets, view: GroupView) -> list[str]:
    warnings = []
    for topic in sorted({t for t, _ in offsets}):
        new = [p for p in view.partitions.get(topic) or () if (topic, p) not in offsets]
        if new:
            warnings.append(
                f"topic {topic} has partitions {', '.join(map(str, new))} the checkpoint does not know (added since "
                "the old query's last batch): the eos-kafka query starts them where its startingOffsetsFallback "
                "says (earliest by default, where Spark's Kafka source starts new partitions too)")
    return warnings


def _names(keys: Iterable[TopicPartitionKey]) -> str:
    return ", ".join(f"{topic}-{partition}" for topic, partition in sorted(keys))


# ---------------------------------------------------------------------------------- the group

def look_at_group(admin: AdminClient, access: ClusterAccess, group: str, offsets: Offsets) -> GroupView:
    description = describe_group(admin, group, access)
    members = tuple(f"{m.group_instance_id or m.member_id} ({m.client_id} on {m.host})" for m in description.members)
    partitions = {topic: _topic_partitions(admin, access, topic) for topic in sorted({t for t, _ in offsets})}
    keys = sorted((topic, p) for topic, found in partitions.items() for p in found or ())
    if not keys:  # every topic is gone: the plan refuses
        return GroupView(access.bootstrap_servers, members, {}, (), partitions, {}, {})
    log.info("reading the committed offsets of group %r and the offsets of %s", group, _names(keys))
    read = fetch_committed_once(admin, group, keys, REQUEST_TIMEOUT_S)
    if read.retriable is not None:
        raise KafkaClientError(f"reading the offsets of group {group!r} failed: {read.reason()}; run "
                               "adopt-checkpoint again")
    committed = {key: c.offset for key, c in read.commits.items() if c.offset is not None}
    try:
        earliest, last_stable = listed_offsets(admin, keys, OffsetSpec.earliest()), listed_offsets(admin, keys)
    except KafkaException as error:
        raise KafkaClientError(f"listing the earliest and last stable offsets of {_names(keys)} failed: "
                               f"{error.args[0]}; the principal needs DESCRIBE on the topics") from error
    return GroupView(access.bootstrap_servers, members, committed, tuple(read.unstable), partitions, earliest,
                     last_stable)


def _topic_partitions(admin: AdminClient, access: ClusterAccess, topic: str) -> tuple[int, ...] | None:
    metadata = list_topics(admin, access.bootstrap_servers, REQUEST_TIMEOUT_S, topic)
    if unknown_topic(metadata, topic):
        return None
    found = metadata.topics[topic]
    if found.error is not None:
        raise KafkaClientError(f"listing topics at {access.bootstrap_servers} failed: topic {topic}: {found.error}; "
                               "the principal needs DESCRIBE on it")
    return tuple(sorted(found.partitions))


def commit_position(admin: AdminClient, adoption: Adoption) -> None:
    metadata = adoption_metadata(adoption.checkpoint, adoption.batch)
    partitions = [TopicPartition(topic, partition, offset, metadata=metadata)
                  for (topic, partition), offset in adoption.offsets().items()]
    request = [ConsumerGroupTopicPartitions(adoption.group, partitions)]
    log.info("committing the end offsets of batch %d to group %r", adoption.batch, adoption.group)
    try:
        result = admin.alter_consumer_group_offsets(request, request_timeout=REQUEST_TIMEOUT_S)[adoption.group].result()
    except KafkaException as error:
        raise KafkaClientError(f"committing the offsets of consumer group {adoption.group!r} failed: "
                               f"{error.args[0]}; the principal needs READ on the group") from error
    refused = [f"{tp.topic}-{tp.partition}: {tp.error}" for tp in result.topic_partitions if tp.error is not None]
    if refused:
        raise KafkaClientError(f"committing the offsets of consumer group {adoption.group!r} failed for "
                               f"{'; '.join(refused)}; run adopt-checkpoint again")


def read_back(admin: AdminClient, adoption: Adoption) -> Adoption:
    """``adoption`` with the group's offsets as the cluster has them now."""
    read = fetch_committed_once(admin, adoption.group, sorted(adoption.offsets()), REQUEST_TIMEOUT_S)
    if read.retriable is not None or read.unstable:
        raise KafkaClientError(f"reading the offsets of group {adoption.group!r} failed: {read.reason()}; run "
                               "python -m pyspark_eos status to see what the group has committed")
    now = {key: committed.offset for key, committed in read.commits.items()}
    adoption.partitions = [replace(p, after=now.get((p.topic, p.partition))) for p in adoption.partitions]
    differ = [(p.topic, p.partition) for p in adoption.partitions if p.after != p.checkpoint]
    if differ:
        raise KafkaClientError(
            f"reading the offsets of group {adoption.group!r} back gave {_names(differ)} at other offsets than "
            "committed: something else committed to the group meanwhile; run python -m pyspark_eos status and stop "
            "what else uses the group")
    return adoption


def adopt_checkpoint(access: ClusterAccess, position: CheckpointPosition, group: str, dry_run: bool) -> Adoption:
    """Commit ``position`` as ``group``'s offsets (not in a dry run), or refuse; what it did."""
    admin = access.admin()
    adoption = adoption_plan(position, group, look_at_group(admin, access, group, position.offsets))
    adoption.dry_run = dry_run
    if dry_run or adoption.unchanged:
        return adoption
    commit_position(admin, adoption)
    adoption.committed = True
    return read_back(admin, adoption)


# ---------------------------------------------------------------------------------- the report

def render(adoption: Adoption) -> str:
    query = f" (query {adoption.query_id})" if adoption.query_id else ""
    if adoption.unchanged:
        outcome = "already at the checkpoint's position: nothing committed"
    elif adoption.dry_run:
        outcome = "would commit (dry run, nothing committed)"
    else:
        outcome = "committed, and read back"
    # group-now: read back after committing, else the group's offset as it was
    rows = [[f"{p.topic}-{p.partition}", str(p.checkpoint), cell(p.before),
             cell(p.before if p.after is None else p.after), cell(p.last_stable), cell(p.lag)]
            for p in adoption.partitions]
    lines = [f"checkpoint {adoption.checkpoint}{query}: last committed batch {adoption.batch}, "
             f"source {adoption.source}",
             f"consumer group {adoption.group}: {outcome}",
             text_table(["partition", "checkpoint", "group-before", "group-now", "last-stable", "lag"], rows),
             f"total lag: {adoption.total_lag}"]
    if not adoption.dry_run:
        lines.append(f"next: start the eos-kafka query with kafka.group.id={adoption.group}, startingOffsets=group "
                     "and a new checkpointLocation")
    return "\n".join(lines)
