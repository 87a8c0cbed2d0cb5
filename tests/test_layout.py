"""The package's tree is its architecture: the runtime (source, sink, protocol, kafka) never
loads the project's test tooling (testing/), each part imports only the parts below it, and
faults reach the runtime only through kafka.fault_hooks."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyspark_eos
from pyspark_eos.kafka import fault_hooks
from pyspark_eos.testing.embedded_kafka import create_topic

from .kafka_tools import unique_name

PACKAGE = Path(pyspark_eos.__file__).resolve().parent
RUNTIME_FILES = sorted(path for path in PACKAGE.rglob("*.py") if path.relative_to(PACKAGE).parts[0] != "testing")
# __main__ runs the command line when imported; its imports are checked with the other files.
IMPORTABLE = [path for path in RUNTIME_FILES if path.name != "__main__.py"]


CHECKOUT = PACKAGE.parent
# The project's Python: what a circle of imports could join.
PROJECT_PACKAGES = ("pyspark_eos", "benchmarks", "devtools", "examples", "tests")


def _imported_modules(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports, relative imports resolved."""
    here = list(path.relative_to(CHECKOUT).with_suffix("").parts)
    package = here[:-1]  # for __init__.py, ``here`` ends with "__init__"
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(CHECKOUT).with_suffix("").parts).removesuffix(".__init__")


def _import_graph() -> dict[str, set[str]]:
    """Each project module's imports of other project modules (not of packages: importing a
    module runs its package's __init__, which is how packages work, not a design's circle)."""
    paths = [path for package in PROJECT_PACKAGES for path in (CHECKOUT / package).rglob("*.py")]
    modules = {_module_name(path) for path in paths if path.name != "__init__.py"}
    return {_module_name(path): {name for name in _imported_modules(path) if name in modules} for path in paths}


def test_no_circle_of_imports_anywhere_in_the_project():
    graph = _import_graph()
    assert "benchmarks.report" in graph["benchmarks.scenarios"]  # the check reads function-level imports too
    circles = set()
    for start in graph:
        stack = [(start, (start,))]
        while stack:
            module, path = stack.pop()
            for imported in graph.get(module, ()):
                if imported == start:
                    circles.add(" -> ".join((*path, start)))
                elif imported not in path and imported > start:  # each circle once, from its least module
                    stack.append((imported, (*path, imported)))
    assert sorted(circles) == []


def test_no_runtime_module_imports_the_test_tooling():
    assert len(RUNTIME_FILES) > 25
    offenders = {str(path.relative_to(PACKAGE)): sorted(name for name in _imported_modules(path)
                                                        if name.startswith("pyspark_eos.testing"))
                 for path in RUNTIME_FILES}
    assert {path: names for path, names in offenders.items() if names} == {}
    # the check itself sees a relative import of testing/ (as the commit path once had)
    assert "pyspark_eos.testing.maven_jars" in _imported_modules(PACKAGE / "testing" / "embedded_kafka.py")


# Which parts of the package each part may import: kafka <- protocol <- {source, sink} <- the data
# source and the operator tools. The top-level modules (the data source, registration, the daemon)
# may import any runtime part; errors and version are leaves any part may import, and workers (the
# fork server of Spark's Python daemons) imports no other part.
ALLOWED_IMPORTS = {
    "errors": set(),
    "version": set(),
    "kafka": {"errors", "version"},
    "protocol": {"kafka", "errors", "version"},
    "source": {"protocol", "kafka", "errors", "version"},
    "sink": {"protocol", "kafka", "errors", "version"},
    "operator": {"protocol", "kafka", "errors", "version"},
    "workers": {"errors", "version"},
}


