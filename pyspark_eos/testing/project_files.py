"""Where the test kit's configuration files and caches live.

The embedded broker and local Spark read their Maven pom, broker and logging configuration from a
``conf/`` directory, the first of:

1. ``EOS_KAFKA_CONF_DIR``, if set;
2. the copy the package ships (``pyspark_eos/testing/conf/``, put there by the distribution
   builder from the checkout's ``conf/``: an installed wheel, ``--py-files`` zip or jar has it);
3. the source checkout's ``conf/`` (a checkout, editable install included, has no packaged copy).

Downloaded jars and other re-creatable files go to ``EOS_KAFKA_CACHE_DIR`` if set, else to the
checkout's ``.cache/`` when the package runs from a checkout, else to a per-user cache:
``$XDG_CACHE_HOME/eos-kafka`` or ``~/.cache/eos-kafka``.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Iterator

from ..errors import EmbeddedKafkaError

CONF_DIR_ENV = "EOS_KAFKA_CONF_DIR"
CACHE_DIR_ENV = "EOS_KAFKA_CACHE_DIR"
# The package's copy of conf/, beside this module.
PACKAGED_CONF = "conf"
# What of the checkout's conf/ the package ships: what the embedded broker and local Spark read.
# The pom of Spark's own Kafka connector stays in the checkout: only the project's tests and
# benchmarks compare with it.
PACKAGED_CONF_FILES = ("server.properties", "kafka-broker-pom.xml", "broker-log4j2.properties", "spark-log4j2.properties")

_CHECKOUT_ROOT = Path(__file__).resolve().parents[2]


def checkout_root() -> Path | None:
    """The source checkout the package runs from, or None for an installed copy."""
    root = _CHECKOUT_ROOT
    if (root / "pyproject.toml").is_file() and (root / "conf").is_dir():
        return root
    return None


def conf_dir() -> Path:
    configured = os.environ.get(CONF_DIR_ENV)
    if configured:
        directory = Path(configured)
        if not (directory / "server.properties").is_file():
            raise EmbeddedKafkaError(
                f"no broker configuration in {directory} ({CONF_DIR_ENV}): it has no server.properties; "
                f"point {CONF_DIR_ENV} at a conf/ directory of an eos-kafka checkout, or unset it to use "
                "the configuration the package ships"
            )
        return directory
    packaged = _packaged_conf_dir()
    if packaged is not None:
        return packaged
    root = checkout_root()
    if root is not None and (root / "conf" / "server.properties").is_file():
        return root / "conf"
    raise EmbeddedKafkaError(
        f"no broker configuration in {Path(__file__).resolve().parent / PACKAGED_CONF} (the package's "
        f"copy) nor in a source checkout's conf/: this copy of eos-kafka was not built by its "
        f"distribution builder (make dist); reinstall it from a wheel that make dist built, or set "
        f"{CONF_DIR_ENV} to the conf/ directory of an eos-kafka checkout"
    )


def conf_file(name: str) -> Path:
    """A file of ``conf_dir()``; raises, naming the directory, when it is not there."""
    directory = conf_dir()
    path = directory / name
    if not path.is_file():
        raise EmbeddedKafkaError(
            f"no broker configuration in {directory}: it has no {name}; set {CONF_DIR_ENV} to the "
            "conf/ directory of an eos-kafka checkout, which has it"
        )
    return path


def _packaged_conf_dir() -> Path | None:
    """The package's copy of conf/ as a directory on disk; None when the package has none.

    Imported from a zip (``--py-files``, a ``--packages`` jar), the files are copied out once into
    the cache: Java and Maven read them by path."""
    packaged = resources.files(__package__) / PACKAGED_CONF
    if not packaged.joinpath("server.properties").is_file():
        return None
    if isinstance(packaged, Path):
        return packaged
    contents = {name: packaged.joinpath(name).read_bytes() for name in PACKAGED_CONF_FILES
                if packaged.joinpath(name).is_file()}
    digest = hashlib.sha256(repr(sorted(contents.items())).encode()).hexdigest()[:12]
    target = cache_dir() / "packaged-conf" / digest
    if not target.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
        for name, data in contents.items():
            (staging / name).write_bytes(data)
        try:
            staging.rename(target)
        except OSError:  # another process put it there first
            shutil.rmtree(staging, ignore_errors=True)
    return target


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/eos-kafka``, or ``~/.cache/eos-kafka``."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "eos-kafka"


def cache_dir() -> Path:
    """Downloaded broker jars and other re-creatable files (ignored by git)."""
    configured = os.environ.get(CACHE_DIR_ENV)
    root = checkout_root()
    if configured:
        directory = Path(configured)
    elif root is not None:
        directory = root / ".cache"
    else:
        directory = user_cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@contextlib.contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """Held while one process fills the cache entry ``name``: test processes running side by side
    (pytest-xdist workers) would otherwise download or install into the same directory at once."""
    with open(cache_dir() / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
