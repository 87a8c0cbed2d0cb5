"""Deciding which offsets each batch reads: where a query starts, where a batch ends, the ranges.

Everything here is a pure function of offsets already fetched from Kafka, so a batch is
re-planned exactly from the offsets Spark keeps in its checkpoint (protocol/checkpoint_offsets),
and a batch's start is the previous batch's end.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from ..errors import ConfigurationError, DataLossError
from ..protocol.offset_range import OffsetRange, TopicPartitionKey
from .options import EARLIEST, EARLIEST_OFFSET, GROUP, LATEST, LATEST_OFFSET, OffsetsSpec, SourceOptions

log = logging.getLogger(__name__)

Offsets = dict[TopicPartitionKey, int]


# ------------------------------------------------------------------------------- starting offsets

@dataclass(frozen=True)
class OffsetLookups:
    """The Kafka questions offset resolution may ask (``KafkaOffsetReader``'s methods)."""

    earliest: Callable[[Iterable[TopicPartitionKey]], Offsets]
    latest: Callable[[Iterable[TopicPartitionKey]], Offsets]
    for_timestamps: Callable[[dict[TopicPartitionKey, int]], Offsets]
    committed: Callable[[str, list[TopicPartitionKey]], dict[TopicPartitionKey, int | None]]


def resolve_offsets(spec: OffsetsSpec, partitions: list[TopicPartitionKey], lookups: OffsetLookups,
                    group_id: str | None = None, fallback: str = EARLIEST) -> Offsets:
    """Concrete offsets for every partition from a starting or ending offsets option."""
    if spec.kind == EARLIEST:
        return lookups.earliest(partitions)
    if spec.kind == LATEST:
        return lookups.latest(partitions)
    if spec.kind == GROUP:
        return _group_offsets(partitions, lookups, group_id, fallback)
    if spec.kind == "timestamp":
        return _timestamp_offsets(spec, partitions, lookups)
    return _explicit_offsets(spec, partitions, lookups)


def _group_offsets(partitions, lookups: OffsetLookups, group_id: str, fallback: str) -> Offsets:
    committed = lookups.committed(group_id, partitions)
    never = [tp for tp in partitions if committed.get(tp) is None]
    if never and fallback == "fail":
        raise ConfigurationError(
            f"consumer group {group_id!r} has no committed offset for {_names(never)} and "
            "startingOffsetsFallback=fail; set startingOffsetsFallback to earliest or latest to start them anyway"
        )
    if never:
        log.info("group %r never committed %s; starting them at %s", group_id, _names(never), fallback)
    resolved = {tp: offset for tp, offset in committed.items() if offset is not None and tp in partitions}
    resolved.update(resolve_offsets(OffsetsSpec(fallback), never, lookups) if never else {})
    return resolved


def _timestamp_offsets(spec: OffsetsSpec, partitions, lookups: OffsetLookups) -> Offsets:
    if spec.timestamp is not None:
        timestamps = {tp: spec.timestamp for tp in partitions}
    else:
        _require_listed(spec.per_partition, partitions, "startingOffsetsByTimestamp")
        timestamps = {tp: spec.per_partition[tp] for tp in partitions}
    found = lookups.for_timestamps(timestamps)
    missing = [tp for tp, offset in found.items() if offset < 0]
    if missing and spec.when_none == "error":
        raise ConfigurationError(
            f"no record at or after the starting timestamp in {_names(missing)} ("
            + ", ".join(f"{topic}-{partition}: {timestamps[(topic, partition)]}" for topic, partition in sorted(missing))
            + "); set startingOffsetsByTimestampStrategy=latest to start those partitions at their end, or give "
            "an earlier timestamp")
    # No record at or after the timestamp, with the "latest" strategy: start at the end.
    found.update(lookups.latest(missing) if missing else {})
    return found


def _explicit_offsets(spec: OffsetsSpec, partitions, lookups: OffsetLookups) -> Offsets:
    _require_listed(spec.per_partition, partitions, "offsets JSON")
    chosen = {tp: spec.per_partition[tp] for tp in partitions}
    earliest = [tp for tp, offset in chosen.items() if offset == EARLIEST_OFFSET]
    latest = [tp for tp, offset in chosen.items() if offset == LATEST_OFFSET]
    chosen.update(lookups.earliest(earliest) if earliest else {})
    chosen.update(lookups.latest(latest) if latest else {})
    return chosen


def _require_listed(given: Mapping[TopicPartitionKey, int], partitions, what: str) -> None:
    """The JSON must name exactly the partitions read, as Spark's Kafka source requires: a
    partition it names that does not exist (or is not subscribed) would be ignored silently."""
    missing = [tp for tp in partitions if tp not in given]
    if missing:
        raise ConfigurationError(f"the {what} gives no offset for {_names(missing)}; list every partition read")
    require_read(given, partitions, what)


def named_partitions(options: SourceOptions) -> dict[str, Mapping[TopicPartitionKey, int]]:
    """The partitions each offsets option names one by one (JSON offsets or timestamps)."""
    suffix = {"timestamp": "OffsetsByTimestamp", "offsets": "Offsets"}
    return {f"{side}{suffix[spec.kind]} JSON": spec.per_partition
            for side, spec in (("starting", options.starting), ("ending", options.ending)) if spec.per_partition}


def require_read(given: Iterable[TopicPartitionKey], partitions, what: str) -> None:
    """Every partition the JSON names must be one the query reads. Unlike a missing partition
    (which a restarted stream may legitimately have gained since its JSON was written), a named
    one that is not read is a mistake whenever it is found: load() checks it too."""
    unknown = [tp for tp in given if tp not in set(partitions)]
    if unknown:
        raise ConfigurationError(
            f"the {what} names {_names(unknown)}, which this query does not read (it reads {_names(partitions)}): "
            "the topic has no such partition or the subscription does not include it; remove them")


def _names(partitions: Iterable[TopicPartitionKey]) -> str:
    return ", ".join(f"{topic}-{partition}" for topic, partition in sorted(partitions))


# ------------------------------------------------------------------------------- batch ends

def rate_limit(start: Offsets, latest: Offsets, max_records: int) -> Offsets:
    """End offsets that advance at most ``max_records`` offsets in total, split over partitions
    in proportion to their backlog (Spark's Kafka source rule; small partitions are not starved)."""
    backlog = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(backlog.values())
    if total <= max_records:
        return dict(latest)
    ends = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        share = max_records * backlog[tp] / total
        advance = math.ceil(share) if share < 1 else math.floor(share)
        ends[tp] = min(end, begin + advance)
    return ends


def cap(ends: Offsets, limit: Offsets | None) -> Offsets:
    """Trigger.AvailableNow: never past the offsets that were latest when the run began."""
    if limit is None:
        return ends
    return {tp: min(offset, limit[tp]) if tp in limit else offset for tp, offset in ends.items()}


# ------------------------------------------------------------------------------- ranges

def plan_ranges(start: Offsets, end: Offsets, earliest: Offsets, fail_on_data_loss: bool,
                existing: frozenset = frozenset()) -> list[OffsetRange]:
    """The non-empty [start, end) ranges of a batch.

    A partition in ``end`` but not in ``start`` is new since the previous batch: it is read from
    its earliest offset. A partition in ``start`` only is not in this batch when it is among
    ``existing`` (the subscription's partitions now): the batch was planned before it was created,
    and a restarted query replays its first batch from initial offsets looked up again (Spark keeps
    none for a Python source), so the next batch reads it as new. Otherwise, and for offsets that
    Kafka no longer has (retention, a deleted or recreated topic), records are lost: an error when
    failOnDataLoss is true, otherwise skipped with a warning.
    """
    _check_vanished({tp: offset for tp, offset in start.items() if tp not in existing}, end, fail_on_data_loss)
    ranges = []
    for tp in sorted(end):
        begin = start.get(tp, earliest.get(tp, 0))
        first = _first_available(tp, begin, end[tp], earliest.get(tp, 0), fail_on_data_loss)
        if first < end[tp]:
            ranges.append(OffsetRange(tp[0], tp[1], first, end[tp]))
    return ranges


def _first_available(tp, begin: int, end: int, earliest: int, fail_on_data_loss: bool) -> int:
    if end < begin:
        _data_loss(fail_on_data_loss, f"{tp[0]}-{tp[1]}: the batch ends at offset {end} before it starts at "
                   f"{begin}; the topic was probably deleted and recreated, or its log truncated")
        return end
    if begin < earliest:
        _data_loss(fail_on_data_loss, f"{tp[0]}-{tp[1]}: offsets [{begin}, {min(earliest, end)}) are gone "
                   f"from Kafka (the earliest available offset is {earliest}), most likely removed by retention")
        return min(earliest, end)
    return begin


def _check_vanished(start: Offsets, end: Offsets, fail_on_data_loss: bool) -> None:
    vanished = sorted(set(start) - set(end))
    if vanished:
        _data_loss(fail_on_data_loss, f"partitions {_names(vanished)} no longer exist; their unread records are lost")


def _data_loss(fail: bool, message: str) -> None:
    if fail:
        raise DataLossError(
            message + ". Set failOnDataLoss=false to skip lost offsets and go on (the missing records are not read)"
        )
    log.warning("data loss (failOnDataLoss=false, going on): %s", message)


def delay_batch(available: int, minimum: int, since_last_ms: float, max_delay_ms: int) -> bool:
    """Whether a micro-batch waits for more records: fewer than ``minimum`` (minOffsetsPerTrigger)
    are available and the last batch began less than ``max_delay_ms`` (maxTriggerDelay) ago."""
    return available < minimum and since_last_ms < max_delay_ms
