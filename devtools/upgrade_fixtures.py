"""State of a running pipeline, written by a release's code, kept as test fixtures for the
releases after it (as Spark keeps checkpoints of earlier releases as test resources).

``python -m devtools.upgrade_fixtures --ref REF --version VERSION`` takes the package as it is
at the git ref ``REF`` (a release's tag or commit), and with that code — Spark's Python workers
too — runs, on an embedded broker:

- an eos-kafka -> eos-kafka pipeline with a consumer group (input offsets and their metadata,
  plan and generation-stamp records, claims and releases), whose last batch is then committed to
  Kafka but not to Spark's commit log (its ``commits/`` file removed, as a driver crash leaves it);
- a stream without a group (progress groups and their metadata), its last batch the same way, and
  an open claim of a stalled attempt on its first task, appended with that release's own claim
  record;
- an idempotent batch write (``txnAppId``/``txnVersion``).

It then writes ``tests/upgrade_fixtures/VERSION/``: ``kafka.json`` (the topics' records, the
groups' committed offsets with their metadata) and ``checkpoints/`` (the two queries'
checkpoints), which ``restore`` puts into a fresh broker and directory for
tests/test_upgrades.py to continue with the current code.

The script runs itself again, as a script, with the release's tree first on ``PYTHONPATH``:
whatever it imports of ``pyspark_eos`` in ``write`` is the release's.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

log = logging.getLogger("upgrade_fixtures")

CHECKOUT = Path(__file__).resolve().parents[1]
FIXTURES = CHECKOUT / "tests" / "upgrade_fixtures"
KAFKA_STATE = "kafka.json"
MANIFEST = "manifest.json"
CHECKPOINTS = "checkpoints"
REQUEST_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Names:
    """The fixed names of the fixtures' topics, group and write: a restore recreates them as they were."""

    input: str = "upgrade-in"
    output: str = "upgrade-out"
    stream_output: str = "upgrade-stream-out"
    batch_output: str = "upgrade-batch-out"
    claims: str = "upgrade-claims"
    group: str = "upgrade-pipeline"
    app: str = "upgrade-app"
    prefix: str = "eos-kafka"  # the sink's default transactionalIdPrefix
    group_checkpoint: str = "group-pipeline"
    stream_checkpoint: str = "stream"
    stalled_transactional_id: str = "eos-kafka.upgrade-stalled.0"


NAMES = Names()
INPUT_PARTITIONS = 3
OUTPUT_PARTITIONS = 2
FIRST_RECORDS = 12  # per input partition, before the upgrade
BATCH_VERSION = 3  # the idempotent write's txnVersion before the upgrade
BATCH_ROWS = 20
MAX_OFFSETS_PER_TRIGGER = 9
# The group pipeline's own claims topic (layout 2, written by the releases after 0.1.0; this file
# runs under the release's code, and 0.1.0's has no claims_layout).
try:
    from pyspark_eos.protocol.claims_layout import PIPELINE_PARTITIONS, pipeline_topic

    OWN_CLAIMS: str | None = pipeline_topic(NAMES.claims, NAMES.group)
except ImportError:
    OWN_CLAIMS, PIPELINE_PARTITIONS = None, 0
# Topics whose records a restore must put at the offsets they had: the input (checkpoints and
# committed offsets name them) and the claims topics (plans are named by offset).
EXACT_OFFSETS = (NAMES.input, NAMES.claims, OWN_CLAIMS)


def input_records(partition: int, first: int, count: int) -> list[tuple[str, str]]:
    return [(f"k{partition}-{i}", f"in-{partition}-{i}") for i in range(first, first + count)]


def batch_rows(version: int) -> list[tuple[str, str]]:
    return [(f"k{i}", f"batch-{version}-{i}") for i in range(BATCH_ROWS)]


