"""Assembles the Apache Kafka broker's jars from Maven Central, once.

``conf/kafka-broker-pom.xml`` pins the broker; ``mvn dependency:copy-dependencies`` copies its
runtime dependencies into ``.cache/kafka-jars/<pom digest>/``. A changed pom gets a new directory,
so bumping the Kafka version never mixes jars of two releases on one classpath.
"""
from __future__ import annotations

import hashlib
import logging
import re
import shutil
import subprocess
import time
from pathlib import Path

from .errors import EmbeddedKafkaError
from .project_files import cache_dir, conf_dir

log = logging.getLogger(__name__)

POM_NAME = "kafka-broker-pom.xml"
_COMPLETE_MARKER = ".complete"


def pom_path() -> Path:
    return conf_dir() / POM_NAME


def kafka_version() -> str:
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom_path().read_text())
    if not match:
        raise EmbeddedKafkaError(f"{pom_path()} does not define <kafka.version>")
    return match.group(1)


def jars_dir() -> Path:
    digest = hashlib.sha256(pom_path().read_bytes()).hexdigest()[:12]
    return cache_dir() / "kafka-jars" / f"{kafka_version()}-{digest}"


def ensure_broker_jars() -> Path:
    """Return the directory holding the broker's jars, downloading them if they are not there."""
    target = jars_dir()
    if (target / _COMPLETE_MARKER).exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise EmbeddedKafkaError(
            "Maven (mvn) is not on PATH: it is needed once to download the Kafka broker jars; "
            "install Maven 3.8+ (Debian: apt-get install maven) and try again"
        )
    if target.exists():
        shutil.rmtree(target)  # an earlier download was interrupted
    log.info("downloading Apache Kafka %s broker jars with Maven into %s (once)", kafka_version(), target)
    started = time.monotonic()
    command = [
        mvn, "--batch-mode", "--no-transfer-progress", "-f", str(pom_path()),
        "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={target}",
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-25:])
        raise EmbeddedKafkaError(
            f"Maven could not download the Kafka broker jars (exit {result.returncode}); "
            f"check that Maven Central is reachable. Last lines of its output:\n{tail}"
        )
    (target / _COMPLETE_MARKER).write_text(kafka_version())
    log.info("Kafka broker jars ready: %d jars in %.0f s", len(list(target.glob("*.jar"))),
             time.monotonic() - started)
    return target


def broker_classpath() -> str:
    jars = sorted(ensure_broker_jars().glob("*.jar"))
    return ":".join(str(jar) for jar in jars)
