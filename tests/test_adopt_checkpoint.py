"""`python -m pyspark_eos adopt-checkpoint`: a query of Spark's own Kafka connector (or of eos-kafka)
writes a real checkpoint, its position becomes a consumer group's offsets, and an eos-kafka query
with a new checkpoint and startingOffsets=group continues exactly there. Every refusal is shown on
a state built for real, and again broker-free on the pure decisions."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from pyspark_eos.errors import AdoptionRefusedError, ConfigurationError
from pyspark_eos.operator import adopt_checkpoint
from pyspark_eos.operator.adopt_checkpoint import (
    CheckpointPosition,
    GroupView,
    adoption_plan,
    batch_ids,
    checkpoint_position,
    chosen_source,
    local_path,
    offset_log_sources,
    position_batch,
)
from pyspark_eos.operator.cli import main
from pyspark_eos.testing.local_spark import LOCAL

from .kafka_tools import committed_offsets, create_topic, last_stable_offsets, mixed_transactions, read_committed
from .kafka_tools import unique_name, wait_until, write_transactions
from .spark_tools import eos_pipeline, run_to_end

PARTITIONS = 2
NEVER_COMMITTED = -1001


# ------------------------------------------------------------------------------- set-up

def spark_kafka_source(spark, bootstrap: str, topic: str):
    # read_committed: the input holds aborted transactions, which Spark's Kafka source reads by default.
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .option("startingOffsets", "earliest").option("kafka.isolation.level", "read_committed").load())


def run_available_now(writer, checkpoint: Path) -> None:
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    assert query.awaitTermination(240), "the query did not reach its input's end in 240 s"
    assert query.exception() is None


def run_to_noop(frame, checkpoint: Path) -> None:
    run_available_now(frame.writeStream.format("noop"), checkpoint)


def checkpoint_offsets(checkpoint: Path, source: int = 0) -> tuple[int, dict[tuple[str, int], int]]:
    """The last committed batch and its end offsets of one source, read straight from the files."""
    batch = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    line = json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[2 + source])
    return batch, {(topic, int(p)): offset for topic, partitions in line.items() for p, offset in partitions.items()}


def topic_end(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> dict[tuple[str, int], int]:
    return {(topic, p): offset for p, offset in last_stable_offsets(bootstrap, topic, partitions).items()}


def group_commits(bootstrap: str, group: str, topic: str, partitions: int = PARTITIONS) -> dict[tuple[str, int], tuple]:
    """(offset, metadata) per partition the group committed, read with a plain AdminClient."""
    committed_offsets(bootstrap, group, topic, partitions)  # waits for the group's coordinator
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])]
    result = admin.list_consumer_group_offsets(request)[group].result(30)
    return {(tp.topic, tp.partition): (tp.offset, tp.metadata) for tp in result.topic_partitions
            if tp.offset != NEVER_COMMITTED}


def set_group_offsets(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    committed_offsets(bootstrap, group, next(iter(offsets))[0], 1)  # the coordinator is ready
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in offsets.items()])]
    admin.alter_consumer_group_offsets(request)[group].result(30)


@dataclass
class Cli:
    code: int
    out: str
    err: str

    def json(self) -> dict:
        return json.loads(self.out)


@pytest.fixture
def adopt(kafka, spark, capsys):
    """Runs the command in this process, where the test's SparkSession is the active one."""
    def run(checkpoint, group: str, *extra: str) -> Cli:
        code = main(["adopt-checkpoint", "--checkpoint", str(checkpoint), "--group", group,
                     "--bootstrap-servers", kafka.bootstrap_servers, *extra])
        captured = capsys.readouterr()
        return Cli(code, captured.out, captured.err)
    return run


@dataclass
class OldQuery:
    bootstrap: str
    input: str
    output: str
    checkpoint: Path
    batch: int
    position: dict[tuple[str, int], int]