def produce_input(bootstrap: str, first: int, count: int) -> None:
    """Plain (non-transactional) records: offsets follow one another, as a restore needs."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition in range(INPUT_PARTITIONS):
        for key, value in input_records(partition, first, count):
            producer.produce(NAMES.input, key=key, value=value, partition=partition)
    if producer.flush(REQUEST_TIMEOUT_S):
        raise RuntimeError(f"writing the input to {NAMES.input} did not finish in {REQUEST_TIMEOUT_S:.0f} s")


# ------------------------------------------------------------------- the pipelines, both sides

def group_pipeline(spark, bootstrap: str, checkpoint: Path):
    """eos-kafka -> eos-kafka with the pipeline's consumer group, as a DataStreamWriter."""
    return _writer(_source(spark, bootstrap, **{"kafka.group.id": NAMES.group}), bootstrap, NAMES.output,
                   checkpoint, **{"kafka.group.id": NAMES.group})


def stream_without_group(spark, bootstrap: str, checkpoint: Path):
    """The same input into another topic with no consumer group: progress records."""
    return _writer(_source(spark, bootstrap), bootstrap, NAMES.stream_output, checkpoint)


def batch_write(spark, bootstrap: str, version: int) -> None:
    frame = spark.createDataFrame(batch_rows(version), "key string, value string").coalesce(2)
    (frame.write.format("eos-kafka").mode("append").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", NAMES.batch_output)
     .option("claimsTopic", NAMES.claims).option("txnAppId", NAMES.app).option("txnVersion", str(version)).save())


