"""Where the claims protocol's records live: which topic and partition each kind goes to.

Layout 1 (eos-kafka 0.1.0, and pipelines without a group or a name): one topic (``claimsTopic``,
``eos-kafka-claims`` by default) with one partition, shared by every pipeline of a cluster. An
attempt reads every record from its plan's record (or look-back) to its own claim, whoever appended
it: its read grows with the tasks of its batch and with the pipelines of the cluster.

Layout 2 (pipelines with a consumer group, or a name: sink/options ``SinkOptions.pipeline``): a
topic of each pipeline's own, named after ``claimsTopic`` and the group or name
(``pipeline_topic``), with two partitions:

- the **control log** (partition 0): the driver's plan records and generation stamps, and the
  ANNOUNCE record an attempt appends before its claim when it is not the first attempt of its
  task under its plan (a retry, a speculative copy);
- the **claims log** (partition 1): claims and releases.

The first attempt of a task under its plan appends its claim and reads only the control log, from
its plan's record to the end (a handful of records a batch), and the claims log only if an
ANNOUNCE of its task is there. Any other attempt reads the claims log from where its plan's
claims start (``PlanRecord.claims_from``) to its own claim, as every attempt did in layout 1. Of a
first attempt and a retry, one always sees the other: each appends to one log before it reads the
other (docs/model, SPLIT_LOG). No pipeline reads another's records, except that a progress attempt
whose task last committed on layout 1 also claims and reads there (sink/progress_claims).
"""
from __future__ import annotations

import hashlib
import re

CONTROL_PARTITION = 0
CLAIMS_PARTITION = 1
PIPELINE_PARTITIONS = 2
# Kafka's limit on a topic's name is 249 characters; a pipeline's topic keeps its group legible
# where it can, and is told apart by a digest where names are cut or characters replaced.
_MAX_TOPIC_CHARS = 249
_DIGEST_CHARS = 16


def pipeline_topic(claims_topic: str, group: str) -> str:
    """The claims topic of the pipeline whose plans name ``group`` (layout 2)."""
    base = claims_topic[:_MAX_TOPIC_CHARS - 2 - _DIGEST_CHARS]
    room = _MAX_TOPIC_CHARS - len(base) - 2 - _DIGEST_CHARS
    legible = re.sub(r"[^A-Za-z0-9._-]", "_", group)[:room]
    digest = hashlib.sha256(group.encode()).hexdigest()[:_DIGEST_CHARS]
    return f"{base}.{legible}-{digest}"


def claims_topic_of(claims_topic: str, group: str | None) -> str:
    """Where a pipeline's claims go: its own topic with a consumer group (layout 2), ``claimsTopic``
    itself without one (layout 1)."""
    return claims_topic if group is None else pipeline_topic(claims_topic, group)


def claims_partition(split: bool) -> int:
    """The partition of a plan's claims: the claims log in layout 2, the one partition in layout 1."""
    return CLAIMS_PARTITION if split else 0
