"""The eos-kafka -> eos-kafka query that the tests' own driver scripts run (driver_kill_job.py,
submit_job.py, connect_job.py): to the input's end in micro-batches of at most 9 offsets. Plain
PySpark only, so it runs wherever the scripts' Python finds pyspark and the eos-kafka format."""


def copy_writer(spark, bootstrap: str, source_topic: str, sink_topic: str, group: str, checkpoint: str):
    """The query, not started yet."""
    frame = (spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", source_topic).option("kafka.group.id", group)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "9").load())
    return (frame.select("key", "value").writeStream.format("eos-kafka")
            .option("kafka.bootstrap.servers", bootstrap).option("topic", sink_topic)
            .option("kafka.group.id", group).option("checkpointLocation", checkpoint)
            .trigger(availableNow=True))


def run_copy(spark, bootstrap: str, source_topic: str, sink_topic: str, group: str, checkpoint: str):
    query = copy_writer(spark, bootstrap, source_topic, sink_topic, group, checkpoint).start()
    query.awaitTermination()
    return query
