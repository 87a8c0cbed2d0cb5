"""JVM options for every JVM the test kit starts: Spark's driver and executors, the embedded
Kafka brokers and Kafka's tools, each taken from ``EOS_KAFKA_TEST_JVM_OPTIONS`` when it is set.

The test suite sets it (tests/conftest.py): its JVMs live for seconds to minutes on a machine of
few cores, where the optimizing compiler's threads and a parallel collector's cost more CPU than
they give back. The benchmarks leave it unset, so that every contender runs on the JVM's defaults.
"""
from __future__ import annotations

import os
import shlex

JVM_OPTIONS_ENV = "EOS_KAFKA_TEST_JVM_OPTIONS"
# C1 only and one collector thread: what a short-lived JVM on two cores pays least CPU with.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def extra_jvm_options() -> list[str]:
    return shlex.split(os.environ.get(JVM_OPTIONS_ENV, ""))
