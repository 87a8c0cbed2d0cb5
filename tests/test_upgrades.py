"""This version continues a pipeline that an earlier version of eos-kafka left, from the state it
wrote: each release's state is kept in tests/upgrade_fixtures/<version>/ (made by
devtools/upgrade_fixtures.py from that release's code), restored here into a fresh broker and
checkpoint directory, and continued with the current code — exactly once.

What the fixtures hold (see devtools/upgrade_fixtures.py): a pipeline with a consumer group and a
stream without one, each with its last batch committed to Kafka but not to Spark's commit log; an
idempotent batch write; an open claim of a stalled attempt; and so the claims topic's plan, stamp,
claim and release records, the metadata committed with input offsets and with progress records,
and the source's offsets in checkpoints. A record in a newer format is refused by name.
"""
from __future__ import annotations

import json
import sys

import pytest
from confluent_kafka import Producer

from devtools.upgrade_fixtures import (
    BATCH_VERSION,
    FIRST_RECORDS,
    INPUT_PARTITIONS,
    NAMES,
    OUTPUT_PARTITIONS,
    FIXTURES,
    KAFKA_STATE,
    batch_rows,
    batch_write,
    fixture_versions,
    group_pipeline,
    produce_input,
    restore,
    run_to_end,
    stream_without_group,
)
from pyspark_eos.errors import FormatVersionError
from pyspark_eos.protocol.checkpoint_offsets import from_json, is_kafka_offsets
from pyspark_eos.kafka.options import DEFAULT_CLAIMS_TOPIC
from pyspark_eos.protocol.claims_layout import PIPELINE_PARTITIONS, pipeline_topic
from pyspark_eos.protocol.claims_log import ensure_claims_topic
from pyspark_eos.protocol.claims_records import CLAIM, PLAN, RELEASE, STAMP, AttemptOrder, Claim, parse_record
from pyspark_eos.protocol.commit_metadata import partition_metadata, stored_metadata
from pyspark_eos.protocol.formats import FORMAT
from pyspark_eos.protocol.group_stamp import GroupStamp
from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster

from .kafka_tools import committed_offsets, read_committed, transactional_ids, unique_name

VERSIONS = fixture_versions()
# What the code reads of the metadata committed with each kind of offset (commit_decision,
# task_progress, status): a fixture whose metadata lacks one of them is no longer understood.
INPUT_METADATA = {"generation", "batch", "query"}
PROGRESS_METADATA = {"batch", "query", "records", "checksum", "plan"}


def test_the_fixtures_include_the_state_of_the_code_before_formats_had_versions():
    # main at 2210b05 wrote no format version: pipelines running it upgrade to this one.
    assert "0.1.0.dev0" in VERSIONS


# ------------------------------------------------------------------ reading the fixtures' records

def _state(version: str) -> dict:
    return json.loads((FIXTURES / version / KAFKA_STATE).read_text())


def _claims_records(version: str) -> list[tuple[int, dict, bytes]]:
    return [(offset, json.loads(value), value.encode()) for _, offset, _, value in
            _state(version)["topics"][NAMES.claims]["records"] if value != "{}"]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_claims_record_of_an_earlier_version_reads_as_what_it_was(version):
    kinds = set()
    for offset, fields, value in _claims_records(version):
        record = parse_record(value, offset, NAMES.group)
        kinds.add(fields["kind"])
        if fields["kind"] == PLAN:
            assert record is None
        elif fields["kind"] == STAMP:
            assert isinstance(record, GroupStamp) and record.group_id == fields["group_id"]
            assert record.generation == fields["generation"] and record.assignment
        else:
            assert isinstance(record, Claim), f"the {fields['kind']} record at {offset} no longer reads: {fields}"
            assert (record.kind, record.group, record.transactional_id, record.order.plan, record.order.attempt) == (
                fields["kind"], fields["group"], fields["transactional_id"], fields["plan"], fields["attempt"])
            assert record.partitions == {tuple(p) for p in fields["partitions"]}
    assert kinds == {PLAN, STAMP, CLAIM, RELEASE}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_committed_offsets_metadata_of_an_earlier_version_reads_with_its_fields(version):
    groups = _state(version)["groups"]
    assert NAMES.group in groups
    progress = [group for group in groups if group.startswith(f"{NAMES.prefix}.progress.")]
    assert len(progress) >= 3  # the stream's tasks and the batch write's
    for group, offsets in groups.items():
        wanted = PROGRESS_METADATA if group in progress else INPUT_METADATA
        for topic, partition, _, metadata in offsets:
            assert wanted <= stored_metadata(metadata).keys(), f"{group} {topic}-{partition}: {metadata}"


