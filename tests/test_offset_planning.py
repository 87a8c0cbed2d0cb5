"""Offset planning is a pure function of offsets: checked here without Kafka."""
from __future__ import annotations

import logging

import pytest

from pyspark_eos.errors import ConfigurationError, DataLossError
from pyspark_eos.source.offset_planning import (
    OffsetLookups,
    OffsetRange,
    cap,
    plan_ranges,
    rate_limit,
    resolve_offsets,
)
from pyspark_eos.source.input_partition import input_partitions, task_count
from pyspark_eos.errors import FormatVersionError
from pyspark_eos.protocol.checkpoint_offsets import from_json, is_kafka_offsets, to_json
from pyspark_eos.protocol.formats import FORMAT
from pyspark_eos.source.options import OffsetsSpec

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def test_offset_json_is_sparks_kafka_form_and_round_trips():
    # Users' monitoring reads it from the query's progress (endOffset) as Spark's Kafka source has it.
    offsets = {A0: 5, A1: 7, B0: 0}
    assert to_json(offsets) == {"a": {"0": 5, "1": 7}, "b": {"0": 0}}
    assert from_json(to_json(offsets)) == offsets


def test_offset_json_that_names_a_format_this_version_reads_reads_as_without_it():
    assert from_json({"@format": FORMAT, "a": {"0": 5, "1": 7}, "b": {"0": 0}}) == {A0: 5, A1: 7, B0: 0}


def test_offset_json_of_a_newer_format_is_refused_naming_both_formats():
    with pytest.raises(FormatVersionError, match=rf"format {FORMAT + 1}.* reads formats up to {FORMAT}.*upgrade"):
        from_json({"@format": FORMAT + 1, "a": {"0": 5}})


def test_rate_limit_splits_in_proportion_to_backlog_without_starving_small_partitions():
    start = {A0: 0, A1: 0, B0: 10}
    latest = {A0: 1000, A1: 10, B0: 11}
    ends = rate_limit(start, latest, 100)
    assert ends[A0] - start[A0] == 98  # floor(100 * 1000 / 1011)
    assert ends[A1] - start[A1] == 1  # 0.99 rounds up: a small partition still moves
    assert ends[B0] - start[B0] == 1
    assert rate_limit(start, latest, 5000) == latest


def test_rate_limit_shares_the_limit_with_new_partitions_from_their_given_start():
    # A new partition enters with its earliest offset as start (micro_batch_stream adds it).
    assert rate_limit({A0: 10, A1: 0}, {A0: 20, A1: 20}, 10) == {A0: 13, A1: 6}


def test_cap_stops_at_the_available_now_end():
    assert cap({A0: 50, A1: 9}, {A0: 40, A1: 40}) == {A0: 40, A1: 9}
    assert cap({A0: 50}, None) == {A0: 50}


def test_plan_ranges_skips_empty_and_reads_new_partitions_from_earliest():
    ranges = plan_ranges({A0: 5, A1: 7}, {A0: 9, A1: 7, B0: 4}, {A0: 0, A1: 0, B0: 2}, True)
    assert ranges == [OffsetRange("a", 0, 5, 9), OffsetRange("b", 0, 2, 4)]


@pytest.mark.parametrize("start, end, earliest, message", [
    ({A0: 3}, {A0: 9}, {A0: 5}, r"a-0: offsets \[3, 5\) are gone from Kafka \(the earliest available offset is 5\)"),
    ({A0: 9}, {A0: 4}, {A0: 0}, r"a-0: the batch ends at offset 4 before it starts at 9"),
    ({A0: 3, B0: 1}, {A0: 4}, {A0: 0}, r"partitions b-0 no longer exist"),
])
def test_data_loss_fails_or_is_skipped_with_a_warning(start, end, earliest, message, caplog):
    with pytest.raises(DataLossError, match=message + ".*failOnDataLoss=false"):
        plan_ranges(start, end, earliest, fail_on_data_loss=True)
    with caplog.at_level(logging.WARNING):
        ranges = plan_ranges(start, end, earliest, fail_on_data_loss=False)
    assert all(r.start >= earliest.get(r.key, 0) for r in ranges)
    assert any("data loss" in record.message for record in caplog.records)


def test_a_partition_created_after_the_batch_was_planned_is_left_to_the_next_batch():
    # A restarted query replays its first batch from initial offsets looked up again: a partition
    # created since is in the start only. It exists: not in this batch, not lost.
    assert plan_ranges({A0: 0, B0: 0}, {A0: 4}, {A0: 0}, True, existing=frozenset({A0, B0})) == [
        OffsetRange("a", 0, 0, 4)]
    with pytest.raises(DataLossError, match="partitions b-0 no longer exist"):
        plan_ranges({A0: 0, B0: 0}, {A0: 4}, {A0: 0}, True, existing=frozenset({A0}))


