"""Every code block of README.md and docs/*.md runs, against a real broker and real Spark.

How a page runs, in order of its blocks:

- ``python`` blocks share one namespace per page holding ``spark`` (a SparkSession),
  ``bootstrap_servers`` and ``checkpoints`` (a fresh directory), as the pages say they assume.
  A block whose first line is a comment naming a ``.py`` file (``# my_job.py``) is written to that
  file in the page's working directory instead, for a later ``spark-submit``.
- ``bash`` blocks run with ``bash -euo pipefail`` in the page's working directory (which links
  ``dist/`` and ``.venv/`` of the checkout), with ``KAFKA_BOOTSTRAP_SERVERS`` and ``CHECKPOINTS``
  set; blocks that run ``make`` run in the checkout.
- ``<!-- docs-test: ... -->`` lines (invisible on the rendered page) prepare what a page's
  examples need: ``input TOPIC/PARTITIONS/RECORDS`` (committed records, and an aborted
  transaction a reader must skip), ``topics TOPIC/PARTITIONS``, ``refill TOPIC [TEXT]`` (that many
  records more before each bash block whose code holds TEXT; without it, each that runs
  spark-submit), ``exactly-once IN -> OUT GROUP [upper]`` (after the page, a plain read_committed
  consumer finds each input value, transformed, once; records written without a transaction, as
  Spark's own Kafka sink writes them, count as committed), ``broker secured`` (a broker of
  its own with ACL authorization and SASL_SSL, TLS and mutual-TLS listeners; the names the page
  assumes for them, and ``KAFKA_CA_FILE`` for bash blocks) and ``python runtime`` (bash blocks get a fresh
  virtual environment with PySpark, confluent-kafka and pyarrow, but not eos-kafka, first on PATH)
  and ``connect`` (a Spark Connect server for the page, its URL in ``SPARK_REMOTE`` for bash blocks),
  and ``release`` (the page runs in ``make release-tests``, not in every ``make test``: its blocks
  build a virtual environment of their own and start a fresh Spark application each, the ways of
  shipping the package that test_distribution checks in every run).

Two blocks are not run here, and the test checks who runs them: ``make test`` is what CI runs
(.ci/run) and ``make demo`` is run by test_example_pipeline.py.
"""
from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pyspark_eos import errors
from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, kafka_tool_command
from pyspark_eos.sink.options import SINK_OPTIONS
from pyspark_eos.source.options import SOURCE_OPTIONS
from pyspark_eos.testing.local_spark import local_connect_server, spark_java_options

from .kafka_tools import committed_offsets, create_topic, last_stable_offsets, read_committed, write_transactions
from .virtualenvs import CHECKOUT, RUNTIME, constraints_file, pinned, virtualenv