@pytest.mark.parametrize("version", VERSIONS)
def test_every_checkpoint_of_an_earlier_version_reads_its_kafka_offsets(version):
    lines = [path.read_text().splitlines()[2] for path in (FIXTURES / version / "checkpoints").glob("*/offsets/*")]
    assert len(lines) >= 2
    for line in lines:
        parsed = json.loads(line)
        assert is_kafka_offsets(parsed)
        assert {partition for topic, partition in from_json(parsed)} == set(range(INPUT_PARTITIONS))


def test_a_renamed_field_in_a_fixture_is_noticed(monkeypatch):
    """The checks above fail when the code stops reading a field its earlier version wrote."""
    state = _state(VERSIONS[0])
    renamed = [[p, o, k, v.replace('"transactional_id"', '"txn_id"')]
               for p, o, k, v in state["topics"][NAMES.claims]["records"]]
    monkeypatch.setattr(sys.modules[__name__], "_state", lambda version: {
        **state, "topics": {**state["topics"], NAMES.claims: {"partitions": 1, "records": renamed}}})
    with pytest.raises(AssertionError, match="no longer reads"):
        test_every_claims_record_of_an_earlier_version_reads_as_what_it_was(VERSIONS[0])


# ------------------------------------------------------------------- records of a newer format

def _newer(record: bytes) -> bytes:
    return json.dumps({**json.loads(record), "format": FORMAT + 1, "eos-kafka": "9.9.9"}).encode()


def test_a_claim_of_a_newer_format_is_refused_naming_both_versions_and_another_groups_is_passed_over():
    value = _newer(Claim(CLAIM, "g", frozenset({("t", 0)}), AttemptOrder(1, 1), "id", "task").to_json())
    with pytest.raises(FormatVersionError, match=rf"claim record at offset 4 \(group 'g'\) is in format {FORMAT + 1}, "
                                                 rf"written by eos-kafka 9\.9\.9; this eos-kafka .* reads formats up "
                                                 rf"to {FORMAT}.*upgrade eos-kafka on the driver and every executor"):
        parse_record(value, 4, "g")
    assert parse_record(value, 4, "another pipeline's group") is None


def test_commit_metadata_of_a_newer_format_is_refused():
    with pytest.raises(FormatVersionError, match=rf"is in format {FORMAT + 1}, written by eos-kafka 9\.9\.9"):
        stored_metadata(_newer(partition_metadata(3, "7", "q").encode()).decode())


def test_a_format_no_longer_read_names_the_last_version_that_reads_it(monkeypatch):
    from pyspark_eos.protocol import formats

    monkeypatch.setitem(formats.NO_LONGER_READ, 0, "0.1.0")
    with pytest.raises(FormatVersionError, match=r"format 0.*no longer reads; eos-kafka 0\.1\.0 is the last version "
                                                 r"that reads it\. Upgrade through 0\.1\.0 first"):
        stored_metadata('{"generation":1,"batch":"3","query":"q"}')


def test_a_write_task_that_meets_a_newer_claim_of_its_own_writes_fails_naming_both_versions(kafka, spark):
    """A newer eos-kafka ran a write under this key (its claim is in a format this one cannot
    read): fencing by a misread claim would fence nothing, so the task fails and writes nothing."""
    from pyspark.errors import PySparkException

    from pyspark_eos.testing.embedded_kafka import create_topic

    topic = create_topic(kafka.bootstrap_servers, unique_name("upgrade-newer"), 1)
    app = unique_name("newer-app")
    claim = Claim(CLAIM, f"{NAMES.prefix}.progress.{app}/{topic}", frozenset({(DEFAULT_CLAIMS_TOPIC, 0)}),
                  AttemptOrder(1, 1), f"{NAMES.prefix}.newer.0", "a task of a newer eos-kafka")
    ensure_claims_topic(kafka.bootstrap_servers, {}, DEFAULT_CLAIMS_TOPIC)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    producer.produce(DEFAULT_CLAIMS_TOPIC, key=claim.group.encode(), value=_newer(claim.to_json()), partition=0)
    assert producer.flush(30) == 0
    frame = spark.createDataFrame([("k", "v")], "key string, value string").coalesce(1)
    with pytest.raises(PySparkException) as failure:
        (frame.write.format("eos-kafka").mode("append").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
         .option("topic", topic).option("txnAppId", app).option("txnVersion", "1").save())
    assert f"is in format {FORMAT + 1}, written by eos-kafka 9.9.9" in str(failure.value)
    assert "upgrade eos-kafka on the driver and every executor to 9.9.9 or later" in str(failure.value)
    assert read_committed(kafka.bootstrap_servers, topic) == []


