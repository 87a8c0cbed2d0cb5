"""The group's offsets follow the output for every pipeline shape (source/group_commits), so the
tools operators already use show the real lag. A narrow pipeline's sink commits them in its
transactions; a pipeline with a shuffle, whose sink commits progress records instead, has the
source's member commit each batch's end once Spark has completed it."""
from __future__ import annotations

import json

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from pyspark_eos.testing.output_check import last_stable_offsets

from .kafka_tools import kafka_tool
from .spark_tools import PARTITIONS, Pipeline
from .test_operator_status import _row, run_cli


def stored_metadata(bootstrap: str, group: str, topic: str) -> list[dict]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])]
    return [json.loads(tp.metadata) for tp in admin.list_consumer_group_offsets(request)[group].result(30).topic_partitions]


def test_a_pipeline_with_a_shuffle_shows_its_lag_in_kafka_consumer_groups_and_status(spark, kafka, tmp_path):
    pipeline = Pipeline(kafka, tmp_path)
    # No kafka.group.id on the sink: after a shuffle its tasks commit progress records, not offsets.
    query = pipeline.run(spark, lambda frame: frame.select("key", "value").repartition(3),
                         sink_options={"kafka.group.id": None})
    assert len([p for p in query.recentProgress if p["numInputRows"]]) > 1  # several batches, each committed
    pipeline.assert_exactly_once()  # the group's offsets are at the input's end
    assert {m["batch"] for m in stored_metadata(pipeline.bootstrap, pipeline.group, pipeline.input)} == {None}

    ends = last_stable_offsets(pipeline.bootstrap, pipeline.input, PARTITIONS)
    described = kafka_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server",
                           pipeline.bootstrap, "--describe", "--group", pipeline.group)
    for partition, end in ends.items():
        # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
        row = next(line.split() for line in described.splitlines()
                   if line.split()[1:3] == [pipeline.input, str(partition)])
        assert row[3] == str(end) and row[5] == "0", described

    status = run_cli(pipeline.bootstrap, "status", "--group", pipeline.group).stdout
    for partition, end in ends.items():
        assert _row(status, f"{pipeline.input}-{partition}")[:5] == [f"{pipeline.input}-{partition}", str(end),
                                                                      "stable", str(end), "0"], status
