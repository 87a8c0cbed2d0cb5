"""``python -m pyspark_eos status|abort-lingering``: the operator's view of a running pipeline;
``adopt-checkpoint``: a stopped query's checkpoint position as a consumer group's offsets, for a
switch to eos-kafka; ``compile-pyspark-zip``: a deployment step that cuts what Spark charges each
Python process it starts."""
from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from dataclasses import asdict
from pathlib import Path

from ..errors import ConfigurationError, EosKafkaError, KafkaClientError
from ..kafka.callbacks import with_callbacks
from ..kafka.options import DEFAULT_CLAIMS_TOPIC
from . import adopt_checkpoint
from .abort_lingering import abort_lingering
from .pyspark_bytecode import compile_pyspark_zip, pyspark_zip
from .status import CONNECT_TIMEOUT_S, ClusterAccess, gather, render

DEFAULT_OLDER_THAN_S = 60.0
COMPILE_PYSPARK_ZIP = "compile-pyspark-zip"
ADOPT_CHECKPOINT = "adopt-checkpoint"


def main(argv: list[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if arguments.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if arguments.command == COMPILE_PYSPARK_ZIP:
        return _compile_pyspark_zip(arguments.spark_home)
    try:
        return _COMMANDS[arguments.command](_cluster_access(arguments), arguments)
    except EosKafkaError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _status(access: ClusterAccess, arguments: argparse.Namespace) -> int:
    status = gather(access, arguments.group, arguments.transactional_id_prefix, tuple(arguments.topic or ()),
                    arguments.claims_topic)
    print(status.to_json() if arguments.json else render(status))
    return 0


def _abort_lingering(access: ClusterAccess, arguments: argparse.Namespace) -> int:
    status = gather(access, arguments.group, arguments.transactional_id_prefix)
    if status.notes and not arguments.dry_run:
        # A stale read of __transaction_state could name a live worker's transaction.
        raise KafkaClientError("not aborting anything: " + "; ".join(status.notes))
    outcomes = abort_lingering(access, status.transactions, arguments.older_than, arguments.dry_run)
    if arguments.json:
        print(json.dumps([asdict(outcome) for outcome in outcomes], indent=2))
    else:
        verb = "would abort" if arguments.dry_run else "aborted"
        for outcome in outcomes:
            print(f"{verb} {outcome.transactional_id} (open for {outcome.open_for_s:.1f} s)")
        if not outcomes:
            print(f"no transaction of {arguments.transactional_id_prefix}.{arguments.group}.* open for "
                  f"{arguments.older_than:.0f} s or more")
    return 0


def _adopt_checkpoint(access: ClusterAccess, arguments: argparse.Namespace) -> int:
    # Starting Spark (for a checkpoint not on a local path) takes seconds: its progress is worth
    # seeing without --verbose.
    logging.getLogger(adopt_checkpoint.__name__).setLevel(logging.INFO)
    spark_conf = _key_values(arguments.spark_conf or [], "Spark")
    position = adopt_checkpoint.read_checkpoint(arguments.checkpoint, spark_conf, arguments.source, arguments.planned)
    adoption = adopt_checkpoint.adopt_checkpoint(access, position, arguments.group, arguments.dry_run)
    for warning in adoption.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(adoption.to_json() if arguments.json else adopt_checkpoint.render(adoption))
    return 0


_COMMANDS = {"status": _status, "abort-lingering": _abort_lingering, ADOPT_CHECKPOINT: _adopt_checkpoint}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pyspark_eos",
                                     description="The operator's view of a running eos-kafka pipeline, the switch "
                                                 "of a stopped query's position to eos-kafka, and a deployment step "
                                                 "that speeds up the start of Spark's Python processes.")
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", help="per input partition: committed offset, open transactions, lag; "
                                               "the group's members; the pipeline's transactional ids")
    abort = commands.add_parser("abort-lingering", help="abort open transactions the pipeline's dead workers left")
    adopt = commands.add_parser(
        ADOPT_CHECKPOINT, help="commit a stopped query's position, from its checkpoint (Spark's Kafka connector's "
                               "or eos-kafka's), as the group's offsets, for an eos-kafka query with "
                               "startingOffsets=group")
    for command in (status, abort, adopt):
        _group_arguments(command)
    for command in (status, abort):
        command.add_argument("--transactional-id-prefix", default="eos-kafka",
                             help="the sink's transactionalIdPrefix option (default eos-kafka)")
    status.add_argument("--topic", action="append", metavar="TOPIC",
                        help="also show partitions of TOPIC the group has not committed yet (repeatable)")
    status.add_argument("--claims-topic", default=DEFAULT_CLAIMS_TOPIC,
                        help=f"the pipeline's claimsTopic option (default {DEFAULT_CLAIMS_TOPIC}): its own claims "
                             "topic is named after it and the group")
    abort.add_argument("--older-than", type=float, default=DEFAULT_OLDER_THAN_S, metavar="SECONDS",
                       help=f"abort only transactions open this long (default {DEFAULT_OLDER_THAN_S:.0f}); a live "
                            "worker's transaction lasts one write task")
    abort.add_argument("--dry-run", action="store_true", help="list what would be aborted, abort nothing")
    _adopt_arguments(adopt)
    compiled = commands.add_parser(
        COMPILE_PYSPARK_ZIP, help="add compiled bytecode to the pyspark.zip Spark starts its Python processes "
                                  "from, so that they stop compiling PySpark at every start (run it with the "
                                  "Python the executors run)")
    compiled.add_argument("--spark-home", type=Path, metavar="DIR",
                          help="the Spark installation (default: SPARK_HOME, else the installed pyspark package)")
    compiled.add_argument("--verbose", action="store_true", help="log what is done")
    return parser