def _source(spark, bootstrap: str, **options):
    reader = (spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", NAMES.input).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(MAX_OFFSETS_PER_TRIGGER)).option("claimsTopic", NAMES.claims))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load().select("key", "value")


def _writer(frame, bootstrap: str, topic: str, checkpoint: Path, **options):
    writer = (frame.writeStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", topic).option("claimsTopic", NAMES.claims)
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer


def run_to_end(writer, timeout_s: float = 300.0):
    """Start a Trigger.AvailableNow query and wait for it; raises its failure."""
    query = writer.start()
    if not query.awaitTermination(timeout_s):
        query.stop()
        raise RuntimeError(f"the query did not finish in {timeout_s:.0f} s")
    return query


def forget_last_commit(checkpoint: Path) -> int:
    """Remove the last batch from the commit log: the batch is then committed to Kafka but not
    to Spark, as a driver that died between the two leaves it."""
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (commits / name).unlink(missing_ok=True)
    return last


def query_id(checkpoint: Path) -> str:
    return json.loads((checkpoint / "metadata").read_text())["id"]


# ------------------------------------------------------------------ writing, with the release's code

def write(out: Path) -> None:
    """Run the pipelines with the ``pyspark_eos`` this process imports, and dump their state."""
    import pyspark_eos
    from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic
    from pyspark_eos.testing.local_spark import local_spark_session

    log.info("writing upgrade fixtures with pyspark_eos %s from %s", pyspark_eos.__version__,
             Path(pyspark_eos.__file__).parent)
    work = Path(tempfile.mkdtemp(prefix="eos-kafka-upgrade-"))
    with EmbeddedKafkaCluster(nodes=1, directory=work / "kafka") as cluster:
        bootstrap = cluster.bootstrap_servers
        create_topic(bootstrap, NAMES.input, INPUT_PARTITIONS)
        for topic in (NAMES.output, NAMES.stream_output, NAMES.batch_output):
            create_topic(bootstrap, topic, OUTPUT_PARTITIONS)
        produce_input(bootstrap, 0, FIRST_RECORDS)
        spark = local_spark_session("local[2]", "eos-kafka upgrade fixtures")
        checkpoints = work / CHECKPOINTS
        log.info("running the pipeline with a consumer group")
        run_to_end(group_pipeline(spark, bootstrap, checkpoints / NAMES.group_checkpoint))
        log.info("running the stream without a group")
        run_to_end(stream_without_group(spark, bootstrap, checkpoints / NAMES.stream_checkpoint))
        log.info("writing batch version %d", BATCH_VERSION)
        batch_write(spark, bootstrap, BATCH_VERSION)
        spark.stop()
        for name in (NAMES.group_checkpoint, NAMES.stream_checkpoint):
            last = forget_last_commit(checkpoints / name)
            log.info("batch %d of %s: in Kafka, not in Spark's commit log", last, name)
        _append_stalled_claim(bootstrap, query_id(checkpoints / NAMES.stream_checkpoint))
        dump(bootstrap, checkpoints, out)
    shutil.rmtree(work, ignore_errors=True)


def _append_stalled_claim(bootstrap: str, stream_query: str) -> None:
    """An attempt of the stream's first task that claimed its input under the newest plan and
    never released: a stalled executor's. Written with the release's own claim record."""
    from pyspark_eos.protocol.claims_log import append, claims_producer
    from pyspark_eos.protocol.claims_records import CLAIM, AttemptOrder, Claim
    from pyspark_eos.sink.task_progress import ProgressKey

    key = ProgressKey(NAMES.prefix, stream_query, 0, NAMES.claims)
    last_plan = max(offset for _, offset, _, value in _records(bootstrap, NAMES.claims, 1)
                    if json.loads(value).get("kind") == "plan")
    claim = Claim(CLAIM, key.claim_group, frozenset(key.claim_partitions), AttemptOrder(last_plan, 10**6),
                  NAMES.stalled_transactional_id, "task 0.0 (stalled)")
    producer = claims_producer(bootstrap, {})
    log.info("stalled claim appended at %d", append(producer, NAMES.claims, key.claim_group, claim.to_json()))
    producer.flush(REQUEST_TIMEOUT_S)


# --------------------------------------------------------------------------- dump and restore

def dump(bootstrap: str, checkpoints: Path, out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    topics = {NAMES.input: INPUT_PARTITIONS, NAMES.claims: 1,
              **({OWN_CLAIMS: PIPELINE_PARTITIONS} if OWN_CLAIMS else {}),
              **{t: OUTPUT_PARTITIONS for t in (NAMES.output, NAMES.stream_output, NAMES.batch_output)}}
    state = {"topics": {topic: {"partitions": count, "records": _records(bootstrap, topic, count)}
                        for topic, count in topics.items()},
             "groups": _groups(bootstrap)}
    (out / KAFKA_STATE).write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    shutil.copytree(checkpoints, out / CHECKPOINTS, ignore=shutil.ignore_patterns("*.crc", ".*.tmp"))
    log.info("wrote %s: %d topics, %d groups, checkpoints %s", out, len(topics), len(state["groups"]),
             sorted(p.name for p in (out / CHECKPOINTS).iterdir()))


def _records(bootstrap: str, topic: str, partitions: int) -> list[list]:
    """Every committed record of ``topic``: [partition, offset, key, value], by partition and offset."""
    from pyspark_eos.testing.output_check import read_committed

    return [[r.partition, r.offset, _text(r.key), _text(r.value)] for r in read_committed(bootstrap, topic, partitions)]


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8")


def _groups(bootstrap: str) -> dict[str, list[list]]:
    """Every group's committed offsets: [topic, partition, offset, metadata]."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S).result()
    groups = {}
    for group in sorted(g.group_id for g in listed.valid):
        request = [ConsumerGroupTopicPartitions(group)]
        answer = admin.list_consumer_group_offsets(request, require_stable=True)[group].result()
        offsets = sorted([tp.topic, tp.partition, tp.offset, tp.metadata or ""]
                         for tp in answer.topic_partitions if tp.offset >= 0)
        if offsets:
            groups[group] = offsets
    return groups


@dataclass(frozen=True)
class Restored:
    """A fixture put back: its broker's topics and groups, and its checkpoints' new home."""

    version: str
    checkpoints: Path
    state: dict

    def checkpoint(self, name: str) -> Path:
        return self.checkpoints / name

    def records(self, topic: str) -> list[list]:
        return self.state["topics"][topic]["records"]


def fixture_versions() -> list[str]:
    return sorted(p.name for p in FIXTURES.iterdir() if (p / KAFKA_STATE).exists())


def restore(version: str, bootstrap: str, directory: Path) -> Restored:
    """Put fixture ``version`` into the (fresh) broker at ``bootstrap`` and its checkpoints into
    ``directory``: records at the offsets they had where that matters, committed offsets with
    their metadata."""
    from pyspark_eos.testing.embedded_kafka import create_topic

    source = FIXTURES / version
    state = json.loads((source / KAFKA_STATE).read_text())
    for topic, content in state["topics"].items():
        create_topic(bootstrap, topic, content["partitions"])
        _produce(bootstrap, topic, content["records"], exact=topic in EXACT_OFFSETS)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for group, offsets in state["groups"].items():
        _commit(admin, group, [TopicPartition(t, p, o, metadata=m) for t, p, o, m in offsets])
    shutil.copytree(source / CHECKPOINTS, directory)
    return Restored(version, directory, state)


def _commit(admin: AdminClient, group: str, offsets: list[TopicPartition]) -> None:
    """Commit ``offsets`` for ``group``: a new broker answers COORDINATOR_LOAD_IN_PROGRESS (per
    partition, not raised) until its group coordinator is up, and the commit is tried again."""
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while True:
        try:
            answer = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)])[group].result()
            failed = [tp.error for tp in answer.topic_partitions if tp.error is not None]
        except KafkaException as error:
            failed = [error]
        if not failed:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"committing the offsets of {group} failed: {failed[0]}")
        time.sleep(0.2)


def _produce(bootstrap: str, topic: str, records: list[list], exact: bool) -> None:
    # Not idempotent and one request at a time: a gap the original had (a transaction marker)
    # is filled with a record no reader of the topic takes for data of its own.
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False,
                         "max.in.flight.requests.per.connection": 1, "linger.ms": 0})
    placed: list[tuple[int, int, int]] = []
    next_offset: dict[int, int] = {}
    for partition, offset, key, value in records:
        while exact and next_offset.get(partition, 0) < offset:
            producer.produce(topic, value=b"{}", partition=partition)
            next_offset[partition] = next_offset.get(partition, 0) + 1
        producer.produce(topic, key=key, value=value, partition=partition,
                         on_delivery=lambda error, message, want=offset: placed.append((message.partition(), want,
                                                                                        message.offset())))
        next_offset[partition] = next_offset.get(partition, 0) + 1
    if producer.flush(REQUEST_TIMEOUT_S):
        raise RuntimeError(f"restoring {topic} did not finish in {REQUEST_TIMEOUT_S:.0f} s")
    moved = [(p, want, got) for p, want, got in placed if exact and want != got]
    if moved:
        raise RuntimeError(f"restoring {topic}: records landed at other offsets than they had: {moved[:5]}")


# ------------------------------------------------------------------------------- command line

def release_tree(ref: str, directory: Path) -> Path:
    """The package as it is at ``ref``, with the checkout's caches (broker jars, Spark home)."""
    archive = subprocess.run(["git", "-C", str(CHECKOUT), "archive", ref], check=True, capture_output=True).stdout
    directory.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.upgrade_fixtures", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", required=True, help="the git ref of the release whose state to write")
    parser.add_argument("--version", required=True, help="the release's version: the fixtures' directory name")
    parser.add_argument("--write", type=Path, help=argparse.SUPPRESS)  # the run under the release's code
    arguments = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if arguments.write:
        write(arguments.write)
        return 0
    with tempfile.TemporaryDirectory(prefix="eos-kafka-release-") as temporary:
        tree = release_tree(arguments.ref, Path(temporary) / "tree")
        out = FIXTURES / arguments.version
        log.info("running %s at %s (%s) to write %s", Path(__file__).name, arguments.ref, tree, out)
        # The release's tree first on the path: the driver's imports and, through the JVM's
        # environment, every Spark Python worker's. The caches stay the checkout's.
        python_path = os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env = {**os.environ, "PYTHONPATH": python_path,
               "EOS_KAFKA_CACHE_DIR": str(CHECKOUT / ".cache")}
        command = [sys.executable, str(Path(__file__).resolve()), "--ref", arguments.ref, "--version",
                   arguments.version, "--write", str(out)]
        return subprocess.run(command, env=env, cwd=temporary).returncode


if __name__ == "__main__":
    sys.exit(main())