@pytest.fixture(scope="module")
def old_query(kafka, spark_sessions, tmp_path_factory) -> OldQuery:
    """format("kafka") -> upper(value) -> Spark's Kafka sink, run to its input's end and stopped;
    then more input arrives, which the old query never read."""
    spark = spark_sessions.get(LOCAL)
    bootstrap = kafka.bootstrap_servers
    source = create_topic(bootstrap, unique_name("adopt-in"), partitions=PARTITIONS)
    output = create_topic(bootstrap, unique_name("adopt-out"), partitions=PARTITIONS)
    write_transactions(bootstrap, source, mixed_transactions(PARTITIONS, rounds=4))
    checkpoint = tmp_path_factory.mktemp("adopt") / "spark-kafka-query"
    frame = spark_kafka_source(spark, bootstrap, source).selectExpr("key", "upper(CAST(value AS STRING)) AS value")
    run_available_now(frame.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                      .option("topic", output), checkpoint)
    batch, position = checkpoint_offsets(checkpoint)
    assert position == topic_end(bootstrap, source)  # the old query stopped at its input's end
    write_transactions(bootstrap, source, [(True, [(p, b"later-p%d-%d" % (p, i)) for p in range(PARTITIONS)
                                                   for i in range(3)])])
    return OldQuery(bootstrap, source, output, checkpoint, batch, position)


def copy_of(checkpoint: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(checkpoint, tmp_path / "checkpoint"))


# ---------------------------------------------------------------------- the switch, for real

def test_eos_kafka_continues_exactly_where_sparks_kafka_query_stopped(old_query, adopt, spark, kafka, tmp_path, capsys):
    group = unique_name("adopt-group")
    result = adopt(old_query.checkpoint, group)
    assert result.code == 0, result.err
    assert f"consumer group {group}: committed, and read back" in result.out
    commits = group_commits(old_query.bootstrap, group, old_query.input)
    assert {key: offset for key, (offset, _) in commits.items()} == old_query.position
    stamps = {json.loads(metadata)["adopted_from"] for _, metadata in commits.values()}
    assert stamps == {f"file:{old_query.checkpoint}"}
    assert {json.loads(metadata)["checkpoint_batch"] for _, metadata in commits.values()} == {old_query.batch}

    # status gives the same position back as Spark's startingOffsets JSON (the way back)
    assert main(["status", "--group", group, "--bootstrap-servers", kafka.bootstrap_servers, "--json"]) == 0
    starting = json.loads(capsys.readouterr().out)["starting_offsets"]
    assert starting == {old_query.input: {str(p): o for (_, p), o in old_query.position.items()}}

    again = adopt(old_query.checkpoint, group, "--json")  # adopting the same checkpoint twice changes nothing
    assert again.code == 0 and again.json()["unchanged"] and not again.json()["committed"]

    writer = eos_pipeline(spark, old_query.bootstrap, old_query.input, old_query.output, group,
                          transform=lambda frame: frame.selectExpr("key", "upper(CAST(value AS STRING)) AS value"),
                          startingOffsets="group")
    run_to_end(writer, str(tmp_path / "eos-kafka-query"))
    inputs = [r.value.upper() for r in read_committed(old_query.bootstrap, old_query.input, PARTITIONS)]
    outputs = [r.value for r in read_committed(old_query.bootstrap, old_query.output, PARTITIONS)]
    assert sorted(outputs) == sorted(inputs)  # each record once across the switch: none lost, none twice
    assert any(value.startswith(b"LATER-") for value in outputs)
    assert {(old_query.input, p): o for p, o in committed_offsets(old_query.bootstrap, group, old_query.input,
                                                                   PARTITIONS).items()} == \
        topic_end(old_query.bootstrap, old_query.input)


def test_a_dry_run_shows_the_offsets_and_the_lag_and_commits_nothing(old_query, adopt):
    group = unique_name("adopt-dry")
    report = adopt(old_query.checkpoint, group, "--dry-run", "--json")
    assert report.code == 0, report.err
    shown = report.json()
    end = topic_end(old_query.bootstrap, old_query.input)
    assert {(p["topic"], p["partition"]): p["checkpoint"] for p in shown["partitions"]} == old_query.position
    assert {(p["topic"], p["partition"]): p["lag"] for p in shown["partitions"]} == \
        {key: end[key] - offset for key, offset in old_query.position.items()}
    assert shown["total_lag"] == sum(end.values()) - sum(old_query.position.values()) > 0
    assert (shown["dry_run"], shown["committed"], shown["batch"]) == (True, False, old_query.batch)
    text = adopt(old_query.checkpoint, group, "--dry-run").out
    assert "would commit (dry run, nothing committed)" in text and f"total lag: {shown['total_lag']}" in text
    assert group_commits(old_query.bootstrap, group, old_query.input) == {}