def _compile_pyspark_zip(spark_home: Path | None) -> int:
    try:
        done = compile_pyspark_zip(pyspark_zip(spark_home))
    except (EosKafkaError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if done.modules == 0:
        print(f"{done.zip_path} already holds bytecode for this Python: nothing to do")
    else:
        print(f"{done.zip_path}: bytecode of {done.modules} modules added for Python "
              f"{sys.version_info.major}.{sys.version_info.minor}; to undo, move {done.backup} back")
    return 0


def _adopt_arguments(adopt: argparse.ArgumentParser) -> None:
    adopt.add_argument("--checkpoint", required=True, metavar="DIR",
                       help="the stopped query's checkpointLocation: a path or URI Spark reads (file://, hdfs://, "
                            "s3a://, abfss://, ...)")
    adopt.add_argument("--source", metavar="N",
                       help="the Kafka source to adopt when the query has several: its position in the query, "
                            "0-based as in lastProgress.sources[N]")
    adopt.add_argument("--planned", action="store_true",
                       help="adopt although a batch was planned and not committed: the eos-kafka query reads it "
                            "again, so what the old query wrote of it may reach the output twice")
    adopt.add_argument("--dry-run", action="store_true",
                       help="show the offsets that would be committed and the lag from there, commit nothing")
    adopt.add_argument("--spark-conf", action="append", metavar="KEY=VALUE",
                       help="a Spark setting for reading a checkpoint not on a local path, e.g. the file system's "
                            "credentials as spark.hadoop.fs.s3a.*; repeatable")


def _group_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--bootstrap-servers", required=True, help="the pipeline's kafka.bootstrap.servers")
    command.add_argument("--group", required=True, help="the pipeline's kafka.group.id")
    command.add_argument("-X", "--config", action="append", metavar="KEY=VALUE",
                         help="a Kafka client setting, as the connector's kafka.KEY options (security.protocol, "
                              "sasl.mechanism, ssl.ca.location, ...); repeatable")
    command.add_argument("--connect-timeout", type=float, default=CONNECT_TIMEOUT_S, metavar="SECONDS",
                         help="how long to wait for a broker at --bootstrap-servers to answer the first request "
                              f"(default {CONNECT_TIMEOUT_S:.0f})")
    command.add_argument("--config-file", type=Path, metavar="FILE",
                         help="Kafka client settings, one KEY=VALUE per line (# comments)")
    command.add_argument("--json", action="store_true", help="machine-readable output")
    command.add_argument("--verbose", action="store_true", help="log what is read")


def _cluster_access(arguments: argparse.Namespace) -> ClusterAccess:
    return ClusterAccess(arguments.bootstrap_servers, _client_config(arguments), _connect_timeout(arguments))


def _connect_timeout(arguments: argparse.Namespace) -> float:
    if not 0 < arguments.connect_timeout < math.inf:
        raise ConfigurationError(f"--connect-timeout must be a number of seconds more than 0, not "
                                 f"{arguments.connect_timeout:g}")
    return arguments.connect_timeout


def _client_config(arguments: argparse.Namespace) -> dict[str, str]:
    lines = arguments.config_file.read_text().splitlines() if arguments.config_file else []
    settings = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    config = _key_values([*settings, *(arguments.config or [])], "Kafka client", strip="kafka.")
    if "bootstrap.servers" in config:
        raise ConfigurationError("give the cluster's address with --bootstrap-servers, not as a client setting")
    return with_callbacks(config)


def _key_values(settings: list[str], kind: str, strip: str = "") -> dict[str, str]:
    """``KEY=VALUE`` settings as a dict (keys without the prefix ``strip``), the last of a key's winning."""
    parsed = {}
    for setting in settings:
        key, separator, value = setting.partition("=")
        if not separator or not key.strip():
            raise ConfigurationError(f"{kind} setting {setting!r} is not KEY=VALUE")
        parsed[key.strip().removeprefix(strip)] = value.strip()
    return parsed