PAGES = [CHECKOUT / "README.md", *sorted((CHECKOUT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(\S*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
DIRECTIVE = re.compile(r"^<!-- docs-test: (.*?) -->$", re.MULTILINE)
FILE_BLOCK = re.compile(r"\A# (\S+\.py)\n")
RUN_ELSEWHERE = {
    "make test\n": (CHECKOUT / ".ci" / "run", "make test"),
    "make demo\n": (CHECKOUT / "tests" / "test_example_pipeline.py", '["make", "demo"]'),
}
# Messages on the troubleshooting page that Spark or Python raise, not eos-kafka.
FOREIGN_MESSAGES = {"[DATA_SOURCE_NOT_FOUND] Failed to find the data source: eos-kafka", "No module named 'pyspark_eos'",
                    "eos-kafka does not support Update mode."}
# What a page's pipeline does to each value, for ``exactly-once IN -> OUT GROUP [TRANSFORM]``.
TRANSFORMS = {"upper": bytes.upper}
PIPELINE_USER, PIPELINE_PASSWORD = "pipeline", "pipeline-secret"
ADMIN_USER, ADMIN_PASSWORD = "admin", "admin-secret"


@dataclass
class Block:
    page: Path
    line: int
    language: str
    code: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(CHECKOUT)}:{self.line}"


@dataclass
class Page:
    path: Path
    blocks: list[Block]
    directives: list[list[str]] = field(default_factory=list)

    def wants(self, name: str) -> list[list[str]]:
        return [d[1:] for d in self.directives if d[0] == name]


def read_page(path: Path) -> Page:
    text = path.read_text()
    blocks = [Block(path, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)) for m in BLOCK.finditer(text)]
    return Page(path, blocks, [d.split() for d in DIRECTIVE.findall(text)])


def page_id(path: Path) -> str:
    return str(path.relative_to(CHECKOUT))


def test_every_code_block_is_python_or_bash():
    blocks = [block for path in PAGES for block in read_page(path).blocks]
    assert blocks
    assert [str(b) for b in blocks if b.language not in ("python", "bash")] == []


def test_blocks_run_elsewhere_are_run_there():
    for command, (runner, text) in RUN_ELSEWHERE.items():
        assert text in runner.read_text(), f"{runner} no longer runs `{command.strip()}`"


def documented_options(page: Path) -> set[str]:
    """The option names in the first column of a page's tables, each with a default column after."""
    rows = [line.split("|") for line in page.read_text().splitlines() if line.startswith("| `")]
    return {name for row in rows if len(row) >= 4 for name in re.findall(r"`([^`]+)`", row[1])}


def test_the_option_tables_list_every_option():
    source, sink = documented_options(CHECKOUT / "docs" / "source.md"), documented_options(CHECKOUT / "docs" / "sink.md")
    assert [o for o in SOURCE_OPTIONS if o not in source] == []
    assert [o for o in SINK_OPTIONS if o not in ("checkpointLocation", "path") and o not in sink] == []


def test_the_messages_on_the_troubleshooting_page_are_raised_by_the_code():
    page = (CHECKOUT / "docs" / "troubleshooting.md").read_text()
    code = " ".join(path.read_text() for path in (CHECKOUT / "pyspark_eos").rglob("*.py"))
    code = re.sub(r'"\s*\n\s*f?"', "", code)  # join implicitly concatenated string literals
    quoted = re.findall(r"\*\*`(.+?)`\*\*", page, re.DOTALL)
    # The literal start of each message, up to its first <placeholder> or "...", without "SomeError: ".
    prefixes = [re.split(r"<|\.\.\.", re.sub(r"^\w+Error: ", "", " ".join(q.split())))[0].strip() for q in quoted]
    missing = [p for p in prefixes if len(p) > 8 and p not in FOREIGN_MESSAGES and p not in code]
    assert missing == [], "\n".join(missing)


def test_the_troubleshooting_page_covers_every_error_class():
    page = (CHECKOUT / "docs" / "troubleshooting.md").read_text()
    names = [name for name, value in vars(errors).items() if isinstance(value, type) and issubclass(value, Exception)]
    assert [n for n in names if n != "EosKafkaError" and n not in page] == []


@pytest.fixture(scope="module")
def pages_kafka(kafka, tmp_path_factory) -> str:
    """Where the pages' examples run: the session's broker, but an embedded one of their own when
    the session's is external. The examples' topics have the names a reader sees on the page
    (``orders``), which are nobody's to create or fill on a user's cluster, and which a second run
    against the same cluster would find there already."""
    if kafka.cluster is not None:
        yield kafka.bootstrap_servers
        return
    with EmbeddedKafkaCluster(nodes=1, directory=tmp_path_factory.mktemp("pages-kafka")) as cluster:
        yield cluster.bootstrap_servers


def _page_param(path: Path):
    return pytest.param(path, marks=pytest.mark.release) if read_page(path).wants("release") else path


@pytest.mark.parametrize("path", [_page_param(p) for p in PAGES if read_page(p).blocks], ids=page_id)
def test_the_page_runs(path, pages_kafka, spark, tmp_path, monkeypatch):
    page = read_page(path)
    with page_broker(page, pages_kafka, tmp_path) as broker, contextlib.ExitStack() as stack:
        runner = PageRunner(page, broker, spark, tmp_path)
        if page.wants("connect"):  # bash blocks are Spark Connect clients of a server of the page's own
            runner.env["SPARK_REMOTE"] = stack.enter_context(local_connect_server(tmp_path / "connect-server.log"))
        runner.prepare()
        for block in page.blocks:
            runner.run(block)
        runner.check()


# ----------------------------------------------------------------------------------- brokers

@dataclass
class Broker:
    bootstrap_servers: str      # what the page's examples connect to
    admin_bootstrap: str        # where the test prepares and checks topics
    names: dict = field(default_factory=dict)  # more names the page's python blocks assume
    env: dict = field(default_factory=dict)  # and its bash blocks


class page_broker:
    """The session's broker, or for ``broker secured`` one of its own with ACL authorization and
    TLS listeners (secure_listeners): the examples connect over SASL_SSL, TLS and mutual TLS."""

    def __init__(self, page: Page, shared: str, tmp_path: Path):
        self.page, self.shared, self.tmp_path, self.cluster = page, shared, tmp_path, None

    def __enter__(self) -> Broker:
        if not self.page.wants("broker"):
            return Broker(self.shared, self.shared)
        self.cluster = EmbeddedKafkaCluster(nodes=1, directory=self.tmp_path / "kafka", overrides=SECURED_OVERRIDES,
                                            secure=True).start()
        tls = self.cluster.tls
        names = {"ca_file": str(tls.ca), "client_certificate": str(tls.client.certificate),
                 "client_key": str(tls.client.key), "tls_bootstrap_servers": self.cluster.listener("TLS"),
                 "mtls_bootstrap_servers": self.cluster.listener("MTLS")}
        return Broker(self.cluster.listener("SASL_SSL"), self.cluster.bootstrap_servers, names,
                      {"KAFKA_CA_FILE": str(tls.ca)})

    def __exit__(self, *exc_info) -> None:
        if self.cluster is not None:
            self.cluster.stop()


# The plaintext listener stays for the brokers' own traffic and the test's set-up, as a super user;
# the examples connect through SASL_SSL as users whose rights are only their ACLs, and through
# mutual TLS as the client certificate's subject.
SECURED_OVERRIDES = {
    "listener.name.sasl_ssl.plain.sasl.jaas.config":
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in ((PIPELINE_USER, PIPELINE_PASSWORD), (ADMIN_USER, ADMIN_PASSWORD)))
        + ";",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": f"User:ANONYMOUS;User:{ADMIN_USER}",
}


# ------------------------------------------------------------------------------------ a page

class PageRunner:
    def __init__(self, page: Page, broker: Broker, spark, tmp_path: Path):
        self.page, self.broker, self.spark = page, broker, spark
        self.workdir = tmp_path / "work"
        self.checkpoints = tmp_path / "checkpoints"
        self.namespace = {"spark": spark, "bootstrap_servers": broker.bootstrap_servers,
                          "checkpoints": str(self.checkpoints), **broker.names}
        self.inputs = {name: (int(partitions), int(records))
                       for name, partitions, records in (spec[0].split("/") for spec in page.wants("input"))}
        self.partitions = {name: int(partitions) for name, partitions in (spec[0].split("/") for spec in page.wants("topics"))}
        self.partitions.update({name: partitions for name, (partitions, _) in self.inputs.items()})
        self.written: dict[str, int] = {}
        self.env = self._bash_env(tmp_path)

    def prepare(self) -> None:
        self.workdir.mkdir()
        self.checkpoints.mkdir()
        for link in ("dist", ".venv"):
            (self.workdir / link).symlink_to(CHECKOUT / link)
        for name, (partitions, _) in self.inputs.items():
            create_topic(self.broker.admin_bootstrap, name, partitions=partitions)
            self._write_input(name)
        for name, partitions in self.partitions.items():
            if name not in self.inputs:
                create_topic(self.broker.admin_bootstrap, name, partitions=partitions)

    def run(self, block: Block) -> None:
        if block.code in RUN_ELSEWHERE:
            return
        if block.language == "python":
            self._run_python(block)
        else:
            self._run_bash(block)

    def check(self) -> None:
        for source, _, sink, group, *transform in self.page.wants("exactly-once"):
            bootstrap = self.broker.admin_bootstrap
            partitions = self.partitions[source]
            change = TRANSFORMS[transform[0]] if transform else (lambda value: value)
            inputs = [change(r.value) for r in read_committed(bootstrap, source, partitions)]
            outputs = [r.value for r in read_committed(bootstrap, sink, self.partitions[sink])]
            assert sorted(outputs) == sorted(inputs)
            assert committed_offsets(bootstrap, group, source, partitions) == \
                last_stable_offsets(bootstrap, source, partitions)

    def _run_python(self, block: Block) -> None:
        named = FILE_BLOCK.match(block.code)
        if named:
            (self.workdir / named.group(1)).write_text(block.code)
            return
        cwd = os.getcwd()
        os.chdir(self.workdir)
        try:
            exec(compile(block.code, str(block), "exec"), self.namespace)
        finally:
            os.chdir(cwd)

    def _run_bash(self, block: Block) -> None:
        for topic, *marker in self.page.wants("refill"):
            if " ".join(marker or ["spark-submit"]) in block.code:
                self._write_input(topic)
        cwd = CHECKOUT if block.code.startswith("make ") else self.workdir
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code], cwd=cwd, env=self.env,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"{block} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"

    def _write_input(self, topic: str) -> None:
        partitions, records = self.inputs[topic]
        done = self.written.get(topic, 0)
        self.written[topic] = done + records
        values = [(i % partitions, b"%s-%d" % (topic.encode(), done + i)) for i in range(records)]
        half = len(values) // 2
        write_transactions(self.broker.admin_bootstrap, topic,
                           [(True, values[:half]), (False, [(0, b"aborted")]), (True, values[half:])])

    def _bash_env(self, tmp_path: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME", "VIRTUAL_ENV")}
        env.update(KAFKA_BOOTSTRAP_SERVERS=self.broker.bootstrap_servers, CHECKPOINTS=str(self.checkpoints),
                   TMPDIR=str(tmp_path), **self.broker.env)
        tools = tmp_path / "bin"
        tools.mkdir()
        kafka_tool_script(tools / "kafka-acls.sh", "org.apache.kafka.tools.AclCommand")
        path = [str(tools)]
        if self.page.wants("python"):
            python = virtualenv("docs-runtime", pinned(*RUNTIME),
                                home=tmp_path / "runtime")
            path.insert(0, str(python.parent))
            env.update(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python),
                       SPARK_CONF_DIR=str(spark_conf_dir(tmp_path)), SPARK_LOCAL_IP="127.0.0.1",
                       PIP_CONSTRAINT=str(constraints_file(tmp_path)))
        env["PATH"] = os.pathsep.join([*path, env["PATH"]])
        return env


def kafka_tool_script(path: Path, main_class: str) -> None:
    path.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(part) for part in kafka_tool_command(main_class)) + ' "$@"\n')
    path.chmod(0o755)


def spark_conf_dir(tmp_path: Path) -> Path:
    """spark-defaults.conf for the pages' spark-submit lines: loopback, no UI, an empty Ivy cache."""
    directory = tmp_path / "spark-conf"
    directory.mkdir()
    settings = {"spark.master": "local[2]", "spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1", "spark.jars.ivy": str(tmp_path / "ivy"),
                "spark.driver.extraJavaOptions": spark_java_options()}
    (directory / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in settings.items()))
    return directory