def _part(module: str) -> str:
    """The part of the package a module belongs to: its first name below pyspark_eos."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_each_part_imports_only_the_parts_below_it():
    crossings = {}
    for path in RUNTIME_FILES:
        part = _part(".".join(("pyspark_eos", *path.relative_to(PACKAGE).with_suffix("").parts)))
        if part not in ALLOWED_IMPORTS:
            continue
        imported = {_part(name) for name in _imported_modules(path) if name.startswith("pyspark_eos.")}
        if imported - ALLOWED_IMPORTS[part] - {part}:
            crossings[str(path.relative_to(PACKAGE))] = sorted(imported - ALLOWED_IMPORTS[part] - {part})
    assert crossings == {}
    # every part of the tree is in the table, and each has modules the check read
    parts = {_part(_module_name(p)) for p in RUNTIME_FILES if p.parent != PACKAGE}
    assert parts == set(ALLOWED_IMPORTS) - {"errors", "version"}


def test_importing_every_runtime_module_loads_no_testing_module():
    modules = [".".join(("pyspark_eos", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
               for path in IMPORTABLE]
    script = textwrap.dedent(f"""
        import importlib, json, sys
        for name in {modules!r}:
            importlib.import_module(name)
        print(json.dumps(sorted(name for name in sys.modules if name.startswith("pyspark_eos"))))
    """)
    env = {key: value for key, value in os.environ.items() if key != fault_hooks.HOOKS_ENV}
    loaded = json.loads(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                       check=True, timeout=120).stdout)
    assert "pyspark_eos.sink.transactional_writer" in loaded
    assert [name for name in loaded if name.startswith("pyspark_eos.testing")] == []


# A Spark job of its own, without the fault-hook variable the test harness sets: one batch write
# through eos-kafka, wrapped so that the write task reports what its Python worker had loaded once
# it had written its transaction.
WORKER_JOB = textwrap.dedent("""
    import json, sys
    from dataclasses import dataclass
    from pyspark.sql.datasource import WriterCommitMessage
    from pyspark_eos import DefaultSource
    from pyspark_eos.sink.writer import EosKafkaBatchWriter
    from pyspark_eos.testing.local_spark import local_spark_session

    bootstrap, topic, report = sys.argv[1:4]

    @dataclass
    class Loaded(WriterCommitMessage):
        inner: WriterCommitMessage
        modules: list

    class ReportingWriter(EosKafkaBatchWriter.__bases__[-1]):  # Arrow batches where Spark has them
        def __init__(self, inner):
            self.inner = inner

        def write(self, iterator):
            message = self.inner.write(iterator)
            return Loaded(message, sorted(name for name in sys.modules if name.startswith("pyspark_eos")))

        def commit(self, messages):
            self.inner.commit([message.inner for message in messages])
            with open(report, "w") as out:
                json.dump([message.modules for message in messages], out)

    class Reporting(DefaultSource):
        @classmethod
        def name(cls):
            return "eos-kafka-reporting"

        def writer(self, schema, overwrite):
            return ReportingWriter(super().writer(schema, overwrite))

    spark = local_spark_session("local[1]", app_name="eos-kafka layout check")
    spark.dataSource.register(Reporting)
    spark.createDataFrame([("k", "v")], "key string, value string").write.mode("append") \\
        .format("eos-kafka-reporting").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save()
    spark.stop()
""")


def test_a_spark_worker_that_wrote_through_the_sink_has_loaded_no_testing_module(kafka, tmp_path):
    topic = create_topic(kafka.bootstrap_servers, unique_name("layout-worker-check"))
    env = {key: value for key, value in os.environ.items() if key != fault_hooks.HOOKS_ENV}
    report = tmp_path / "loaded.json"
    result = subprocess.run([sys.executable, "-c", WORKER_JOB, kafka.bootstrap_servers, topic, str(report)], env=env,
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (loaded,) = json.loads(report.read_text())
    assert "pyspark_eos.sink.transactional_writer" in loaded  # the worker that wrote the batch
    assert [name for name in loaded if name.startswith("pyspark_eos.testing")] == []


# The driver side of the sink, and the one entry of a write task, which builds what the task holds
# for its life from the options: every module a task goes through below it takes plain values.
TAKE_SINK_OPTIONS = {"data_source", "sink.options", "sink.writer", "sink.driver_checks", "sink.transactional_writer"}


def test_only_the_write_tasks_entry_and_the_driver_side_take_the_sinks_options():
    takers = {_module_name(path).removeprefix("pyspark_eos.") for path in RUNTIME_FILES
              if "pyspark_eos.sink.options.SinkOptions" in _imported_modules(path)}
    assert takers | {"sink.options"} == TAKE_SINK_OPTIONS


def test_nothing_a_write_task_goes_through_imports_the_writer_back():
    importers = {_module_name(path).removeprefix("pyspark_eos.") for path in RUNTIME_FILES
                 if "pyspark_eos.sink.transactional_writer" in _imported_modules(path)}
    assert importers == {"sink.writer"}  # the driver's writer hands each task to it
