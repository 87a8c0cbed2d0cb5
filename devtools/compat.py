"""The compatibility matrix (``make compat``): the tests marked ``compat`` against every Kafka
broker release and PySpark release the package supports, and against the lowest confluent-kafka
it declares; then the table in docs/compatibility.md is rewritten from the results.

Each row is one pytest run of the subset:

- the pinned broker (conf/kafka-broker-pom.xml) with every PySpark release below;
- every other broker release with the PySpark this checkout's environment runs;
- the lowest confluent-kafka with the pinned broker and that PySpark.

A broker release is chosen with ``$EOS_KAFKA_BROKER_VERSION`` (``maven_jars.kafka_broker``);
another PySpark or confluent-kafka runs in a virtual environment of its own under ``.cache/``,
with this checkout installed in it. Every row's outcome is appended to
``.cache/compat/results.jsonl``; the docs' table shows each row's newest outcome.

    .venv/bin/python -m devtools.compat                 # every row
    .venv/bin/python -m devtools.compat --row kafka-3.9.2 --row pyspark-4.0.5
    .venv/bin/python -m devtools.compat --table-only    # rewrite the table from the results kept
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import logging
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import asdict, dataclass
from pathlib import Path

from pyspark_eos.kafka.dependencies import CONFLUENT_KAFKA_MINIMUM
from pyspark_eos.testing.maven_jars import KAFKA_BROKER, KAFKA_VERSION_ENV, OLDEST_KAFKA
from pyspark_eos.testing.project_files import cache_dir
from tests.virtualenvs import CHECKOUT, virtualenv

log = logging.getLogger("compat")

KAFKA_RELEASES = (OLDEST_KAFKA, "4.0.2", "4.4.0")
PYSPARK_RELEASES = ("4.0.5", "4.1.4", "4.2.1", "4.3.0")
DOC = CHECKOUT / "docs" / "compatibility.md"
TABLE_START, TABLE_END = "<!-- compat:start -->", "<!-- compat:end -->"
RESULTS = "results.jsonl"


@dataclass(frozen=True)
class Row:
    name: str
    kafka: str
    pyspark: str
    confluent_kafka: str


@dataclass(frozen=True)
class Outcome:
    row: Row
    passed: int
    failed: list[str]
    skipped: int
    seconds: float
    finished: str
    commit: str

    @property
    def verdict(self) -> str:
        return "pass" if self.passed and not self.failed else "FAIL"


def lowest_confluent_kafka() -> str:
    """The lowest confluent-kafka the package accepts (its import check; setup.cfg declares the same)."""
    return ".".join(map(str, CONFLUENT_KAFKA_MINIMUM))


def rows() -> list[Row]:
    pinned, pyspark = KAFKA_BROKER.version(), importlib.metadata.version("pyspark")
    client = importlib.metadata.version("confluent-kafka")
    return ([Row(f"pyspark-{release}", pinned, release, client) for release in PYSPARK_RELEASES]
            + [Row(f"kafka-{release}", release, pyspark, client) for release in KAFKA_RELEASES]
            + [Row(f"confluent-kafka-{lowest_confluent_kafka()}", pinned, pyspark, lowest_confluent_kafka())])


def compat_modules() -> list[str]:
    """The test modules with compat tests: only they are imported, so that a module that needs a
    newer PySpark for tests of its own (the benchmarks' Arrow writer) does not fail the row."""
    return sorted(str(path.relative_to(CHECKOUT)) for path in (CHECKOUT / "tests").glob("test_*.py")
                  if "pytest.mark.compat" in path.read_text())


def python_for(row: Row) -> Path:
    """This environment's python when it has the row's PySpark and client, else one built for the row."""
    if (row.pyspark, row.confluent_kafka) == (importlib.metadata.version("pyspark"),
                                              importlib.metadata.version("confluent-kafka")):
        return Path(sys.executable)
    log.info("%s: preparing a virtual environment with PySpark %s and confluent-kafka %s (once)",
             row.name, row.pyspark, row.confluent_kafka)
    return virtualenv(f"compat-{row.name}", [f"pyspark=={row.pyspark}", f"confluent-kafka=={row.confluent_kafka}",
                                             "-e", f"{CHECKOUT}[test]", "--config-settings", "editable_mode=compat"])


def run_row(row: Row, workdir: Path, pytest_args: list[str]) -> Outcome:
    report = workdir / f"{row.name}.xml"
    report.unlink(missing_ok=True)  # an earlier run's report must not stand for this one
    python = python_for(row)
    log.info("%s: Kafka %s, PySpark %s, confluent-kafka %s: running the compat tests", row.name, row.kafka,
             row.pyspark, row.confluent_kafka)
    started = time.monotonic()
    finished = subprocess.run([str(python), "-m", "pytest", "-m", "compat", "-n", "2", "--dist", "loadgroup", "-q",
                    "-p", "no:cacheprovider", f"--junitxml={report}", *pytest_args, *compat_modules()],
                   cwd=CHECKOUT, env={**os.environ, KAFKA_VERSION_ENV: row.kafka})
    outcome = _outcome(row, report, time.monotonic() - started)
    if finished.returncode != 0 and not outcome.failed:
        outcome.failed.append(f"pytest exited with {finished.returncode}: see its output above")
    log.info("%s: %s (%d passed, %d failed) in %.0f s", row.name, outcome.verdict, outcome.passed,
             len(outcome.failed), outcome.seconds)
    return outcome


def _outcome(row: Row, report: Path, seconds: float) -> Outcome:
    passed, failed, skipped = 0, [], 0
    if report.exists():
        for case in ElementTree.parse(report).iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append(f"{case.get('classname')}::{case.get('name')}")
            elif case.find("skipped") is not None:
                skipped += 1
            else:
                passed += 1
    else:
        failed.append("pytest wrote no report: see its output above")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=CHECKOUT, capture_output=True,
                            text=True).stdout.strip()
    finished = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return Outcome(row, passed, failed, skipped, round(seconds), finished, commit)


