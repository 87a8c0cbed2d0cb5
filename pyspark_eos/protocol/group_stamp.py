"""The group membership a plan was made under, as the sink needs it to commit."""
from __future__ import annotations

import base64
from dataclasses import dataclass


@dataclass(frozen=True)
class GroupStamp:
    """Carried by every input partition of a plan, and recorded in the claims topic for each new
    generation of the membership (claims_records).

    ``metadata`` is librdkafka's consumer-group metadata (kafka.group_metadata); the writer hands
    it to send_offsets_to_transaction.
    """

    metadata: bytes
    group_id: str
    generation: int
    member_id: str
    instance_id: str | None
    assignment: frozenset[tuple[str, int]]
    # Which run of the query (one driver's GroupMembership) holds the membership: a task may
    # commit under a newer generation of its own plan's run, never under another instance's.
    run_token: str = ""

    def describe(self) -> str:
        return (f"group {self.group_id!r} generation {self.generation} member {self.member_id!r} "
                f"(instance {self.instance_id!r})")

    def as_json(self) -> dict:
        # "membership": the run token's name in records written before it had this one.
        return {"metadata": base64.b64encode(self.metadata).decode(), "group_id": self.group_id,
                "generation": self.generation, "member_id": self.member_id, "instance_id": self.instance_id,
                "assignment": sorted(self.assignment), "membership": self.run_token}

    @classmethod
    def from_json(cls, data: dict) -> "GroupStamp":
        return cls(base64.b64decode(data["metadata"]), data["group_id"], int(data["generation"]), data["member_id"],
                   data["instance_id"], frozenset((t, p) for t, p in data["assignment"]), data.get("membership", ""))
