"""The metadata the sink stores with each offset it commits: which generation of the group's
membership, batch and query committed it. The sink's commit decision and the operator's status
read it back; an offset another writer committed carries none of it."""
from __future__ import annotations

import json

from .formats import WRITER_FIELD, check_readable, stamped


def partition_metadata(generation: int, batch_id: str | None, query_id: str | None) -> str:
    """The metadata stored with each committed input offset: who committed it, for which batch."""
    return dumps({"generation": generation, "batch": batch_id, "query": query_id})


def adoption_metadata(checkpoint: str, batch: int) -> str:
    """The metadata ``adopt-checkpoint`` stores with the offsets it commits: where they came from
    (the checkpoint and its last committed batch). No generation and no query: the first batch of
    the eos-kafka query that starts from them commits as any first commit does."""
    return dumps({"adopted_from": checkpoint, "checkpoint_batch": batch})


def dumps(fields: dict) -> str:
    """Metadata in the format this version writes (protocol/formats)."""
    return json.dumps(stamped(fields), separators=(",", ":"))


def stored_metadata(metadata: str) -> dict:
    """What the sink stored with an offset; empty for an offset committed by something else.
    Raises FormatVersionError for metadata in a format this version does not read."""
    try:
        stored = json.loads(metadata)
    except ValueError:
        return {}
    if not isinstance(stored, dict):
        return {}
    if WRITER_FIELD in stored or stored.keys() & _UNVERSIONED_FIELDS:
        check_readable(stored, "the metadata committed with this offset")
    return stored


# What format 0 (written before metadata carried its format) stored: input offsets' and progress
# records' fields. JSON without them and without a writer is some other client's.
_UNVERSIONED_FIELDS = frozenset({"generation", "batch", "query", "records", "checksum", "plan"})
