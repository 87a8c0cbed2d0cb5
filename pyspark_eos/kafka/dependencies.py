"""The compiled Kafka client eos-kafka needs, checked where Spark plans a query.

confluent-kafka wraps librdkafka in a C extension. Python can import C extensions only from
files on disk, not from the archives ``--py-files`` and ``--packages`` put on the Python path, so
it has to be installed with pip in the Python that runs the driver and the executors. Without
this check a missing client shows up as an ImportError deep in a Spark stack trace once the
query runs; with it, ``load()`` says what to install and where.
"""
from __future__ import annotations

import sys

from ..errors import MissingDependencyError

# The oldest release with everything eos-kafka calls (list_offsets with an isolation level,
# require_stable group offset fetches). setup.cfg's install_requires says the same.
CONFLUENT_KAFKA_MINIMUM = (2, 6)


def require_confluent_kafka() -> None:
    wanted = ".".join(map(str, CONFLUENT_KAFKA_MINIMUM))
    install = (f"install it with `pip install 'confluent-kafka>={wanted}'` in this Python and in the "
               "Python of every executor (it is a compiled extension: --py-files and --packages "
               "cannot ship it)")
    try:
        import confluent_kafka
    except ImportError as error:
        raise MissingDependencyError(
            f"eos-kafka needs confluent-kafka, which {sys.executable} cannot import ({error}); {install}"
        ) from None
    found = version_of(confluent_kafka)
    if release(found) < CONFLUENT_KAFKA_MINIMUM:
        raise MissingDependencyError(
            f"eos-kafka needs confluent-kafka {wanted} or newer; {sys.executable} has {found}: {install}"
        )


def version_of(module) -> str:
    # version() gave a (string, int) tuple in older releases and a string in newer ones.
    found = getattr(module, "__version__", None) or module.version()
    return found[0] if isinstance(found, tuple) else found


def release(version: str) -> tuple[int, ...]:
    """(major, minor) of a version string, suffixes ignored ("2.13.0rc1" -> (2, 13))."""
    numbers = []
    for part in version.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        numbers.append(int(digits or 0))
    return tuple(numbers)