def test_a_file_uri_names_the_same_checkpoint(old_query, adopt):
    group = unique_name("adopt-uri")
    assert adopt(f"file://{old_query.checkpoint}", group).code == 0
    commits = group_commits(old_query.bootstrap, group, old_query.input)
    assert {key: offset for key, (offset, _) in commits.items()} == old_query.position
    assert {json.loads(metadata)["adopted_from"] for _, metadata in commits.values()} == {f"file:{old_query.checkpoint}"}


def test_a_local_checkpoint_is_read_without_spark_as_hadoop_reads_it(old_query, spark, monkeypatch):
    def no_spark(settings):
        raise AssertionError("a local checkpoint started a Spark session")
    monkeypatch.setattr(adopt_checkpoint, "spark_session", no_spark)
    read = adopt_checkpoint.read_checkpoint(str(old_query.checkpoint), {}, None, False)
    through_hadoop = adopt_checkpoint._read_through_hadoop(spark, str(old_query.checkpoint), {}, None, False)
    assert read == through_hadoop
    assert (read.checkpoint, read.batch) == (f"file:{old_query.checkpoint}", old_query.batch)
    with pytest.raises(ConfigurationError, match=r"reading the checkpoint .*/metadata failed: .*Not a directory"):
        adopt_checkpoint.read_checkpoint(str(old_query.checkpoint / "metadata"), {}, None, False)