def load_outcomes(path: Path) -> dict[str, Outcome]:
    """The newest outcome of each row kept in ``path``."""
    newest: dict[str, Outcome] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            data = json.loads(line)
            newest[data["row"]["name"]] = Outcome(**{**data, "row": Row(**data["row"])})
    return newest


def table(outcomes: dict[str, Outcome]) -> str:
    lines = ["| row | Kafka broker | PySpark | confluent-kafka | result | tests passed | failed | time | when | commit |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows():
        outcome = outcomes.get(row.name)
        if outcome is None:
            lines.append(f"| {row.name} | {row.kafka} | {row.pyspark} | {row.confluent_kafka} | not run | | | | | |")
            continue
        ran = outcome.row
        failed = "<br>".join(f"`{name}`" for name in outcome.failed) or "none"
        lines.append(f"| {row.name} | {ran.kafka} | {ran.pyspark} | {ran.confluent_kafka} | {outcome.verdict} | "
                     f"{outcome.passed} | {failed} | {outcome.seconds:.0f} s | {outcome.finished} | {outcome.commit} |")
    return "\n".join(lines)


def write_table(outcomes: dict[str, Outcome]) -> None:
    text = DOC.read_text()
    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    DOC.write_text(text[:start] + "\n" + table(outcomes) + "\n" + text[end:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.compat", description=__doc__.split("\n\n")[0])
    parser.add_argument("--row", action="append", help="run only this row (repeatable), e.g. kafka-4.4.0")
    parser.add_argument("--table-only", action="store_true", help="rewrite the docs' table from the results kept")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    workdir = cache_dir() / "compat"
    workdir.mkdir(parents=True, exist_ok=True)
    chosen = [row for row in rows() if not args.row or row.name in args.row]
    if args.row and len(chosen) != len(args.row):
        parser.error(f"unknown row in {args.row}; the rows are {[row.name for row in rows()]}")
    outcomes = []
    if not args.table_only:
        for index, row in enumerate(chosen, 1):
            log.info("row %d of %d", index, len(chosen))
            outcome = run_row(row, workdir, args.pytest_args)
            outcomes.append(outcome)
            with open(workdir / RESULTS, "a") as results:
                results.write(json.dumps(asdict(outcome)) + "\n")
    write_table(load_outcomes(workdir / RESULTS))
    log.info("%s rewritten", DOC.relative_to(CHECKOUT))
    return 1 if any(outcome.verdict != "pass" for outcome in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
