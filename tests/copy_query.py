"""The eos-kafka -> eos-kafka query that the tests' own driver scripts run (driver_kill_job.py,
submit_job.py, connect_job.py): to the input's end in micro-batches of at most 9 offsets. Plain
PySpark only, so it runs wherever the scripts' Python finds pyspark and the eos-kafka format.

``to_the_end`` and ``await_end`` run any query to its input's end: with Trigger.AvailableNow, except
on PySpark 4.0 and 4.1, which give a Python source no admission control and run a query whose source
cannot take Trigger.AvailableNow as one single batch; there with the default trigger until
``processAllAvailable`` returns."""
import threading

import pyspark

AVAILABLE_NOW = tuple(int(part) for part in pyspark.__version__.split(".")[:2]) >= (4, 2)


def to_the_end(writer):
    return writer.trigger(availableNow=True) if AVAILABLE_NOW else writer


def await_end(query, timeout: float | None = None) -> bool:
    """Whether the query reached its input's end (within ``timeout``); raises if it failed."""
    if AVAILABLE_NOW:
        return query.awaitTermination(timeout) if timeout is not None else query.awaitTermination() or True
    failure = []
    waiting = threading.Thread(target=lambda: _process_all(query, failure), daemon=True)
    waiting.start()
    waiting.join(timeout)
    if waiting.is_alive():
        return False  # the caller stops the query
    query.stop()
    if failure:
        raise failure[0]
    return True


def _process_all(query, failure: list) -> None:
    try:
        query.processAllAvailable()
    except Exception as error:  # noqa: BLE001 - raised by await_end, in the caller's thread
        failure.append(error)


def copy_writer(spark, bootstrap: str, source_topic: str, sink_topic: str, group: str, checkpoint: str):
    """The query, not started yet."""
    frame = (spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", source_topic).option("kafka.group.id", group)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "9").load())
    writer = (frame.select("key", "value").writeStream.format("eos-kafka")
            .option("kafka.bootstrap.servers", bootstrap).option("topic", sink_topic)
            .option("kafka.group.id", group).option("checkpointLocation", checkpoint))
    return to_the_end(writer)


def run_copy(spark, bootstrap: str, source_topic: str, sink_topic: str, group: str, checkpoint: str):
    query = copy_writer(spark, bootstrap, source_topic, sink_topic, group, checkpoint).start()
    await_end(query)
    return query