def test_local_paths_are_plain_paths_and_file_uris_of_this_host(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert local_path("checkpoints/q") == tmp_path / "checkpoints" / "q"
    assert local_path("/data/q/") == local_path("file:///data/q") == local_path("file://localhost/data/q") \
        == local_path("file:/data/q") == Path("/data/q")
    assert local_path("file:///data/a%20b") == Path("/data/a b")
    for remote in ("s3a://bucket/q", "hdfs:///q", "abfss://c@account.dfs.core.windows.net/q", "file://host/q",
                   "viewfs://mount/q"):
        assert local_path(remote) is None, remote


def test_spark_conf_reaches_the_file_system_that_reads_the_checkpoint(old_query, adopt):
    mount = unique_name("mount").replace("-", "")
    location = f"viewfs://{mount}/old-query"
    unmounted = adopt(location, unique_name("adopt-viewfs"), "--dry-run")
    assert unmounted.code == 2 and f"error: reading the checkpoint {location} failed" in unmounted.err
    mounted = adopt(location, unique_name("adopt-viewfs"), "--dry-run", "--json", "--spark-conf",
                    f"spark.hadoop.fs.viewfs.mounttable.{mount}.link./old-query=file://{old_query.checkpoint}")
    assert mounted.code == 0, mounted.err
    assert {(p["topic"], p["partition"]): p["checkpoint"] for p in mounted.json()["partitions"]} == old_query.position


def test_a_spark_connect_shop_reads_a_checkpoint_through_hadoop_from_a_local_session(old_query, kafka):
    # SPARK_REMOTE names a Connect server (none listens there): the command reads the checkpoint
    # through Hadoop in a local session of its own, where PySpark refused to build one.
    mount = unique_name("mount").replace("-", "")
    result = subprocess.run(
        [sys.executable, "-m", "pyspark_eos", "adopt-checkpoint", "--checkpoint", f"viewfs://{mount}/old-query",
         "--group", unique_name("adopt-connect"), "--bootstrap-servers", kafka.bootstrap_servers, "--dry-run",
         "--json", "--spark-conf",
         f"spark.hadoop.fs.viewfs.mounttable.{mount}.link./old-query=file://{old_query.checkpoint}"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "SPARK_REMOTE": "sc://127.0.0.1:1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    partitions = json.loads(result.stdout)["partitions"]
    assert {(p["topic"], p["partition"]): p["checkpoint"] for p in partitions} == old_query.position


def test_an_eos_kafka_checkpoint_is_adopted_too(kafka, spark, adopt, tmp_path):
    bootstrap = kafka.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("adopt-eos"), partitions=PARTITIONS)
    write_transactions(bootstrap, topic, mixed_transactions(PARTITIONS, rounds=2))
    frame = (spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").load())
    run_to_noop(frame, tmp_path / "eos-query")
    batch, position = checkpoint_offsets(tmp_path / "eos-query")
    group = unique_name("adopt-from-eos")
    result = adopt(tmp_path / "eos-query", group)
    assert result.code == 0, result.err
    assert {key: offset for key, (offset, _) in group_commits(bootstrap, group, topic).items()} == position == \
        topic_end(bootstrap, topic)


# --------------------------------------------------------------------------------- refusals

def test_refused_while_the_group_has_an_active_member(old_query, adopt):
    group = unique_name("adopt-busy")
    member = Consumer({"bootstrap.servers": old_query.bootstrap, "group.id": group, "enable.auto.commit": False})
    member.subscribe([old_query.input])
    wait_until(lambda: (member.poll(0.2), member.assignment())[1], 60, "the member's assignment")
    try:
        refused = adopt(old_query.checkpoint, group)
        assert refused.code == 2
        assert f"error: consumer group '{group}' has 1 active member(s)" in refused.err
        assert "Stop it" in refused.err
        assert group_commits(old_query.bootstrap, group, old_query.input) == {}
    finally:
        member.close()  # a dynamic member leaves the group as it closes
    assert adopt(old_query.checkpoint, group).code == 0


def test_refused_when_the_group_is_past_the_checkpoint(old_query, adopt):
    group = unique_name("adopt-ahead")
    (first, offset0), (second, offset1) = sorted(old_query.position.items())
    set_group_offsets(old_query.bootstrap, group, {first: offset0 + 1, second: offset1 - 1})
    refused = adopt(old_query.checkpoint, group)
    assert refused.code == 2
    assert f"error: consumer group '{group}' has committed offsets past the checkpoint's for " \
           f"{first[0]}-{first[1]} (group {offset0 + 1}, checkpoint {offset0}): moving the group back" in refused.err
    assert f"{second[0]}-{second[1]}" not in refused.err.split("moving")[0]  # behind the checkpoint is fine
    assert {key: o for key, (o, _) in group_commits(old_query.bootstrap, group, old_query.input).items()} == \
        {first: offset0 + 1, second: offset1 - 1}

    set_group_offsets(old_query.bootstrap, group, {first: offset0})  # equal: the group may move forward elsewhere
    assert adopt(old_query.checkpoint, group).code == 0
    assert {key: o for key, (o, _) in group_commits(old_query.bootstrap, group, old_query.input).items()} == \
        old_query.position


def test_a_batch_planned_and_not_committed_is_refused_unless_planned(old_query, adopt, tmp_path):
    checkpoint = copy_of(old_query.checkpoint, tmp_path)
    planned = old_query.batch + 1  # planned: in offsets/, not in commits/
    shutil.copy(checkpoint / "offsets" / str(old_query.batch), checkpoint / "offsets" / str(planned))
    group = unique_name("adopt-planned")
    refused = adopt(checkpoint, group)
    assert refused.code == 2
    assert f"has batch {planned} planned (offsets/{planned}) but not committed (no commits/{planned})" in refused.err
    assert "Trigger.AvailableNow" in refused.err and "--planned" in refused.err
    assert group_commits(old_query.bootstrap, group, old_query.input) == {}

    accepted = adopt(checkpoint, group, "--planned", "--json")
    assert accepted.code == 0, accepted.err
    assert accepted.json()["batch"] == old_query.batch  # the end of the last committed batch, not the planned one
    assert f"warning: batch {planned} was planned but not committed (--planned)" in accepted.err
    assert {key: o for key, (o, _) in group_commits(old_query.bootstrap, group, old_query.input).items()} == \
        old_query.position


def test_a_deleted_topic_is_refused(kafka, spark, adopt, tmp_path):
    bootstrap = kafka.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("adopt-deleted"), partitions=PARTITIONS)
    write_transactions(bootstrap, topic, mixed_transactions(PARTITIONS, rounds=1))
    run_to_noop(spark_kafka_source(spark, bootstrap, topic), tmp_path / "query")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, 60, f"{topic} to be gone")
    refused = adopt(tmp_path / "query", unique_name("adopt-deleted"))
    assert refused.code == 2
    assert f"error: the checkpoint reads topic {topic}, which the cluster at {bootstrap} no longer has" in refused.err


@pytest.fixture(scope="module")
def union_query(kafka, spark_sessions, tmp_path_factory):
    """A query of two Kafka sources and a file source, in that order."""
    spark = spark_sessions.get(LOCAL)
    bootstrap = kafka.bootstrap_servers
    topics = [create_topic(bootstrap, unique_name(f"adopt-union{i}"), partitions=PARTITIONS) for i in range(2)]
    for topic in topics:
        write_transactions(bootstrap, topic, mixed_transactions(PARTITIONS, rounds=1))
    files = tmp_path_factory.mktemp("adopt-text")
    (files / "lines.txt").write_text("a line\n")
    frames = [spark_kafka_source(spark, bootstrap, topic).selectExpr("CAST(value AS STRING) AS value") for topic in topics]
    frame = frames[0].union(frames[1]).union(spark.readStream.format("text").load(str(files)))
    checkpoint = tmp_path_factory.mktemp("adopt-union") / "query"
    run_to_noop(frame, checkpoint)
    return topics, checkpoint


def test_several_kafka_sources_are_refused_until_one_is_named(union_query, adopt, kafka):
    (first, second), checkpoint = union_query
    group = unique_name("adopt-union")
    refused = adopt(checkpoint, group)
    assert refused.code == 2
    assert f"the checkpoint's query has 2 Kafka sources: 0: Kafka, topics {first}; 1: Kafka, topics {second}; " \
           "2: not a Kafka source" in refused.err
    assert "--source N" in refused.err
    missing = adopt(checkpoint, group, "--source", "3")
    assert missing.code == 2 and "the checkpoint's query has no source 3" in missing.err

    chosen = adopt(checkpoint, group, "--source", "1")
    assert chosen.code == 0, chosen.err
    _, position = checkpoint_offsets(checkpoint, source=1)
    assert {key: o for key, (o, _) in group_commits(kafka.bootstrap_servers, group, second).items()} == position
    assert group_commits(kafka.bootstrap_servers, group, first) == {}


def test_a_source_that_is_not_kafka_is_refused(union_query, adopt):
    _, checkpoint = union_query
    refused = adopt(checkpoint, unique_name("adopt-text"), "--source", "2")
    assert refused.code == 2
    assert 'error: source 2 of the checkpoint\'s query is not a Kafka source (its offsets in offsets/' in refused.err
    assert '{"logOffset":' in refused.err


def test_no_committed_batch_or_no_checkpoint_is_refused(old_query, adopt, tmp_path):
    never = copy_of(old_query.checkpoint, tmp_path)
    shutil.rmtree(never / "commits")  # a query stopped before its first batch committed
    refused = adopt(never, unique_name("adopt-never"))
    assert refused.code == 2 and "was ever committed (commits/ is empty): there is no position to adopt" in refused.err
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = adopt(empty, unique_name("adopt-empty"))
    assert refused.code == 2 and f"error: no Structured Streaming checkpoint at file:{empty}: it has no metadata file" in refused.err


def test_retention_and_added_partitions_are_warned_about(kafka, spark, adopt, tmp_path):
    bootstrap = kafka.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("adopt-changed"), partitions=PARTITIONS)
    write_transactions(bootstrap, topic, mixed_transactions(PARTITIONS, rounds=1))
    run_to_noop(spark_kafka_source(spark, bootstrap, topic), tmp_path / "query")
    _, position = checkpoint_offsets(tmp_path / "query")
    # After the old query stopped: records it never read are deleted by "retention", and a partition is added.
    write_transactions(bootstrap, topic, [(True, [(0, b"unread-%d" % i) for i in range(4)])])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deleted_to = position[(topic, 0)] + 2
    admin.delete_records([TopicPartition(topic, 0, deleted_to)])[TopicPartition(topic, 0, deleted_to)].result(30)
    admin.create_partitions([NewPartitions(topic, PARTITIONS + 1)])[topic].result(30)
    wait_until(lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == PARTITIONS + 1, 60,
               "the added partition")

    result = adopt(tmp_path / "query", unique_name("adopt-changed"), "--json")
    assert result.code == 0, result.err
    warnings = result.json()["warnings"]
    assert warnings == [
        f"{topic}-0: the checkpoint's offset {position[(topic, 0)]} is below the partition's earliest offset "
        f"{deleted_to}: retention deleted records the old query never read; the eos-kafka query reports them lost "
        "(DataLossError), or skips them with failOnDataLoss=false",
        f"topic {topic} has partitions {PARTITIONS} the checkpoint does not know (added since the old query's last "
        "batch): the eos-kafka query starts them where its startingOffsetsFallback says (earliest by default, where "
        "Spark's Kafka source starts new partitions too)"]
    assert all(f"warning: {warning}" in result.err for warning in warnings)


