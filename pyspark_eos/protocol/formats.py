"""Format versions of what eos-kafka writes for a later run to read: the claims topic's records,
the metadata committed with each offset (input offsets and progress records) and the source's
offsets in Spark's checkpoint.

A running pipeline's state outlives the version of eos-kafka that wrote it: an upgrade continues
from the claims, offsets and checkpoint the earlier version left. Each claims record and each
offset's metadata says which format it is in and which eos-kafka wrote it, so a version that meets
a format it cannot read fails, naming both, instead of misreading a claim (and fencing nothing) or
a committed offset's batch. The checkpoint's offsets keep Spark's layout, unmarked while it holds
(protocol/checkpoint_offsets).

Format 0 is every record written before records carried a format (eos-kafka 0.1.0.dev0): the
same fields as format 1, without the two below. docs/compatibility.md states which formats each
release reads; tests/upgrade_fixtures/ holds state written by earlier versions.
"""
from __future__ import annotations

from typing import Mapping

from ..errors import FormatVersionError
from ..version import __version__

FORMAT = 1  # the format this version writes
FORMAT_FIELD = "format"
WRITER_FIELD = "eos-kafka"  # the version of eos-kafka that wrote the record
# Formats this version no longer reads, each with the last version of eos-kafka that reads it.
NO_LONGER_READ: dict[int, str] = {}


def stamped(record: Mapping) -> dict:
    """``record`` with the format this version writes and its own version."""
    return {**record, FORMAT_FIELD: FORMAT, WRITER_FIELD: __version__}


def format_of(record: Mapping) -> int:
    """The format of a record this package wrote (0: written before records carried one)."""
    version = record.get(FORMAT_FIELD, 0)
    return version if isinstance(version, int) and not isinstance(version, bool) else -1


def readable(record: Mapping) -> bool:
    """True for a record in a format this version reads."""
    version = format_of(record)
    return 0 <= version <= FORMAT and version not in NO_LONGER_READ


def check_readable(record: Mapping, what: str) -> Mapping:
    """``record``, if this version reads its format; raises FormatVersionError, naming both
    versions and what to do, if it does not."""
    if readable(record):
        return record
    raise unreadable(record, what)


def unreadable(record: Mapping, what: str) -> FormatVersionError:
    version = format_of(record)
    writer = record.get(WRITER_FIELD)
    written = f"format {version if version >= 0 else repr(record.get(FORMAT_FIELD))}" + (
        f", written by eos-kafka {writer}" if writer else " (written before records named their format)"
        if version == 0 else "")
    if version > FORMAT or version < 0:
        return FormatVersionError(
            f"{what} is in {written}; this eos-kafka {__version__} reads formats up to {FORMAT}. A newer eos-kafka "
            f"ran this pipeline: upgrade eos-kafka on the driver and every executor to "
            f"{writer or 'the version that ran it'} or later (docs/compatibility.md)")
    last = NO_LONGER_READ[version]
    return FormatVersionError(
        f"{what} is in {written}, which this eos-kafka {__version__} no longer reads; eos-kafka {last} is the "
        f"last version that reads it. Upgrade through {last} first: run the pipeline on it until a batch has "
        "committed, then upgrade to this version (docs/compatibility.md)")
