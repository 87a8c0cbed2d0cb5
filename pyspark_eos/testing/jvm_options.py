"""JVM options for every JVM the test kit starts: Spark's driver and executors, the embedded
Kafka brokers and Kafka's tools, each taken from ``EOS_KAFKA_TEST_JVM_OPTIONS`` when it is set.

The test suite sets it (tests/conftest.py): its JVMs live for seconds to minutes on a machine of
few cores, where the optimizing compiler's threads and a parallel collector's cost more CPU than
they give back. The benchmarks leave it unset, so that every contender runs on the JVM's defaults.

The suite also sets ``EOS_KAFKA_TEST_CLASS_ARCHIVES``, a directory of class-data-sharing archives
(JDK's AppCDS, one per classpath and JVM): a JVM started with an archive maps the classes a
recorded run loaded instead of reading, verifying and parsing them from the jars again, much of
what a Spark driver or a Kafka broker spends starting. ``recording_class_archive`` makes
one from a run; until one exists, JVMs start without it.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shlex
import shutil
from pathlib import Path
from typing import Iterator

JVM_OPTIONS_ENV = "EOS_KAFKA_TEST_JVM_OPTIONS"
# C1 only and one collector thread: what a short-lived JVM on two cores pays least CPU with.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
CLASS_ARCHIVES_ENV = "EOS_KAFKA_TEST_CLASS_ARCHIVES"
# A JVM refuses an archive another JDK build or another classpath wrote, and says so on stdout
# (where Kafka's tools print what tests read): it starts without the archive, quietly.
_QUIET_CDS = "-Xlog:cds=off,cds+dynamic=off"


def extra_jvm_options() -> list[str]:
    return shlex.split(os.environ.get(JVM_OPTIONS_ENV, ""))


def class_archive_options(classpath_key: str) -> list[str]:
    """The option mapping the archive recorded for ``classpath_key`` (a Spark home, a Kafka
    classpath), if the suite keeps archives and that one exists."""
    archive = class_archive(classpath_key)
    return [f"-XX:SharedArchiveFile={archive}", _QUIET_CDS] if archive is not None and archive.exists() else []


def class_archive(classpath_key: str) -> Path | None:
    directory = os.environ.get(CLASS_ARCHIVES_ENV)
    if not directory:
        return None
    digest = hashlib.sha256(f"{classpath_key}\0{_java_identity()}".encode()).hexdigest()[:16]
    return Path(directory) / f"{digest}.jsa"


@functools.lru_cache(maxsize=1)
def _java_identity() -> str:
    # The java a Spark launcher or the broker's command runs; a JDK update replaces its files.
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home) / "bin" / "java" if java_home else Path(shutil.which("java") or "java")
    try:
        real = java.resolve()
        return f"{real}:{real.stat().st_mtime_ns}"
    except OSError:
        return str(java)


@contextlib.contextmanager
def recording_class_archive(classpath_key: str) -> Iterator[list[str]]:
    """Options for one JVM that writes ``classpath_key``'s archive as it exits; the caller waits
    for that JVM to exit inside the block. The archive is published only then, whole, so that no
    JVM maps a half-written one."""
    archive = class_archive(classpath_key)
    if archive is None:
        raise RuntimeError(f"set {CLASS_ARCHIVES_ENV} to a directory to record class archives in")
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{archive.stem}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    try:
        yield [f"-XX:ArchiveClassesAtExit={partial}", _QUIET_CDS]
        if not partial.exists():
            raise RuntimeError(f"the recorded JVM exited without writing its class archive {partial}")
        os.replace(partial, archive)
    finally:
        partial.unlink(missing_ok=True)