# ------------------------------------------------------------------ the decisions, broker-free

LOCATION = "file:/checkpoints/old"
OFFSETS_V1 = 'v1\n{"batchWatermarkMs":0}\n{"orders":{"0":10,"1":20}}\n{"logOffset":3}\n-'


class Files:
    """A checkpoint as a dict of its files."""

    location = LOCATION

    def __init__(self, files: dict[str, str]):
        self.files = files

    def names(self, directory: str) -> list[str] | None:
        found = [name.split("/", 1)[1] for name in self.files if name.startswith(directory + "/")]
        return found or None

    def text(self, name: str) -> str | None:
        return self.files.get(name)


def test_batch_ids_skip_checksums_and_temporary_files():
    assert batch_ids(["0", ".0.crc", "1", ".1.abc.tmp", "12", "1.compact", "x"]) == [0, 1, 12]
    assert batch_ids(None) == []


def test_the_position_is_the_last_committed_batch():
    assert position_batch(LOCATION, [3, 4, 5], [3, 4, 5], False) == (5, [])
    with pytest.raises(AdoptionRefusedError, match="has batch 6 planned .offsets/6. but not committed"):
        position_batch(LOCATION, [5, 6], [5], False)
    batch, warnings = position_batch(LOCATION, [5, 6], [5], True)
    assert batch == 5 and "reads its records again from the end of batch 5" in warnings[0]
    with pytest.raises(AdoptionRefusedError, match="was ever committed"):
        position_batch(LOCATION, [0], [], True)