def fake_lookups(committed):
    return OffsetLookups(
        earliest=lambda tps: {tp: 0 for tp in tps},
        latest=lambda tps: {tp: 100 for tp in tps},
        for_timestamps=lambda ts: {tp: (50 if t <= 1000 else -1) for tp, t in ts.items()},
        committed=lambda group, tps: {tp: committed.get(tp) for tp in tps},
    )


def test_group_start_falls_back_for_partitions_never_committed():
    lookups = fake_lookups({A0: 42})
    assert resolve_offsets(OffsetsSpec("group"), [A0, A1], lookups, "g", "earliest") == {A0: 42, A1: 0}
    assert resolve_offsets(OffsetsSpec("group"), [A0, A1], lookups, "g", "latest") == {A0: 42, A1: 100}
    with pytest.raises(ConfigurationError, match="group 'g' has no committed offset for a-1"):
        resolve_offsets(OffsetsSpec("group"), [A0, A1], lookups, "g", "fail")


def test_explicit_and_timestamp_starts():
    lookups = fake_lookups({})
    spec = OffsetsSpec("offsets", per_partition={A0: 7, A1: -2, B0: -1})
    assert resolve_offsets(spec, [A0, A1, B0], lookups) == {A0: 7, A1: 0, B0: 100}
    with pytest.raises(ConfigurationError, match="gives no offset for b-0"):
        resolve_offsets(OffsetsSpec("offsets", per_partition={A0: 1}), [A0, B0], lookups)
    with pytest.raises(ConfigurationError, match="names a-37, which this query does not read"):  # Spark refuses it too
        resolve_offsets(OffsetsSpec("offsets", per_partition={A0: -2, A1: -2, ("a", 37): -2}), [A0, A1], lookups)
    with pytest.raises(ConfigurationError, match="names c-0, which"):
        resolve_offsets(OffsetsSpec("timestamp", per_partition={A0: 1000, ("c", 0): 1000}), [A0], lookups)
    by_time = OffsetsSpec("timestamp", per_partition={A0: 1000, A1: 5000})
    assert resolve_offsets(by_time, [A0, A1], lookups) == {A0: 50, A1: 100}
    assert resolve_offsets(OffsetsSpec("timestamp", timestamp=10), [A0], lookups) == {A0: 50}


def test_small_ranges_share_tasks_in_full_waves_with_balanced_records():
    ranges = [OffsetRange("a", p, 0, 1000 * (p + 1)) for p in range(8)]  # 36k records, 1k to 8k each
    tasks = input_partitions(ranges, None, None, min_records=10_000, min_tasks=2)
    assert len(tasks) == 2  # 36k / 10k = 3 tasks, down to a full wave of 2 cores
    assert sorted((r for task in tasks for r in task.ranges), key=lambda r: r.key) == ranges
    loads = [sum(r.end - r.start for r in task.ranges) for task in tasks]
    assert max(loads) - min(loads) <= 1000
    assert all(list(task.ranges) == sorted(task.ranges, key=lambda r: r.key) for task in tasks)
    assert [task.index for task in tasks] == [0, 1]


def test_large_ranges_keep_a_task_each_and_min_records_1_is_one_task_per_partition():
    big = [OffsetRange("a", p, 0, 50_000) for p in range(4)]
    assert [t.ranges for t in input_partitions(big, None, None, min_records=20_000, min_tasks=2)] == [(r,) for r in big]
    small = [OffsetRange("a", p, 0, 10) for p in range(5)]
    assert [t.ranges for t in input_partitions(small, None, None, min_records=1, min_tasks=2)] == [(r,) for r in small]
    assert len(input_partitions(small, None, None, min_records=20_000, min_tasks=8)) == 5  # never more tasks than ranges
    assert task_count([1000] * 256, 20_000, 2) == 12


def test_ranges_not_at_their_group_offset_get_a_task_each_and_min_records_1_never_rounds_down():
    ranges = [OffsetRange("a", p, 0, 100) for p in range(6)]
    tasks = input_partitions(ranges, None, None, min_records=20_000, min_tasks=2, alone=frozenset({("a", 1), ("a", 4)}))
    alone = [t.ranges for t in tasks if len(t.ranges) == 1]
    assert sorted(alone, key=lambda r: r[0].key) == [(ranges[1],), (ranges[4],)]
    assert len(tasks) == 4 and [t.index for t in tasks] == [0, 1, 2, 3]
    assert sorted((r for t in tasks for r in t.ranges), key=lambda r: r.key) == ranges
    tiny = [OffsetRange("a", p, 0, 1) for p in range(5)]
    assert len(input_partitions(tiny, None, None, min_records=1, min_tasks=4)) == 5


def test_a_kafka_sources_checkpoint_line_is_told_from_other_sources():
    assert is_kafka_offsets({"a": {"0": 5, "1": 7}})  # Spark's Kafka source
    assert is_kafka_offsets({"@format": FORMAT + 1, "a": {"0": 5}})  # a later format's (from_json refuses it)
    assert not is_kafka_offsets({"logOffset": 3})  # a file source
    assert not is_kafka_offsets(17) and not is_kafka_offsets({}) and not is_kafka_offsets({"@format": FORMAT})