# ----------------------------------------------------------- continuing from an earlier version

@pytest.fixture(scope="module", params=VERSIONS)
def restored(request, tmp_path_factory):
    """A fresh broker holding the fixture's state, and its checkpoints in a fresh directory."""
    with EmbeddedKafkaCluster(nodes=1, directory=tmp_path_factory.mktemp("upgrade-kafka")) as cluster:
        state = restore(request.param, cluster.bootstrap_servers, tmp_path_factory.mktemp("upgrade") / "checkpoints")
        yield cluster.bootstrap_servers, state


def _values(bootstrap: str, topic: str, partitions: int) -> list[str]:
    return [record.value.decode() for record in read_committed(bootstrap, topic, partitions=partitions)]


def _assert_once(bootstrap: str, output: str, expected: list[str]) -> None:
    values = _values(bootstrap, output, OUTPUT_PARTITIONS)
    duplicates = sorted({v for v in values if values.count(v) > 1})
    assert not duplicates, f"{len(duplicates)} value(s) twice in {output}, e.g. {duplicates[:5]}"
    assert sorted(values) == sorted(expected), f"missing: {sorted(set(expected) - set(values))[:5]}"


def test_a_pipeline_with_a_group_continues_exactly_once(restored, spark):
    bootstrap, state = restored
    assert len(_values(bootstrap, NAMES.output, OUTPUT_PARTITIONS)) == INPUT_PARTITIONS * FIRST_RECORDS
    produce_input(bootstrap, FIRST_RECORDS, 5)
    expected = _values(bootstrap, NAMES.input, INPUT_PARTITIONS)
    shared_before = _group_plans(bootstrap)
    # The checkpoint's last batch is replayed first: its records are in Kafka already.
    run_to_end(group_pipeline(spark, bootstrap, state.checkpoint(NAMES.group_checkpoint)))
    _assert_once(bootstrap, NAMES.output, expected)
    ends = {p: len(expected) // INPUT_PARTITIONS for p in range(INPUT_PARTITIONS)}
    assert committed_offsets(bootstrap, NAMES.group, NAMES.input, INPUT_PARTITIONS) == ends
    # It continued on layout 2: its plans and claims went to its own topic, none to the shared one.
    own = pipeline_topic(NAMES.claims, NAMES.group)
    kinds = {json.loads(r.value)["kind"] for r in read_committed(bootstrap, own, partitions=PIPELINE_PARTITIONS)}
    assert {"plan", "claim", "release"} <= kinds
    assert shared_before > 0 and _group_plans(bootstrap) == shared_before


def _group_plans(bootstrap: str) -> int:
    """The plan records of the pipeline with a group in the shared claims topic (layout 1)."""
    records = [json.loads(r.value) for r in read_committed(bootstrap, NAMES.claims)]
    return sum(r.get("kind") == "plan" and r.get("group") == NAMES.group for r in records)


def test_a_stream_without_a_group_continues_exactly_once_and_fences_the_stalled_attempt(restored, spark):
    bootstrap, state = restored
    assert NAMES.stalled_transactional_id not in transactional_ids(bootstrap, NAMES.stalled_transactional_id)
    produce_input(bootstrap, 100, 3)  # records of its own: the group pipeline's test may run first or not
    expected = _values(bootstrap, NAMES.input, INPUT_PARTITIONS)
    run_to_end(stream_without_group(spark, bootstrap, state.checkpoint(NAMES.stream_checkpoint)))
    _assert_once(bootstrap, NAMES.stream_output, expected)
    # The earlier version's open claim was read and its transactional id initialized (fenced).
    assert NAMES.stalled_transactional_id in transactional_ids(bootstrap, NAMES.stalled_transactional_id)


def test_an_idempotent_write_of_an_earlier_version_is_not_written_again(restored, spark):
    bootstrap, _ = restored
    batch_write(spark, bootstrap, BATCH_VERSION)
    before = [value for _, value in batch_rows(BATCH_VERSION)]
    _assert_once(bootstrap, NAMES.batch_output, before)
    batch_write(spark, bootstrap, BATCH_VERSION + 1)
    _assert_once(bootstrap, NAMES.batch_output, before + [value for _, value in batch_rows(BATCH_VERSION + 1)])
