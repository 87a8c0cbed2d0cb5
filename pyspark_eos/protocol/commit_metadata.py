"""The metadata the sink stores with each offset it commits: which generation of the group's
membership, batch and query committed it. The sink's commit decision and the operator's status
read it back; an offset another writer committed carries none of it."""
from __future__ import annotations

import json


def partition_metadata(generation: int, batch_id: str | None, query_id: str | None) -> str:
    """The metadata stored with each committed input offset: who committed it, for which batch."""
    return json.dumps({"generation": generation, "batch": batch_id, "query": query_id}, separators=(",", ":"))


def stored_metadata(metadata: str) -> dict:
    """What the sink stored with an offset; empty for an offset committed by something else."""
    try:
        stored = json.loads(metadata)
    except ValueError:
        return {}
    return stored if isinstance(stored, dict) else {}