def test_offset_log_lines_of_both_versions_in_the_querys_source_order():
    v1 = offset_log_sources(OFFSETS_V1, "offsets/7")
    assert [(line.source, line.offsets) for line in v1] == [
        ("0", {("orders", 0): 10, ("orders", 1): 20}), ("1", None), ("2", None)]
    v2 = offset_log_sources('v2\n{"batchWatermarkMs":0}\n1:{"b":{"0":4}}\n0:{"@format":1,"a":{"0":5}}\n', "x")
    assert [(line.source, line.offsets) for line in v2] == [("0", {("a", 0): 5}), ("1", {("b", 0): 4})]
    with pytest.raises(AdoptionRefusedError, match="its first line is 'v9'"):
        offset_log_sources("v9\n{}\n{}", "offsets/7")


def test_the_source_is_the_only_kafka_one_or_the_one_named():
    lines = offset_log_sources(OFFSETS_V1, "offsets/7")
    assert chosen_source(lines, None, "offsets/7").source == "0"
    assert chosen_source(lines, "0", "offsets/7").source == "0"
    with pytest.raises(AdoptionRefusedError, match="source 1 of the checkpoint's query is not a Kafka source"):
        chosen_source(lines, "1", "offsets/7")
    with pytest.raises(AdoptionRefusedError, match="no source 4"):
        chosen_source(lines, "4", "offsets/7")
    two = offset_log_sources('v1\n{}\n{"a":{"0":1}}\n{"b":{"0":2}}', "offsets/7")
    with pytest.raises(AdoptionRefusedError, match="has 2 Kafka sources: 0: Kafka, topics a; 1: Kafka, topics b"):
        chosen_source(two, None, "offsets/7")
    with pytest.raises(AdoptionRefusedError, match="has no Kafka source"):
        chosen_source(offset_log_sources('v1\n{}\n{"logOffset":3}', "x"), None, "x")


