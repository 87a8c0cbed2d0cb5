"""Jars assembled from Maven Central, once, for the test kit.

A pom in ``conf/`` (``project_files.conf_dir()``) pins each set: the Apache Kafka broker that
``embedded_kafka`` runs (the tests, the example pipeline and the benchmarks run against it; the
package ships its pom), and Spark's own Kafka connector that the project's tests and benchmarks
compare with (its pom is only in the checkout).
``mvn dependency:copy-dependencies`` copies a pom's runtime dependencies into
``<cache>/<name>/<version>-<pom digest>/`` (``project_files.cache_dir()``: the checkout's
``.cache/``, or a per-user cache for an installed copy); a changed pom gets a new directory, so a
version bump never mixes jars of two releases on one classpath.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import EmbeddedKafkaError
from .project_files import cache_dir, cache_lock, conf_file

log = logging.getLogger(__name__)

_COMPLETE_MARKER = ".complete"


@dataclass(frozen=True)
class MavenJars:
    name: str
    pom_name: str
    version_property: str
    # Another release of the same artifacts than the pom's: Maven resolves the pom with its
    # version property set to this one (``-D<property>=<version>``).
    chosen_version: str | None = None

    def at(self, version: str | None) -> "MavenJars":
        """The same jars at ``version`` (None: the pom's own)."""
        return replace(self, chosen_version=version)

    def pom_path(self) -> Path:
        return conf_file(self.pom_name)

    def version(self) -> str:
        if self.chosen_version:
            return self.chosen_version
        pattern = rf"<{re.escape(self.version_property)}>([^<]+)</{re.escape(self.version_property)}>"
        match = re.search(pattern, self.pom_path().read_text())
        if not match:
            raise EmbeddedKafkaError(f"{self.pom_path()} does not define <{self.version_property}>")
        return match.group(1)

    def directory(self) -> Path:
        digest = hashlib.sha256(self.pom_path().read_bytes()).hexdigest()[:12]
        return cache_dir() / self.name / f"{self.version()}-{digest}"

    def ensure(self) -> Path:
        """The directory holding the jars, downloading them first if they are not there."""
        target = self.directory()
        if (target / _COMPLETE_MARKER).exists():
            return target
        with cache_lock(self.name):
            if not (target / _COMPLETE_MARKER).exists():  # another process may have finished meanwhile
                self._download(target)
        return target

    def _download(self, target: Path) -> None:
        if target.exists():
            shutil.rmtree(target)  # an earlier download was interrupted
        log.info("downloading %s %s jars with Maven into %s (once)", self.name, self.version(), target)
        started = time.monotonic()
        _copy_dependencies(self.pom_path(), target,
                           [f"-D{self.version_property}={self.chosen_version}"] if self.chosen_version else [])
        (target / _COMPLETE_MARKER).write_text(self.version())
        log.info("%s jars ready: %d jars in %.0f s", self.name, len(list(target.glob("*.jar"))),
                 time.monotonic() - started)

    def jars(self) -> list[Path]:
        return sorted(self.ensure().glob("*.jar"))

    def classpath(self) -> str:
        return ":".join(str(jar) for jar in self.jars())


def _copy_dependencies(pom: Path, target: Path, properties: list[str]) -> None:
    run_maven(["-f", str(pom), *properties, "dependency:copy-dependencies", "-DincludeScope=runtime",
               f"-DoutputDirectory={target}"],
              f"download the jars of {pom} into {target}")


def run_maven(arguments: list[str], what: str) -> None:
    """Run ``mvn`` in batch mode; raise with the tail of its output when it fails."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise EmbeddedKafkaError(
            f"Maven (mvn) is not on PATH: it is needed to {what}; install Maven 3.8+ "
            "(Debian: apt-get install maven) and try again"
        )
    result = subprocess.run([mvn, "--batch-mode", "--no-transfer-progress", *arguments], capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-25:])
        raise EmbeddedKafkaError(
            f"Maven could not {what} (exit {result.returncode}); check that Maven Central is reachable. "
            f"Last lines of its output:\n{tail}"
        )


KAFKA_BROKER = MavenJars("kafka-jars", "kafka-broker-pom.xml", "kafka.version")
SPARK_KAFKA_CONNECTOR = MavenJars("spark-kafka-connector-jars", "spark-kafka-connector-pom.xml", "spark.kafka.version")
# Runs the embedded broker (and Kafka's tools) at another release than the pom's, e.g. 3.9.1.
KAFKA_VERSION_ENV = "EOS_KAFKA_BROKER_VERSION"
# The oldest broker release eos-kafka is tested against (docs/compatibility.md): make test runs
# one pipeline on it, make compat its whole subset.
OLDEST_KAFKA = "3.9.2"


def kafka_broker(version: str | None = None) -> MavenJars:
    """The broker jars at ``version``, else at $EOS_KAFKA_BROKER_VERSION, else at the pom's."""
    return KAFKA_BROKER.at(version or os.environ.get(KAFKA_VERSION_ENV) or None)


def kafka_version() -> str:
    return kafka_broker().version()