def test_checkpoint_position_reads_metadata_and_the_committed_batchs_offsets():
    files = Files({"metadata": '{"id":"q-1"}', "offsets/6": OFFSETS_V1, "offsets/.6.crc": "", "commits/6": "v1\n{}"})
    assert checkpoint_position(files) == CheckpointPosition(LOCATION, "q-1", 6, "0",
                                                            {("orders", 0): 10, ("orders", 1): 20})
    with pytest.raises(AdoptionRefusedError, match="no Structured Streaming checkpoint at"):
        checkpoint_position(Files({"offsets/6": OFFSETS_V1, "commits/6": ""}))
    with pytest.raises(AdoptionRefusedError, match="has commits/6 but no offsets/6"):
        checkpoint_position(Files({"metadata": "{}", "commits/6": ""}))


POSITION = CheckpointPosition(LOCATION, "q-1", 6, "0", {("orders", 0): 10, ("orders", 1): 20})


def view(**changes) -> GroupView:
    base = dict(bootstrap_servers="k:9092", members=(), committed={}, pending=(), partitions={"orders": (0, 1)},
                earliest={("orders", 0): 0, ("orders", 1): 0}, last_stable={("orders", 0): 15, ("orders", 1): 20})
    return GroupView(**{**base, **changes})


def test_the_plan_commits_the_position_with_its_lag():
    plan = adoption_plan(POSITION, "g", view(committed={("orders", 0): 4}))
    assert plan.offsets() == POSITION.offsets and not plan.unchanged and plan.warnings == []
    assert [(p.before, p.lag) for p in plan.partitions] == [(4, 5), (None, 0)] and plan.total_lag == 5
    assert adoption_plan(POSITION, "g", view(committed=dict(POSITION.offsets))).unchanged


def test_the_plan_refuses_members_open_transactions_moving_back_and_gone_partitions():
    with pytest.raises(AdoptionRefusedError, match=r"has 1 active member\(s\) \(m-1 \(c on h\)\)"):
        adoption_plan(POSITION, "g", view(members=("m-1 (c on h)",)))
    with pytest.raises(AdoptionRefusedError, match="an open transaction holds consumer group 'g'.s offsets for orders-1"):
        adoption_plan(POSITION, "g", view(pending=(("orders", 1),)))
    with pytest.raises(AdoptionRefusedError, match=r"past the checkpoint's for orders-1 \(group 21, checkpoint 20\):"):
        adoption_plan(POSITION, "g", view(committed={("orders", 0): 9, ("orders", 1): 21}))
    with pytest.raises(AdoptionRefusedError, match="reads topic orders, which the cluster at k:9092 no longer has"):
        adoption_plan(POSITION, "g", view(partitions={"orders": None}))
    with pytest.raises(AdoptionRefusedError, match="reads orders-1, which the cluster"):
        adoption_plan(POSITION, "g", view(partitions={"orders": (0,)}))
    with pytest.raises(AdoptionRefusedError, match=r"past the end of orders-1 \(checkpoint 20, partition's end 3\): "
                                                   "the topic was deleted and created again"):
        adoption_plan(POSITION, "g", view(last_stable={("orders", 0): 15, ("orders", 1): 3}))


def test_the_plan_warns_of_deleted_records_and_unknown_partitions():
    plan = adoption_plan(POSITION, "g", view(partitions={"orders": (0, 1, 2)}, earliest={("orders", 0): 12}))
    assert len(plan.warnings) == 2
    assert plan.warnings[0].startswith("orders-0: the checkpoint's offset 10 is below the partition's earliest offset 12")
    assert plan.warnings[1].startswith("topic orders has partitions 2 the checkpoint does not know")


def test_the_command_line_offers_only_what_adopting_uses(capsys):
    with pytest.raises(SystemExit):
        main(["adopt-checkpoint", "--checkpoint", "/c", "--group", "g", "--bootstrap-servers", "h:1",
              "--transactional-id-prefix", "p"])
    assert "unrecognized arguments: --transactional-id-prefix" in capsys.readouterr().err
    # refused before Spark starts or Kafka is asked
    assert main(["adopt-checkpoint", "--checkpoint", "/c", "--group", "g", "--bootstrap-servers", "h:1",
                 "--spark-conf", "spark.hadoop.fs.s3a.endpoint"]) == 2
    assert "error: Spark setting 'spark.hadoop.fs.s3a.endpoint' is not KEY=VALUE" in capsys.readouterr().err
